"""What a node package's preflight checks are made of: ``workcell check``'s interface (its runner is
workcell.check).

Why: on the physical cell a wrong address, port, Modbus ID or camera serial shows up as a node that dies at
start-up, one device at a time. A package whose node uses a device has a module ``<package>.preflight`` with
``check(node, params, ctx) -> list[Check]``. Every probe only reads: no enable, no motion, no write to a drive
(the CTAG's enable runs a calibration stroke). Serial ports and cameras are not opened while a real-profile
graph runs (``Context.ports_busy`` says why); each check says so. Probes that go through a vendor SDK that can
crash or hang its process (pyaubo_sdk, pyrealsense2, xrobotoolkit-sdk) run in a child process
(:func:`in_child`), which prints its answer as one marker line.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

OK, WARN, FAIL, SKIP = "ok", "warn", "FAIL", "skip"
MARKER: Final = "PREFLIGHT "  # a child probe's answer: this, then one line of JSON
PROBE_TIMEOUT: Final = 10.0  # s a probe may take (a child is killed after it)


@dataclass(frozen=True)
class Check:
    """One thing checked: what, how it went, what was found and, if it did not pass, what to do."""

    node: str
    what: str
    status: str  # OK, WARN, FAIL or SKIP
    detail: str
    todo: str = ""


@dataclass(frozen=True)
class Context:
    nodes: tuple[str, ...] = ()  # the nodes the graph would start (a local policy server among them, ...)
    ports_busy: str = ""  # why serial ports and cameras must not be opened now ("": they may)
    timeout: float = PROBE_TIMEOUT


class ProbeError(RuntimeError):
    """A child probe that hung, crashed or gave no answer."""


def section(params: Mapping[str, Any], prefix: str, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """A device config's fields from a node's resolved parameters: ``prefix.field`` values over ``defaults`` (the
    graph lists only some; the node declares the rest with these defaults)."""
    given = {k[len(prefix) + 1 :]: v for k, v in params.items() if k.startswith(prefix + ".")}
    return {**defaults, **given}


def skipped_busy(node: str, what: str, ctx: Context) -> Check:
    return Check(node, what, SKIP, f"not opened: {ctx.ports_busy}")


# ----------------------------------------------------------------------------------------------- child probes
def in_child(target: str, arg: Mapping[str, Any], timeout: float = PROBE_TIMEOUT) -> dict[str, Any]:
    """``module:function(arg)`` run in a child process; its dict answer. ProbeError when the child hung (killed
    after ``timeout``), crashed or answered nothing: the SDKs this is for can take their process down."""
    cmd = [sys.executable, "-m", "libero_workcell.preflight", target]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # what this process imports
    try:  # the argument on stdin, not the command line: it can hold a password
        out = subprocess.run(cmd, input=json.dumps(dict(arg)), capture_output=True, text=True, timeout=timeout,
                             env=env)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise ProbeError(f"no answer within {timeout:g} s (the probe hung and was stopped)") from None
    for line in reversed(out.stdout.splitlines()):
        if line.startswith(MARKER):
            return dict(json.loads(line[len(MARKER) :]))
    last = (out.stderr.strip().splitlines() or ["nothing on stderr"])[-1]
    raise ProbeError(f"the probe process ended without an answer (exit code {out.returncode}): {last}")


def _child_main(target: str) -> None:
    """The child's side: call the probe, print its answer as the marker line, leave at once (no interpreter
    teardown: an SDK's threads can crash it)."""
    module, _, function = target.partition(":")
    try:
        answer = getattr(importlib.import_module(module), function)(json.loads(sys.stdin.read()))
    except Exception as exc:
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(f"\n{MARKER}{json.dumps(answer)}\n")
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    _child_main(sys.argv[1])
