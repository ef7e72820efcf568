"""The JSON topics' messages read in one place: bounded parsing, the shape each topic promises, bad ones dropped.

Several topics carry a JSON document in a ``std_msgs/String`` (contract.Topics: ``/aubo/mode``, ``/sim/episode``,
``/recorder/status``, ...). Any process on the graph's domain can publish on them, so a subscriber treats each
one as hostile: :func:`parse` refuses a document too large or nested too deep before ``json`` builds it, and
each topic's model (pydantic) checks the fields its readers use, with their types, so ``{"spec": 5}`` or ``[]``
is a :class:`ContractError`, never an exception deep inside a callback. :class:`JsonTopicReader` is what a node
holds: it decodes, counts and logs each bad message (throttled) and hands back None, and the node goes on
with its last good value. Fields a reader does not use pass through untouched (``extra="allow"``): a newer
publisher may say more.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, Final, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, ValidationError, field_validator

from libero_workcell.contract import ARM_DRIVEN_MODES, ARM_MODES, ContractError
from libero_workcell.task import WORKPIECE_CATALOG, TaskSpec

MAX_DOCUMENT_BYTES: Final = 1 << 20  # a status or report is a few KiB; the ground truth with every object ~10


def parse(text: str | bytes, what: str = "message") -> Any:
    """The JSON value of ``text``, or ContractError (too large, not JSON, nested deeper than Python recurses:
    ``json`` raises RecursionError there, which is a refusal like any other, never an escaping exception)."""
    size = len(text)
    if size > MAX_DOCUMENT_BYTES:
        raise ContractError(f"{what}: {size} bytes of JSON, more than {MAX_DOCUMENT_BYTES}")
    try:
        return json.loads(text)
    except RecursionError:
        raise ContractError(f"{what}: JSON nested too deep") from None
    except ValueError as exc:  # (UnicodeDecodeError and JSONDecodeError among them)
        raise ContractError(f"{what}: not JSON ({exc})") from None


class TopicDocument(BaseModel):
    """A JSON topic's document: the fields its readers use, checked; any others kept as they came."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)


class ArmModeReport(TopicDocument):
    """``/aubo/mode`` (latched, on every change): the arm's mode and its fault ("" when none)."""

    mode: Literal[ARM_MODES]  # type: ignore[valid-type]
    fault: str = ""

    @property
    def driven(self) -> bool:
        """Whether sources may drive the arm in this mode (enabled or holding)."""
        return self.mode in ARM_DRIVEN_MODES


Finite = Annotated[float, Field(allow_inf_nan=False)]
Vec3 = Annotated[tuple[Finite, Finite, Finite], Field()]


class SimMetrics(TopicDocument):
    """The world's evaluation of an episode (sim_cell.metrics): which workpieces are placed, SR, PCR ..."""

    placed: list[bool] = Field(max_length=64)
    SR: Finite
    PCR_T: Finite


class SimEpisodeReport(TopicDocument):
    """``/sim/episode`` (latched, sim only): the world's episode, its task and how it stands (all of it, as the
    world always sends it: a document without them is not the world's)."""

    episode: NonNegativeInt
    sim_time: Finite
    done: bool
    spec: dict[str, Any]  # the task (libero_workcell.task.TaskSpec.to_dict)
    metrics: SimMetrics

    @field_validator("spec")
    @classmethod
    def _a_task(cls, spec: dict[str, Any]) -> dict[str, Any]:
        if spec:
            try:
                TaskSpec.from_dict(spec)
            except (ValueError, TypeError, KeyError) as exc:
                raise ValueError(f"not a task: {exc}") from None
        return spec

    @property
    def instruction(self) -> str:
        """The task's language instruction ("" when the report carries no task)."""
        return str(self.spec.get("language_instruction", "")) if self.spec else ""


class GroundTruthPiece(TopicDocument):
    name: str
    type: str
    pos: Vec3
    lin_vel: Vec3
    arrived: bool
    in_slot: bool
    target_pos: Vec3

    @field_validator("type")
    @classmethod
    def _known(cls, kind: str) -> str:
        if kind not in WORKPIECE_CATALOG:
            raise ValueError(f"unknown workpiece type {kind[:40]!r}")
        return kind


class GroundTruthBelt(TopicDocument):
    speed: Finite


class GroundTruth(TopicDocument):
    """``/sim/ground_truth`` (sim only): the world's state at a control step, what the scripted expert reads."""

    sim_time: Finite
    episode: NonNegativeInt = 0
    clock_ns: NonNegativeInt | None = None
    belt: GroundTruthBelt
    slot_rule: str = "ordered"
    workpieces: list[GroundTruthPiece] = Field(max_length=64)


class RecorderStatus(TopicDocument):
    """``/recorder/status`` (latched): what the recorder records and has saved (as the recorder always sends it)."""

    recording: bool
    saving: NonNegativeInt
    num_demos: NonNegativeInt
    save_failures: NonNegativeInt
    error: str | None
    session_file: str
    last_saved: dict[str, Any] | None = None  # the demo saved last: its name, and what the session log keeps of it


class StatusDocument(TopicDocument):
    """A status topic shown as it comes (``/teleop/status``, ``/policy/status``, ``/replay/status``): any object."""


Doc = TypeVar("Doc", bound=TopicDocument)


def decode(model: type[Doc], text: str | bytes, topic: str) -> Doc:
    """``text`` as ``model``'s document, or ContractError naming ``topic`` and what is wrong."""
    return checked(model, text, topic)[0]


def checked(model: type[Doc], text: str | bytes, topic: str) -> tuple[Doc, Any]:
    """``text`` as ``model``'s document and as the JSON value it parsed to (for a reader that keeps the plain
    value, checked), or ContractError naming ``topic`` and what is wrong."""
    value = parse(text, topic)
    try:
        return model.model_validate(value), value
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'the document'}: {e['msg']}" for e in exc.errors())
        raise ContractError(f"{topic}: {problems[:400]}") from None


class JsonTopicReader(Generic[Doc]):
    """One subscription's decoder: a good message's document, or None after counting and logging a bad one."""

    def __init__(self, model: type[Doc], topic: str, logger: Any | None = None) -> None:
        self.model, self.topic, self._logger = model, topic, logger
        self.dropped = 0  # bad messages so far
        self.last_error = ""

    def __call__(self, msg: Any) -> Doc | None:
        """``msg``: a std_msgs/String (or its text)."""
        got = self.checked(msg)
        return None if got is None else got[0]

    def checked(self, msg: Any) -> tuple[Doc, Any] | None:
        """The document and the plain JSON value it was read from (:func:`checked`), or None."""
        try:
            return checked(self.model, getattr(msg, "data", msg), self.topic)
        except ContractError as exc:
            self.dropped += 1
            self.last_error = str(exc)[:300]
            if self._logger is not None:
                self._logger.error(f"dropped a bad message: {self.last_error}", throttle_duration_sec=2.0)
            return None

    def then(self, handle: Callable[[Doc], None]) -> Callable[[Any], None]:
        """A subscription callback: ``handle`` each good document; a bad one is only counted and logged."""

        def callback(msg: Any) -> None:
            if (doc := self(msg)) is not None:
                handle(doc)

        return callback
