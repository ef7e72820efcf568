"""Policy deployment settings, validated once at start-up (the node declares them as ``policy.<field>``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Final

from libero_workcell.config_base import MappedConfig
from libero_workcell.contract import CONTROL_HZ_DEFAULT
from libero_workcell.image_convention import POLICY_LIBERO, POLICY_VIEWS
from policy_node.chunks import BLEND_OLD_DEFAULT, MIN_SPLICE_STEP_DEFAULT
from policy_node.clients import scheme_of
from policy_node.observation import STATE_CONTRACT, STATE_FORMATS
from policy_node.protocol import MAX_REPLY_BYTES_DEFAULT
from preferences.catalogue import Catalogue, Condition, PreferenceError

# policy_node declares every field as policy.<field>; the task is the one that changes at run time (each trial's
# instruction on the physical cell, `workcell call policy task`)
TASK_PARAM: Final = "policy.task"
MODE_ASYNC: Final = "async"  # prefetch the next chunk while this one runs (policy_node.chunks)
MODE_SYNC: Final = "sync"  # openpi's LIBERO client: stand still while each chunk is computed
MODES: Final = (MODE_ASYNC, MODE_SYNC)
SPLICE_BOUNDED: Final = "bounded"  # each executed step within the chunks' own largest step (policy_node.chunks)
SPLICE_BLEND: Final = "blend"  # the overlap blend alone (LeRobot's): the jump at a splice is not bounded
SPLICES: Final = (SPLICE_BOUNDED, SPLICE_BLEND)
# How a reply's delay counts on the simulated workcell in lockstep (docs/sim_time.md): "0" (LIBERO's protocol: the
# world waits for the policy), a number of milliseconds (each reply counts that much sim time after its
# observation), "measured" (each reply counts its measured round trip). On the wall clock replies count when
# they come; "wall" is "measured" in sim.
LATENCY_MEASURED: Final = "measured"
LATENCY_WALL: Final = "wall"
MIN_REPLY_BYTES: Final = 1024  # a (10, 7) chunk with its timing is a few hundred bytes


def parse_latency(text: str) -> float | None:
    """A fixed delay in seconds, or None for a measured one ("measured", "wall")."""
    t = str(text).strip().lower()
    if t in (LATENCY_MEASURED, LATENCY_WALL):
        return None
    try:
        ms = float(t.removesuffix("ms"))
    except ValueError:
        raise PolicyConfigError(f"latency must be 0, a number of milliseconds or 'measured', got {text!r}") from None
    if not math.isfinite(ms) or ms < 0:
        raise PolicyConfigError(f"latency must be >= 0 ms, got {text!r}")
    return ms / 1e3


class PolicyConfigError(ValueError):
    pass


@dataclass(frozen=True)
class PolicyConfig(MappedConfig):
    error: ClassVar[type[ValueError]] = PolicyConfigError
    label: ClassVar[str] = "policy"

    url: str = "ws://127.0.0.1:8000"  # the policy server; the scheme picks the client (ws, wss: openpi)
    timeout: float = 0.5  # s: connecting, and each reply; longer is a lost server (the arm holds)
    reconnect_period: float = 1.0  # s between connection attempts while the server is away
    max_reply_bytes: int = MAX_REPLY_BYTES_DEFAULT  # a longer frame from the server is refused unread (reconnect)
    mode: str = MODE_ASYNC
    replan_steps: int = 5  # actions used of each chunk (openpi's LIBERO client: 5)
    prefetch_share: float = 0.5  # async: request when this share of a window is left (LeRobot's 0.5) ...
    blend_old: float = BLEND_OLD_DEFAULT  # ... and blend overlapping actions old x this + new x (1 - this)
    splice: str = SPLICE_BOUNDED  # how a new chunk takes over from the running one (SPLICES)
    min_splice_step: float = MIN_SPLICE_STEP_DEFAULT  # bounded: the least step allowed per control step
    # real-time chunking: send the actions committed for the next d steps and d with each observation
    # (prev_actions, inference_delay: policy_node.clients.openpi_ws.adapter); servers that do not know them ignore them
    rtc: bool = False
    start_wait_steps: int = 10  # hold steps ([0]*6 + [-1]) before the first chunk (openpi's LIBERO client: 10)
    max_obs_age: float = 0.15  # s: an observation older than this (state or either camera) is never sent
    image_view: str = POLICY_LIBERO  # what the checkpoint was trained to see (image_convention.POLICY_VIEWS)
    state_format: str = STATE_CONTRACT  # observation/state: contract 7-D or libero 8-D (policy_node.observation)
    task: str = ""  # the instruction; "" in sim: the world's
    # LIBERO-PeRM: a catalogue spec, or two joined by "+" (a declared combination or conflict); the prompt becomes
    # "Task: {task}. Preference: {language}." (preferences.catalogue)
    preference: str = ""
    latency: str = LATENCY_WALL  # sim lockstep: "0", milliseconds, or "measured" (see parse_latency)
    control_hz: float = CONTROL_HZ_DEFAULT

    def __post_init__(self) -> None:
        try:  # a scheme no client speaks stops the start, not the first connection
            scheme_of(self.url)
        except ValueError as exc:
            raise PolicyConfigError(f"url: {exc}") from None
        for name in ("timeout", "reconnect_period", "max_obs_age", "control_hz"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v > 0):
                raise PolicyConfigError(f"{name} must be a positive number, got {v!r}")
            object.__setattr__(self, name, float(v))
        if self.mode not in MODES:
            raise PolicyConfigError(f"mode must be one of {list(MODES)}, got {self.mode!r}")
        for name, low in (("replan_steps", 1), ("start_wait_steps", 0), ("max_reply_bytes", MIN_REPLY_BYTES)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise PolicyConfigError(f"{name} must be an integer >= {low}, got {v!r}")
        if not 0.0 <= self.prefetch_share <= 1.0:
            raise PolicyConfigError(f"prefetch_share must be in [0, 1], got {self.prefetch_share!r}")
        if not 0.0 <= self.blend_old < 1.0:
            raise PolicyConfigError(f"blend_old must be in [0, 1), got {self.blend_old!r}")
        if self.splice not in SPLICES:
            raise PolicyConfigError(f"splice must be one of {list(SPLICES)}, got {self.splice!r}")
        if isinstance(self.min_splice_step, bool) or not isinstance(self.min_splice_step, (int, float)) \
                or not (math.isfinite(self.min_splice_step) and 0 < self.min_splice_step <= 2):  # fmt: skip
            raise PolicyConfigError(f"min_splice_step must be in (0, 2], got {self.min_splice_step!r}")
        if not isinstance(self.rtc, bool):
            raise PolicyConfigError(f"rtc must be true or false, got {self.rtc!r}")
        if self.image_view not in POLICY_VIEWS:
            raise PolicyConfigError(f"image_view must be one of {list(POLICY_VIEWS)}, got {self.image_view!r}")
        if self.state_format not in STATE_FORMATS:
            raise PolicyConfigError(f"state_format must be one of {list(STATE_FORMATS)}, got {self.state_format!r}")
        object.__setattr__(self, "_latency_s", parse_latency(self.latency))
        try:  # parsed once, now: a preference that cannot be scored stops the start, and no request re-parses it
            object.__setattr__(self, "_condition", Catalogue.load().condition(self.preference))
        except PreferenceError as exc:
            raise PolicyConfigError(f"preference: {exc}") from None

    @property
    def latency_s(self) -> float | None:
        """Sim lockstep: the fixed delay a reply counts, in seconds; None: its measured round trip."""
        return self._latency_s

    @property
    def condition(self) -> Condition:
        """The preferences asked, from the catalogue (config/preferences/catalogue.yaml)."""
        return self._condition

    @property
    def preference_text(self) -> str:
        """The prompt's preference language ("" for none)."""
        return self.condition.text

    @property
    def control_period(self) -> float:
        return 1.0 / self.control_hz
