"""policy_node.clients.openpi_ws.wire: openpi's msgpack-numpy decoded with every array checked before numpy sees its
buffer."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
from crafted_policy_server import array_map, values_in
from openpi_client import msgpack_numpy

from policy_node.clients.openpi_ws.wire import (
    MAX_ELEMENTS,
    MAX_NDIM,
    MAX_VALUES,
    WireError,
    checked_shape,
    numeric_dtype,
    unpack_frame,
)

NUMERIC = ["|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "<f2", "<f4", "<f8", ">f8", "=i4"]


@pytest.mark.parametrize("dtype", NUMERIC)
def test_what_openpis_packer_writes_decodes_as_openpis_unpacker_reads_it(dtype) -> None:
    a = (np.arange(14) % 2).astype(dtype).reshape(2, 7)
    reply = {"actions": a, "scalar": a.dtype.type(1), "server_timing": {"infer_ms": 2.5}, "names": ["x", b"y"]}
    frame = msgpack_numpy.packb(reply)
    ours, theirs = unpack_frame(frame), msgpack_numpy.unpackb(frame)
    assert ours["actions"].dtype == theirs["actions"].dtype == np.dtype(dtype)
    np.testing.assert_array_equal(ours["actions"], theirs["actions"])
    assert ours["scalar"] == theirs["scalar"] and type(ours["scalar"]) is type(theirs["scalar"])
    assert ours["server_timing"] == {"infer_ms": 2.5} and ours["names"] == ["x", b"y"]


@pytest.mark.parametrize("dtype", ["|O", "|V0", "|V8", "<U1", "|S8", "<M8[ns]", "<m8", "<c16", "<f16", "|b2", "f1",
                                   "<f8 ", "(2,)<f8", "<f8,<i4", "i", "", b"<f8", None, 8, ["<f8"]])  # fmt: skip
def test_every_dtype_but_numeric_ones_of_1_to_8_bytes_is_refused(dtype) -> None:
    with pytest.raises(WireError, match=r"dtype .* is not (numeric|a numpy type)"):
        numeric_dtype(dtype)


def test_the_dtype_is_refused_by_its_text_before_numpy_parses_it() -> None:
    with pytest.raises(WireError, match="'b2' is not a numpy type"):  # the right letters, no such type
        numeric_dtype("b2")
    assert numeric_dtype("b1") == np.bool_ and numeric_dtype("<f2") == np.float16


def test_shapes_up_to_the_limits_and_not_one_past() -> None:
    assert checked_shape([1] * MAX_NDIM) == (1,) * MAX_NDIM and checked_shape(()) == ()
    assert checked_shape([MAX_ELEMENTS, 1]) == (MAX_ELEMENTS, 1) and checked_shape([0, 10**12]) == (0, 10**12)
    with pytest.raises(WireError, match=f"has {MAX_NDIM + 1} dimensions \\(at most {MAX_NDIM}\\)"):
        checked_shape([1] * (MAX_NDIM + 1))
    with pytest.raises(WireError, match=f"has {MAX_ELEMENTS + 1} elements \\(at most {MAX_ELEMENTS}\\)"):
        checked_shape([MAX_ELEMENTS + 1])
    for bad in ([-1, 7], [1.0, 7], [True, 7], "17", None, {1: 2}, [[1], 7]):
        with pytest.raises(WireError, match="is not a list of non-negative integers"):
            checked_shape(bad)


def test_an_array_is_built_only_from_a_buffer_exactly_its_size() -> None:
    assert unpack_frame(msgpack.packb(array_map(b"\0" * 56, "<f8", [1, 7]))).shape == (1, 7)
    assert unpack_frame(msgpack.packb(array_map(b"", "<f8", [0, 7]))).shape == (0, 7)
    assert unpack_frame(msgpack.packb(array_map(b"\x01", "|u1", []))).shape == ()
    assert unpack_frame(msgpack.packb(array_map(b"\0" * 8 * MAX_ELEMENTS, "<f8", [MAX_ELEMENTS]))).size == MAX_ELEMENTS
    for data, reason in [(b"\0" * 55, "55 bytes"), (b"\0" * 57, "57 bytes"), (b"", "0 bytes")]:
        with pytest.raises(WireError, match=f"array data has {reason}; shape \\(1, 7\\) of <f8 needs 56"):
            unpack_frame(msgpack.packb(array_map(data, "<f8", [1, 7])))
    for data, name in (("\0" * 56, "str"), (None, "NoneType"), ([0] * 56, "list")):
        with pytest.raises(WireError, match=f"array data is a {name}, not bytes"):
            unpack_frame(msgpack.packb(array_map(data, "<f8", [1, 7])))  # type: ignore[arg-type]
    with pytest.raises(WireError, match="is not a list"):  # no shape at all
        unpack_frame(msgpack.packb({b"__ndarray__": True, b"data": b"", b"dtype": "<f8"}))


def test_a_decoded_array_is_a_copy_free_view_that_numpy_cannot_write_through() -> None:
    a = unpack_frame(msgpack.packb(array_map(np.ones(7).tobytes(), "<f8", [7])))
    assert not a.flags.writeable and a.tolist() == [1.0] * 7


def test_scalars_are_numeric_and_fit_their_dtype() -> None:
    def scalar(data, dtype):
        return unpack_frame(msgpack.packb({b"__npgeneric__": True, b"data": data, b"dtype": dtype}))

    assert scalar(3, "<i8") == 3 and type(scalar(3, "<i8")) is np.int64 and scalar(0.5, "<f4") == np.float32(0.5)
    assert scalar(True, "|b1") is np.True_
    with pytest.raises(WireError, match="scalar 300 does not fit \\|i1"):
        scalar(300, "|i1")
    with pytest.raises(WireError, match="scalar -1 does not fit <u8"):
        scalar(-1, "<u8")
    for data, name in (("1", "str"), (b"1", "bytes"), (None, "NoneType"), ([1], "list")):
        with pytest.raises(WireError, match=f"scalar data is a {name}, not a number"):
            scalar(data, "<f8")
    with pytest.raises(WireError, match="dtype '\\|O' is not numeric"):
        scalar(1, "|O")


def test_a_map_with_both_markers_is_an_array_and_other_maps_stay_maps() -> None:
    both = {**array_map(b"\0" * 8, "<f8", [1]), b"__npgeneric__": True}
    assert unpack_frame(msgpack.packb(both)).shape == (1,)
    plain = {"__ndarray__": True, "data": b"\0", "dtype": "|O", "shape": [1]}  # str keys: openpi reads bytes keys only
    assert unpack_frame(msgpack.packb(plain)) == plain


@pytest.mark.parametrize(
    "frame, reason",
    [(b"", "not msgpack: .*"), (b"\xc1", "not msgpack: FormatError"), (b"\x91", "not msgpack: .*"),
     (msgpack.packb(1) + b"\x01", "not msgpack: ExtraData"), (b"\x91" * 5000 + b"\x01", "not msgpack: .*"),
     (msgpack.packb(msgpack.ExtType(3, b"x")), "msgpack extension type 3 \\(openpi's frames have none\\)"),
     (msgpack.packb({1: 2}), "not msgpack: ValueError"), (b"\xa2\xff\xfe", "not msgpack: UnicodeDecodeError"),
     ("text", "a frame is bytes, got a str"), (None, "a frame is bytes, got a NoneType")],
)  # fmt: skip
def test_what_is_not_msgpack_is_a_wire_error_with_the_reason(frame, reason) -> None:
    with pytest.raises(WireError, match=reason):
        unpack_frame(frame)


def test_an_array_nested_anywhere_is_checked() -> None:
    deep = {"a": [{"b": array_map(b"", "|O", [0])}]}
    with pytest.raises(WireError, match="'\\|O' is not numeric"):
        unpack_frame(msgpack.packb(deep))
    assert unpack_frame(bytearray(msgpack.packb([1, 2]))) == [1, 2]


def nested(leaf: object, *dims: int) -> object:
    for n in reversed(dims):
        leaf = [leaf] * n
    return leaf


def test_lists_and_maps_are_bounded_like_arrays_up_to_max_values_and_not_one_past() -> None:
    """Issue 35, item 13: a reply of 300,000 actions as plain msgpack lists passed every array check."""
    at_limit = nested(0.5, MAX_VALUES // 8, 7)  # 2048 lists of 7: 16,384 values
    assert values_in(at_limit) == MAX_VALUES and unpack_frame(msgpack.packb(at_limit)) == at_limit
    with pytest.raises(WireError, match=f"the frame holds more than {MAX_VALUES} values"):
        unpack_frame(msgpack.packb([*at_limit, []]))  # one more list item
    with pytest.raises(WireError, match=f"the frame holds more than {MAX_VALUES} values"):
        unpack_frame(msgpack.packb({"actions": at_limit}))  # one more map entry
    with pytest.raises(WireError, match=f"the frame holds more than {MAX_VALUES} values"):  # arrays count too
        unpack_frame(msgpack.packb([array_map(b"\0" * MAX_ELEMENTS, "|u1", [MAX_ELEMENTS])] * 3))
    for flat in ([0] * (MAX_VALUES + 1), {str(i): 0 for i in range(MAX_VALUES + 1)}):  # one header declares them
        with pytest.raises(WireError, match=f"a list or map declares more than {MAX_VALUES} values"):
            unpack_frame(msgpack.packb(flat))
    with pytest.raises(WireError, match="a list or map declares more than"):  # 2**32 - 1 items, none sent
        unpack_frame(b"\xdd\xff\xff\xff\xff")


@pytest.mark.parametrize(
    "obj",
    [{"actions": nested(0, 300_000, 7)}, {"actions": nested(0.25, 2400, 7)}, nested("a", 100, 100, 100),
     {"actions": nested({"k": 1}, 4, 4, 4, 4, 4, 4, 4, 4)}, nested(array_map(b"\0" * 56, "<f8", [7]), 3000)],
    ids=["300,000 actions", "2,400 actions", "a million strings", "nested maps", "3,000 arrays"],
)  # fmt: skip
def test_decoding_refuses_a_frame_before_it_builds_what_the_frame_declares(obj) -> None:
    """Bounded in memory, not in time: what decoding allocates before it refuses stays a small multiple of
    MAX_VALUES objects, whatever the frame holds (300,000 actions as lists built 35 MB of Python objects)."""
    import tracemalloc

    frame = msgpack.packb(obj)
    assert len(frame) <= 4 * 1024 * 1024  # within the default max_reply_bytes: the reply bound alone let it in
    tracemalloc.start()
    try:
        with pytest.raises(WireError, match=f"more than {MAX_VALUES} values"):
            unpack_frame(frame)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, peak
