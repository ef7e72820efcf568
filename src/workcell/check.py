"""``workcell check``: a read-only preflight of the devices the graph ``workcell bringup`` would start needs.

The preflight resolves the same graph (same ``--job``, ``cell:=FILE``, ``NODE.PARAM:=VALUE``, ``--graph``) and
runs, for each node, its package's checks (``<package>.preflight.check``, libero_workcell.preflight: what a check
is made of) on the node's parameters, the nodes at once. This is the one place the bring-up runs device code
(read-only probes, before any node runs): each package's checks are imported here in plain sight, and
pyproject.toml's contract "Jobs and bring-up reach the devices only through the contract" lists these imports as
its exceptions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from libero_workcell.preflight import FAIL, OK, SKIP, WARN, Check, Context
from libero_workcell.progress import counted, progress_bar
from workcell import run_registry

Checker = Callable[[str, Mapping[str, Any], Context], list[Check]]


def ports_busy() -> str:
    """Why serial ports and cameras are held now: a running real-profile graph (workcell.run_registry)."""
    for record in run_registry.running():
        if not record.use_sim:
            job = f", job {record.job}" if record.job else ""
            return (f"a real-profile graph runs (pid {record.pid}, ROS_DOMAIN_ID {record.domain_id}{job}) and its "
                    "nodes hold the serial ports and cameras: stop it to check them")  # fmt: skip
    return ""


def checker(module: str) -> Checker | None:
    """The checks of the package of a node's module (``aubo_bridge.node`` -> ``aubo_bridge.preflight.check``);
    None for a node that uses no device. Imported when asked: a graph's check loads only its own packages'."""
    package = module.split(".")[0]
    if package == "aubo_bridge":
        from aubo_bridge.preflight import check
    elif package == "conveyor_driver":
        from conveyor_driver.preflight import check
    elif package == "camera_driver":
        from camera_driver.preflight import check
    elif package == "teleop_pico":
        from teleop_pico.preflight import check
    elif package == "policy_node":
        from policy_node.preflight import check
    elif package == "recorder":
        from recorder.preflight import check
    else:
        return None
    return check


def run(nodes: Sequence[Any], ctx: Context, progress: bool = False) -> list[Check]:
    """Every node's checks (``nodes``: bringup.NodeSpec), the nodes at once, the results in node order.
    ``progress``: a bar of the nodes checked on stderr (a device that does not answer takes its probes' timeouts)."""
    jobs = [(spec.name, fn, spec.parameters) for spec in nodes if (fn := checker(spec.module)) is not None]

    def one(job: tuple[str, Checker, Mapping[str, Any]]) -> list[Check]:
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
