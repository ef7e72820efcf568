"""Credentials in URLs are redacted wherever a setting is stored or printed (issue 35, item 13).

``policy.url: ws://user:pw@host`` in a lab's cell file was stored as it is in every session's ``env_args`` (the
recorder keeps the cell's settings), printed by `workcell bringup`, and published in the policy node's
diagnostics (and so in the session's MCAP log): redaction looked only at the names of settings, never at values
that are URLs.
"""

from __future__ import annotations

import json
import string

from hypothesis import given, settings
from hypothesis import strategies as st

from libero_workcell.cell_file import REDACTED, load_cell, redact, redact_text, redact_value
from workcell import cli
from workcell.bringup import Graph

URL = "ws://operator:hunter2@10.0.0.9:8000"


def _cell(tmp_path, text: str):
    path = tmp_path / "lab_cell.yaml"
    path.write_text(text)
    return path


def test_a_policy_url_with_credentials_is_recorded_and_printed_without_them(tmp_path, capsys) -> None:
    cell = _cell(tmp_path, f"use_sim: false\npolicy_node: {{policy: {{url: '{URL}'}}}}\n")
    graph = Graph.load()
    recorded = load_cell(cell, graph.arguments, graph.node_names()).recorded()  # the recorder's env_args["cell"]
    assert recorded["settings"]["policy_node.policy.url"] == f"ws://{REDACTED}@10.0.0.9:8000"
    assert "hunter2" not in json.dumps(recorded) and "operator" not in json.dumps(recorded)
    assert cli.main(["bringup", "--job", "deploy_real", f"cell:={cell}", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"'policy.url': 'ws://{REDACTED}@10.0.0.9:8000'" in out and "hunter2" not in out, out
    assert cli.main(["bringup", "--job", "deploy_real", f"policy_node.policy.url:={URL}", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"ws://{REDACTED}@10.0.0.9:8000" in out and "hunter2" not in out


def test_what_redaction_replaces_and_what_it_keeps() -> None:
    assert redact_text("ws://127.0.0.1:8000") == "ws://127.0.0.1:8000"  # no credentials: as it is
    assert redact_text("wss://token@policy.lab:443/v1") == f"wss://{REDACTED}@policy.lab:443/v1"
    assert redact_text("ws://u:p/a#ss@h") == f"ws://{REDACTED}@h"  # a password its user did not escape
    assert redact_text("http://h/x?api_key=abc&step=2&Token=t#top") == \
        f"http://h/x?api_key={REDACTED}&step=2&Token={REDACTED}#top"  # fmt: skip
    assert redact_text(f"cannot connect to the policy server at {URL}: refused (see ops@lab)") == \
        f"cannot connect to the policy server at ws://{REDACTED}@10.0.0.9:8000: refused (see ops@lab)"  # fmt: skip
    assert redact_text("ops@lab.example, /data/demo@2.hdf5") == "ops@lab.example, /data/demo@2.hdf5"  # no URL
    assert redact_value([URL, 3, None]) == [f"ws://{REDACTED}@10.0.0.9:8000", 3, None] and redact_value(2.5) == 2.5
    assert redact({"policy.api_key": "abc", "arcs.ip": "10.0.0.2", "policy.url": URL}) == {
        "policy.api_key": REDACTED, "arcs.ip": "10.0.0.2", "policy.url": f"ws://{REDACTED}@10.0.0.9:8000"}


USERINFO = st.text(string.ascii_letters + string.digits + string.punctuation, min_size=1, max_size=24)
HOSTS = st.sampled_from(["127.0.0.1", "policy.lab", "[::1]", "h"])


@settings(max_examples=300, deadline=None)
@given(scheme=st.sampled_from(["ws", "wss", "http", "https", "grpc+tls"]), userinfo=USERINFO, host=HOSTS,
       port=st.sampled_from(["", ":8000"]), path=st.sampled_from(["", "/", "/v1/infer"]),
       secret=st.text(string.ascii_letters + string.digits + "-._~%", min_size=1, max_size=16),
       context=st.sampled_from(["{}", "policy server {}", "cannot connect to {}: refused", "'{}', 'x'"]))  # fmt: skip
def test_no_credentials_survive_redaction_whatever_they_are(scheme, userinfo, host, port, path, secret,
                                                           context) -> None:  # fmt: skip
    """Any user information (letters, digits, punctuation, unescaped) and any secret query value: what comes out
    names the scheme, host, port and path, never the credentials."""
    url = f"{scheme}://{userinfo}@{host}{port}{path}?api_key={secret}&n=1"
    got = redact_text(context.format(url))
    assert got == context.format(f"{scheme}://{REDACTED}@{host}{port}{path}?api_key={REDACTED}&n=1")
