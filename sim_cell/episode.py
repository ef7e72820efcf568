"""Run an episode in one process, in sim time: world + arm driver + an action source.

The same pieces as the ROS graph (SimWorld, the ArmDriver with its sim
backends over a SimLink, the contract's 7-D action), minus the middleware
and the wall clock, so many seeds run in seconds and identically each time.
The graph-level tests prove the ROS path; this proves the behaviour.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.spatial.transform import Rotation

from aubo_bridge.backends.sim import SimArmBackend
from aubo_bridge.config import ArmConfig
from aubo_bridge.driver import ArmDriver
from gripper.sim_backend import SimGripperBackend
from libero_workcell.contract import SOURCE_EXPERT
from libero_workcell.task import TaskSpec
from sim_cell.expert import SceneView, ScriptedExpert
from sim_cell.world import SimWorld
from transports.sim_link import SimLink

# (ground truth dict, 7-D state) -> 7-D action
ActionSource = Callable[[dict, np.ndarray], np.ndarray]


@dataclass
class EpisodeResult:
    spec: TaskSpec
    metrics: dict
    steps: int
    rejected: int
    actions: list[np.ndarray] = field(default_factory=list)
    states: list[np.ndarray] = field(default_factory=list)


@dataclass
class SimRig:
    """The world, its link and an enabled ArmDriver on sim time: the graph's pieces in one process."""

    world: SimWorld
    link: SimLink
    driver: ArmDriver
    servo_per_control: int  # servo ticks per control period
    physics_per_servo: int  # physics steps per servo tick

    def servo_tick(self) -> None:
        """One servo period: the driver sends a target, the world advances to the next tick."""
        self.driver.tick()
        self.world.step(self.physics_per_servo)

    def tcp(self) -> tuple[np.ndarray, np.ndarray]:
        """The measured TCP: position and rotation matrix (what a source observes)."""
        s = self.driver.status()
        return s.tcp_pos, Rotation.from_rotvec(s.tcp_rotvec).as_matrix()

    def act(self, action: np.ndarray, source: str, what: str, servo_ticks: int | None = None, turn: int = 0) -> None:
        """Submit one action as ``source`` (its stream ``turn``), then let one control period pass (or
        ``servo_ticks`` servo periods: as long as a recorded action held the arm); a rejection is an error naming
        ``what`` was being done (a source that must not be refused: conversion, replay)."""
        res = self.driver.submit_action(action, source, turn)
        if not res.accepted:
            shown = np.round(action, 3).tolist()
            raise RuntimeError(f"{what}: the arm driver rejected the action {shown}: {res.reason}")
        self.control_period(self.servo_per_control if servo_ticks is None else servo_ticks)

    def control_period(self, servo_ticks: int) -> None:
        """``servo_ticks`` servo periods, then the arm observed at the new control step: what the next source
        sees is this moment's state, as the graph's arm bridge publishes it in lockstep (aubo_bridge.node)."""
        for _ in range(servo_ticks):
            self.servo_tick()
        self.driver.observe()


def make_sim_rig(
    spec: TaskSpec,
    arm_config: ArmConfig | None = None,
    render: bool = False,
    active_source: str = SOURCE_EXPERT,
    start_q: np.ndarray | None = None,
    camera_hz: float | None = None,
) -> SimRig:
    """``start_q``: the arm's joints at the episode's start (default: home); ``camera_hz``: the world's
    own rendering rate (None: its default; 0: render only when asked)."""
    cfg = arm_config or ArmConfig()
    link = SimLink.in_memory()
    extra = {} if camera_hz is None else {"camera_hz": camera_hz}
    world = SimWorld(spec, link=link, render=render, home_q=start_q, **extra)
    clock = lambda: world.sim_time  # noqa: E731 - the driver runs on sim time here
    arm = SimArmBackend(link, clock=clock, stale_after=math.inf)
    gripper = SimGripperBackend(link, clock=clock, stale_after=math.inf)
    driver = ArmDriver(cfg, arm, gripper, clock=clock, active_source=active_source)
    ok, msg = driver.enable()
    if not ok:
        raise RuntimeError(f"arm would not enable: {msg}")
    return SimRig(
        world,
        link,
        driver,
        servo_per_control=round(cfg.servo_hz / cfg.control_hz),
        physics_per_servo=round(cfg.servo_period / world.model.opt.timestep),
    )


def expert_source(expert: ScriptedExpert | None = None) -> ActionSource:
    expert = expert or ScriptedExpert()
    return lambda gt, state: expert.act(SceneView.from_ground_truth(gt), state)


def run_episode(
    spec: TaskSpec,
    source: ActionSource | None = None,
    arm_config: ArmConfig | None = None,
    render: bool = False,
    record: bool = False,
    stop_when_done: bool = True,
    on_step: Callable[[SimRig, np.ndarray, np.ndarray], None] | None = None,
    max_steps: int | None = None,
    camera_hz: float | None = None,
) -> EpisodeResult:
    """Run ``spec`` to its horizon (or until all workpieces are placed) with ``source`` driving.

    ``on_step(rig, action, state)`` is called once per control step, after the action was submitted and
    before the arm moved on it (so ``rig.driver.status()`` is still the observation the action answers).
    """
    source = source or expert_source()
    rig = make_sim_rig(spec, arm_config, render, camera_hz=camera_hz)
    world, driver = rig.world, rig.driver
    result = EpisodeResult(spec, {}, 0, 0)
    try:
        while world.sim_time < spec.horizon and (max_steps is None or result.steps < max_steps):
            state = driver.status().state7
            action = np.asarray(source(world.ground_truth(), state), dtype=float)
            res = driver.submit_action(action, SOURCE_EXPERT)
            result.rejected += int(not res.accepted)
            if record:
                result.actions.append(action)
                result.states.append(state)
            if on_step is not None:
                on_step(rig, action, state)
            rig.control_period(rig.servo_per_control)
            result.steps += 1
            if stop_when_done and world.evaluate()["SR"] == 1.0:
                break
        result.metrics = world.evaluate()
    finally:
        world.close()
    return result
