"""The preference catalogue (config/preferences/catalogue.yaml): what a preference means on this workcell.

A preference is named by a *spec*: its id, optionally with parameters, ``keep_clear`` or
``slot_for:workpiece=gear_blank,slot=left``; a condition is one or two specs joined by ``+``. Parsing checks
everything against the catalogue and the workcell (a metric that exists, parameters of the right kind and
range, names the workcell has), so a preference that cannot be scored never reaches a prompt or a robot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Final, Literal

import yaml

from libero_workcell.config_files import find_config_file
from libero_workcell.contract import format_prompt
from libero_workcell.layout import NUM_SLOTS
from libero_workcell.task import WORKPIECE_CATALOG, TaskSpec

CATALOGUE_FILE: Final = "preferences/catalogue.yaml"
FORMAT: Final = "libero_workcell.preferences/1"
TYPES: Final = ("motion", "skill", "user_profile")
PARAM_TYPES: Final = ("number", "region", "part", "workpiece", "slot")
JOIN: Final = " and "  # two preferences in one prompt: "Preference: {first} and {second}."

Kind = Literal["none", "single", "composition", "conflict"]


class PreferenceError(ValueError):
    """A preference the workcell cannot honour or score: unknown, no metric, parameters that do not fit."""


@dataclass(frozen=True)
class ParamSpec:
    name: str
    type: str
    default: Any
    min: float | None = None
    max: float | None = None
    unit: str = ""


@dataclass(frozen=True)
class PreferenceDef:
    """One catalogue entry."""

    id: str
    type: str
    language: str
    metric: str
    better: str  # "lower" or "higher": which way the metric's value satisfies the preference more
    params: Mapping[str, ParamSpec] = field(default_factory=dict)


@dataclass(frozen=True)
class Preference:
    """A catalogue entry with its parameters: what the robot is asked, and how it is scored."""

    definition: PreferenceDef
    params: Mapping[str, Any]
    text: str  # the language, parameters filled in

    @property
    def id(self) -> str:
        return self.definition.id

    @property
    def type(self) -> str:
        return self.definition.type

    @property
    def metric(self) -> str:
        return self.definition.metric

    @property
    def better(self) -> str:
        return self.definition.better

    @property
    def spec(self) -> str:
        """The canonical spec: the id, and every parameter that is not its default (sorted)."""
        changed = {k: v for k, v in sorted(self.params.items()) if v != self.definition.params[k].default}
        return self.id + (":" + ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                                         for k, v in changed.items()) if changed else "")  # fmt: skip

    @property
    def bin_key(self) -> str:
        """What the label bins depend on: the id and the named things the metric looks at (not the numbers,
        which only say how hard the robot should try)."""
        named = {k: v for k, v in sorted(self.params.items()) if self.definition.params[k].type != "number"}
        return self.id + ("(" + ",".join(f"{k}={v}" for k, v in named.items()) + ")" if named else "")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "spec": self.spec, "type": self.type, "metric": self.metric, "better": self.better,
                "params": dict(self.params), "text": self.text}  # fmt: skip


@dataclass(frozen=True)
class Condition:
    """What one episode is asked: no preference, one, or two (a declared combination or conflict)."""

    preferences: tuple[Preference, ...] = ()
    kind: Kind = "none"

    @property
    def text(self) -> str:
        """The prompt's preference: the languages joined, "" without one."""
        return JOIN.join(p.text for p in self.preferences)

    @property
    def spec(self) -> str:
        return "+".join(p.spec for p in self.preferences)

    def prompt(self, task: str) -> str:
        """``Task: {task}. Preference: {preference}.``, or the bare task without a preference."""
        return format_prompt(task, self.text or None)

    def check_task(self, task: TaskSpec) -> None:
        """PreferenceError when a parameter names what this task does not have (a workpiece that does not
        arrive, a slot choice the task's instruction already makes)."""
        for p in self.preferences:
            w = p.params.get("workpiece")
            if w is not None and w not in task.workpieces:
                raise PreferenceError(f"{p.spec}: the task's workpieces are {list(task.workpieces)}, not {w!r}")
            if p.metric == "placement_slot" and task.slot_rule != "free":
                raise PreferenceError(f"{p.spec}: the task already says which slot each workpiece goes in (slot_rule "
                                      f"{task.slot_rule!r}); a slot preference needs slot_rule 'free'")  # fmt: skip
            if p.metric == "first_pick" and task.num_workpieces < 2:
                raise PreferenceError(f"{p.spec}: a task of one workpiece has no choice of which comes first")

    def apply(self, task: TaskSpec) -> TaskSpec:
        """``task`` asked this condition (its prompt's preference and the specs), checked against it."""
        self.check_task(task)
        return task.replace(preference=self.text or None, preference_specs=tuple(p.spec for p in self.preferences))

    def to_list(self) -> list[dict[str, Any]]:
        return [p.to_dict() for p in self.preferences]


