"""SimLink: consistent reads under a concurrent writer, clear errors for a dead writer or a missing world."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from transports.sim_link import READ_TIMEOUT, LinkError, SimLink


def test_reader_never_sees_a_torn_command_under_a_concurrent_writer() -> None:
    link = SimLink.in_memory()
    stop = threading.Event()

    def writer() -> None:
        k = 0.0
        while not stop.is_set():
            k += 1.0
            link.write_arm_command(np.full(6, k))

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(3000):
            q = link.read_arm_command().q
            assert np.all(q == q[0])  # all six from the same write
    finally:
        stop.set()
        t.join()


def test_writer_that_died_mid_write_is_reported_not_hung() -> None:
    link = SimLink.in_memory()
    link._rec["state_seq"] += 1  # odd forever: a writer killed mid-write
    t0 = time.monotonic()
    with pytest.raises(LinkError, match="stayed busy"):
        link.read_state()
    assert time.monotonic() - t0 < READ_TIMEOUT + 0.5


def test_attach_to_a_missing_world_times_out_with_a_clear_message() -> None:
    with pytest.raises(LinkError, match="is the sim_world node running"):
        SimLink.attach("no_such_world_for_test", timeout=0.2)


def test_named_link_round_trip_between_two_mappings() -> None:
    owner = SimLink.create("pytest_link_roundtrip")
    try:
        other = SimLink.attach("pytest_link_roundtrip", timeout=1.0)
        other.write_gripper_command(0.75)
        assert owner.read_gripper_command() == (1, 0.75)
        assert other.read_frame("wrist") is None
    finally:
        owner.close()
    assert not owner.path.exists()


def test_bad_link_name_rejected() -> None:
    with pytest.raises(LinkError, match="invalid sim link name"):
        SimLink.create("../etc")
