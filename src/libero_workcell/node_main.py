"""The one ``main()`` every node runs: init, construct, spin, clean shutdown.

Construction errors (bad parameters, a missing sim world, a refused device)
end the process with exit code 2 and one clear line; Ctrl-C or SIGTERM at
any point, including while a node is still waiting for its device, ends it
cleanly with exit code 0 after the node's own ``shutdown()`` ran.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import rclpy
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.node import Node


def run_node(
    factory: Callable[[], Node],
    name: str,
    args: list[str] | None = None,
    threads: int = 1,
    startup_errors: tuple[type[BaseException], ...] = (ValueError, RuntimeError),
) -> None:
    rclpy.init(args=args, signal_handler_options=rclpy.signals.SignalHandlerOptions.NO)
    # Our own handlers: SIGINT/SIGTERM raise KeyboardInterrupt wherever the node is (spin or start-up wait).
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    node = None
    try:
        node = factory()
        executor = MultiThreadedExecutor(num_threads=threads) if threads > 1 else SingleThreadedExecutor()
        executor.add_node(node)
        while rclpy.ok() and not getattr(node, "finished", False):
            executor.spin_once(timeout_sec=0.1)
    except startup_errors as exc:
        if node is not None:
            raise
        print(f"{name}: cannot start: {exc}", flush=True)
        raise SystemExit(2) from exc
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            shutdown = getattr(node, "shutdown", None)
            if callable(shutdown):
                shutdown()
            node.destroy_node()
        rclpy.try_shutdown()


def log_outcome(logger: Any, ok: bool, text: str) -> None:
    """Log ``text`` as info when ``ok``, else as an error. rclpy refuses one call site logging at two
    severities ("Logger severity cannot be changed between calls": the node dies), so each has its own."""
    if ok:
        logger.info(text)
    else:
        logger.error(text)