@dataclass(frozen=True)
class Catalogue:
    definitions: Mapping[str, PreferenceDef]
    combinations: frozenset[frozenset[str]]
    conflicts: frozenset[frozenset[str]]
    regions: Mapping[str, Mapping[str, Any]]
    parts: Mapping[str, Mapping[str, Any]]
    slots: Mapping[str, int]
    path: Path | None = None

    # ---- loading ---------------------------------------------------------
    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], path: Path | None = None) -> Catalogue:
        from preferences.metrics import METRICS  # the metric registry (metrics import nothing from here)

        where = str(path or "catalogue")
        if raw.get("format") != FORMAT:
            raise PreferenceError(f"{where}: format {raw.get('format')!r}, expected {FORMAT!r}")
        regions = dict(raw.get("regions") or {})
        parts = dict(raw.get("parts") or {})
        slots = {str(k): int(v) for k, v in (raw.get("slots") or {}).items()}
        bad_slots = {k: v for k, v in slots.items() if not 0 <= v < NUM_SLOTS}
        if bad_slots:
            raise PreferenceError(f"{where}: slots {bad_slots} outside the tray's 0..{NUM_SLOTS - 1}")
        defs: dict[str, PreferenceDef] = {}
        for pid, entry in (raw.get("preferences") or {}).items():
            w = f"{where}: preference {pid!r}"
            entry = dict(entry or {})
            if entry.get("type") not in TYPES:
                raise PreferenceError(f"{w}: type {entry.get('type')!r}, expected one of {list(TYPES)}")
            metric = entry.get("metric")
            if not metric:
                raise PreferenceError(f"{w} has no metric: a preference that cannot be scored is not accepted")
            if metric not in METRICS:
                raise PreferenceError(f"{w}: unknown metric {metric!r}; metrics: {sorted(METRICS)}")
            better = entry.get("better", METRICS[metric].better)
            if better not in ("lower", "higher"):
                raise PreferenceError(f"{w}: better must be 'lower' or 'higher', got {better!r}")
            params = {}
            for name, spec in (entry.get("params") or {}).items():
                spec = dict(spec)
                if spec.get("type") not in PARAM_TYPES:
                    raise PreferenceError(f"{w}: parameter {name!r} of type {spec.get('type')!r}; "
                                          f"types: {list(PARAM_TYPES)}")  # fmt: skip
                params[name] = ParamSpec(name, spec["type"], spec.get("default"), spec.get("min"), spec.get("max"),
                                         spec.get("unit", ""))  # fmt: skip
            missing = sorted(set(METRICS[metric].params) - set(params))
            if missing:
                raise PreferenceError(f"{w}: metric {metric!r} needs the parameters {missing}")
            defs[pid] = PreferenceDef(pid, entry["type"], str(entry.get("language") or ""), metric, better, params)
            if not defs[pid].language:
                raise PreferenceError(f"{w} has no language")
        cat = cls(defs, frozenset(), frozenset(), regions, parts, slots, path)
        for d in defs.values():  # every default must itself be valid
            cat.preference(d.id)
        pairs = {}
        for key in ("combinations", "conflicts"):
            found = set()
            for pair in raw.get(key) or []:
                if len(pair) != 2 or pair[0] == pair[1] or any(p not in defs for p in pair):
                    raise PreferenceError(f"{where}: {key} entry {pair}: two different catalogue ids")
                found.add(frozenset(pair))
            pairs[key] = frozenset(found)
        both = pairs["combinations"] & pairs["conflicts"]
        if both:
            raise PreferenceError(f"{where}: {[sorted(p) for p in both]} declared both combination and conflict")
        return cls(defs, pairs["combinations"], pairs["conflicts"], regions, parts, slots, path)

    @classmethod
    def load(cls, path: str | Path | None = None) -> Catalogue:
        return _load(str(find_config_file(path or CATALOGUE_FILE)))

    # ---- parsing -----------------------------------------------------------
    def preference(self, spec: str) -> Preference:
        """``id`` or ``id:name=value,...``, validated; PreferenceError saying what is wrong."""
        spec = spec.strip()
        pid, _, args = spec.partition(":")
        if pid not in self.definitions:
            raise PreferenceError(f"unknown preference {pid!r}: only catalogued preferences, which have a metric, "
                                  f"are accepted; the catalogue has {sorted(self.definitions)}")  # fmt: skip
        d = self.definitions[pid]
        given: dict[str, str] = {}
        for item in filter(None, (a.strip() for a in args.split(","))):
            name, eq, value = item.partition("=")
            if not eq or name not in d.params:
                raise PreferenceError(f"{spec}: {item!r} is not a parameter of {pid} (parameters: {sorted(d.params)})")
            given[name] = value.strip()
        params = {name: self._value(pid, p, given.get(name, p.default)) for name, p in d.params.items()}
        return Preference(d, params, d.language.format(**self._words(params, d)))

    def condition(self, specs: str | list[str] | tuple[str, ...] | None) -> Condition:
        """One or two specs (a list, or one string joined by ``+``); two must be a declared pair."""
        if isinstance(specs, str):
            specs = [s for s in specs.split("+") if s.strip()]
        prefs = tuple(self.preference(s) for s in specs or ())
        if not prefs:
            return Condition()
        if len(prefs) == 1:
            return Condition(prefs, "single")
        if len(prefs) > 2:
            raise PreferenceError(f"at most two preferences at a time, got {[p.spec for p in prefs]}")
        pair = frozenset(p.id for p in prefs)
        if pair in self.combinations:
            return Condition(prefs, "composition")
        if pair in self.conflicts:
            return Condition(prefs, "conflict")
        raise PreferenceError(f"{prefs[0].id} and {prefs[1].id} are neither a declared combination nor a declared "
                              f"conflict: declare the pair in {CATALOGUE_FILE} so it can be scored")  # fmt: skip

    def _value(self, pid: str, p: ParamSpec, raw: Any) -> Any:
        where = f"{pid}: parameter {p.name}"
        if p.type == "number":
            try:
                v = float(raw)
            except (TypeError, ValueError):
                raise PreferenceError(f"{where} must be a number, got {raw!r}") from None
            if (p.min is not None and v < p.min) or (p.max is not None and v > p.max) or v != v:
                raise PreferenceError(f"{where} = {v:g} {p.unit} does not fit the workcell: allowed "
                                      f"[{p.min:g}, {p.max:g}] {p.unit}".rstrip())  # fmt: skip
            return v
        names = {"region": self.regions, "part": self.parts, "slot": self.slots, "workpiece": WORKPIECE_CATALOG}[p.type]
        if str(raw) not in names:
            raise PreferenceError(f"{where} = {raw!r}: the workcell has no such {p.type}; known: {sorted(names)}")
        return str(raw)

    def _words(self, params: Mapping[str, Any], d: PreferenceDef) -> dict[str, str]:
        words = {}
        for name, value in params.items():
            t = d.params[name].type
            if t == "workpiece":
                words[name] = WORKPIECE_CATALOG[value].description
            elif t in ("region", "part"):
                words[name] = str((self.regions if t == "region" else self.parts)[value].get("words", value))
            else:
                words[name] = f"{value:g}" if isinstance(value, float) else str(value)
        return words

    @property
    def named(self) -> dict[str, Mapping[str, Any]]:
        """The named things metrics look up (preferences.metrics): regions, parts, slots."""
        return {"regions": self.regions, "parts": self.parts, "slots": self.slots}


@lru_cache(maxsize=8)
def _load(path: str) -> Catalogue:
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise PreferenceError(f"{path}: not YAML: {exc}") from None
    return Catalogue.from_dict(raw or {}, Path(path))
