"""robosuite 1.4.0's Panda model files, taken from its PyPI wheel into a local cache.

Only the model is used (the arm's and its gripper's MJCF and meshes), never robosuite's code: the
wheel is downloaded once with pip (``pip download robosuite==1.4.0 --no-deps``, ~190 MB) and the
Panda's files are extracted to ``$LIBERO_WORKCELL_CACHE`` (default ``~/.cache/libero_workcell``).
``LIBERO_WORKCELL_ROBOSUITE_WHEEL`` points at a wheel already on disk instead (offline machines).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Final

ROBOSUITE_VERSION: Final = "1.4.0"
WHEEL_NAME: Final = f"robosuite-{ROBOSUITE_VERSION}-py3-none-any.whl"
ASSETS: Final = "robosuite/models/assets/"
# What the Panda needs: the arm (MJCF, collision STLs, visual OBJs) and the Panda gripper.
MEMBERS: Final = (
    "robots/panda/robot.xml",
    "robots/panda/meshes/",
    "robots/panda/obj_meshes/",
    "grippers/panda_gripper.xml",
    "grippers/meshes/panda_gripper/",
    "grippers/obj_meshes/panda_gripper/",
)


class PandaAssetsError(RuntimeError):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get("LIBERO_WORKCELL_CACHE", Path.home() / ".cache" / "libero_workcell"))


def _download_wheel(dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "-q", f"robosuite=={ROBOSUITE_VERSION}", "--no-deps"]
    cmd += ["-d", str(dest)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    wheel = dest / WHEEL_NAME
    if done.returncode != 0 or not wheel.exists():
        raise PandaAssetsError(
            f"could not download robosuite {ROBOSUITE_VERSION} (for its Panda model) with pip: "
            f"{done.stderr.strip()[-500:] or 'no wheel'}; on an offline machine set LIBERO_WORKCELL_ROBOSUITE_WHEEL "
            f"to a copy of {WHEEL_NAME}"
        )
    return wheel


def panda_assets() -> Path:
    """The directory holding ``robots/panda/`` and ``grippers/`` of robosuite's assets (extracted once)."""
    root = cache_dir() / f"robosuite-{ROBOSUITE_VERSION}-assets"
    marker = root / ".complete"
    if marker.exists():
        return root
    wheel_env = os.environ.get("LIBERO_WORKCELL_ROBOSUITE_WHEEL")
    with tempfile.TemporaryDirectory(prefix="robosuite-wheel-") as tmp:
        wheel = Path(wheel_env) if wheel_env else _download_wheel(Path(tmp))
        if not wheel.is_file():
            raise PandaAssetsError(f"LIBERO_WORKCELL_ROBOSUITE_WHEEL={wheel_env!r} is not a file")
        try:
            with zipfile.ZipFile(wheel) as zf:
                names = [n for n in zf.namelist() if any(n.startswith(ASSETS + m) for m in MEMBERS)]
                if not any(n.endswith("robots/panda/robot.xml") for n in names):
                    raise PandaAssetsError(f"{wheel} holds no robosuite Panda model")
                staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=_parent(root)))
                for name in names:
                    target = staging / name[len(ASSETS) :]
                    if name.endswith("/"):
                        continue
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(zf.read(name))
        except zipfile.BadZipFile as exc:
            raise PandaAssetsError(f"{wheel} is not a wheel: {exc}") from exc
    (staging / ".complete").write_text(ROBOSUITE_VERSION)
    if root.exists():  # another process finished first
        shutil.rmtree(staging, ignore_errors=True)
        return root
    staging.rename(root)  # atomic: a half-extracted cache is never seen as complete
    return root


def _parent(root: Path) -> Path:
    root.parent.mkdir(parents=True, exist_ok=True)
    return root.parent


if __name__ == "__main__":  # scripts/bootstrap.sh --dev: fetch the model once, before the tests need it
    print(f"robosuite {ROBOSUITE_VERSION} Panda model: {panda_assets()}")
