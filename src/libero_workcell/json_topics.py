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
from typing import Any, Final, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from libero_workcell.contract import ARM_DRIVEN_MODES, ARM_MODES, ContractError

MAX_DOCUMENT_BYTES: Final = 1 << 20  # a status or report is a few KiB; the ground truth with every object ~10
MAX_DEPTH: Final = 32  # the deepest real document nests 5 levels; json recursing on 2,000 `[` would not return


def parse(text: str | bytes, what: str = "message") -> Any:
    """The JSON value of ``text``, or ContractError (too large, nested too deep, not JSON). The depth is
    counted on the raw text before ``json`` parses it, so a deeply nested document costs one pass, no recursion."""
    size = len(text)
    if size > MAX_DOCUMENT_BYTES:
        raise ContractError(f"{what}: {size} bytes of JSON, more than {MAX_DOCUMENT_BYTES}")
    raw = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    if _depth(raw) > MAX_DEPTH:
        raise ContractError(f"{what}: JSON nested deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ContractError(f"{what}: not JSON ({exc})") from None


def _depth(text: str) -> int:
    """The deepest nesting of brackets outside strings."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


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


Doc = TypeVar("Doc", bound=TopicDocument)


def decode(model: type[Doc], text: str | bytes, topic: str) -> Doc:
    """``text`` as ``model``'s document, or ContractError naming ``topic`` and what is wrong."""
    value = parse(text, topic)
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'the document'}: {e['msg']}" for e in exc.errors())
        raise ContractError(f"{topic}: {problems}") from None


class JsonTopicReader(Generic[Doc]):
    """One subscription's decoder: a good message's document, or None after counting and logging a bad one."""

    def __init__(self, model: type[Doc], topic: str, logger: Any | None = None) -> None:
        self.model, self.topic, self._logger = model, topic, logger
        self.dropped = 0  # bad messages so far
        self.last_error = ""

    def __call__(self, msg: Any) -> Doc | None:
        """``msg``: a std_msgs/String (or its text)."""
        try:
            return decode(self.model, getattr(msg, "data", msg), self.topic)
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
