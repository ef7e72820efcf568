"""The page's buttons: which operator commands the console offers, and what each does in the graph.

The commands are ``workcell call``'s (workcell.operator_cli.COMMANDS), so a button and the command line do the
same thing through the same services and parameters; the console offers a subset (no jog: driving the arm from
a web page is not a console's job). :class:`GraphControls` calls them with clients the node made at start-up, so
a hold costs one service round trip and nothing else.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from workcell.operator_cli import COMMANDS, OperatorError, Step, steps_of

# command -> the arguments the page may give it (None: any one argument the command itself validates)
OFFERED: Final[dict[str, tuple[tuple[str, ...], ...] | None]] = {
    "enable": ((),),
    "hold": ((),),
    "reset": ((),),
    "home": ((),),
    "stop-all": ((),),
    "episode": (("start",), ("save",), ("discard",)),
    "belt": (("start",), ("stop",), ("reset",)),
    "source": None,
    "policy": (("start",), ("stop",)),
}
SERVICE_TIMEOUT_S: Final = 10.0  # a button's answer (a save answers at once; homing at once)
BODY_FORM: Final = '{"args": [strings]}'


class ControlError(ValueError):
    """A command the console does not offer, or arguments it does not take."""


@dataclass(frozen=True)
class Outcome:
    ok: bool
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "message": self.message}


def plan(command: str, args: Sequence[str]) -> list[Step]:
    """What ``command args`` does, if the console offers it."""
    if command not in OFFERED:
        raise ControlError(f"the console does not offer {command!r}; it offers: {', '.join(OFFERED)}")
    allowed = OFFERED[command]
    if allowed is not None and tuple(args) not in allowed:
        raise ControlError(f"{command} takes one of: {', '.join(' '.join(a) or '(nothing)' for a in allowed)}")
    if allowed is None and len(args) != 1:
        raise ControlError(f"{command} takes one argument: {COMMANDS[command][0]}")
    try:
        return steps_of(command, list(args))
    except OperatorError as exc:
        raise ControlError(str(exc)) from None


def parse_body(body: bytes) -> list[str]:
    """A control request's arguments from its body (empty: none), or :class:`ControlError` saying what is wrong
    with it: whatever the bytes, a refusal with a reason, never an exception of another kind."""
    if not body:
        return []
    try:
        data = json.loads(body, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise ControlError(f"the body is {BODY_FORM}: it is nested too deeply") from None
    except ValueError as exc:  # not UTF-8, not JSON, or a key twice
        raise ControlError(f"the body is {BODY_FORM}: {exc}") from None
    if not isinstance(data, dict) or set(data) - {"args"}:
        raise ControlError(f"the body is {BODY_FORM}, nothing else")
    args = data.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):  # (the body's bound bounds them)
        raise ControlError(f"the body is {BODY_FORM}: args is a list of strings")
    return args


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) < len(keys):  # which one counts would depend on the parser: neither does
        raise ValueError(f"a key appears twice ({sorted({k for k in keys if keys.count(k) > 1})})")
    return dict(pairs)


def describe(command: str) -> str:
    return COMMANDS[command][0]


class Controls(Protocol):
    async def run(self, command: str, args: Sequence[str]) -> Outcome: ...


class StepRunner(Protocol):
    """What carries out one step in the graph (the console node)."""

    async def trigger(self, service: str) -> tuple[bool, str]: ...

    async def set_parameter(self, node: str, name: str, value: Any) -> tuple[bool, str]: ...

    def offers(self, service: str) -> bool: ...


class GraphControls:
    """Commands as steps, each awaited in turn; an optional step (stop-all's policy stop) is skipped where the
    graph lacks its service."""

    def __init__(self, runner: StepRunner) -> None:
        self.runner = runner

    async def run(self, command: str, args: Sequence[str]) -> Outcome:
        steps = plan(command, args)  # ControlError goes back to the page as a refusal
        messages, all_ok = [], True
        for step in steps:
            if not step.required and not self.runner.offers(step.service):
                messages.append(f"{step.describe()}: skipped (not in this graph)")
                continue
            try:
                if step.service:
                    ok, message = await asyncio.wait_for(self.runner.trigger(step.service), SERVICE_TIMEOUT_S)
                else:
                    ok, message = await asyncio.wait_for(
                        self.runner.set_parameter(step.node, step.param, step.value), SERVICE_TIMEOUT_S)
            except TimeoutError:
                ok, message = False, f"no answer within {SERVICE_TIMEOUT_S:g} s"
            except OperatorError as exc:
                ok, message = False, str(exc)
            all_ok &= ok
            messages.append(f"{step.describe()}: {message}" if len(steps) > 1 else message)
        return Outcome(all_ok, "; ".join(messages))
