"""Loopback-only DDS environment for tests, the demo and the simulated workcell.

Why: the simulated workcell and the tests must never put a packet on a real
network, and two runs on one machine must not see each other's topics. Fast
DDS is confined to 127.0.0.1 by the profile in ``resources/fastdds_loopback.xml``
and each run gets its own ``ROS_DOMAIN_ID``.

``ROS_AUTOMATIC_DISCOVERY_RANGE`` is set to ``SYSTEM_DEFAULT`` ("leave the
middleware's own configuration alone"), not ``LOCALHOST``: measured with
rmw_fastrtps_cpp 9.3 / Fast DDS 3.2, ``LOCALHOST`` on top of this profile
makes the RMW add sockets bound to 0.0.0.0 and to the external interface,
while ``SYSTEM_DEFAULT`` (and ``SUBNET``) leave only 127.0.0.1 sockets.

The environment must be in place before the first ``rclpy.init()`` of the
process (the RMW reads it when it creates its DDS participant); child
processes get it through their ``env``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import sys
import tempfile
import warnings
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Final

RMW: Final = "rmw_fastrtps_cpp"
PROFILE_NAME: Final = "fastdds_loopback.xml"
DISCOVERY_RANGE: Final = "SYSTEM_DEFAULT"
DOMAIN_ID_MIN: Final = 1  # 0 is everybody's default: never used for a per-run domain
DOMAIN_ID_MAX: Final = 100  # keeps RTPS ports (7400 + 250 * id + ...) below the ephemeral range

# Variables that would override or widen the profile: removed from a loopback env.
CONFLICTING_VARS: Final = (
    "ROS_LOCALHOST_ONLY",  # deprecated; maps to LOCALHOST range (adds non-loopback sockets)
    "ROS_STATIC_PEERS",  # extra unicast peers, possibly on other hosts
    "ROS_DISCOVERY_SERVER",  # Fast DDS discovery-server mode, usually another host
    "ROS_SUPER_CLIENT",
    "FASTRTPS_DEFAULT_PROFILES_FILE",  # legacy name of the profile variable
    "FASTDDS_ENVIRONMENT_FILE",
    "FASTDDS_BUILTIN_TRANSPORTS",  # would replace the profile's transport choice
    "RMW_FASTRTPS_USE_QOS_FROM_XML",  # our profile defines no entity QoS
)


def profile_path() -> Path:
    """Absolute path of the loopback Fast DDS profile shipped as package data.

    Found through importlib.resources, so it works from the source tree, an
    editable or plain pip install and a colcon install alike.
    """
    path = Path(str(resources.files("libero_workcell").joinpath("resources", PROFILE_NAME)))
    if not path.is_file():
        raise FileNotFoundError(f"loopback DDS profile missing from the installed package: {path}")
    return path.resolve()


def per_run_domain_id(pid: int | None = None) -> int:
    """A domain id in [DOMAIN_ID_MIN, DOMAIN_ID_MAX] derived from the process id.

    Concurrent runs collide only if their pids are congruent modulo 100.
    """
    pid = os.getpid() if pid is None else pid
    return DOMAIN_ID_MIN + pid % (DOMAIN_ID_MAX - DOMAIN_ID_MIN + 1)


DELEGATED_VAR: Final = "LIBERO_WORKCELL_DOMAIN_DELEGATED"  # DOMAIN:TOKEN (DomainClaim.delegated_env)


class DomainClaim:
    """A domain id this process holds on this machine (an ``flock`` on a file named by it): no other
    :func:`claim_domain` on the machine gets it until :meth:`release`, or until this process ends, however it ends
    (the kernel drops the lock of a killed process)."""

    def __init__(self, domain_id: int, handle: int | None, token: str = "") -> None:
        self.domain_id = domain_id
        self._handle = handle  # None: a domain delegated to this process (:func:`delegated_env`), held by another
        self.token = token  # written into the claim's file: what a delegation names

    def delegated_env(self) -> dict[str, str]:
        """The variables that hand this domain to child processes: a graph a child starts on the inherited
        ``ROS_DOMAIN_ID`` joins it (:func:`claim_exact`) instead of being refused. A test run does this with its
        own domain: its graphs run on it, and no other run or graph on the machine gets it."""
        return {"ROS_DOMAIN_ID": str(self.domain_id), DELEGATED_VAR: f"{self.domain_id}:{self.token}"}

    def release(self) -> None:
        if self._handle is not None:
            os.close(self._handle)  # closing the descriptor drops the lock
            self._handle = None

    def __enter__(self) -> DomainClaim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def claims_dir() -> Path:
    """Where the machine's domain claims live: one folder per user (another user's runs use other ports' locks)."""
    return Path(tempfile.gettempdir()) / f"libero_workcell-domains-{os.getuid()}"


class DomainHeldError(RuntimeError):
    """The domain asked for is held by another process on this machine (a running graph, a worker)."""

    def __init__(self, domain_id: int, message: str = "") -> None:
        self.domain_id = domain_id
        super().__init__(message or f"ROS_DOMAIN_ID {domain_id} is held by another process on this machine")


