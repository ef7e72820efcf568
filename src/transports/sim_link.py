"""Shared-memory link between the simulated workcell and the drivers' sim backends.

The MuJoCo world runs in one process (the ``sim_world`` node); the arm,
gripper, conveyor and camera drivers run in others. They meet in one
fixed-layout block of shared memory, as a real arm controller and its
client meet on a socket: the world writes measured state and rendered
frames, each backend writes its own command section. No sockets, no
serialisation, microsecond latency.

Each section has a single writer and is guarded by a sequence lock (the
writer makes the counter odd while writing; a reader retries until it sees
the same even counter before and after its copy), so readers never see a
torn state. The world stamps every state write with wall time: a backend
that sees that stamp go stale knows the world is gone, the analogue of a
lost connection. The world also carries the simulated controller's safety report (``arm_fault``: a
protective stop's reason, "" when none), which the arm's sim backend reports as a real ARCS controller's
safety mode would be reported.

The same class runs over a plain in-memory buffer for in-process tests, so
the code under test is the same in both.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np

from libero_workcell.contract import CAMERA_NAMES, IMAGE_SIZE
from transports.errors import BackendError

MAGIC: Final = 0x4C49424552304931  # "LIBER0I1"
# s a device waits for the world to create its link: the world starts with its graph, and on a loaded machine its
# imports alone can take many seconds (as long as the world itself waits for its participants: sim_world's
# start_timeout)
ATTACH_TIMEOUT: Final = 60.0
LAYOUT_VERSION: Final = 3
ARM_FAULT_BYTES: Final = 160  # UTF-8 bytes of the simulated controller's protective-stop reason (longer is cut)
MAX_WORKPIECES: Final = 8
SHM_DIR: Final = Path("/dev/shm")
READ_TIMEOUT: Final = 0.1  # s a reader waits for a section's writer to finish

_SEQ = np.uint64

LAYOUT: Final = np.dtype(
    [
        ("magic", np.uint64),
        ("version", np.uint32),
        # --- world state, written by the world -------------------------
        ("state_seq", _SEQ),
        ("sim_time", np.float64),  # s since reset
        ("wall_time", np.float64),  # time.time() of the write
        ("episode", np.uint32),  # increments on every reset
        ("arm_q", np.float64, 6),  # rad
        ("arm_qd", np.float64, 6),  # rad/s
        ("tcp_pos", np.float64, 3),  # m, base frame (sim ground truth)
        ("tcp_quat", np.float64, 4),  # x, y, z, w
        ("gripper_coord", np.float64),  # [0 open, 1 closed]
        ("belt_pos", np.float64),  # m, belt travel
        ("belt_speed", np.float64),  # m/s, actual
        ("belt_running", np.uint8),
        ("arm_fault", f"S{ARM_FAULT_BYTES}"),  # UTF-8, NUL-padded: the controller's protective stop ("" none)
        # --- arm command, written by the arm backend -------------------
        ("arm_cmd_seq", _SEQ),
        ("arm_cmd_q", np.float64, 6),  # rad, servo target
        ("arm_cmd_wall", np.float64),
        # --- gripper command, written by the gripper backend ----------
        ("grip_cmd_seq", _SEQ),
        ("grip_cmd_coord", np.float64),  # [0 open, 1 closed]
        # --- conveyor command, written by the conveyor backend ---------
        ("belt_cmd_seq", _SEQ),
        ("belt_cmd_speed", np.float64),  # m/s
        ("belt_cmd_run", np.uint8),
        # --- camera frames, written by the world ---------------------
        ("cam_seq", _SEQ, len(CAMERA_NAMES)),
        ("cam_frame", np.uint64, len(CAMERA_NAMES)),  # frame counter
        ("cam_sim_time", np.float64, len(CAMERA_NAMES)),
        ("cam_wall_time", np.float64, len(CAMERA_NAMES)),
        ("cam_fovy", np.float64, len(CAMERA_NAMES)),  # vertical field of view, degrees
        ("cam_rgb", np.uint8, (len(CAMERA_NAMES), IMAGE_SIZE, IMAGE_SIZE, 3)),
    ]
)


class LinkError(BackendError):
    """The link is missing, of another layout, or its world has stopped."""


@dataclass(frozen=True)
class WorldState:
    sim_time: float
    wall_time: float
    episode: int
    arm_q: np.ndarray
    arm_qd: np.ndarray
    tcp_pos: np.ndarray
    tcp_quat: np.ndarray
    gripper_coord: float
    belt_pos: float
    belt_speed: float
    belt_running: bool
    arm_fault: str = ""  # the simulated controller's protective-stop reason ("" none), as fault_text leaves it


@dataclass(frozen=True)
class ArmCommand:
    seq: int
    q: np.ndarray
    wall_time: float


@dataclass(frozen=True)
class BeltCommand:
    seq: int
    speed: float
    run: bool


@dataclass(frozen=True)
class CameraFrame:
    camera: str
    frame: int
    sim_time: float
    wall_time: float
    rgb: np.ndarray  # (IMAGE_SIZE, IMAGE_SIZE, 3) uint8, a private copy
    fovy: float  # vertical field of view, degrees


_STATE_FIELDS: Final = (
    "sim_time",
    "wall_time",
    "episode",
    "arm_q",
    "arm_qd",
    "tcp_pos",
    "tcp_quat",
    "gripper_coord",
    "belt_pos",
    "belt_speed",
    "belt_running",
    "arm_fault",
)


def fault_text(text: object) -> str:
    """``text`` as the link carries a fault reason: one line of printable characters (runs of whitespace and
    control characters become one space), cut to at most :data:`ARM_FAULT_BYTES` bytes of UTF-8 on a character
    boundary."""
    line = " ".join("".join(c if c.isprintable() else " " for c in str(text)).split())
    return line.encode("utf-8")[:ARM_FAULT_BYTES].decode("utf-8", errors="ignore").rstrip()


def link_path(name: str) -> Path:
    """Where the link named ``name`` lives; names are plain identifiers."""
    if not name or not all(c.isalnum() or c in "_-" for c in name):
        raise LinkError(f"invalid sim link name {name!r}: use letters, digits, '_' or '-'")
    return SHM_DIR / f"libero_workcell_{name}.shm"


class SimLink:
    """A typed view of the shared block. Create with :meth:`create`, :meth:`attach` or :meth:`in_memory`."""

    def __init__(self, buffer: np.ndarray, path: Path | None = None, owner: bool = False) -> None:
        self._buf = buffer
        self._rec = buffer[0]
        self.path = path
        self._owner = owner

    # ---- construction -------------------------------------------------
    @classmethod
    def in_memory(cls) -> SimLink:
        buf = np.zeros(1, dtype=LAYOUT)
        link = cls(buf)
        link._init_header()
        return link

    @classmethod
    def create(cls, name: str) -> SimLink:
        """Create (or truncate) the named link; the caller owns and later unlinks it."""
        path = link_path(name)
        buf = np.memmap(path, dtype=LAYOUT, mode="w+", shape=(1,))
        buf[0] = np.zeros((), dtype=LAYOUT)
        link = cls(buf, path, owner=True)
        link._init_header()
        return link

    @classmethod
    def attach(cls, name: str, timeout: float = ATTACH_TIMEOUT) -> SimLink:
        """Attach to a link the world created, waiting up to ``timeout`` s for it."""
        path = link_path(name)
        deadline = time.monotonic() + timeout
        while True:
            if path.exists() and path.stat().st_size == LAYOUT.itemsize:
                buf = np.memmap(path, dtype=LAYOUT, mode="r+", shape=(1,))
                if int(buf[0]["magic"]) == MAGIC:
                    if int(buf[0]["version"]) != LAYOUT_VERSION:
                        raise LinkError(
                            f"sim link {path} has layout v{int(buf[0]['version'])}, expected v{LAYOUT_VERSION}"
                        )
                    return cls(buf, path)
            if time.monotonic() >= deadline:
                raise LinkError(
                    f"sim world link {path} not found after {timeout:.1f} s: is the sim_world node running?"
                )
            time.sleep(0.05)

    def _init_header(self) -> None:
        self._rec["version"] = LAYOUT_VERSION
        self._rec["magic"] = MAGIC

    def close(self) -> None:
        """Release the mapping; the owner also removes the file."""
        if isinstance(self._buf, np.memmap):
            self._buf.flush()
        if self._owner and self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)

    # ---- seqlock helpers ----------------------------------------------
    def _write(self, seq_field: str, values: dict, index: int | None = None) -> None:
        rec = self._rec
        if index is None:
            rec[seq_field] += 1
            for key, value in values.items():
                rec[key] = value
            rec[seq_field] += 1
        else:
            rec[seq_field][index] += 1
            for key, value in values.items():
                rec[key][index] = value
            rec[seq_field][index] += 1

    def _read(self, seq_field: str, fields: tuple[str, ...], index: int | None = None) -> tuple[int, dict]:
        """Copy ``fields`` consistently. Spins, then yields: the writer may be descheduled mid-write."""
        rec = self._rec
        deadline = None
        spins = 0
        while True:
            s1 = int(rec[seq_field] if index is None else rec[seq_field][index])
            if not s1 & 1:
                if index is None:
                    out = {f: np.copy(rec[f]) for f in fields}
                else:
                    out = {f: np.copy(rec[f][index]) for f in fields}
                s2 = int(rec[seq_field] if index is None else rec[seq_field][index])
                if s1 == s2:
                    return s1 // 2, out
            spins += 1
            if spins > 100:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + READ_TIMEOUT
                elif now > deadline:
                    raise LinkError(
                        f"sim link section {seq_field} stayed busy for {READ_TIMEOUT} s: writer died mid-write"
                    )
                time.sleep(0.0001)

    # ---- world side ---------------------------------------------------
    def write_state(self, state: WorldState) -> None:
        values = {f: getattr(state, f) for f in _STATE_FIELDS}
        values["arm_fault"] = fault_text(state.arm_fault).encode("utf-8")
        self._write("state_seq", values)

    def write_frame(
        self, camera_index: int, frame: int, sim_time: float, rgb: np.ndarray, fovy: float = float("nan")
    ) -> None:
        """Publish a rendered frame; ``fovy`` (degrees) lets readers build intrinsics (NaN: unknown)."""
        values = {"cam_frame": frame, "cam_sim_time": sim_time, "cam_wall_time": time.time(), "cam_rgb": rgb}
        values["cam_fovy"] = fovy
        self._write("cam_seq", values, index=camera_index)

    def read_arm_command(self) -> ArmCommand:
        seq, v = self._read("arm_cmd_seq", ("arm_cmd_q", "arm_cmd_wall"))
        return ArmCommand(seq, v["arm_cmd_q"], float(v["arm_cmd_wall"]))

    def read_gripper_command(self) -> tuple[int, float]:
        seq, v = self._read("grip_cmd_seq", ("grip_cmd_coord",))
        return seq, float(v["grip_cmd_coord"])

    def read_belt_command(self) -> BeltCommand:
        seq, v = self._read("belt_cmd_seq", ("belt_cmd_speed", "belt_cmd_run"))
        return BeltCommand(seq, float(v["belt_cmd_speed"]), bool(v["belt_cmd_run"]))

    # ---- backend side -------------------------------------------------
    def read_state(self) -> tuple[int, WorldState]:
        """(sequence, state). Sequence 0 means the world has not written yet."""
        seq, v = self._read("state_seq", _STATE_FIELDS)
        return seq, WorldState(
            sim_time=float(v["sim_time"]),
            wall_time=float(v["wall_time"]),
            episode=int(v["episode"]),
            arm_q=v["arm_q"],
            arm_qd=v["arm_qd"],
            tcp_pos=v["tcp_pos"],
            tcp_quat=v["tcp_quat"],
            gripper_coord=float(v["gripper_coord"]),
            belt_pos=float(v["belt_pos"]),
            belt_speed=float(v["belt_speed"]),
            belt_running=bool(v["belt_running"]),
            arm_fault=v["arm_fault"].item().decode("utf-8", errors="replace"),
        )

    def read_fresh_state(self, stale_after: float) -> tuple[WorldState | None, str | None]:
        """(state, fault): state is None before the world's first write; fault names a stalled world."""
        seq, state = self.read_state()
        if seq == 0:
            return None, None
        age = time.time() - state.wall_time
        if age > stale_after:
            return state, f"sim world state is {age:.2f} s old: world stopped or stalled"
        return state, None

    def read_world(self, stale_after: float | None) -> tuple[WorldState | None, str | None]:
        """(state, fault) as a device's sim backend reads the world: :meth:`read_fresh_state`, except that
        ``stale_after`` None (lockstep: the world is the clock and waits for its participants) never reads stale."""
        if stale_after is None:
            seq, state = self.read_state()
            return (None if seq == 0 else state), None
        return self.read_fresh_state(stale_after)

    def write_arm_command(self, q: np.ndarray) -> None:
        self._write("arm_cmd_seq", {"arm_cmd_q": q, "arm_cmd_wall": time.time()})

    def write_gripper_command(self, coord: float) -> None:
        self._write("grip_cmd_seq", {"grip_cmd_coord": coord})

    def write_belt_command(self, speed: float, run: bool) -> None:
        self._write("belt_cmd_seq", {"belt_cmd_speed": speed, "belt_cmd_run": run})

    def frame_index(self, camera: str) -> int:
        """The newest frame's counter (0: none yet): a cheap check before copying a frame."""
        return int(self._rec["cam_frame"][CAMERA_NAMES.index(camera)])

    def read_frame(self, camera: str) -> CameraFrame | None:
        """The newest frame of ``camera``, or None before the first render."""
        index = CAMERA_NAMES.index(camera)
        _, v = self._read("cam_seq", ("cam_frame", "cam_sim_time", "cam_wall_time", "cam_rgb", "cam_fovy"), index=index)
        if int(v["cam_frame"]) == 0:
            return None
        return CameraFrame(
            camera,
            int(v["cam_frame"]),
            float(v["cam_sim_time"]),
            float(v["cam_wall_time"]),
            v["cam_rgb"],
            float(v["cam_fovy"]),
        )
