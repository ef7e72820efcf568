"""docs/interfaces.md and the contract module must agree, both ways."""

from __future__ import annotations

import importlib
import math
import re
from pathlib import Path

import pytest

from libero_workcell import contract
from libero_workcell.contract import (
    ACTION_NAMES,
    ACTION_POS_SCALE,
    ACTION_ROT_SCALE,
    CAMERA_NAMES,
    STATE_NAMES,
    Params,
    Qos,
    Services,
    Topics,
)

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "interfaces.md").read_text()
NODE_SOURCES = {
    "aubo_bridge": ROOT / "src" / "aubo_bridge" / "node.py",
    "conveyor_driver": ROOT / "src" / "conveyor_driver" / "node.py",
    "camera_driver": ROOT / "src" / "camera_driver" / "node.py",
    "sim_world": ROOT / "sim_cell" / "world_node.py",
    "scripted_expert": ROOT / "sim_cell" / "expert_node.py",
    "demo_replay": ROOT / "sim_cell" / "replay_node.py",
    "teleop_pico": ROOT / "src" / "teleop_pico" / "node.py",
    "recorder": ROOT / "src" / "recorder" / "node.py",
    "policy_node": ROOT / "src" / "policy_node" / "node.py",
    "policy_server": ROOT / "sim_cell" / "policy_server_node.py",
    "session_log": ROOT / "src" / "session_log" / "node.py",
    "foxglove_bridge": ROOT / "src" / "session_log" / "foxglove_node.py",
}
NODE_MODULES = {
    "aubo_bridge": "aubo_bridge.node",
    "conveyor_driver": "conveyor_driver.node",
    "camera_driver": "camera_driver.node",
    "sim_world": "sim_cell.world_node",
    "scripted_expert": "sim_cell.expert_node",
    "demo_replay": "sim_cell.replay_node",
    "teleop_pico": "teleop_pico.node",
    "recorder": "recorder.node",
    "policy_node": "policy_node.node",
    "policy_server": "sim_cell.policy_server_node",
    "session_log": "session_log.node",
    "foxglove_bridge": "session_log.foxglove_node",
}


def _constants(cls: type) -> dict[str, str]:
    return {k: v for k, v in vars(cls).items() if k.isupper() and isinstance(v, str)}


def _contract_topics() -> set[str]:
    topics = set(_constants(Topics).values())
    for cam in CAMERA_NAMES:
        topics |= {Topics.image(cam), Topics.camera_info(cam)}
    return topics


def _doc_table_names(prefix: str) -> set[str]:
    """Backticked names starting with ``prefix`` in the first column of any table."""
    return set(re.findall(r"^\| `(" + re.escape(prefix) + r"[^`]*)`", DOC, flags=re.M))


def test_every_topic_documented_and_every_documented_topic_exists() -> None:
    documented = {n for n in _doc_table_names("/") if n not in _constants(Services).values()}
    assert documented == _contract_topics()


def test_every_service_documented_and_exists() -> None:
    services = set(_constants(Services).values())
    documented = {n for n in _doc_table_names("/") if n not in _contract_topics()}
    assert documented == services


def test_topic_rows_name_the_right_qos_profile() -> None:
    qos_names = {k for k, v in vars(Qos).items() if isinstance(v, contract.QosSpec)}
    for row in re.findall(r"^\| `(/[^`]+)` \| `[^`]+` \| (\w+) \|", DOC, flags=re.M):
        assert row[1] in qos_names, row


def test_qos_table_matches_contract() -> None:
    for name, spec in vars(Qos).items():
        if not isinstance(spec, contract.QosSpec):
            continue
        row = re.search(r"^\| " + name + r" \| ([\w ]+) \| (\d+) \| ([\w ]+) \|", DOC, flags=re.M)
        assert row, f"QoS profile {name} not documented"
        assert row.group(1).strip() == ("reliable" if spec.reliable else "best effort")
        assert int(row.group(2)) == spec.depth
        assert row.group(3).strip() == ("transient local" if spec.transient_local else "volatile")


def test_action_and_state_fields_and_scales() -> None:
    for name in ACTION_NAMES + STATE_NAMES:
        assert f"`{name}`" in DOC, name
    assert f"{ACTION_POS_SCALE} m per control step" in DOC
    assert f"{ACTION_ROT_SCALE} rad per control step" in DOC
    assert contract.BASE_FRAME in DOC and contract.TCP_FRAME in DOC
    assert f"{contract.IMAGE_SIZE} x {contract.IMAGE_SIZE} `{contract.IMAGE_ENCODING}`" in DOC
    for source in contract.ACTION_SOURCES:
        assert f"`{source}`" in DOC


def _doc_section(title: str) -> str:
    match = re.search(r"^### " + re.escape(title) + r"( \([^\n]*\))?\n(.*?)(?=^#|\Z)", DOC, flags=re.M | re.S)
    assert match, f"no '### {title}' section in docs/interfaces.md"
    return match.group(2)


@pytest.mark.parametrize("node", sorted(NODE_SOURCES))
def test_node_parameters_documented(node: str) -> None:
    declared = set(importlib.import_module(NODE_MODULES[node]).PARAMETERS)  # every parameter the node declares
    assert declared, f"{node} declares no parameters"
    section = _doc_section(node)
    documented = set(
        re.findall(r"`([\w.]+)`", "\n".join(line.split("|")[1] for line in section.splitlines() if "|" in line))
    )
    assert declared <= documented, f"undocumented {node} parameters: {sorted(declared - documented)}"
    assert documented <= declared, f"documented but not declared by {node}: {sorted(documented - declared)}"


