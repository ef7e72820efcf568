"""Entry point of an SDK host's child process: ``python -m transports.process_host.child CMD_FD STATE_FD NAME``.

A child started by a real-time thread (the driver process's) inherits its SCHED_FIFO policy. Its first
seconds are imports (numpy, scipy, the SDK): at real-time priority they would starve every other process on
the machine, the controller emulator's replies included. So the policy is reset before anything is imported;
:func:`transports.process_host.host._child_main` then asks for the priority the parent gave, once the imports are done.
"""

import contextlib
import os
import sys

with contextlib.suppress(AttributeError, OSError):  # not Linux, or not permitted: nothing inherited to drop
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))

import multiprocessing
from multiprocessing.connection import Connection

from transports.process_host import host as sdk_host

if __name__ == "__main__":
    multiprocessing.current_process().name = sys.argv[3]
    sdk_host._child_main(Connection(int(sys.argv[1])), Connection(int(sys.argv[2]), readable=False))
