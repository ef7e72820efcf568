"""The lab's cell file: one YAML file, outside the installed tree, that holds what makes a workcell this lab's.

Why: a robot PC's controller address and credentials, serial ports and Modbus IDs, camera serials, workspace
box and tool offset belong to the lab, not to the package (under colcon ``config/workcell.yaml`` is an installed
copy that a rebuild overwrites). ``cell:=PATH`` on ``workcell bringup`` or ``ros2 launch`` merges the file over
the graph's defaults, under anything given on the command line, and the recorders store it with every session
(secrets redacted). Its keys are the graph's arguments (``use_sim: false``) and its nodes, each a mapping of
that node's parameters; nested mappings join with dots (``arcs: {ip: ...}`` is ``arcs.ip``)::

    use_sim: false
    aubo_bridge:
      arcs: {ip: 192.168.10.20, user: aubo, password: "123456"}
      tool_offset: [0.0, 0.0, 0.21]
      gripper: {port: /dev/ttyUSB-gripper, unit: 9}
    wrist_camera:
      realsense: {serial: "123456789012"}

Parameters are checked against what each node declares (:func:`workcell.bringup.node_parameters`);
an unknown key is refused with the valid names.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

CELL_ARGUMENT = "cell"  # the graph argument that names a cell file
REDACTED = "<redacted>"
_SECRET = re.compile(r"password|passwd|token|secret|api_key", re.IGNORECASE)
MAX_BYTES = 1 << 20  # a cell file is a page of settings; anything this big is not one


class CellFileError(ValueError):
    """A cell file that cannot be read or does not fit the graph."""


@dataclass(frozen=True)
class Cell:
    path: Path
    overrides: dict[str, Any] = field(default_factory=dict)  # "arg" / "node.param" -> value, as from a command line

    def recorded(self) -> dict[str, Any]:
        """What a session stores: the file's path and its settings with every secret redacted."""
        return {"path": str(self.path), "settings": redact(self.overrides)}


# a URL's user information (``ws://user:pw@host``: from the scheme to the last ``@`` before a space, so a password
# with a ``/`` or ``#`` a user did not escape goes too), and a query parameter named like a secret (``?api_key=``)
_URL_USERINFO = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)\S*@")
_QUERY_SECRET = re.compile(rf"([?&;][^=&;#\s]*(?:{_SECRET.pattern})[^=&;#\s]*=)[^&;#\s]*", re.IGNORECASE)


def redact(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` with the value of every key that names a secret (password, token, ...) replaced, and the
    credentials of every URL in the other values (``policy.url: ws://user:pw@host``: :func:`redact_text`)."""
    return {k: (REDACTED if _SECRET.search(k) else redact_value(v)) for k, v in settings.items()}


def redact_value(value: Any) -> Any:
    """A setting's value with the credentials of the URLs in it replaced (texts, and lists of them)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, (list, tuple)):
        return type(value)(redact_value(v) for v in value)
    return value


def redact_text(text: str) -> str:
    """``text`` (a URL, or a message naming one) with every URL's credentials replaced: ``ws://user:pw@host:8000``
    reads ``ws://<redacted>@host:8000``, ``?api_key=abc`` ``?api_key=<redacted>``. What is stored, printed or
    published (a session's env_args, bring-up's lines, diagnostics, the MCAP log) goes through here."""
    return _QUERY_SECRET.sub(rf"\1{REDACTED}", _URL_USERINFO.sub(rf"\1{REDACTED}@", text))


def _flatten(prefix: str, value: Any, out: dict[str, Any], where: str) -> None:
    if isinstance(value, Mapping):
        if not value:
            raise CellFileError(f"{where}: {prefix} is an empty mapping")
        for key, sub in value.items():
            if not isinstance(key, str) or not key:
                raise CellFileError(f"{where}: {prefix} has a key that is not a name: {key!r}")
            _flatten(f"{prefix}.{key}", sub, out, where)
    else:
        out[prefix] = value


def load_cell(path: str | Path, arguments: Collection[str] | None = None, nodes: Collection[str] | None = None) -> Cell:
    """Read and check a cell file against the graph's ``arguments`` and ``nodes`` (names). Without them (a node
    storing the file bring-up already checked against its graph), a mapping is a node's and a value an
    argument's."""
    given = Path(path).expanduser()
    where = str(given)
    try:
        resolved = given.resolve(strict=True)
        if not resolved.is_file():
            raise CellFileError(f"cell file {where} is not a file")
        if resolved.stat().st_size > MAX_BYTES:
            raise CellFileError(f"cell file {where} is larger than {MAX_BYTES} bytes: not a cell file")
        text = resolved.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CellFileError(f"cell file {where} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CellFileError(f"cell file {where} cannot be read: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CellFileError(f"cell file {where} is not valid YAML: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise CellFileError(f"cell file {where}: the top level must be a mapping of arguments and nodes")
    overrides: dict[str, Any] = {}
    for key, value in data.items():
        if key == CELL_ARGUMENT:
            raise CellFileError(f"cell file {where}: a cell file cannot name another cell file")
        is_argument = key in arguments if arguments is not None else not isinstance(value, Mapping)
        if is_argument:
            if isinstance(value, Mapping):
                raise CellFileError(f"cell file {where}: argument {key} takes a value, not a mapping")
            overrides[str(key)] = value
        elif nodes is None or key in nodes:
            if not isinstance(value, Mapping):
                raise CellFileError(f"cell file {where}: node {key} takes a mapping of its parameters")
            flat: dict[str, Any] = {}
            _flatten(str(key), value, flat, where)
            overrides.update(flat)
        else:
            known = f"arguments: {', '.join(sorted(arguments or ()))}; nodes: {', '.join(nodes or ())}"
            raise CellFileError(f"cell file {where}: {key!r} is neither an argument nor a node of the graph; {known}")
    return Cell(resolved, overrides)
