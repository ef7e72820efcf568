"""``workcell check``: a read-only preflight of the devices the graph ``workcell bringup`` would start needs.

Why: on the physical cell a wrong address, port, Modbus ID or camera serial shows up as a node that dies at
start-up, one device at a time. The preflight resolves the same graph (same ``--job``, ``cell:=FILE``,
``NODE.PARAM:=VALUE``, ``--graph``) and asks each node's package what to check for the node's parameters: a
module ``<package>.preflight`` with ``check(node, params, ctx) -> list[Check]`` (aubo_bridge, conveyor_driver,
camera_driver, teleop_pico, policy_node, recorder). Every probe only reads: no enable, no motion, no write to
a drive (the CTAG's enable runs a calibration stroke). Serial ports and cameras are not opened while a
real-profile graph runs (its nodes hold them); each check says so. Probes that go through a vendor SDK that can
crash or hang its process (pyaubo_sdk, pyrealsense2, xrobotoolkit-sdk) run in a child process
(:func:`in_child`), which prints its answer as one marker line.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, Final

from libero_workcell.progress import counted, progress_bar

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


def ports_busy() -> str:
    """Why serial ports and cameras are held now: a running real-profile graph (libero_workcell.run_registry)."""
    from libero_workcell import run_registry

    for record in run_registry.running():
        if not record.use_sim:
            job = f", job {record.job}" if record.job else ""
            return (f"a real-profile graph runs (pid {record.pid}, ROS_DOMAIN_ID {record.domain_id}{job}) and its "
                    "nodes hold the serial ports and cameras: stop it to check them")  # fmt: skip
    return ""


def section(params: Mapping[str, Any], prefix: str, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """A device config's fields from a node's resolved parameters: ``prefix.field`` values over ``defaults`` (the
    graph lists only some; the node declares the rest with these defaults)."""
    given = {k[len(prefix) + 1 :]: v for k, v in params.items() if k.startswith(prefix + ".")}
    return {**defaults, **given}


def skipped_busy(node: str, what: str, ctx: Context) -> Check:
    return Check(node, what, SKIP, f"not opened: {ctx.ports_busy}")


def _checker(module: str) -> Callable[[str, Mapping[str, Any], Context], list[Check]] | None:
    """``check`` of the node's package preflight module (``aubo_bridge.node`` -> ``aubo_bridge.preflight``)."""
    name = module.split(".")[0] + ".preflight"
    if importlib.util.find_spec(name) is None:
        return None
    return importlib.import_module(name).check


def run(nodes: Sequence[Any], ctx: Context, progress: bool = False) -> list[Check]:
    """Every node's checks (``nodes``: bringup.NodeSpec), the nodes at once, the results in node order.
    ``progress``: a bar of the nodes checked on stderr (a device that does not answer takes its probes' timeouts)."""
    jobs = [(spec.name, fn, spec.parameters) for spec in nodes if (fn := _checker(spec.module)) is not None]

    def one(job: tuple[str, Callable[..., list[Check]], Mapping[str, Any]]) -> list[Check]:
        node, fn, params = job
        try:
            return list(fn(node, params, ctx))
        except Exception as exc:  # a probe's own bug must not hide the other nodes' results
            return [Check(node, "preflight", FAIL, f"the check itself failed: {type(exc).__name__}: {exc}",
                          "report this with the output above")]  # fmt: skip

    with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool, \
            progress_bar(len(jobs), "checking", "node", enabled=progress and bool(jobs)) as bar:  # fmt: skip
        futures = [pool.submit(one, job) for job in jobs]
        for _ in counted(as_completed(futures), bar):
            pass
        return [c for f in futures for c in f.result()]


def report(checks: Iterable[Check]) -> str:
    """One line per check (and the what-to-do under each that did not pass), then the count."""
    checks = list(checks)
    if not checks:
        return ("nothing to check: no node of this graph uses a device (on the simulated workcell every device "
                "is the sim world; `use_sim:=false`, or a --job such as real_workcell, checks the physical cell)")
    width = max(len(c.node) for c in checks)
    lines = []
    for c in checks:
        lines.append(f"  {c.status:4s}  {c.node:{width}s}  {c.what}: {c.detail}")
        if c.todo and c.status in (FAIL, WARN):
            lines.append(f"  {'':4s}  {'':{width}s}  -> {c.todo}")
    counts = {s: sum(c.status == s for c in checks) for s in (OK, FAIL, WARN, SKIP)}
    lines.append(f"{counts[OK]} passed, {counts[FAIL]} failed, {counts[WARN]} warnings, {counts[SKIP]} skipped")
    return "\n".join(lines)


def exit_code(checks: Iterable[Check]) -> int:
    """0 when nothing failed, 1 when a check failed (warnings and skips do not fail)."""
    return 1 if any(c.status == FAIL for c in checks) else 0


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
