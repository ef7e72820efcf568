"""The request openpi's LIBERO client sends, built from the stack's observation (policy_node.observation).

Keys as openpi's LIBERO client sends them: ``observation/image`` and ``observation/wrist_image`` (the camera
frame as the checkpoint was trained to see it, ``libero_workcell.image_convention.policy_image``, the same
call the training export makes; then openpi's own ``image_tools.resize_with_pad`` to 224 and uint8),
``observation/state`` (float32, in the configured state format: ``policy_node.observation.state_vector``) and
``prompt``. In sim lockstep, :data:`SIM_CLOCK_KEY` too. With ``policy.rtc`` (real-time chunking, Black et al.
2025), :data:`PREV_ACTIONS_KEY` and :data:`INFERENCE_DELAY_KEY` (docs/policy.md, "Real-time chunking").

The camera transform (:func:`camera_input`, about 1.7 ms per frame) is made when each frame arrives while the
policy drives (policy_node.observation.FrameInput, ``ClientKind.frame_input`` is this function): the request takes
the snapshot's preprocessed frames when they were made for its view, and transforms the raw frames otherwise.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
from openpi_client import image_tools

from libero_workcell.contract import POLICY_IMAGE_SIZE, format_prompt
from libero_workcell.image_convention import policy_image
from policy_node.observation import Snapshot, state_vector

IMAGE_KEY: Final = "observation/image"
WRIST_IMAGE_KEY: Final = "observation/wrist_image"
STATE_KEY: Final = "observation/state"
PROMPT_KEY: Final = "prompt"
# Sim lockstep only: the sim clock (ns) of the observation, so a simulated policy server that reads the world
# (sim_cell.expert_policy) sees it at that moment; openpi's input transforms take only the keys they know.
SIM_CLOCK_KEY: Final = "sim_clock_ns"
# policy.rtc: the actions committed for the next d control steps, (d, 7) float32, row j for step j after the
# observation (what the arm executes while the chunk is computed), and d (int). A real-time chunking server makes
# its chunk's first d actions these and blends out of them; openpi's input transforms drop keys they do not know,
# so any other openpi server ignores them.
PREV_ACTIONS_KEY: Final = "prev_actions"
INFERENCE_DELAY_KEY: Final = "inference_delay"


def camera_input(frame: np.ndarray, view: str, size: int = POLICY_IMAGE_SIZE) -> np.ndarray:
    """One upright camera frame as the policy gets it: its view, then openpi's resize-with-pad, uint8."""
    img = policy_image(np.asarray(frame), view)
    return image_tools.convert_to_uint8(image_tools.resize_with_pad(img, size, size))


def openpi_observation(snap: Snapshot, view: str, state_format: str, task: str, preference: str = "", *,
                       sim_clock_ns: int | None = None,
                       committed: np.ndarray | None = None) -> dict[str, Any]:  # fmt: skip
    """The request's dict (numpy arrays and a string: what msgpack-numpy sends)."""
    prepared = snap.input_view == view  # made on arrival for this view (policy_node.observation.FrameInput)
    obs: dict[str, Any] = {
        IMAGE_KEY: snap.external_input if prepared and snap.external_input is not None
        else camera_input(snap.external, view),
        WRIST_IMAGE_KEY: snap.wrist_input if prepared and snap.wrist_input is not None
        else camera_input(snap.wrist, view),
        STATE_KEY: state_vector(snap.state7, state_format),
        PROMPT_KEY: format_prompt(task, preference or None),
    }
    if sim_clock_ns is not None:
        obs[SIM_CLOCK_KEY] = sim_clock_ns
    if committed is not None:
        prev = np.asarray(committed, dtype=np.float32).reshape(-1, 7)
        obs[PREV_ACTIONS_KEY] = prev
        obs[INFERENCE_DELAY_KEY] = len(prev)
    return obs
