"""The JSON topics read in one place (issue 35, item 4): whatever a publisher sends, a reader gets a checked
document or a counted refusal, never an exception; and no node reads a JSON topic any other way.

The nodes themselves, fed these messages on real topics: tests/recorder/test_recorder_hostile_topics.py and
tests/teleop/test_teleop_node.py (tests/fixtures/hostile_json.py, the messages).
"""

from __future__ import annotations

import ast
import json

import pytest
from conftest import CODE_FOLDERS, REPO
from hostile_json import HOSTILE
from hypothesis import given, settings
from hypothesis import strategies as st

from libero_workcell import json_topics
from libero_workcell.contract import ContractError
from libero_workcell.json_topics import (
    ArmModeReport,
    GroundTruth,
    JsonTopicReader,
    RecorderStatus,
    SimEpisodeReport,
    StatusDocument,
)
from libero_workcell.task import TaskSpec

MODELS = (ArmModeReport, GroundTruth, RecorderStatus, SimEpisodeReport, StatusDocument)



def good_episode() -> dict:
    spec = TaskSpec.from_seed(0)
    return {"episode": 3, "sim_time": 1.5, "done": False, "spec": spec.to_dict(),
            "metrics": {"placed": [True], "SR": 1.0, "PCR_T": 1.0, "PCR_S": 1.0}, "wall_time": 1.0}  # fmt: skip


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_a_hostile_message_is_a_contract_error_or_a_checked_document(model, text) -> None:
    try:
        doc = json_topics.decode(model, text, "/topic")
    except ContractError as exc:
        assert str(exc).startswith("/topic: ")
        return
    assert isinstance(doc, model)


@pytest.mark.parametrize("text", ['{"spec": 5}', "[]", "[" * 5000, '{"episode": "three"}'])
def test_the_episode_reports_that_killed_the_recorder_are_refused(text) -> None:
    with pytest.raises(ContractError, match=r"^/sim/episode: "):
        json_topics.decode(SimEpisodeReport, text, "/sim/episode")


def test_good_documents_read_back_with_what_their_readers_use_and_keep_the_rest() -> None:
    ep = json_topics.decode(SimEpisodeReport, json.dumps(good_episode()), "/sim/episode")
    assert ep.episode == 3 and ep.metrics.placed == [True] and ep.instruction.startswith("pick up")
    assert ep.model_dump()["wall_time"] == 1.0  # a field no reader checks passes through
    mode = json_topics.decode(ArmModeReport, '{"mode": "holding", "fault": ""}', "/aubo/mode")
    assert mode.driven and not json_topics.decode(ArmModeReport, '{"mode": "homing"}', "/aubo/mode").driven
    status = json_topics.decode(RecorderStatus, json.dumps({"recording": True, "saving": 1, "num_demos": 2,
                                "save_failures": 0, "error": None, "session_file": "d.hdf5", "plan_next": None}), "/r")
    assert status.recording and status.saving == 1 and status.model_dump()["plan_next"] is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(
        ["mode", "fault", "spec", "episode", "metrics", "placed", "recording", "saving", "workpieces", "belt",
         "speed", "sim_time", "clock_ns", "last_saved", "x"]), inner, max_size=5),
    max_leaves=20,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(MODELS), json_values)
def test_whatever_json_a_publisher_sends_a_reader_counts_it_or_takes_it(model, value) -> None:
    reader = JsonTopicReader(model, "/topic")
    got = reader(json.dumps(value))
    assert (got is None) == (reader.dropped == 1)
    assert got is None or isinstance(got, model)


def test_a_reader_hands_on_good_documents_and_keeps_the_last_refusal() -> None:
    taken: list[ArmModeReport] = []
    reader = JsonTopicReader(ArmModeReport, "/aubo/mode")
    callback = reader.then(taken.append)
    for text in ('{"mode": "enabled"}', "[]", '{"mode": "fault", "fault": "e-stop"}', "[" * 3000):
        callback(text)
    assert [t.mode for t in taken] == ["enabled", "fault"] and reader.dropped == 2
    assert "nested too deep" in reader.last_error


# ------------------------------------------------------------------------------ no JSON topic read another way
def test_no_node_parses_a_message_with_json_loads() -> None:
    """A message callback that calls ``json.loads`` on ``.data`` is how one message killed the recorder and
    teleop_pico: every such read goes through libero_workcell.json_topics (or ros_msgs for the action result)."""
    offenders = []
    for path in [p for folder in CODE_FOLDERS for p in folder.rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "loads"
                    and node.args and isinstance(node.args[0], ast.Attribute) and node.args[0].attr == "data"):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
            # (a deserialized String's .data, too)
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "loads"
                    and node.args and isinstance(node.args[0], ast.Attribute)
                    and isinstance(node.args[0].value, ast.Call)):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not offenders, f"json.loads on a message's data (use libero_workcell.json_topics): {offenders}"
