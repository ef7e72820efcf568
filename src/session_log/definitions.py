"""A ROS 2 message type's full definition text, as MCAP's ``ros2msg`` schema encoding wants it.

Why: a log opens in Foxglove and decodes with ``mcap_ros2`` only if each channel's schema holds the type's
``.msg`` text and, after it, the text of every type it uses (rosbag2's layout: a line of 80 ``=``, then
``MSG: pkg/Type`` and that type's text). The ``.msg`` files ship in every ROS install, the PyPI wheels too, under
``<prefix>/share/<package>/msg/``: the prefixes of ``AMENT_PREFIX_PATH`` (a sourced ROS install) and then
``sys.prefix`` (the wheels in a venv). No rclpy here: the writer and its tests run without ROS.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

SEPARATOR: Final = "=" * 80
PRIMITIVES: Final = frozenset({
    "bool", "byte", "char", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
    "int64", "uint64", "string", "wstring",
})  # fmt: skip
_TYPE = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)/(?:msg/)?([A-Za-z][A-Za-z0-9_]*)$")


class DefinitionError(LookupError):
    """A message type whose definition (or one it uses) is not installed."""


def split_type(type_name: str) -> tuple[str, str]:
    """``pkg/msg/Type`` or ``pkg/Type`` -> (``pkg``, ``Type``)."""
    m = _TYPE.match(type_name)
    if m is None:
        raise DefinitionError(f"{type_name!r} is not a message type name (pkg/msg/Type)")
    return m.group(1), m.group(2)


def _prefixes() -> Iterator[Path]:
    for prefix in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep):
        if prefix:
            yield Path(prefix)
    yield Path(sys.prefix)


def msg_file(package: str, name: str) -> Path:
    """The installed ``.msg`` file of ``package/msg/name``."""
    searched = []
    for prefix in _prefixes():
        path = prefix / "share" / package / "msg" / f"{name}.msg"
        if path.is_file():
            return path
        searched.append(str(path))
    raise DefinitionError(f"no definition of {package}/msg/{name}: looked for " + ", ".join(searched))


def used_types(package: str, text: str) -> list[str]:
    """The message types (``pkg/Type``) a ``.msg`` text's fields use, in order, each once; a bare ``Type`` is
    of the same package."""
    out: list[str] = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        base = re.sub(r"(<=\d+)?(\[[^\]]*\])?$", "", words[0])  # string<=10, Type[], Type[3], Type[<=3]
        base = re.sub(r"<=\d+$", "", base)
        if base in PRIMITIVES:
            continue
        pkg, name = split_type(base) if "/" in base else (package, base)
        if f"{pkg}/{name}" not in out:
            out.append(f"{pkg}/{name}")
    return out


def full_definition(type_name: str) -> str:
    """``type_name``'s ``.msg`` text followed by every type it uses, depth first, each once (``ros2msg``)."""
    package, name = split_type(type_name)
    main = msg_file(package, name).read_text(encoding="utf-8")
    parts, seen = [main.rstrip("\n")], {f"{package}/{name}"}
    stack = list(reversed(used_types(package, main)))
    while stack:
        dep = stack.pop()
        if dep in seen:
            continue
        seen.add(dep)
        pkg, dep_name = split_type(dep)
        text = msg_file(pkg, dep_name).read_text(encoding="utf-8")
        parts.append(f"{SEPARATOR}\nMSG: {dep}\n{text.rstrip(chr(10))}")
        stack.extend(reversed(used_types(pkg, text)))
    return "\n".join(parts) + "\n"