def test_shared_parameter_names_documented() -> None:
    for name in _constants(Params).values():
        assert f"| `{name}` |" in DOC, name


# ----------------------------------------------------------------- the numbers, not just the names
def _declared_defaults(node: str) -> dict[str, object]:
    """Every parameter default a node declares (its module's PARAMETERS, node_params.declare_all)."""
    return dict(importlib.import_module(NODE_MODULES[node]).PARAMETERS)


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets: "[0, 0, 1], 2" -> ["[0, 0, 1]", "2"]."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    parts.append(cur.strip())
    return parts


def _same(documented: str, actual: object) -> bool:
    text = documented.strip().strip("`")
    if isinstance(actual, bool):
        return text == ("true" if actual else "false")
    if isinstance(actual, str):
        return text.strip('"') == actual
    if isinstance(actual, (list, tuple)):
        values = [v.strip() for v in text.strip("[]").split(",")]
        return len(values) == len(actual) and all(_same(v, a) for v, a in zip(values, actual, strict=True))
    number = int(text, 16) if text.lower().startswith(("0x", "-0x")) else float(text)
    return (math.isnan(number) and math.isnan(actual)) or math.isclose(number, float(actual), rel_tol=1e-9)


def _table_rows(section: str) -> list[dict[str, str]]:
    """Rows of every table in a doc section, as {column heading: cell}."""
    rows, header = [], None
    for line in section.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not set(line) <= set("|-: "):
            rows.append(dict(zip(header, cells, strict=False)))
    return rows


# Defaults the tables name by reference instead of by value; each reference is checked below.
REFERENCED = {"see above", "as `gripper.*`", "`kinematics.HOME_Q`", "the default set (docs/session_log.md)"}


@pytest.mark.parametrize("node", ["session_log", "foxglove_bridge"])
def test_the_session_logs_default_topics_are_its_documented_set(node: str) -> None:
    """The topics' default, by reference: docs/session_log.md's table (test_session_log_core checks it)."""
    from session_log.topics import DEFAULT_TOPICS

    assert _declared_defaults(node)["topics"] == list(DEFAULT_TOPICS)


@pytest.mark.parametrize("node", sorted(NODE_SOURCES))
def test_documented_defaults_are_the_code_defaults(node: str) -> None:
    """Every default in the node's tables equals the code's (documenting max_tcp_speed 5.0 fails here)."""
    actual = _declared_defaults(node)
    checked = 0
    for row in _table_rows(_doc_section(node)):
        names = re.findall(r"`([\w.]+)`", row["parameter"])
        default = row.get("default", "")
        if not default or default in REFERENCED:
            continue
        values = _split_top(default)
        if len(values) == 1 and len(names) > 1:
            values = values * len(names)  # one default for the whole row
        assert len(values) == len(names), f"{node}: {names} documented with defaults {values}"
        for name, value in zip(names, values, strict=True):
            assert _same(value, actual[name]), f"{node}.{name}: documented {value!r}, code {actual[name]!r}"
            checked += 1
    assert checked >= 2, f"no documented default of {node} was checked"


def test_shared_parameter_defaults_agree_with_every_node_that_declares_them() -> None:
    shared = {re.findall(r"`([\w.]+)`", r["parameter"])[0]: r["default"] for r in _table_rows(_doc_section_top())}
    for node in NODE_SOURCES:
        actual = _declared_defaults(node)
        for name, default in shared.items():
            if name in actual and default:
                assert _same(default, actual[name]), f"{node}.{name}: documented {default!r}, code {actual[name]!r}"


def _doc_section_top() -> str:
    match = re.search(r"^Shared by several nodes:\n(.*?)(?=^###)", DOC, flags=re.M | re.S)
    assert match
    return match.group(1)


def test_the_gripper_tool_rows_really_default_as_the_gripper() -> None:
    actual = _declared_defaults("aubo_bridge")
    for row in _table_rows(_doc_section("aubo_bridge")):
        if row.get("default") == "as `gripper.*`":
            for name in re.findall(r"`gripper_tool\.(\w+)`", row["parameter"]):
                assert actual[f"gripper_tool.{name}"] == actual[f"gripper.{name}"], name
    from aubo_bridge.model.kinematics import HOME_Q

    assert actual["home_q"] == pytest.approx(list(HOME_Q))


def test_documented_allowed_ranges_are_the_checked_ones() -> None:
    """The 'allowed' column of aubo_bridge is config.RANGES, and every range there is documented."""
    from aubo_bridge.config import RANGES

    documented: dict[str, tuple[float, float]] = {}
    for row in _table_rows(_doc_section("aubo_bridge")):
        names = re.findall(r"`([\w.]+)`", row["parameter"])
        ranges = re.findall(r"\((-?[\d.e-]+), (-?[\d.e-]+)\]", row.get("allowed", ""))
        if ranges:
            assert len(ranges) == len(names), row
            documented.update({n: (float(lo), float(hi)) for n, (lo, hi) in zip(names, ranges, strict=True)})
    assert set(documented) == set(RANGES)
    for name, (low, high, _unit) in RANGES.items():
        assert documented[name] == (low, high), name
