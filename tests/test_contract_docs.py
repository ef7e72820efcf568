"""docs/interfaces.md and the contract module must agree, both ways."""

from __future__ import annotations

import ast
import importlib
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

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "interfaces.md").read_text()
NODE_SOURCES = {
    "aubo_bridge": ROOT / "src" / "aubo_bridge" / "node.py",
    "conveyor_driver": ROOT / "src" / "conveyor_driver" / "node.py",
    "camera_driver": ROOT / "src" / "camera_driver" / "node.py",
    "sim_world": ROOT / "sim_bridge" / "world_node.py",
    "scripted_expert": ROOT / "sim_bridge" / "expert_node.py",
}
NODE_MODULES = {
    "aubo_bridge": "aubo_bridge.node",
    "conveyor_driver": "conveyor_driver.node",
    "camera_driver": "camera_driver.node",
    "sim_world": "sim_bridge.world_node",
    "scripted_expert": "sim_bridge.expert_node",
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


def _declared_params(path: Path) -> set[str]:
    """Parameter names a node declares, resolving Params.X constants and ArmConfig field lists."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    tuples: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    tuples[target.id] = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "declare_parameter":
            arg = node.args[0]
            if isinstance(arg, ast.Constant):
                names.add(arg.value)
            elif isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) and arg.value.id == "Params":
                names.add(getattr(Params, arg.attr))
            elif isinstance(arg, ast.Name):  # loop variable over a module-level tuple of names
                for loop in ast.walk(tree):
                    if isinstance(loop, ast.For) and getattr(loop.target, "id", None) == arg.id:
                        names.update(tuples.get(getattr(loop.iter, "id", ""), []))
    return names


def _doc_section(title: str) -> str:
    match = re.search(r"^### " + re.escape(title) + r"( \([^\n]*\))?\n(.*?)(?=^#|\Z)", DOC, flags=re.M | re.S)
    assert match, f"no '### {title}' section in docs/interfaces.md"
    return match.group(2)


@pytest.mark.parametrize("node", sorted(NODE_SOURCES))
def test_node_parameters_documented(node: str) -> None:
    declared = _declared_params(NODE_SOURCES[node])
    # parameters generated from device config dataclasses: the node module lists them
    module = importlib.import_module(NODE_MODULES[node])
    declared |= set(getattr(module, "CONFIG_PARAMS", {}))
    assert declared, f"found no declare_parameter calls in {node}"
    section = _doc_section(node)
    documented = set(
        re.findall(r"`([\w.]+)`", "\n".join(line.split("|")[1] for line in section.splitlines() if "|" in line))
    )
    assert declared <= documented, f"undocumented {node} parameters: {sorted(declared - documented)}"
    assert documented <= declared, f"documented but not declared by {node}: {sorted(documented - declared)}"


def test_shared_parameter_names_documented() -> None:
    for name in _constants(Params).values():
        assert f"| `{name}` |" in DOC, name
