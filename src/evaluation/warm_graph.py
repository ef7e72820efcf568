"""Trials on a warm simulated workcell: one deploy graph runs trial after trial, each a world episode.

Why: starting the seven processes of a graph costs more wall time than many a trial's reset. The world's task
parameters are settable at run time and ``/sim/reset`` starts a new episode from them on the next control step;
the policy node and the rollout recorder already follow the world's episodes (a new world episode is a new policy
episode with its instruction, and a new recorded rollout), the arm bridge re-syncs on the world's episode, and the
local policy server's expert starts over when the world's time goes back. So a trial is: set the task, reset,
wait for the episode to end and its rollout to be saved. The graph's first episode is its first trial (started
with that trial's task), and a trial's result does not depend on which trials ran on the graph before it
(tests/evaluation/test_evaluation_sim.py). Settings that cannot change at run time (the preference) key the graph:
a trial that needs others gets a graph of its own.

The rollout recorder keeps one session per graph (``workers/<host>/rollouts.hdf5``, an episode file per trial);
each trial's episode file is hard-linked as ``rollouts/trial_NNN.hdf5`` and its policy timing records (the
policy node tags each with its world episode) copied to ``timing/trial_NNN.jsonl``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import time
import warnings
from pathlib import Path
from typing import Any

from evaluation.probe import START_TIMEOUT, GraphProbe
from evaluation.protocol import Trial
from evaluation.settings import EvalSettings, recorded

STOP_TIMEOUT = 20.0  # s for a graph's nodes to stop cleanly
# s for a trial's last policy timing lines: the policy node writes a step's line once its action's result joined it
# (or a second later, as the last action's does, which the ended episode never applies), possibly after the rollout
# is saved; on a loaded machine well after
TIMING_TIMEOUT = 30.0
# The world's task parameters a trial sets (sim_world's, changeable at run time) and the conveyor's belt speed
SIM_WORLD = "sim_world"
CONVEYOR = "conveyor_driver"


def trial_task(trial: Trial) -> dict[str, Any]:
    """The world's task parameters of one trial."""
    return {
        "seed": int(trial.seed),
        "combination": int(trial.combination),
        "slot_permutation": [int(i) for i in trial.slot_permutation],
        "belt_speed": float(trial.belt_speed),
    }


def graph_overrides(trial: Trial, settings: EvalSettings, session: Path, port: int, link: str) -> dict[str, str]:
    """The deploy graph's arguments for a graph whose first episode is ``trial``."""
    from policy_node.clients import local_url
    from workcell import launch_presets

    local = not settings.policy_url
    o = {k: str(v) for k, v in launch_presets.DEPLOY_SIM.items()}
    o.update(
        {
            "policy_local_server": str(local).lower(),
            "policy_port": str(port),
            "policy_url": local_url(port) if local else settings.policy_url,
            "policy_autostart": "true",  # in lockstep: the policy drives every world episode from its first step
            "record_rollouts": "true",  # ... and the rollout recorder records each whole (follow_episodes)
            "real_time_factor": "0",
            "record_path": str(session / "rollouts.hdf5"),
            "policy_timing": str(session / "timing.jsonl"),
            "belt_speed": f"{trial.belt_speed:g}",
            "preference": graph_key(trial, settings),
            "sim_link": link,
            f"{SIM_WORLD}.seed": str(trial.seed),
            f"{SIM_WORLD}.combination": str(trial.combination),
            f"{SIM_WORLD}.slot_permutation": json.dumps(list(trial.slot_permutation)),
            "policy_node.policy.mode": settings.mode,
            "policy_node.policy.replan_steps": str(settings.replan_steps),
        }
    )
    o.update(settings.extra)
    return o


def graph_key(trial: Trial, settings: EvalSettings) -> str:
    """What a trial needs of its graph that cannot change at run time: the preference (the policy's prompt and the
    recorder's satisfaction curves are set at start)."""
    return trial.preference or settings.preference


def new_session(out_dir: Path) -> Path:
    """The folder of a graph this process starts, ``workers/<host>-<pid>-<n>``, made here: never one an earlier graph
    had. A worker whose graph failed a trial starts the retry's graph in the same process (a new host): in the failed
    graph's folder its logs would be overwritten and its policy timing records mixed into the retry's."""
    workers = out_dir / "workers"
    workers.mkdir(parents=True, exist_ok=True)
    n = 0
    while True:
        folder = workers / f"{socket.gethostname()}-{os.getpid()}-{n}"
        try:
            folder.mkdir()
            return folder
        except FileExistsError:  # an earlier graph's (of this process, or of an earlier run's with this pid)
            n += 1


