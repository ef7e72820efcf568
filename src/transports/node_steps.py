"""A node's control step as the node sees it: one object, whichever clock it runs on.

On the physical cell the step runs on the wall clock at ``hz`` (newest inputs); on the simulated cell in lockstep
(the node's ``use_sim`` and ``lockstep`` parameters) once per control step of the world, on that step's exact
observation, and the world waits for it (:mod:`transports.stepping`, :mod:`transports.sim_lockstep`). The node
declares through it the topics its step reads and publishes: in lockstep they are reliable and transient local,
and the node takes part in the world's steps only once each of them is connected and its executor serves it
(:func:`libero_workcell.node_main.served`), so no step can wait for a message lost to discovery. The barrier
itself stays out of the node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rclpy.node import Node
from rclpy.publisher import Publisher

from libero_workcell.contract import CAMERA_NAMES, Params, Qos, QosSpec, Topics
from libero_workcell.node_main import served
from libero_workcell.ros_qos import qos
from transports.stepping import StampedInputs, Step, StepRunner


def lockstep_of(node: Node) -> bool:
    """Whether ``node``'s parameters put it in lockstep with the simulated world (both declared beforehand)."""
    return bool(node.get_parameter(Params.USE_SIM).value) and bool(node.get_parameter(Params.LOCKSTEP).value)


class NodeSteps:
    """``body(step) -> acted`` once per control step of ``node`` (see the module). ``inputs``: the keys of the
    stamped inputs a step gathers (:attr:`inputs`); ``source``: the action source the node publishes as;
    ``also_ready()``: what else must hold before the node takes part in lockstep (a server that answers, ...)."""

    def __init__(self, node: Node, hz: float, body: Callable[[Step], bool], *, inputs: Sequence[str] = (),
                 source: str = "", priority: int = 0, lockstep: bool | None = None,
                 also_ready: Callable[[], bool] = lambda: True) -> None:  # fmt: skip
        self._node = node
        self.lockstep = lockstep_of(node) if lockstep is None else bool(lockstep)
        self.inputs = StampedInputs(inputs)
        self._reads: list[str] = []
        self._writes: list[Publisher] = []
        self._also_ready = also_ready
        self.runner = StepRunner(node.get_name(), hz, body, lockstep=self.lockstep,
                                 sim_link=str(node.get_parameter(Params.SIM_LINK).value), source=source,
                                 ready=self._ready, priority=priority)  # fmt: skip

    # ---- what a step reads and publishes
    def qos(self, spec: QosSpec) -> Any:
        """The QoS of a topic a step waits for or publishes: ``spec``'s, reliable and transient local in lockstep."""
        return qos(spec, self.lockstep)

    def read(self, msg_type: Any, topic: str, spec: QosSpec, callback: Callable[[Any], None],
             waited: bool = True) -> Any:  # fmt: skip
        """Subscribe to a topic a step reads; ``waited``: lockstep registers only once it has a publisher."""
        if waited:
            self._reads.append(topic)
        return self._node.create_subscription(msg_type, topic, callback, self.qos(spec))

    def read_frames(self, callback: Callable[[str, Any], None], waited: bool = True) -> None:
        """Subscribe to both cameras' images, ``callback(camera, msg)``: in lockstep every frame (each is a step's),
        otherwise the newest, best effort."""
        from sensor_msgs.msg import Image

        spec = Qos.SENSOR_LOCKSTEP if self.lockstep else Qos.SENSOR
        for camera in CAMERA_NAMES:
            self.read(Image, Topics.image(camera), spec, lambda m, c=camera: callback(c, m), waited)

    def publisher(self, msg_type: Any, topic: str, spec: QosSpec) -> Publisher:
        """A publisher of what a step sends; lockstep registers only once it has a subscriber."""
        pub = self._node.create_publisher(msg_type, topic, self.qos(spec))
        self._writes.append(pub)
        return pub

    def _ready(self) -> bool:
        node = self._node
        return (served(node).is_set() and all(node.count_publishers(t) > 0 for t in self._reads)
                and all(p.get_subscription_count() > 0 for p in self._writes) and self._also_ready())  # fmt: skip

    # ---- a step's inputs
    def gather(self, wanted: Mapping[str, int]) -> dict[str, Any] | None:
        """The inputs stamped exactly as ``wanted`` (a lockstep step's observation: each is on its way, the world
        waits), or None once the node stops."""
        return self.inputs.wait(wanted, self.runner.stopping)

    # ---- the loop
    def start(self) -> None:
        self.runner.start()

    def stop(self) -> None:
        self.runner.stop()
        self.inputs.notify()

    def waiting(self, code: int) -> None:
        self.runner.waiting(code)

    def source_acted(self, source: str, step: Step) -> bool:
        """Lockstep: whether ``source`` sent an action for ``step`` (it waits for the source's decision)."""
        return self.runner.source_acted(source, step)

    @property
    def stopping(self) -> Any:
        return self.runner.stopping

    @property
    def loop(self) -> Any:
        """The wall-clock loop's timing (None in lockstep)."""
        return self.runner.loop

    @property
    def errors(self) -> int:
        return self.runner.errors

    @property
    def participant(self) -> Any:
        return self.runner.participant

    @property
    def priority_note(self) -> str | None:
        return self.runner.priority_note
