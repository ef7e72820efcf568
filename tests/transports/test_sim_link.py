"""SimLink: consistent reads under a concurrent writer, clear errors for a dead writer or a missing world."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from transports.sim_link import ARM_FAULT_BYTES, READ_TIMEOUT, LinkError, SimLink, WorldState, fault_text


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


def _state(arm_fault: str = "", wall_time: float | None = None) -> WorldState:
    z = np.zeros(6)
    return WorldState(1.0, time.time() if wall_time is None else wall_time, 1, z, z, np.zeros(3),
                      np.array([0.0, 0.0, 0.0, 1.0]), 0.0, 0.0, 0.0, False, arm_fault)  # fmt: skip


def test_the_controllers_fault_reason_crosses_the_link_and_clears() -> None:
    link = SimLink.in_memory()
    link.write_state(_state("protective stop: collision at the tray"))
    assert link.read_state()[1].arm_fault == "protective stop: collision at the tray"
    assert link.read_world(None)[0].arm_fault == "protective stop: collision at the tray"  # lockstep reads it too
    link.write_state(_state(""))
    assert link.read_state()[1].arm_fault == ""


def test_a_fault_reason_is_one_line_cut_to_the_fields_size_on_a_character_boundary() -> None:
    assert fault_text("  protective\nstop:\t collision \x00at the tray  ") == "protective stop: collision at the tray"
    long = "é" * ARM_FAULT_BYTES  # two bytes each: cut at ARM_FAULT_BYTES bytes, never half a character
    assert fault_text(long) == "é" * (ARM_FAULT_BYTES // 2)
    odd = "x" + long  # the cut falls inside a character: that character goes
    assert fault_text(odd) == "x" + "é" * ((ARM_FAULT_BYTES - 1) // 2)
    link = SimLink.in_memory()
    link.write_state(_state("line one\nline two " + "y" * 500))
    got = link.read_state()[1].arm_fault
    assert got.startswith("line one line two y") and len(got.encode("utf-8")) == ARM_FAULT_BYTES
