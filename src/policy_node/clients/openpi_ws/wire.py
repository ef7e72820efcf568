"""openpi's msgpack-numpy frames, decoded without trusting the server that sent them.

openpi-client's ``msgpack_numpy.unpackb`` builds ``np.ndarray(buffer=data, dtype=dtype, shape=shape)`` from
whatever a frame declares: an object dtype makes numpy read the frame's bytes as pointers (a crafted reply
crashed the node, or handed it the values of live objects), a zero-itemsize dtype lets a 0-byte buffer declare
(1e9, 7) (a MemoryError when validated). The reply path faces the network (``policy.url``), so every frame from
the server (its metadata and each reply) is decoded here instead: an array is built only from a numeric dtype
(bool, signed and unsigned integers, floats of 1, 2, 4 or 8 bytes), at most :data:`MAX_NDIM` dimensions and
:data:`MAX_ELEMENTS` elements, and a data buffer exactly as long as its shape and itemsize say, all checked
before numpy sees the buffer. Plain msgpack lists and maps are bounded too (a reply of 300,000 actions as lists
of numbers passed every array check and took seconds of CPU to validate): a frame holds at most
:data:`MAX_VALUES` values (list items, map entries and array elements, counted as msgpack builds them), and
msgpack itself refuses a list or map header declaring more before it builds one. Anything else is a
:class:`WireError` naming what was refused.

Requests are still packed with openpi's packer (it refuses object, void and complex dtypes when packing).
"""

from __future__ import annotations

import math
import re
from typing import Any, Final

import msgpack
import numpy as np

MAX_NDIM: Final = 4  # an action chunk is (H, 7); nothing openpi sends back needs more
MAX_ELEMENTS: Final = 8192  # pi0's (50, 7) chunk is 350; a frame declaring more is refused before numpy sees it
# values in one frame, lists, maps and arrays together: pi0's chunk as lists of numbers is 400, openpi's metadata a few
MAX_VALUES: Final = 2 * MAX_ELEMENTS
NUMERIC_KINDS: Final = "biuf"  # bool, signed and unsigned integers, floats (never object, void, strings, datetime)
# how openpi's packer writes a numeric dtype (``dtype.str``): byte order, kind, itemsize ("<f8", "|u1", "|b1")
_DTYPE_TEXT: Final = re.compile(rf"[<>|=]?[{NUMERIC_KINDS}][1248]")
ARRAY_KEY: Final = b"__ndarray__"
SCALAR_KEY: Final = b"__npgeneric__"


class WireError(ValueError):
    """A frame that is not openpi's msgpack-numpy, or declares an array this client refuses to build."""


def numeric_dtype(text: object) -> np.dtype:
    """The dtype a frame declares, if it is numeric (``NUMERIC_KINDS``, 1 to 8 bytes); WireError otherwise."""
    if not isinstance(text, str) or not _DTYPE_TEXT.fullmatch(text):
        raise WireError(f"dtype {text!r} is not numeric (bool, int, uint or float of 1, 2, 4 or 8 bytes)")
    try:  # numpy parses only what matched: byte order, one of NUMERIC_KINDS, an itemsize
        return np.dtype(text)
    except TypeError:  # "b2", "f1": the right letters, no such type
        raise WireError(f"dtype {text!r} is not a numpy type") from None


def checked_shape(shape: object) -> tuple[int, ...]:
    """The shape a frame declares, if it has at most MAX_NDIM non-negative integer dimensions and at most
    MAX_ELEMENTS elements; WireError otherwise."""
    if not isinstance(shape, (list, tuple)) or any(type(d) is not int or d < 0 for d in shape):
        raise WireError(f"shape {shape!r} is not a list of non-negative integers")
    if len(shape) > MAX_NDIM:
        raise WireError(f"shape {tuple(shape)} has {len(shape)} dimensions (at most {MAX_NDIM})")
    size = math.prod(shape)  # Python integers: no overflow whatever the frame declares
    if size > MAX_ELEMENTS:
        raise WireError(f"shape {tuple(shape)} has {size} elements (at most {MAX_ELEMENTS})")
    return tuple(shape)


def _array(obj: dict[Any, Any]) -> np.ndarray:
    data = obj.get(b"data")
    dtype, shape = numeric_dtype(obj.get(b"dtype")), checked_shape(obj.get(b"shape"))
    if not isinstance(data, bytes):
        raise WireError(f"array data is a {type(data).__name__}, not bytes")
    expected = math.prod(shape) * dtype.itemsize
    if len(data) != expected:
        raise WireError(f"array data has {len(data)} bytes; shape {shape} of {dtype.str} needs {expected}")
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def _scalar(obj: dict[Any, Any]) -> np.generic:
    dtype, data = numeric_dtype(obj.get(b"dtype")), obj.get(b"data")
    if not isinstance(data, (bool, int, float)):
        raise WireError(f"scalar data is a {type(data).__name__}, not a number")
    try:
        return dtype.type(data)
    except (OverflowError, ValueError, TypeError) as exc:
        raise WireError(f"scalar {data!r} does not fit {dtype.str}: {exc}") from None


class _Counted:
    """msgpack's hooks for one frame: arrays and scalars built as checked, and every value counted as its list or
    map is completed (inner ones first), the frame refused once it holds more than MAX_VALUES."""

    def __init__(self) -> None:
        self.values = 0

    def _count(self, n: int) -> None:
        self.values += n
        if self.values > MAX_VALUES:
            raise WireError(f"the frame holds more than {MAX_VALUES} values (list items, map entries, array elements)")

    def object_hook(self, obj: dict[Any, Any]) -> Any:
        if ARRAY_KEY in obj:
            array = _array(obj)
            self._count(array.size)
            return array
        self._count(len(obj))
        return _scalar(obj) if SCALAR_KEY in obj else obj

    def list_hook(self, items: list[Any]) -> list[Any]:
        self._count(len(items))
        return items


def _refuse_ext(code: int, _data: bytes) -> Any:
    raise WireError(f"msgpack extension type {code} (openpi's frames have none)")


def unpack_frame(frame: bytes) -> Any:
    """One frame from the policy server, decoded; WireError with the reason for anything refused (corrupt
    msgpack, trailing bytes, an extension type, an array or scalar that fails the checks above, more than
    MAX_VALUES values)."""
    if not isinstance(frame, (bytes, bytearray, memoryview)):
        raise WireError(f"a frame is bytes, got a {type(frame).__name__}")
    hooks = _Counted()
    try:
        return msgpack.unpackb(frame, raw=False, object_hook=hooks.object_hook, list_hook=hooks.list_hook,
                               ext_hook=_refuse_ext, max_array_len=MAX_VALUES, max_map_len=MAX_VALUES)  # fmt: skip
    except WireError:
        raise
    except ValueError as exc:
        if "exceeds max_" in str(exc):  # a list or map header declaring more than MAX_VALUES: refused unbuilt
            raise WireError(f"a list or map declares more than {MAX_VALUES} values ({exc})") from None
        raise WireError(f"not msgpack: {type(exc).__name__}: {exc}") from None
    except Exception as exc:  # msgpack's own errors on a corrupt frame: FormatError, ExtraData, StackError, ...
        raise WireError(f"not msgpack: {type(exc).__name__}: {exc}") from None
