"""The session log's file: messages as received (CDR bytes, never decoded) into MCAP, zstd chunks, ROS 2 schemas.

Crash safety is the point of the shape. mcap's ``Writer`` collects messages into a chunk and writes the chunk
(compressed, with its message index) when it passes ``chunk_size``; here every write goes straight to the OS
(no Python buffer: :class:`_Unbuffered`), and a chunk open for ``chunk_seconds`` (on ``clock``, the wall's by
default) is closed too (:meth:`SessionLogWriter.tick`). So a ``kill -9`` loses at most the open chunk: every
closed chunk is whole in the file, and a reader that does not need the summary (which only :meth:`close`
writes) reads them all (:mod:`session_log.review`).

A write the OS refuses (a full disk: ENOSPC) stops the log, never the process: :attr:`SessionLogWriter.stopped`
says why, every later call is a no-op, and :meth:`close` only closes the file (the chunks written before stay
readable, the summary is never written). The graph is worth more than its log.

Schemas are ``ros2msg`` (the ``.msg`` text with its dependencies: :mod:`session_log.definitions`), messages
``cdr``, the profile ``ros2``: the layout rosbag2's MCAP storage writes, which Foxglove and ``ros2 bag`` read.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from mcap.writer import LIBRARY_IDENTIFIER, CompressionType, Writer

from session_log.definitions import full_definition

PROFILE: Final = "ros2"
SCHEMA_ENCODING: Final = "ros2msg"
MESSAGE_ENCODING: Final = "cdr"
CHUNK_SIZE: Final = 1 << 20  # bytes of messages per chunk before it is compressed and written (mcap's default)
CHUNK_SECONDS: Final = 1.0  # s a chunk may stay open: what a crash may cost at most (plus what was in flight)
LIBRARY: Final = f"libero_workcell session_log; {LIBRARY_IDENTIFIER}"


class _Unbuffered:
    """The file mcap's Writer writes to, with nothing held in this process: each ``write`` is in the OS's hands
    when it returns (a killed process loses none of it; a power cut is another matter: no fsync here)."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        self._pos = 0

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        while view:
            view = view[os.write(self._fd, view) :]
        self._pos += len(data)
        return len(data)

    def tell(self) -> int:
        return self._pos

    def flush(self) -> None:
        pass

    def close(self) -> None:
        os.close(self._fd)


def header_stamp_ns(cdr: bytes) -> int | None:
    """The ``header.stamp`` of a CDR message whose first field is a ``std_msgs/Header``, ns (None if too short).
    The stamp is the first thing after the 4-byte encapsulation header, whose second byte's low bit says the
    byte order."""
    if len(cdr) < 12:
        return None
    sec, nanosec = struct.unpack_from("<iI" if cdr[1] & 1 else ">iI", cdr, 4)
    return sec * 1_000_000_000 + nanosec


@dataclass
class TopicStats:
    type_name: str
    messages: int = 0
    bytes: int = 0


