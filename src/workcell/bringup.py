"""The workcell graph: node list and parameters from one YAML file (``config/*.yaml``).

Why: ``ros2 launch`` on a robot PC and ``workcell bringup`` here (no launch_ros
wheels) must start the same nodes with the same parameters. Both read the
graph through :class:`Graph`; the launch file and the process launcher
(:mod:`workcell.launcher`) hold no node list of their own. The YAML
schema is documented at the top of ``config/workcell.yaml``.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from libero_workcell.cell_file import CELL_ARGUMENT, CellFileError, load_cell
from libero_workcell.config_files import PACKAGE, find_config_file, package_config_file
from workcell.launcher import NodeDiedError, NodeExit, RunningGraph, launch, ros_params_yaml

__all__ = [
    "DEFAULT_GRAPH",
    "PACKAGE",
    "Argument",
    "Graph",
    "GraphError",
    "NodeDiedError",
    "NodeExit",
    "NodeSpec",
    "RunningGraph",
    "find_graph",
    "launch",
    "launch_text",
    "node_parameters",
    "parse_overrides",
    "ros_params_yaml",
]

USE_SIM_TIME = "use_sim_time"  # rclpy's own parameter: the node's clock follows /clock
DEFAULT_GRAPH = "workcell.yaml"
# libyaml's safe loader where PyYAML was built with it (the wheels are): the same documents, an order of magnitude
# faster than the pure-Python one, and every `workcell` command and launch reads the graph file first
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
NODE_PARAMETERS = "node_parameters.json"  # what each node module declares (tools/node_parameters.py writes it)

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_ARG_REF = re.compile(r"^\$\(arg ([A-Za-z][A-Za-z0-9_]*)\)$")
PARTICIPANTS = "$(participants)"  # a parameter value: the names of the running nodes marked `participant`


class GraphError(ValueError):
    """A malformed graph file or an override that does not fit it."""


@dataclass(frozen=True)
class NodeSpec:
    """One node to start: ROS name, console script, ``python -m`` module, typed parameters."""

    name: str
    executable: str
    module: str
    parameters: dict[str, Any] = field(default_factory=dict)
    observer: bool = False  # it only watches (the graph file's ``observer``): its death stops nothing else


@dataclass(frozen=True)
class Argument:
    """A launch argument declared in the graph file."""

    name: str
    default: Any
    description: str = ""


# --------------------------------------------------------------------------
# Locating the graph file
# --------------------------------------------------------------------------
def find_graph(name: str | os.PathLike[str] = DEFAULT_GRAPH) -> Path:
    """Resolve a graph file: an existing path as given, else ``<config dir>/<name>``
    (:func:`libero_workcell.config_files.find_config_file`).
    """
    given = Path(name)
    if not given.is_file() and given.name != str(name):
        raise FileNotFoundError(f"graph file not found: {given}")
    return find_config_file(given)


# --------------------------------------------------------------------------
# Typing of values
# --------------------------------------------------------------------------
def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    """``["key:=value", ...]`` -> ``{key: raw value text}`` (typed later, against the graph)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition(":=")
        if not sep or not key:
            raise GraphError(f"override {item!r} is not of the form key:=value")
        out[key.strip()] = value
    return out


def launch_text(value: Any) -> str:
    """A value as launch-argument text that :meth:`Graph.argument_values` parses back."""
    if isinstance(value, str):
        return value
    return yaml.safe_dump(value, default_flow_style=True, width=1 << 16).strip().removesuffix("...").strip()


def _is_ros_scalar(value: Any) -> bool:
    return isinstance(value, bool | int | float | str)


def _check_ros_value(value: Any, what: str) -> None:
    """ROS parameters are scalars or non-empty homogeneous lists of scalars."""
    if _is_ros_scalar(value):
        return
    if isinstance(value, list):
        if not value:
            raise GraphError(f"{what}: empty lists have no ROS parameter type; use a sentinel such as [-1]")
        kinds = {bool if isinstance(v, bool) else float if isinstance(v, int | float) else type(v) for v in value}
        if all(_is_ros_scalar(v) for v in value) and len(kinds) == 1:
            return
    raise GraphError(f"{what}: {value!r} is not a ROS parameter value (scalar or homogeneous list)")


