"""Image conventions: the one home of every flip between the cameras, the demo files and a policy.

Measured with robosuite 1.4.0 (docs/hardware.md, "Image conventions"):

- ``upright``: the natural view, row 0 at the top. The workcell's cameras (real and simulated) publish
  it, and this workcell's own recordings store it.
- ``robosuite_raw``: robosuite's camera observation, as LIBERO's HDF5 files hold it: the upright view
  flipped vertically (rows reversed), not rotated.
- the LIBERO policy convention: openpi's LIBERO client rotates the raw image 180 degrees
  (``[::-1, ::-1]``), and rot180(vflip(upright)) = hflip(upright): a LIBERO-convention checkpoint sees
  the scene upright, mirrored left to right.

Export to training data and inference share :func:`policy_view` (issue 8; the seed's "one 180-degree
rotation of raw simulator images"), so a policy sees the same picture from a file as from the camera.
"""

from __future__ import annotations

from typing import Final

import numpy as np

UPRIGHT: Final = "upright"
ROBOSUITE_RAW: Final = "robosuite_raw"
CONVENTIONS: Final = (UPRIGHT, ROBOSUITE_RAW)
# the ``images`` entry of a demo file's env_args names its convention (sim_bridge writes these texts)
ENV_ARGS_TEXT: Final = {UPRIGHT: "upright", ROBOSUITE_RAW: "robosuite raw: upright view flipped vertically"}


def check_convention(convention: str) -> str:
    if convention not in CONVENTIONS:
        raise ValueError(f"image convention must be one of {list(CONVENTIONS)}, got {convention!r}")
    return convention


def stored(upright: np.ndarray, convention: str) -> np.ndarray:
    """An upright image as a file of ``convention`` stores it."""
    check_convention(convention)
    return np.ascontiguousarray(upright if convention == UPRIGHT else upright[::-1])


def to_upright(image: np.ndarray, convention: str) -> np.ndarray:
    """A stored image of ``convention`` back to upright (the vertical flip is its own inverse)."""
    return stored(image, convention)


def policy_view(image: np.ndarray, convention: str = UPRIGHT) -> np.ndarray:
    """What a LIBERO-convention policy sees: openpi's 180-degree rotation of the raw image, i.e. the upright
    image mirrored left to right. For a live camera frame (upright) and for a stored frame alike."""
    raw = stored(to_upright(image, convention), ROBOSUITE_RAW)
    return np.ascontiguousarray(raw[::-1, ::-1])


# What a policy is shown (training export and inference alike): LIBERO's policy convention, or upright.
POLICY_LIBERO: Final = "libero"
POLICY_UPRIGHT: Final = "upright"
POLICY_VIEWS: Final = (POLICY_LIBERO, POLICY_UPRIGHT)


def policy_image(image: np.ndarray, view: str, convention: str = UPRIGHT) -> np.ndarray:
    """An image of ``convention`` (a camera frame: upright) as a policy trained on ``view`` images sees it:
    :func:`policy_view` for ``libero``, upright for ``upright``. The recorder's export and the policy node
    both call this, so a policy sees the same picture from a file as from the camera."""
    if view not in POLICY_VIEWS:
        raise ValueError(f"policy image view must be one of {list(POLICY_VIEWS)}, got {view!r}")
    return policy_view(image, convention) if view == POLICY_LIBERO else to_upright(image, convention)


def convention_of(env_args: dict) -> str:
    """A demo file's image convention from its env_args (``images``); robosuite's raw when it does not say,
    as in LIBERO's own files."""
    text = str(env_args.get("images", ""))
    for convention, label in ENV_ARGS_TEXT.items():
        if text in (label, convention):
            return convention
    if not text:
        return ROBOSUITE_RAW
    raise ValueError(f"unknown image convention {text!r} in env_args; known: {list(ENV_ARGS_TEXT.values())}")
