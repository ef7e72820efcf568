"""Issue 35, item 4: one ``/sim/episode`` message ``{"spec": 5}`` killed the recorder mid-episode, and its shutdown
deleted the open demo. On real topics, every hostile message on the JSON topics it reads is counted and dropped;
the episode goes on and is saved whole."""

from __future__ import annotations

import time

import pytest
from hostile_json import HOSTILE
from test_recorder_node import feed, wait_saved
from test_recorder_node import graph as graph  # the fixture

from libero_workcell.contract import Qos, Topics
from libero_workcell.libero_format import read_demos
from libero_workcell.ros_qos import qos

pytestmark = pytest.mark.ros
rclpy = pytest.importorskip("rclpy")


def test_hostile_json_messages_mid_episode_are_dropped_and_the_episode_is_saved_whole(graph, tmp_path) -> None:
    from std_msgs.msg import String
    from std_srvs.srv import Trigger

    rec, pubs, spin = graph()
    episode_pub = rec.create_publisher(String, Topics.SIM_EPISODE, qos(Qos.LATCHED))
    assert rec._srv_start(Trigger.Request(), Trigger.Response()).success
    t0 = time.time()
    for i in range(12):
        feed(pubs, spin, t0 + i * 0.05, servo_tick=100 + 5 * i)
        if i in (3, 8):  # mid-episode, every hostile message on both JSON topics it reads, one at a time
            for text in HOSTILE:
                for pub, what in ((episode_pub, "episode"), (pubs["result"], "result")):
                    before = rec.bad_messages.get(what, 0)
                    pub.publish(String(data=text))
                    deadline = time.monotonic() + 10
                    while rec.bad_messages.get(what, 0) == before and time.monotonic() < deadline:
                        spin(0.01)
                    assert rec.bad_messages.get(what, 0) == before + 1, (what, text[:40])  # counted and dropped
    assert rec.bad_messages["episode"] == rec.bad_messages["result"] == 2 * len(HOSTILE)
    res = rec._srv_save(Trigger.Request(), Trigger.Response())
    assert res.success and "12 steps" in res.message, res.message
    wait_saved(rec, spin, 1)
    assert read_demos(tmp_path / "d2s.hdf5").demos[0].num_samples == 12
