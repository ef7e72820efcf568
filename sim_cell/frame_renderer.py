"""The world's cameras rendered on a thread of their own, from a copy of the moment's state.

Rendering both cameras costs more than the physics of a whole control period, and in lockstep the world would
do it between the ticks. On its own thread (MuJoCo's renderer holds no GIL while the rasteriser works) it runs
while the world steps on and the nodes work, on the other core: the frames are published to the link when
they are done, and the world announces them then (:class:`sim_cell.world_clock.WorldClock`). A GL context
belongs to the thread that made it: the renderer is made here, and made again when the world's model changes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import mujoco

from libero_workcell.contract import IMAGE_SIZE
from sim_cell.world import FrameJob, SimWorld


class FrameRenderer:
    def __init__(self, world: SimWorld, on_done: Callable[[], None] = lambda: None) -> None:
        self._world = world
        self._on_done = on_done
        self._cond = threading.Condition()
        self._job: FrameJob | None = None
        self._busy = False
        self._stop = False
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="frame-renderer", daemon=True)
        self._thread.start()

    def submit(self, job: FrameJob) -> None:
        """Render ``job`` (the previous one must be done: :meth:`wait_idle`)."""
        with self._cond:
            if self._busy:
                raise RuntimeError("the frame renderer is still rendering the last frames")
            self._job, self._busy = job, True
            self._cond.notify_all()

    @property
    def busy(self) -> bool:
        return self._busy

    def wait_idle(self, timeout: float | None = None) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: not self._busy, timeout)

    def _run(self) -> None:
        renderer: mujoco.Renderer | None = None
        model: mujoco.MjModel | None = None
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._job is not None or self._stop)
                if self._stop:
                    break
                job, self._job = self._job, None
            assert job is not None
            try:
                if renderer is None or job.model is not model:
                    if renderer is not None:
                        renderer.close()
                    renderer, model = mujoco.Renderer(job.model, IMAGE_SIZE, IMAGE_SIZE), job.model
                job.run(self._world, renderer)
            except BaseException as exc:  # the world thread sees it and fails loudly
                self.error = exc
            with self._cond:
                self._busy = False
                self._cond.notify_all()
            self._on_done()
        if renderer is not None:
            renderer.close()

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout=5.0)