def _coerce(value: Any, like: Any, what: str) -> Any:
    """``value`` converted to the type of ``like`` (a default), or :class:`GraphError`."""
    if isinstance(like, bool):
        if isinstance(value, bool):
            return value
    elif isinstance(like, float):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif isinstance(like, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif isinstance(like, str):
        return value if isinstance(value, str) else launch_text(value)
    elif isinstance(like, list) and isinstance(value, list) and value:
        items = [_coerce(v, like[0], what) for v in value] if like else value
        _check_ros_value(items, what)
        return items
    raise GraphError(f"{what}: {value!r} does not fit the type of its default {like!r}")


def _typed(raw: Any, like: Any, what: str) -> Any:
    """Parse an override (text from a command line or a Python value) against a default."""
    if isinstance(raw, str) and not isinstance(like, str):
        try:
            raw = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise GraphError(f"{what}: cannot parse {raw!r}: {exc}") from None
    return _coerce(raw, like, what)


# --------------------------------------------------------------------------
# The graph
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class Graph:
    """A parsed graph file. :meth:`resolve` turns overrides into the nodes to start."""

    path: Path
    arguments: dict[str, Argument]
    inject: tuple[str, ...]
    nodes: tuple[dict[str, Any], ...]
    sim_time_from: str | None = None  # a boolean argument: every node gets use_sim_time = its value

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None) -> Graph:
        """Load and validate a graph file (default: :data:`DEFAULT_GRAPH` via :func:`find_graph`)."""
        resolved = find_graph(DEFAULT_GRAPH if path is None else path)
        data = yaml.load(resolved.read_text(encoding="utf-8"), Loader=_SAFE_LOADER) or {}
        if not isinstance(data, dict):
            raise GraphError(f"{resolved}: top level must be a mapping")
        arguments = {}
        for name, spec in (data.get("arguments") or {}).items():
            if not _NAME.match(str(name)) or not isinstance(spec, dict) or "default" not in spec:
                raise GraphError(f"{resolved}: argument {name!r} needs a valid name and a default")
            _check_ros_value(spec["default"], f"argument {name}")
            arguments[name] = Argument(name, spec["default"], str(spec.get("description", "")))
        sim_time = data.get("sim_time_from")
        graph = cls(resolved, arguments, tuple(data.get("inject") or ()), tuple(data.get("nodes") or ()),
                    str(sim_time) if sim_time else None)  # fmt: skip
        graph._validate()
        return graph

    def _validate(self) -> None:
        where = str(self.path)
        for name in self.inject:
            if name not in self.arguments:
                raise GraphError(f"{where}: inject names unknown argument {name!r}")
        sim_time = self.arguments.get(self.sim_time_from or "")
        if self.sim_time_from is not None and (sim_time is None or not isinstance(sim_time.default, bool)):
            raise GraphError(f"{where}: sim_time_from must name a boolean argument, got {self.sim_time_from!r}")
        seen: set[str] = set()
        for node in self.nodes:
            if not isinstance(node, dict):
                raise GraphError(f"{where}: each node must be a mapping, got {node!r}")
            name = node.get("name")
            if not isinstance(name, str) or not _NAME.match(name) or name in seen:
                raise GraphError(f"{where}: node name {name!r} is missing, invalid or repeated")
            seen.add(name)
            unknown = set(node) - {"name", "executable", "module", "condition", "parameters", "parameters_if",
                                   "participant", "observer"}  # fmt: skip
            if unknown:
                raise GraphError(f"{where}: node {name}: unknown keys {sorted(unknown)}")
            for key in ("executable", "module"):
                if not isinstance(node.get(key), str) or not node[key]:
                    raise GraphError(f"{where}: node {name}: {key} is required")
            if "condition" in node:
                self._condition_arg(node)
            blocks = node.get("parameters_if") or {}
            if not isinstance(blocks, dict) or not all(isinstance(b, dict) for b in blocks.values()):
                raise GraphError(f"{where}: node {name}: parameters_if maps conditions to parameter mappings")
            for cond in blocks:
                self._condition_arg({"name": name, "condition": cond})
            for flag in ("participant", "observer"):
                if not isinstance(node.get(flag, False), bool):
                    raise GraphError(f"{where}: node {name}: {flag} is true or false")
            for param, value in self._all_params(node).items():
                if param in self.inject or param == USE_SIM_TIME:
                    raise GraphError(f"{where}: node {name}: parameter {param} is injected from the arguments")
                self._param_default(name, param, value)

    @staticmethod
    def _all_params(node: Mapping[str, Any]) -> dict[str, Any]:
        """Every parameter a node may get: ``parameters`` and each ``parameters_if`` block."""
        merged = dict(node.get("parameters") or {})
        for block in (node.get("parameters_if") or {}).values():
            for param, value in block.items():
                merged.setdefault(param, value)
        return merged

    def _condition_holds(self, node_name: str, cond: str, values: Mapping[str, Any]) -> bool:
        arg, negate = self._condition_arg({"name": node_name, "condition": cond})
        return bool(values[arg]) != negate

    def _condition_arg(self, node: Mapping[str, Any]) -> tuple[str, bool]:
        cond = str(node["condition"]).strip()
        negate = cond.startswith("not ")
        arg = cond.removeprefix("not ").strip()
        # a boolean argument, or a string one that holds when not empty (record_mcap:=PATH starts its node)
        if arg not in self.arguments or not isinstance(self.arguments[arg].default, bool | str):
            raise GraphError(f"{self.path}: node {node['name']}: condition {cond!r} must name a boolean or a "
                             "string argument")
        return arg, negate

    def _param_default(self, node: str, param: str, value: Any) -> Any:
        """The default of a node parameter (following ``$(arg NAME)`` to the argument)."""
        if isinstance(value, str) and (ref := _ARG_REF.match(value)):
            if ref.group(1) not in self.arguments:
                raise GraphError(f"{self.path}: {node}.{param}: unknown argument in {value!r}")
            return self.arguments[ref.group(1)].default
        if value == PARTICIPANTS:
            return ""
        _check_ros_value(value, f"{node}.{param}")
        return value

    def _runs(self, node: Mapping[str, Any], values: Mapping[str, Any]) -> bool:
        if "condition" not in node:
            return True
        arg, negate = self._condition_arg(node)
        return bool(values[arg]) != negate

    def node_names(self) -> list[str]:
        """All node names in the file, whatever their conditions."""
        return [n["name"] for n in self.nodes]

    def _split(self, overrides: Mapping[str, Any]) -> tuple[dict[str, Any], dict[tuple[str, str], Any]]:
        args: dict[str, Any] = {}
        params: dict[tuple[str, str], Any] = {}
        nodes = {n["name"]: n for n in self.nodes}
        for key, raw in overrides.items():
            node, dot, param = key.partition(".")
            if not dot:
                if key not in self.arguments:
                    raise GraphError(f"unknown argument {key!r}; arguments: {', '.join(self.arguments)}")
                args[key] = _typed(raw, self.arguments[key].default, key)
            elif node not in nodes:
                raise GraphError(f"override {key!r}: no node {node!r}; nodes: {', '.join(nodes)}")
            elif param in (listed := self._all_params(nodes[node])):
                like = self._param_default(node, param, listed[param])
                params[(node, param)] = _typed(raw, like, key)
            elif param in self.inject or param == USE_SIM_TIME:
                how = f"the argument {param}:=" if param in self.inject else f"the argument {self.sim_time_from}:="
                raise GraphError(f"override {key!r}: {param} is the same for every node; set it with {how}")
            else:  # declared by the node but not listed in the graph file: typed against the node's own default
                declared = node_parameters(nodes[node]["module"])
                if param not in declared:
                    raise GraphError(f"override {key!r}: {node} has no parameter {param!r}; its parameters: "
                                     f"{', '.join(sorted(declared))}")  # fmt: skip
                params[(node, param)] = _typed(raw, declared[param], key)
        return args, params

    def _with_cell(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """``overrides`` over the settings of the cell file they name (``cell:=PATH``), if any: the command
        line wins over the cell file, which wins over the graph's defaults."""
        path = overrides.get(CELL_ARGUMENT, getattr(self.arguments.get(CELL_ARGUMENT), "default", ""))
        if not path:
            return dict(overrides)
        try:
            cell = load_cell(str(path), arguments=self.arguments, nodes=self.node_names())
        except CellFileError as exc:
            raise GraphError(str(exc)) from None
        return {**cell.overrides, **overrides, CELL_ARGUMENT: str(cell.path)}

    def argument_values(self, overrides: Mapping[str, Any] | Iterable[str] = ()) -> dict[str, Any]:
        """Typed values of all arguments after ``overrides`` (mapping, or ``key:=value`` strings) and the cell
        file they name."""
        args, _ = self._split(self._with_cell(_as_mapping(overrides)))
        return self._values(args)

    def _values(self, args: Mapping[str, Any]) -> dict[str, Any]:
        return {name: args.get(name, a.default) for name, a in self.arguments.items()}

    def resolve(self, overrides: Mapping[str, Any] | Iterable[str] = ()) -> list[NodeSpec]:
        """The nodes to start, in file order, with injected and overridden parameters (the cell file's
        settings under the command line's)."""
        args, param_overrides = self._split(self._with_cell(_as_mapping(overrides)))
        values = self._values(args)
        specs = []
        running = [n for n in self.nodes if self._runs(n, values)]
        participants = ",".join(n["name"] for n in running if n.get("participant", False))
        for node in running:
            params: dict[str, Any] = {name: values[name] for name in self.inject}
            if self.sim_time_from is not None:
                params[USE_SIM_TIME] = bool(values[self.sim_time_from])
            chosen = dict(node.get("parameters") or {})
            for cond, block in (node.get("parameters_if") or {}).items():
                if self._condition_holds(node["name"], cond, values):
                    chosen.update(block)
            for param, value in chosen.items():
                if (node["name"], param) in param_overrides:
                    value = param_overrides[(node["name"], param)]
                elif isinstance(value, str) and (ref := _ARG_REF.match(value)):
                    value = values[ref.group(1)]
                elif value == PARTICIPANTS:
                    value = participants
                params[param] = list(value) if isinstance(value, list) else value
            for (name, param), value in param_overrides.items():  # declared by the node, not in the graph file
                if name == node["name"] and param not in chosen:
                    params[param] = list(value) if isinstance(value, list) else value
            specs.append(NodeSpec(node["name"], node["executable"], node["module"], params,
                                  bool(node.get("observer", False))))  # fmt: skip
        return specs


def node_parameters(module: str) -> dict[str, Any]:
    """Every parameter the node behind ``module`` declares, with its default (its ``PARAMETERS``,
    :func:`libero_workcell.node_params.declare_all`), as ``config/node_parameters.json`` holds them: read as data,
    never by importing the node (``python -m tools.node_parameters`` writes the file; a test keeps it true)."""
    declared = _declared_parameters().get(module)
    if declared is None:
        raise GraphError(f"cannot read the parameters of {module}: not in {NODE_PARAMETERS} (a node module the "
                         "graph file starts: python -m tools.node_parameters writes them)")  # fmt: skip
    return dict(declared)


@functools.cache
def _declared_parameters() -> dict[str, dict[str, Any]]:
    try:
        return dict(json.loads(package_config_file(NODE_PARAMETERS).read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise GraphError(f"cannot read the nodes' parameters ({NODE_PARAMETERS}): {exc}") from exc


def _as_mapping(overrides: Mapping[str, Any] | Iterable[str]) -> Mapping[str, Any]:
    if isinstance(overrides, Mapping):
        return overrides
    return parse_overrides(overrides)

