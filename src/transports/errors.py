"""The one error every transport and device backend raises when a device refuses or its link fails.

Drivers catch :class:`BackendError` (and only it) to turn a backend's trouble into a fault or a hold; a bug in
a backend (any other exception) is not mistaken for a device that said no.
"""

from __future__ import annotations


class BackendError(RuntimeError):
    """The device refused a command or the link to it failed."""
