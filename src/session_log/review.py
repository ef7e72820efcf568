"""Read a session log back, whole or cut short: ``python -m session_log.review PATH`` prints what it holds
(in the manner of ``ros2 bag info``); ``--decode`` decodes every message with mcap_ros2's decoder too.

A log whose recording ended cleanly has a summary and a footer, and mcap's seeking reader uses them. A log
whose recorder was killed has neither: it is read from the start, record by record, up to the last whole chunk
(the open chunk the kill cut short is where the file ends: mcap's ``EndOfFile``).
"""

from __future__ import annotations

import argparse
import io
import os
import struct
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

from mcap.exceptions import EndOfFile, McapError
from mcap.reader import DecodedMessageTuple, make_reader
from mcap_ros2.decoder import DecoderFactory

from libero_workcell.progress import progress_bar

MAGIC: Final = b"\x89MCAP0\r\n"
MAGIC_SIZE: Final = len(MAGIC)
RECORD_HEAD: Final = struct.Struct("<BQ")  # MCAP's framing: after the magic, records of opcode (u8), length (u64), body


class _Forward(io.RawIOBase):
    """A file read front to back, up to ``limit`` bytes: mcap's make_reader then reads it record by record,
    needing no footer, and meets the end of the stream at a record's boundary."""

    def __init__(self, f: IO[bytes], limit: int, on_read: Callable[[int], object] | None = None) -> None:
        self._f, self._left, self._on_read = f, limit, on_read

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readinto(self, buffer: Any) -> int:
        data = self._f.read(min(len(buffer), self._left))
        self._left -= len(data)
        buffer[: len(data)] = data
        if self._on_read is not None:
            self._on_read(len(data))
        return len(data)


def whole_records_end(path: str | Path) -> int:
    """Where the file's last whole record ends (its size for a closed log; for one cut short, the end of the
    last chunk, metadata or index record written whole: all that can be read)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        end = MAGIC_SIZE if size >= MAGIC_SIZE else 0
        while end + RECORD_HEAD.size <= size:
            f.seek(end)
            _opcode, length = RECORD_HEAD.unpack(f.read(RECORD_HEAD.size))
            if end + RECORD_HEAD.size + length > size:
                break
            end += RECORD_HEAD.size + length
        f.seek(end)
        if end + MAGIC_SIZE == size and f.read(MAGIC_SIZE) == MAGIC:  # a closed log: the footer, then the magic
            return size
        return end


def has_summary(path: str | Path) -> bool:
    """True if the log ends with its footer and summary (the recording was closed, not cut short)."""
    if whole_records_end(path) != os.path.getsize(path):  # cut short: no footer to look for
        return False
    with open(path, "rb") as f:
        try:
            return make_reader(f).get_summary() is not None
        except McapError:
            return False


def messages(
    path: str | Path, decode: bool = True, on_read: Callable[[int], object] | None = None
) -> Iterator[DecodedMessageTuple]:
    """Every message of the log in file order (decoded with mcap_ros2 if ``decode``, else ``decoded_message``
    is None), whether or not the recording was closed: a file cut short ends after its last whole chunk.
    ``on_read(n)``: called with each read's byte count (up to :func:`whole_records_end` in all)."""
    end = whole_records_end(path)
    with open(path, "rb") as f:
        forward = _Forward(f, end, on_read)
        reader = make_reader(forward, decoder_factories=[DecoderFactory()])  # never seeks for the footer
        it = reader.iter_decoded_messages(log_time_order=False) if decode else (
            DecodedMessageTuple(s, c, m, None) for s, c, m in reader.iter_messages(log_time_order=False))
        try:
            yield from it
        except EndOfFile:  # a log cut short: its last whole record has been read
            return


def metadata(path: str | Path) -> list[tuple[str, dict[str, str]]]:
    """The metadata records (name, values), closed log or not."""
    end = whole_records_end(path)
    with open(path, "rb") as f:
        out = []
        try:
            for record in make_reader(_Forward(f, end)).iter_metadata():
                out.append((record.name, dict(record.metadata)))
        except EndOfFile:
            pass
        return out


@dataclass
class TopicInfo:
    type_name: str
    count: int = 0


@dataclass
class LogInfo:
    path: Path
    size: int
    closed: bool  # the summary and footer are there
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    start_ns: int | None = None
    end_ns: int | None = None
    metadata: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    @property
    def count(self) -> int:
        return sum(t.count for t in self.topics.values())

    @property
    def duration(self) -> float:
        return 0.0 if self.start_ns is None or self.end_ns is None else (self.end_ns - self.start_ns) / 1e9


def info(path: str | Path, decode: bool = False, progress: bool = False) -> LogInfo:
    """What the log holds: topics with their types and counts, the log-time span, the metadata. ``progress``: a
    bar of the bytes read on stderr (a long session's log takes a while, decoded longer)."""
    path = Path(path)
    out = LogInfo(path, path.stat().st_size, has_summary(path), metadata=metadata(path))
    with progress_bar(whole_records_end(path), "reading", "B", unit_scale=True, enabled=progress) as bar:
        for schema, channel, message, _ in messages(path, decode=decode, on_read=bar.update):
            topic = out.topics.setdefault(channel.topic, TopicInfo(schema.name if schema else ""))
            topic.count += 1
            t = message.log_time
            out.start_ns = t if out.start_ns is None else min(out.start_ns, t)
            out.end_ns = t if out.end_ns is None else max(out.end_ns, t)
    return out


def report(log: LogInfo) -> str:
    """``ros2 bag info``'s layout, and whether the recording was closed."""
    width = max((len(t) for t in log.topics), default=0)
    lines = [
        f"Files:             {log.path}",
        f"Bag size:          {log.size / 2**20:.1f} MiB",
        "Storage id:        mcap",
        f"Closed:            {'yes' if log.closed else 'no: cut short, read up to its last whole chunk'}",
        f"Duration:          {log.duration:.3f} s",
        f"Start:             {(log.start_ns or 0) / 1e9:.3f} s",
        f"End:               {(log.end_ns or 0) / 1e9:.3f} s",
        f"Messages:          {log.count}",
        "Topic information:",
        *(f"  Topic: {name:<{width}} | Type: {t.type_name} | Count: {t.count} | Serialization Format: cdr"
          for name, t in sorted(log.topics.items())),
        "Metadata:",
        *(f"  {name}: {values}" for name, values in log.metadata),
    ]  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m session_log.review", description=__doc__.split("\n\n")[0])
    parser.add_argument("path", help="an MCAP session log (record_mcap:=PATH)")
    parser.add_argument("--decode", action="store_true", help="decode every message with mcap_ros2 (slower)")
    args = parser.parse_args(argv)
    print(report(info(args.path, decode=args.decode, progress=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
