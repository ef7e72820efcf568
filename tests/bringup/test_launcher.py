"""The process launcher's errors."""

from __future__ import annotations

import pickle

from workcell.launcher import NodeDiedError, NodeExit


def test_a_node_died_error_survives_pickling_with_its_exits() -> None:
    """An evaluation worker's trial raises it in another process: it must arrive whole, not as a second error."""
    err = NodeDiedError([NodeExit("policy_node", 2, ("ModuleNotFoundError: x",), None)])
    back = pickle.loads(pickle.dumps(err))
    assert isinstance(back, NodeDiedError) and back.exits == err.exits and str(back) == str(err)