def episode_timing(source: Path, episode: int, steps: int, timeout: float = TIMING_TIMEOUT) -> list[str]:
    """The policy node's timing lines of world episode ``episode`` in ``source``, once all ``steps`` of it are
    there (a line per step the policy ran: as many as the rollout's samples), or what is there after ``timeout``
    s. A line the node is still writing is not one yet."""
    deadline = time.monotonic() + timeout
    while True:
        lines = []
        if source.is_file():
            for line in source.read_text().splitlines():
                with contextlib.suppress(json.JSONDecodeError, TypeError, AttributeError):
                    if json.loads(line).get("episode") == episode:
                        lines.append(line)
        if len(lines) >= steps or time.monotonic() >= deadline:
            return lines
        time.sleep(0.05)


def read_rollout(path: Path) -> Any:
    """A rollout's one demo (libero_format.Demo), without its images."""
    from libero_workcell.libero_format import read_demos

    return read_demos(path).demos[0]


def rollout_digest(path: Path) -> str:
    """sha256 of a rollout's actions and low-dimensional observations: two rollouts with the same digest did the
    same thing, step for step (the same machine reproduces a trial bit for bit: docs/sim_time.md)."""
    return demo_digest(read_rollout(path))


def demo_digest(demo: Any) -> str:
    """:func:`rollout_digest` of a demo already read."""
    h = hashlib.sha256()
    for a in (demo.actions, demo.ee_pos, demo.ee_ori, demo.gripper_states, demo.joint_states, demo.robot_states):
        h.update(a.astype("<f8").tobytes())
    return h.hexdigest()


