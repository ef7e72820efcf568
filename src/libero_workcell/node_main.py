"""The one ``main()`` every node runs: init, construct, spin, clean shutdown.

Once the node is built it prints one line starting with ``processes.NODE_UP`` (the launcher counts the nodes
up). Construction errors (bad parameters, a missing sim world, a refused device)
end the process with exit code 2 and one clear line; Ctrl-C or SIGTERM at
any point, including while a node is still waiting for its device, ends it
cleanly with exit code 0 after the node's own ``shutdown()`` ran. A node whose launcher is gone (the kernel's
death signal, :func:`libero_workcell.processes.die_with_parent`) has nobody to escalate if that shutdown hangs:
it ends itself ``orphan_bound`` seconds after the signal (:func:`bound_orphan_shutdown`).

Every node spins one single-threaded executor, rclpy's ``EventsExecutor`` (its event queue and timers in C++;
the Python ``SingleThreadedExecutor`` rebuilds a wait set for every callback: the graph's nodes used more CPU,
figures in docs/architecture.md, "Nodes"). rclpy 9's multi-threaded one leaves a message waiting up to its
wait timeout after a callback ran, which a lockstep graph pays at every step. Work that may block (a device
that confirms a command) runs off the executor instead: :func:`off_executor` and :func:`serve_trigger`.

The EventsExecutor installs a subscription's message callback at its first spin, and rmw_fastrtps counts the
messages already waiting before it stores the callback: one that arrives between the two is not announced until
the next message on that topic. A stream only sees it late; a lockstep step that waits for its tick's one
message would wait forever (the world sends no next one). :func:`attach` therefore takes what waits on every
subscription once the callbacks are in, and :func:`served` tells a node's lockstep thread when that is done.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any, Final, TypeVar

import rclpy
from rclpy.callback_groups import CallbackGroup, MutuallyExclusiveCallbackGroup
from rclpy.executors import ExternalShutdownException
from rclpy.experimental import EventsExecutor
from rclpy.node import Node
from rclpy.subscription import Subscription
from rclpy.task import Future
from std_srvs.srv import Trigger

from libero_workcell.processes import NODE_UP

T = TypeVar("T")

# How long an orphaned node's shutdown may take before it ends itself: the launcher's own stop gives a node its
# SIGINT timeout, then SIGTERM, then SIGKILL (workcell.launcher); an orphan gets one SIGTERM and nothing after.
ORPHAN_SHUTDOWN_BOUND: Final = 30.0  # s
EXIT_ORPHAN_HUNG: Final = 75  # the exit code of an orphan whose shutdown did not end within its bound


def bound_orphan_shutdown(name: str, parent: int, bound: float | None,
                          exit_now: Callable[[int], object] = os._exit) -> threading.Timer | None:  # fmt: skip
    """If this process's parent is no longer ``parent`` (its launcher died: nobody will escalate a stop), start a
    timer that ends the process ``bound`` s from now, whatever its shutdown is doing, with one line saying so.
    None (and nothing started) when the launcher is there or ``bound`` is None."""
    if bound is None or os.getppid() == parent:
        return None

    def give_up() -> None:
        print(f"{name}: its launcher is gone and its shutdown did not end within {bound:g} s: exiting "
              f"(code {EXIT_ORPHAN_HUNG})", file=sys.stderr, flush=True)  # fmt: skip
        exit_now(EXIT_ORPHAN_HUNG)

    timer = threading.Timer(bound, give_up)
    timer.daemon = True
    timer.start()
    return timer


def run_node(
    factory: Callable[[], Node],
    name: str,
    args: list[str] | None = None,
    startup_errors: tuple[type[BaseException], ...] = (ValueError, RuntimeError),
    orphan_bound: float | None = ORPHAN_SHUTDOWN_BOUND,
) -> None:
    """``orphan_bound``: the seconds an orphaned node's shutdown may take (None: as long as it takes; a node
    whose shutdown completes what it must not lose)."""
    rclpy.init(args=args, signal_handler_options=rclpy.signals.SignalHandlerOptions.NO)
    # Our own handlers: SIGINT/SIGTERM raise KeyboardInterrupt wherever the node is (spin or start-up wait).
    stopping = threading.Event()
    parent = os.getppid()
    bounded: list[threading.Timer] = []  # (one timer: a stop signal after the launcher died starts it)

    def interrupt(signum: int, frame: object) -> None:
        stopping.set()
        if not bounded and (timer := bound_orphan_shutdown(name, parent, orphan_bound)) is not None:
            bounded.append(timer)
        signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)
    node = None
    try:
        node = factory()
        print(f"{NODE_UP} {node.get_name()} built, spinning", flush=True)  # the launcher counts these
        executor = EventsExecutor()
        attach(executor, node)
        while rclpy.ok() and not getattr(node, "finished", False):
            executor.spin_once(timeout_sec=0.1)
    except startup_errors as exc:
        if stopping.is_set():  # the interrupt landed inside a binding, which turned it into its own error
            pass
        elif node is not None:
            raise
        else:
            print(f"{name}: cannot start: {exc}", flush=True)
            raise SystemExit(2) from exc
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        if not stopping.is_set():  # as above: an interrupt a binding turned into an error is a clean stop
            raise
    finally:
        if node is not None:
            shutdown = getattr(node, "shutdown", None)
            if callable(shutdown):
                shutdown()
            node.destroy_node()
        rclpy.try_shutdown()


_SERVED: weakref.WeakKeyDictionary[Node, threading.Event] = weakref.WeakKeyDictionary()
_SERVED_LOCK = threading.Lock()


def served(node: Node) -> threading.Event:
    """Set once ``node``'s executor delivers its subscriptions' messages (:func:`attach`): a lockstep
    participant starts taking part only then, so no message of its first tick can wait unannounced."""
    with _SERVED_LOCK:
        event = _SERVED.get(node)
        if event is None:
            event = _SERVED[node] = threading.Event()
        return event


def attach(executor: Any, node: Node) -> None:
    """Add ``node`` to ``executor`` and, once the executor has installed its callbacks (the task runs after the
    update that ``add_node`` queued), deliver what already waits on each subscription, then set :func:`served`."""
    executor.add_node(node)
    executor.create_task(lambda: _deliver_waiting(node))


def _deliver_waiting(node: Node) -> None:
    for sub in list(node.subscriptions):
        while (taken := _take(sub)) is not None:
            sub.callback(*taken)
    served(node).set()


def _take(sub: Subscription) -> tuple[Any, ...] | None:
    """The next message waiting on ``sub`` as its callback takes it (rclpy's executors take it this way)."""
    with sub.handle:
        msg_info = sub.handle.take_message(sub.msg_type, sub.raw)
    if msg_info is None:
        return None
    return (msg_info[0],) if sub._callback_type is Subscription.CallbackType.MessageOnly else tuple(msg_info)


def log_outcome(logger: Any, ok: bool, text: str) -> None:
    """Log ``text`` as info when ``ok``, else as an error. rclpy refuses one call site logging at two
    severities ("Logger severity cannot be changed between calls": the node dies), so each has its own."""
    if ok:
        logger.info(text)
    else:
        logger.error(text)


def off_executor(node: Node, fn: Callable[[], T]) -> Future:
    """Run ``fn()`` on a thread of its own; an ``async`` callback awaits the future, and the node's executor
    serves its other callbacks meanwhile (give the callback a callback group of its own)."""
    future: Future = Future()

    def work() -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:
            future.set_exception(exc)
        executor = node.executor
        if executor is not None:
            executor.wake()

    threading.Thread(target=work, name=f"{node.get_name()}-call", daemon=True).start()
    return future


def serve_trigger(node: Node, name: str, handler: Callable[[], tuple[bool, str]], log: bool = True,
                  group: CallbackGroup | None = None) -> CallbackGroup:  # fmt: skip
    """A std_srvs/Trigger service whose ``handler() -> (success, message)`` may block (a device confirming a
    command): it runs off the executor, one call at a time per ``group`` (a new group if None, returned)."""
    group = group or MutuallyExclusiveCallbackGroup()

    async def serve(_request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        response.success, response.message = await off_executor(node, handler)
        if log:
            log_outcome(node.get_logger(), response.success, f"{name}: {response.message}")
        return response

    node.create_service(Trigger, name, serve, callback_group=group)
    return group