class SessionLogWriter:
    """One MCAP file: :meth:`add_topic`, then :meth:`write` each message as it arrives; :meth:`tick` now and then
    (closes a chunk open too long); :meth:`close` writes the summary. Not thread-safe: one thread calls it."""

    def __init__(self, path: str | os.PathLike[str], chunk_size: int = CHUNK_SIZE,
                 chunk_seconds: float = CHUNK_SECONDS, clock: Callable[[], float] = time.monotonic,
                 definition: Callable[[str], str] = full_definition) -> None:  # fmt: skip
        if chunk_size < 1 or not chunk_seconds > 0:
            raise ValueError(f"chunk_size and chunk_seconds must be > 0, got {chunk_size}, {chunk_seconds}")
        self.path = Path(path).absolute()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.chunk_seconds, self._clock, self._definition = float(chunk_seconds), clock, definition
        self._out = _Unbuffered(self.path)
        self._mcap = Writer(self._out, chunk_size=int(chunk_size), compression=CompressionType.ZSTD)
        self._mcap.start(profile=PROFILE, library=LIBRARY)
        self._schemas: dict[str, int] = {}  # type name -> schema id
        self._channels: dict[str, int] = {}  # topic -> channel id
        self.topics: dict[str, TopicStats] = {}
        self.chunks = 0  # chunks written so far (each readable after a crash)
        self._opened: float | None = None  # clock() when the open chunk got its first message
        self._closed = False
        self.stopped: str | None = None  # why the log stopped (the OS refused a write), or None while it logs

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Around each change to the file: an OSError stops the log (:attr:`stopped`) instead of propagating."""
        try:
            yield
        except OSError as exc:
            self.stopped = f"{exc.strerror or exc} (after {self._out.tell()} bytes)"

    # ------------------------------------------------------------------ content
    def add_topic(self, topic: str, type_name: str, metadata: Mapping[str, str] | None = None) -> None:
        """A channel for ``topic`` with ``type_name``'s schema (its definition read once per type). A
        :class:`~session_log.definitions.DefinitionError` if the type's definition is not installed."""
        if topic in self._channels:
            raise ValueError(f"{topic} is already in the log")
        if self.stopped:
            return
        before = self._out.tell()
        text = None if type_name in self._schemas else self._definition(type_name)
        with self._writing():
            if text is not None:
                self._schemas[type_name] = self._mcap.register_schema(type_name, SCHEMA_ENCODING, text.encode())
            self._channels[topic] = self._mcap.register_channel(topic, MESSAGE_ENCODING, self._schemas[type_name],
                                                                dict(metadata or {}))  # fmt: skip
            self.topics[topic] = TopicStats(type_name)
            self._written(before)

    def write(self, topic: str, data: bytes, log_time_ns: int, publish_time_ns: int | None = None,
              sequence: int = 0) -> None:  # fmt: skip
        """One message as received (its CDR bytes), at ``log_time_ns``; ``publish_time_ns`` defaults to it."""
        if self.stopped:
            return
        before = self._out.tell()
        publish = log_time_ns if publish_time_ns is None else publish_time_ns
        with self._writing():
            self._mcap.add_message(self._channels[topic], int(log_time_ns), bytes(data), int(publish), sequence)
            stats = self.topics[topic]
            stats.messages += 1
            stats.bytes += len(data)
            if not self._written(before) and self._opened is None:
                self._opened = self._clock()
        self.tick()

    def _written(self, before: int) -> bool:
        """Whether mcap wrote the open chunk since the file was ``before`` bytes (it filled up; mcap writes no
        chunk without a message): none is open now."""
        if self._out.tell() == before:
            return False
        self.chunks += 1
        self._opened = None
        return True

    def add_metadata(self, name: str, values: Mapping[str, Any]) -> None:
        """A metadata record (``name``, string values: others as JSON), written at once between chunks."""
        text = {k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items()}
        if self.stopped:
            return
        with self._writing():
            self._mcap.add_metadata(name, text)

    # ------------------------------------------------------------------ chunks, the end
    def tick(self) -> bool:
        """Close the open chunk if it has been open ``chunk_seconds`` or more; True if it did."""
        if self.stopped or self._opened is None or self._clock() - self._opened < self.chunk_seconds:
            return False
        with self._writing():
            self._mcap.flush()  # mcap >= 1.6: the open chunk, written now (its size rule alone would wait)
            self.chunks += 1
            self._opened = None
        return not self.stopped

    @property
    def messages(self) -> int:
        return sum(s.messages for s in self.topics.values())

    @property
    def size(self) -> int:
        """Bytes in the file so far (the open chunk is not)."""
        return self._out.tell()

    def close(self) -> None:
        """The last chunk, the summary (schemas, channels, statistics, indexes) and the footer; idempotent. A
        stopped log is only closed (what it holds is what was written before it stopped)."""
        if self._closed:
            return
        self._closed = True
        try:
            if not self.stopped:
                with self._writing():
                    self._mcap.finish()
                    if self._opened is not None:
                        self.chunks += 1
        finally:
            self._out.close()
