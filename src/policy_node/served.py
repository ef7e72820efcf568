"""What a policy served by the local server reads of a request, whichever protocol that server speaks.

The local server (policy_node.serve) speaks openpi's websocket protocol; its request's keys are the openpi
adapter's (policy_node.clients.openpi_ws.adapter). The policies served here (policy_node.builtin_policies,
sim_cell.expert_policy) read a request through :func:`read_request`, never by the wire's keys, so another
protocol for the local server changes this module and its own folder, not them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from policy_node.clients.openpi_ws.adapter import (
    INFERENCE_DELAY_KEY,
    PREV_ACTIONS_KEY,
    PROMPT_KEY,
    SIM_CLOCK_KEY,
    STATE_KEY,
)


@dataclass(frozen=True)
class ServedRequest:
    state: np.ndarray  # the state vector as sent (policy.state_format: the contract's 7-D by default)
    prompt: str | None
    sim_clock_ns: int | None  # sim lockstep: the sim clock of the observation
    # real-time chunking (policy.rtc): the actions committed for the next steps as sent, and how many steps
    committed: np.ndarray | None
    inference_delay: int | None


def read_request(obs: Mapping[str, Any]) -> ServedRequest:
    """The request's parts; ValueError for a request without a state (what each policy needs of the rest, it
    checks itself)."""
    if STATE_KEY not in obs:
        raise ValueError(f"the request has no state ({STATE_KEY}); it has {sorted(obs)}")
    clock = obs.get(SIM_CLOCK_KEY)
    rtc = PREV_ACTIONS_KEY in obs and INFERENCE_DELAY_KEY in obs
    return ServedRequest(
        state=np.asarray(obs[STATE_KEY], float),
        prompt=None if obs.get(PROMPT_KEY) is None else str(obs[PROMPT_KEY]),
        sim_clock_ns=None if clock is None else int(clock),
        committed=np.asarray(obs[PREV_ACTIONS_KEY]) if rtc else None,
        inference_delay=int(obs[INFERENCE_DELAY_KEY]) if rtc else None,
    )
