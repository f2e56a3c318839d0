"""The partition state and fence a coordinator node keeps on disk (``offsets_log.replica_state``) and the
``LogServer`` that persists and serves them, with real files: what a restarted node, or a controller that
lost its cache, reads back."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from raygroups.actors.log_server import LogServer
from raygroups.coordinator.records import new_offset_commit_record
from raygroups.offsets_log import Batch
from raygroups.offsets_log.replica_state import (
    ReplicaStateError,
    partition_dir,
    read_node_descriptor,
    read_replica_state,
    validate_partition_state,
    write_replica_state,
)


def state(leader="A", epoch=3, isr=("A", "B"), pe=7, replicas=("A", "B", "C")):
    return {"replicas": list(replicas), "leader": leader, "leader_epoch": epoch, "isr": list(isr),
            "partition_epoch": pe}


def server(path, node="B", num_partitions=4) -> LogServer:
    return LogServer(node, str(path / node), 1 << 20, None, num_partitions)


def batch(offset: int, epoch: int) -> Batch:
    return Batch(offset, epoch, 0, (new_offset_commit_record("g", "t", 0, offset, -1, "", 0),))


def test_a_restarted_log_server_refuses_appends_below_its_persisted_fence(tmp_path):
    async def scenario():
        first = server(tmp_path)
        assert (await first.update_partition(0, state(epoch=5)))["ok"]
        assert (await first.append(0, [batch(0, 5)], 5))["ok"]
        await first.close()
        again = server(tmp_path)  # the process restarted: only the disk is left
        refused = await again.append(0, [batch(1, 4)], 4)
        assert refused == {"ok": False, "reason": "fenced", "fenced_epoch": 5}
        assert (await again.append(0, [batch(1, 5)], 5))["ok"]
        report = await again.report()
        assert report["replicas"][0] == {"state": state(epoch=5), "fenced_epoch": 5}
        assert report["descriptor"] == {"num_partitions": 4, "node": "B", "min_insync_replicas": None,
                                        "layout_created": False}

    asyncio.run(scenario())


def test_an_append_from_a_newer_epoch_raises_the_fence_on_disk(tmp_path):
    async def scenario():
        ls = server(tmp_path)
        await ls.update_partition(0, state(epoch=2))
        assert (await ls.append(0, [batch(0, 4)], 4))["ok"]  # the controller's update to epoch 4 was missed
        await ls.close()
        assert read_replica_state(partition_dir(str(tmp_path / "B"), 0)) == (state(epoch=2), 4)
        assert (await server(tmp_path).append(0, [batch(1, 3)], 3))["reason"] == "fenced"

    asyncio.run(scenario())


def test_an_older_state_is_refused_and_the_same_one_changes_nothing(tmp_path):
    async def scenario():
        ls = server(tmp_path)
        assert (await ls.update_partition(1, state(pe=7)))["ok"]
        path = os.path.join(partition_dir(str(tmp_path / "B"), 1), "partition-state.json")
        written = os.stat(path).st_mtime_ns
        assert await ls.update_partition(1, state(pe=6, epoch=9)) == {
            "ok": False, "reason": "stale", "node": "B", "partition_epoch": 7}
        assert (await ls.update_partition(1, state(pe=7)))["ok"]
        assert os.stat(path).st_mtime_ns == written
        assert (await ls.report())["replicas"][1]["state"]["leader_epoch"] == 3

    asyncio.run(scenario())


def test_a_state_naming_this_node_leader_releases_the_replica_and_a_later_one_takes_it_back(tmp_path):
    async def scenario():
        ls = server(tmp_path)
        await ls.update_partition(0, state(leader="A", epoch=1, pe=1))
        assert (await ls.append(0, [batch(0, 1)], 1))["ok"]
        await ls.update_partition(0, state(leader="B", epoch=2, pe=2))  # this node leads: its shard opens the log
        assert (await ls.state(0)) == {"node": "B", "released": True, "fenced_epoch": 2}
        assert (await ls.append(0, [batch(1, 2)], 2))["reason"] == "rejected"
        await ls.update_partition(0, state(leader="C", epoch=3, pe=3))  # a follower again
        s = await ls.state(0)
        assert (s["log_end_offset"], s["fenced_epoch"]) == (1, 3)

    asyncio.run(scenario())


def test_a_node_that_is_no_replica_records_nothing(tmp_path):
    async def scenario():
        ls = server(tmp_path, node="D")
        assert (await ls.update_partition(2, state()))["ok"]
        assert (await ls.report())["replicas"] == {}
        assert not os.path.exists(partition_dir(str(tmp_path / "D"), 2))

    asyncio.run(scenario())


def test_an_unreadable_state_file_is_reported_not_used_and_a_new_state_replaces_it(tmp_path):
    directory = partition_dir(str(tmp_path / "B"), 3)
    os.makedirs(directory)
    with open(os.path.join(directory, "partition-state.json"), "w") as f:
        f.write('{"format": 1, "state": {"replicas": ["A"], "leader": "Z"')

    async def scenario():
        ls = server(tmp_path)
        report = await ls.report()
        assert 3 not in report["replicas"] and "not valid JSON" in report["errors"][3]
        assert (await ls.update_partition(3, state(pe=1)))["ok"]
        assert (await ls.report())["errors"] == {}

    asyncio.run(scenario())
    assert read_replica_state(directory)[0] == state(pe=1)


def test_an_interrupted_write_leaves_the_previous_state(tmp_path):
    directory = str(tmp_path / "p")
    write_replica_state(directory, state(pe=1), 3)
    with open(os.path.join(directory, "partition-state.json.tmp"), "w") as f:
        f.write("{half")  # the crash happened before the rename
    assert read_replica_state(directory) == (state(pe=1), 3)
    assert not os.path.exists(os.path.join(directory, "partition-state.json.tmp"))


@pytest.mark.parametrize(("change", "message"), [
    ({"leader_epoch": -1}, "leader_epoch must be >= 0"),
    ({"isr": ["A", "Z"]}, "not a subset of replicas"),
    ({"leader": "Z"}, "is not one of the replicas"),
    ({"replicas": ["A", "A"]}, "names a node twice"),
    ({"replicas": []}, "at least one node"),
    ({"partition_epoch": "1"}, "partition_epoch must be an int"),
])
def test_bad_states_are_refused_naming_the_field(change, message):
    with pytest.raises(ReplicaStateError, match=message):
        validate_partition_state({**state(), **change})
    with pytest.raises(ReplicaStateError, match="missing isr"):
        validate_partition_state({k: v for k, v in state().items() if k != "isr"})


def test_the_node_descriptor_is_written_once_and_an_unreadable_one_is_reported_not_overwritten(tmp_path):
    server(tmp_path, num_partitions=8)
    assert read_node_descriptor(str(tmp_path / "B"))["num_partitions"] == 8
    again = server(tmp_path, num_partitions=50)  # what the disk holds wins; the controller compares
    assert again.descriptor["num_partitions"] == 8
    with open(tmp_path / "B" / "deployment.json", "w") as f:
        json.dump({"format": 1, "num_partitions": 0, "node": "B"}, f)
    broken = server(tmp_path)  # starts, so that the controller can say why the node is refused
    report = asyncio.run(broken.report())
    assert report["descriptor"] is None and "num_partitions must be >= 1" in report["descriptor_error"]
    assert json.load(open(tmp_path / "B" / "deployment.json"))["num_partitions"] == 0  # evidence kept


def test_the_descriptor_keeps_the_lowest_min_isr_and_records_the_layout(tmp_path):
    def make(min_isr):
        return LogServer("B", str(tmp_path / "B"), 1 << 20, None, 4, min_isr)

    make(2)
    make(1)  # the deployment ran with min.insync.replicas=1 once: writes may be on one replica only
    ls = make(2)
    assert ls.descriptor["min_insync_replicas"] == 1
    assert asyncio.run(ls.mark_layout())
    assert read_node_descriptor(str(tmp_path / "B")) == {"num_partitions": 4, "node": "B", "min_insync_replicas": 1,
                                                         "layout_created": True}


def test_another_state_under_the_same_partition_epoch_is_refused(tmp_path):
    async def scenario():
        ls = server(tmp_path)
        assert (await ls.update_partition(0, state(pe=4)))["ok"]
        assert await ls.update_partition(0, state(pe=4, isr=("A", "C"))) == {
            "ok": False, "reason": "stale", "node": "B", "partition_epoch": 4}
        assert (await ls.update_partition(0, state(pe=4)))["ok"]  # the very same one: fine

    asyncio.run(scenario())


def test_a_node_back_with_a_stale_state_naming_it_leader_follows_once_told_the_current_one(tmp_path):
    async def scenario():
        ls = server(tmp_path)
        await ls.update_partition(0, state(leader="B", epoch=2, pe=2))  # it led, then died
        await ls.close()
        again = server(tmp_path)  # leadership moved while it was down: its disk does not know
        await again.update_partition(0, state(leader="A", epoch=3, pe=3, isr=("A",)))  # the controller's sync
        assert (await again.append(0, [batch(0, 3)], 3))["ok"]  # a follower, caught up by the new leader

    asyncio.run(scenario())


def test_registered_topics_survive_a_restart_and_an_older_registry_is_refused(tmp_path):
    async def scenario():
        ls = server(tmp_path)
        assert (await ls.update_topics({"orders": 12}, 2))["ok"]
        assert await ls.update_topics({"orders": 12, "old": 1}, 1) == {"ok": False, "reason": "stale", "version": 2}
        report = await server(tmp_path).report()
        assert (report["topics"], report["topics_version"]) == ({"orders": 12}, 2)

    asyncio.run(scenario())
    with pytest.raises(ReplicaStateError, match="partitions of 'orders' must be >= 1"):
        asyncio.run(server(tmp_path).update_topics({"orders": 0}, 3))