class WarmWorkcell:
    """A simulated deploy graph on DDS domain ``domain`` (the process's environment is set for it), started by its
    first trial and kept for the next ones. ``run(trial)`` returns the trial's result row; it raises when the graph
    fails the trial (a node that died, a reply that never came), after which the host is closed."""

    def __init__(self, settings: EvalSettings, out_dir: Path, domain: int) -> None:
        from libero_workcell import dds

        self.settings, self.out_dir, self.domain = settings, Path(out_dir), domain
        self.env = dds.loopback_env(domain)
        with warnings.catch_warnings():  # a host after a failed one: each probe makes its own context, which reads it
            warnings.simplefilter("ignore", RuntimeWarning)
            dds.apply_loopback_env(domain)  # this process's probe joins the graph's domain
        self.graph: Any = None
        self.probe: GraphProbe | None = None
        self.key: str | None = None
        self.trials_run = 0  # on the current graph
        self.graphs_started = 0
        self._episode = -1  # the world's episode number of the last trial
        self._session: Path | None = None

    # ---- a trial
    def run(self, trial: Trial) -> dict[str, Any]:
        t0 = time.monotonic()
        key = graph_key(trial, self.settings)
        if self.graph is not None and (key != self.key or self.graph.exited()):
            self.close()
        if self.graph is None:
            self._start(trial, key)
        else:
            self._next_episode(trial)
        started = time.monotonic()
        try:
            episode = self._await_end()
        except BaseException:
            self.close()
            raise
        self.trials_run += 1
        rollout = self._collect_rollout(trial)
        demo = read_rollout(rollout)
        timing = self._collect_timing(trial, int(episode["episode"]), demo.num_samples)
        m = episode["metrics"]
        outcome = {
            "placed": [bool(p) for p in m["placed"]],
            "PCR_S": float(m["PCR_S"]),
            "pcr_s_init": float(m.get("pcr_s_init", 0.0)),
            "SR": float(m["SR"]) if not m.get("aborted") else 0.0,
            "PCR_T": float(m["PCR_T"]),
        }
        if m.get("aborted"):  # a node of the loop stopped answering: the next trial gets a fresh graph
            self.close()
        return {
            "trial": trial.as_dict(),
            "outcome": outcome,
            "sim_time": episode["sim_time"],
            "world_horizon": episode.get("horizon"),
            "aborted": m.get("aborted"),  # a node of the loop stopped answering (the reason)
            "wall_s": time.monotonic() - t0,
            "setup_s": started - t0,  # graph start-up (the first trial on a graph) or the reset between trials
            "rollout": str(rollout),
            "rollout_digest": demo_digest(demo),
            "timing": str(timing),
            "settings": recorded(self.settings),
            "worker": {"host": socket.gethostname(), "domain": self.domain, "graph": self.graphs_started,
                       "trial_on_graph": self.trials_run},
        }

    def _start(self, trial: Trial, key: str) -> None:
        from libero_workcell.loopback import free_port
        from workcell.bringup import Graph
        from workcell.launcher import launch

        self._session = new_session(self.out_dir)
        link = f"eval_{os.getpid()}_{self._session.name.rsplit('-', 1)[1]}"
        overrides = graph_overrides(trial, self.settings, self._session, free_port(), link)
        nodes = Graph.load().resolve(overrides)
        self.graphs_started += 1
        self.graph = launch(nodes, env=self.env, log_dir=self._session / "logs")
        self.key, self.trials_run, self._episode = key, 0, -1
        self.probe = GraphProbe(f"eval_{os.getpid()}").__enter__()
        self.probe.spin(lambda: self.probe.episode is not None and self.probe.recorder is not None, START_TIMEOUT,
                        "the world and the recorder", self.graph.check)  # fmt: skip

    def _next_episode(self, trial: Trial) -> None:
        """The next world episode is ``trial``: the conveyor's speed first (a belt command older than the reset does
        not count in the new episode: the world starts the belt at the task's speed), then the task, then reset."""
        assert self.probe is not None
        task = trial_task(trial)
        self.probe.set_param(CONVEYOR, "belt_speed", task["belt_speed"])
        self.probe.set_params_atomically(SIM_WORLD, task)
        self.probe.call("/sim/reset", self.graph.check)

    def _await_end(self) -> dict[str, Any]:
        """The world's report of the episode after the last one, done, once its rollout is saved."""
        assert self.probe is not None
        probe, last, demos = self.probe, self._episode, self.trials_run + 1

        failures = int((probe.recorder or {}).get("save_failures", 0))

        def ended() -> bool:
            ep, rec = probe.episode, probe.recorder
            if rec is not None and int(rec.get("save_failures", 0)) > failures:  # a full disk: say so, now
                raise RuntimeError(f"the rollout recorder could not save the trial: {rec.get('error')}")
            if ep is None or rec is None or int(ep["episode"]) <= last or not ep.get("done"):
                return False
            return int(rec.get("num_demos", 0)) >= demos and not rec.get("saving") and not rec.get("recording")

        probe.spin(lambda: probe.episode is not None and int(probe.episode["episode"]) > last, START_TIMEOUT,
                   "the world's next episode", self.graph.check)  # fmt: skip
        horizon = float(probe.episode.get("horizon") or 60.0)
        probe.spin(ended, 4 * horizon + 60, "the episode's end and its rollout saved", self.graph.check)
        self._episode = int(probe.episode["episode"])
        return dict(probe.episode)

    def _collect_rollout(self, trial: Trial) -> Path:
        """The trial's episode file, linked as ``rollouts/trial_NNN.hdf5`` (an earlier attempt's is kept aside)."""
        from recorder.session_file import episodes_dir_of

        assert self.probe is not None and self._session is not None
        name = self.probe.recorder["saved"][-1]
        episode_file = episodes_dir_of(self._session / "rollouts.hdf5") / f"{name}.hdf5"
        target = self.out_dir / "rollouts" / f"trial_{trial.index:03d}.hdf5"
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():  # an interrupted or failed attempt's: kept aside, never overwritten
            target.rename(target.with_name(f"{target.stem}.interrupted-{int(time.time())}.hdf5"))
        try:
            os.link(episode_file, target)
        except OSError:  # another file system: a copy
            shutil.copy2(episode_file, target)
        return target

    def _collect_timing(self, trial: Trial, episode: int, steps: int) -> Path:
        """The policy node's timing records of the trial's world episode (its ``steps``), as
        ``timing/trial_NNN.jsonl``."""
        assert self._session is not None
        target = self.out_dir / "timing" / f"trial_{trial.index:03d}.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        lines = episode_timing(self._session / "timing.jsonl", episode, steps)
        target.write_text("".join(line + "\n" for line in lines))
        return target

    def close(self) -> None:
        """Stop the graph (its nodes, then the probe)."""
        graph, self.graph = self.graph, None
        probe, self.probe = self.probe, None
        if probe is not None:
            with contextlib.suppress(Exception):
                probe.__exit__(None, None, None)
        if graph is not None:
            graph.stop(timeout=STOP_TIMEOUT)


def warm_host(settings: EvalSettings):  # -> scheduler.HostFactory
    """The host factory of a simulated evaluation: a warm graph per worker."""
    import functools

    return functools.partial(WarmWorkcell, settings)