def _lock(folder: Path, domain: int) -> DomainClaim | None:
    """The claim of ``domain``, or None when another process (or another claim of this one) holds it."""
    handle = os.open(folder / f"{domain}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        token = secrets.token_hex(8)
        os.ftruncate(handle, 0)
        os.pwrite(handle, token.encode(), 0)
    except BlockingIOError:
        os.close(handle)
        return None
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(handle)
        raise
    return DomainClaim(domain, handle, token)


def _delegated(folder: Path, domain: int) -> DomainClaim | None:
    """``domain`` as a claim this process's environment was handed (DELEGATED_VAR naming the token its holder wrote),
    or None."""
    named = os.environ.get(DELEGATED_VAR, "")
    if not named or named.split(":", 1)[0] != str(domain):
        return None
    try:
        token = (folder / f"{domain}.lock").read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    return DomainClaim(domain, None, token) if token and named == f"{domain}:{token}" else None


def _claims_folder() -> Path:
    folder = claims_dir()
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def claim_domain(prefer: int | None = None) -> DomainClaim:
    """The first domain id from ``prefer`` on (default: :func:`per_run_domain_id`), wrapping within
    [DOMAIN_ID_MIN, DOMAIN_ID_MAX], that no other process on this machine holds. Why: workers that land on one
    machine in any number (evaluation workers, a cluster's actors) each need a domain of their own, and pids
    modulo 100 collide. Raises RuntimeError when every id is held."""
    start = per_run_domain_id() if prefer is None else int(prefer)
    span = DOMAIN_ID_MAX - DOMAIN_ID_MIN + 1
    folder = _claims_folder()
    for k in range(span):
        if (claim := _lock(folder, DOMAIN_ID_MIN + (start - DOMAIN_ID_MIN + k) % span)) is not None:
            return claim
    raise RuntimeError(f"every DDS domain id {DOMAIN_ID_MIN}..{DOMAIN_ID_MAX} is held on this machine ({folder})")


def claim_exact(domain_id: int) -> DomainClaim:
    """``domain_id`` itself (one the operator chose, or the shell's ``ROS_DOMAIN_ID``), or
    :class:`DomainHeldError` when another process on this machine holds it: a graph never joins another's, unless
    its holder handed it to this process's environment (:meth:`DomainClaim.delegated_env`: a test run's domain)."""
    domain = int(domain_id)
    if not 0 <= domain <= 232:
        raise ValueError(f"ROS domain id out of range 0..232: {domain}")
    folder = _claims_folder()
    claim = _lock(folder, domain) or _delegated(folder, domain)
    if claim is None:
        raise DomainHeldError(domain)
    return claim


def claim_graph_domain(explicit: int | None = None, environ: Mapping[str, str] | None = None) -> DomainClaim:
    """The domain a graph runs on, held for as long as it runs: ``explicit`` (``--domain-id``), else an inherited
    ``ROS_DOMAIN_ID`` (from ``environ``, default os.environ), each that id exactly (:func:`claim_exact`), else
    the first free one from the per-run id (:func:`claim_domain`)."""
    chosen = explicit if explicit is not None else inherited_domain_id(environ)
    return claim_domain() if chosen is None else claim_exact(chosen)


def inherited_domain_id(environ: Mapping[str, str] | None = None) -> int | None:
    """The ``ROS_DOMAIN_ID`` already set in ``environ`` (default os.environ), if valid."""
    value = (os.environ if environ is None else environ).get("ROS_DOMAIN_ID", "").strip()
    if not value:
        return None
    try:
        domain = int(value)
    except ValueError:
        raise ValueError(f"ROS_DOMAIN_ID is not an integer: {value!r}") from None
    if not 0 <= domain <= 232:
        raise ValueError(f"ROS_DOMAIN_ID out of range 0..232: {domain}")
    return domain


def loopback_vars(domain_id: int | None = None) -> dict[str, str]:
    """Only the variables a loopback run sets (see :func:`loopback_env`)."""
    domain = per_run_domain_id() if domain_id is None else int(domain_id)
    if not 0 <= domain <= 232:
        raise ValueError(f"ROS domain id out of range 0..232: {domain}")
    return {
        "RMW_IMPLEMENTATION": RMW,
        "FASTDDS_DEFAULT_PROFILES_FILE": str(profile_path()),
        "ROS_DOMAIN_ID": str(domain),
        "ROS_AUTOMATIC_DISCOVERY_RANGE": DISCOVERY_RANGE,
    }


def loopback_env(domain_id: int | None = None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A full process environment: ``base`` (default os.environ) made loopback-only.

    Sets RMW_IMPLEMENTATION, FASTDDS_DEFAULT_PROFILES_FILE, ROS_DOMAIN_ID (the
    given one, else :func:`per_run_domain_id`) and ROS_AUTOMATIC_DISCOVERY_RANGE,
    and drops :data:`CONFLICTING_VARS`.
    """
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in CONFLICTING_VARS}
    env.update(loopback_vars(domain_id))
    return env


def apply_loopback_env(domain_id: int | None = None) -> dict[str, str]:
    """Make this process loopback-only; call before the first ``rclpy.init()``.

    Returns the variables that were set. The domain id is read by each context when it is created, so a
    process may join another domain later with a new context (the operator CLI does). The rest (the RMW, the
    Fast DDS profile, the discovery settings) is read once per process: changing any of it after rclpy was
    imported warns, because what already runs keeps the old settings.
    """
    values = loopback_vars(domain_id)
    if "rclpy" in sys.modules:
        process_wide = sorted([k for k, v in values.items() if k != "ROS_DOMAIN_ID" and os.environ.get(k) != v]
                              + [k for k in CONFLICTING_VARS if k in os.environ])  # fmt: skip
        if process_wide:
            warnings.warn(f"apply_loopback_env() after rclpy was imported changes {process_wide}: what already "
                          "runs keeps its settings", RuntimeWarning, stacklevel=2)  # fmt: skip
    for key in CONFLICTING_VARS:
        os.environ.pop(key, None)
    os.environ.update(values)
    return values
