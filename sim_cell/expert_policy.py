"""The scripted expert as an openpi policy: chunks that do the D2S task on the simulated workcell, no GPU.

Served by the local policy server (sim_cell.policy_server_node) so the whole deploy loop (policy_node,
openpi's websocket protocol, chunks, the arm driver) runs on the simulated workcell with nothing trained.
Each request's state (policy_node.served) is where the arm is; the sim's ground truth (the workpieces, which the
server node reads from ``/sim/ground_truth``) is what a camera-based policy would have to see. The chunk is
the expert's next H actions, planned forward from the observed state on a model of the arm's LIBERO response
(libero_workcell.action_response) with the workpieces carried on by their velocities: a real plan, closed through
the observation at every chunk, like a VLA's.

The expert has phases and step counters (a grasp is held for so many steps). The persistent expert is
advanced by the control steps that really passed between two requests (the ground truth's sim time), on
the observed state; each chunk is planned on a copy of it.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np
from openpi_client.base_policy import BasePolicy
from scipy.spatial.transform import Rotation

from libero_workcell.action_response import Goal, OscGains, OscResponse, RefState, next_goal
from libero_workcell.contract import CONTROL_HZ_DEFAULT, STATE_DIM, action_to_delta
from policy_node.served import read_request
from sim_cell.expert import ExpertConfig, SceneView, ScriptedExpert

LOG_KEEP = 32  # of the expert's phase log (a copy per chunk must stay cheap)
MAX_VELOCITY_GAP = 0.5  # s: two requests further apart than this say nothing about the arm's velocity

# /sim/ground_truth content: of the sim clock given (ns; a lockstep request's), or the newest with None; None when
# there is none
GroundTruth = Callable[[int | None], dict | None]


def _carried_on(scene: SceneView, dt: float) -> SceneView:
    """The scene ``dt`` later, each workpiece moved on by its velocity (the belt's, or the gripper's)."""
    return replace(scene, sim_time=scene.sim_time + dt,
                   workpieces=tuple(replace(w, pos=w.pos + w.vel * dt) for w in scene.workpieces))  # fmt: skip


class ExpertChunkPolicy(BasePolicy):
    def __init__(self, ground_truth: GroundTruth, horizon: int = 10, control_hz: float = CONTROL_HZ_DEFAULT,
                 config: ExpertConfig | None = None, delay_ms: float = 0.0) -> None:  # fmt: skip
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        self.ground_truth = ground_truth
        self.horizon = int(horizon)
        self.hz = float(control_hz)
        self.delay_ms = float(delay_ms)
        self.expert = ScriptedExpert(config or ExpertConfig(control_hz=self.hz))
        self._model = OscResponse(OscGains(), 1.0 / self.hz)  # exact over a period: the goal holds within it
        self._last_time: float | None = None
        self._last_state: tuple[float, np.ndarray] | None = None  # (sim time, state7) of the previous request
        self._lock = threading.Lock()
        self.calls = 0

    def reset(self) -> None:
        with self._lock:
            self.expert.reset()
            self._last_time = None
            self._last_state = None

    def _moving(self, sim_time: float, state: np.ndarray) -> RefState:
        """The arm's reference now: the observed pose, moving as it moved since the previous request (the
        response is second order: planning from rest would leave the plan behind a moving arm)."""
        R = Rotation.from_rotvec(state[3:6]).as_matrix()
        ref = RefState.at_rest(state[:3], R)
        prev, self._last_state = self._last_state, (sim_time, state.copy())
        if prev is None or not 0.0 < sim_time - prev[0] <= MAX_VELOCITY_GAP:
            return ref
        dt = sim_time - prev[0]
        R0 = Rotation.from_rotvec(prev[1][3:6]).as_matrix()
        omega = Rotation.from_matrix(R @ R0.T).as_rotvec() / dt
        return RefState(ref.pos, (state[:3] - prev[1][:3]) / dt, R, omega)

    def infer(self, obs: dict) -> dict:
        t0 = time.monotonic()
        request = read_request(obs)
        state = request.state
        if state.shape != (STATE_DIM,):
            raise ValueError(f"the expert policy needs the contract's {STATE_DIM}-D state, got shape {state.shape}")
        clock = request.sim_clock_ns
        gt = self.ground_truth(clock)
        if gt is None:
            raise RuntimeError("no ground truth from the simulated world " + ("yet" if clock is None else
                               f"for sim clock {clock} ns"))  # fmt: skip
        scene = SceneView.from_ground_truth(gt)
        with self._lock:
            self.calls += 1
            if self._last_time is not None and scene.sim_time + 1e-9 < self._last_time:
                self.expert.reset()  # the world was reset: a new episode
                self._last_time = self._last_state = None
            steps = 1 if self._last_time is None else max(1, round((scene.sim_time - self._last_time) * self.hz))
            self._last_time = scene.sim_time
            for _ in range(steps):  # the control steps that passed, on the state observed now
                first = self.expert.act(scene, state)
            self.expert.log = self.expert.log[-LOG_KEEP:]
            planner = copy.deepcopy(self.expert)
            ref = self._moving(scene.sim_time, state)
        actions = np.zeros((self.horizon, 7))
        actions[0] = first
        goal = Goal(ref.pos, ref.R)
        dt = 1.0 / self.hz
        for j in range(1, self.horizon):  # plan forward on the response model
            dpos, drot, _ = action_to_delta(actions[j - 1])
            goal = next_goal(ref, goal, dpos, drot)
            ref = self._model.step(ref, goal)
            predicted = np.concatenate([ref.pos, Rotation.from_matrix(ref.R).as_rotvec(), state[6:7]])
            actions[j] = planner.act(_carried_on(scene, j * dt), predicted)
        spare = self.delay_ms / 1e3 - (time.monotonic() - t0)
        if spare > 0:
            time.sleep(spare)
        return {"actions": actions, "policy_timing": {"infer_ms": (time.monotonic() - t0) * 1e3}}
