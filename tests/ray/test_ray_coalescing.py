"""Request coalescing of the Ray client against real shard actors: requests issued together reach a
shard in one call and are answered each as a single call would be; order per lane; lanes keep a
parked JoinGroup from holding back anything else; a batch that cannot reach its shard is retried
request by request; the shard refuses a malformed batch whole."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal

import pytest
from raygroups.coordinator.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)

from raygroups import Errors, partition_for
from raygroups.client.ray_client import lane_of
from tests.conditions import wait_for
from tests.ray.test_ray_client_api import _join, _stable_member

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def cluster(ray_session, tmp_path_factory):
    """One deployment for the module (each test uses groups of its own)."""
    import ray

    from raygroups.deployment.start import start_local
    from tests.ray.conftest import CONFIG, METRICS_EVERY_SECOND

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 _system_config=METRICS_EVERY_SECOND)
    c = start_local(num_partitions=4, data_dir=tmp_path_factory.mktemp("coalescing"), config=CONFIG,
                    namespace="test-coalescing")
    c.create_topic("orders", 4)
    yield c
    c.shutdown()


@contextlib.contextmanager
def paused_shard(cluster, partition: int, prefix: str):
    """SIGSTOP shard ``partition`` (SIGCONT on the way out); yields a group of it and the group's commit
    lane once a first commit of the group (offset 1 on orders:0) is in flight there, and that commit."""
    import ray

    client = cluster.client()
    group = next(g for g in (f"{prefix}-{i}" for i in range(100)) if partition_for(g, 4) == partition)
    pid = ray.get(cluster.shard(partition).status.remote())["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        first = client.commit_offsets(group_id=group, offsets={("orders", 0): (1, "")})
        lane = (partition, "commit", None, True)
        wait_for(lambda: lane in client._lanes and client._lanes[lane].in_flight == 1, 10, what="the first commit sent")
        yield group, lane, first
    finally:
        os.kill(pid, signal.SIGCONT)


def _join_req(member_id="", group_id="g", instance=None):
    return JoinGroupRequest(group_id, member_id, "consumer", (("range", b""),), 10_000, 10_000, instance,
                            "c", "/h", True, None)


def test_lanes():
    """Which requests may share a call (pure: no Ray)."""
    assert lane_of(HeartbeatRequest("a", 1, "m"), 3) == lane_of(OffsetFetchRequest("b"), 3) == (3, "read", None, True)
    assert lane_of(OffsetCommitRequest("a", {}), 3) == (3, "commit", None, True)
    # Every JoinGroup of a group shares a lane (a streaming call: each answered as soon as it is ready).
    assert lane_of(_join_req(), 0) == lane_of(_join_req("m-1"), 0) == lane_of(_join_req(instance="i"), 0) \
        == lane_of(dataclasses.replace(_join_req(), require_known_member_id=False), 0) == (0, "join", "g", False)
    assert lane_of(_join_req(group_id="h"), 0) == (0, "join", "h", False)
    assert lane_of(SyncGroupRequest("g", 1, "m", {}), 0) == (0, "sync", ("g", 1), False)
    assert lane_of(SyncGroupRequest("g", 2, "m", {}), 0) != lane_of(SyncGroupRequest("g", 1, "m", {}), 0)
    assert lane_of(LeaveGroupRequest("g", (("m", None),)), 0) is None


def test_commits_issued_together_share_calls_and_keep_their_own_answers(cluster):
    import ray

    client = cluster.client()
    shard_before = ray.get(cluster.shard(0).status.remote())
    groups = [g for g in (f"grp-{i}" for i in range(400)) if partition_for(g, 4) == 0][:50]
    before = dict(client.batch_stats)
    futures = [client.commit_offsets(group_id=g, offsets={("orders", i % 4): (i, "")}) for i, g in enumerate(groups)]
    # A commit with a generation for an unknown group fails on its own, in the same burst.
    bad = client.commit_offsets(group_id=groups[0] + "-x", offsets={("orders", 0): (1, "")}, generation_id=3,
                                member_id="m")
    unknown_topic = client.commit_offsets(group_id=groups[1], offsets={("nope", 0): (1, "")})
    assert all(f.result(30).errors == {("orders", i % 4): Errors.NONE} for i, f in enumerate(futures))
    assert bad.result(30).errors == {("orders", 0): Errors.ILLEGAL_GENERATION}
    assert unknown_topic.result(30).errors == {("nope", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION}
    calls = client.batch_stats["calls"] - before["calls"]
    requests = client.batch_stats["requests"] - before["requests"]
    assert requests >= len(groups) and calls < requests / 2, (calls, requests)
    fetched = [client.fetch_offsets(group_id=g, partitions=[("orders", i % 4)]) for i, g in enumerate(groups)]
    assert [f.result(30).offsets[("orders", i % 4)].offset for i, f in enumerate(fetched)] == list(range(len(groups)))
    status = ray.get(cluster.shard(0).status.remote())
    written = status["records"] - shard_before["records"]
    fsyncs = status["batches"] - shard_before["batches"]
    assert written >= len(groups) and fsyncs < len(groups) / 2, (written, fsyncs)  # few fsyncs


def test_order_per_lane_is_kept(cluster):
    client = cluster.client()
    futures = [client.commit_offsets(group_id="ordered", offsets={("orders", 0): (n, "")}) for n in range(300)]
    assert all(f.result(30).errors == {("orders", 0): Errors.NONE} for f in futures)
    assert client.fetch_offsets(group_id="ordered").result(30).offsets[("orders", 0)].offset == 299


def test_a_parked_join_holds_back_nothing_else(cluster):
    client = cluster.client()
    a = _stable_member(client, group_id="parked")
    # A second member joins: the group waits (rebalance timeout 10 s) for the first one to rejoin.
    first = _join(client, group_id="parked").result(30)
    parked = _join(client, first.member_id, group_id="parked")
    wait_for(lambda: client.describe_groups(["parked"]).result(30)[0].group_state == "PreparingRebalance", 30,
             what="the second member's join to start a rebalance")
    same_shard = [g for g in (f"other-{i}" for i in range(200)) if partition_for(g, 4) == partition_for("parked", 4)]
    commits = [client.commit_offsets(group_id=g, offsets={("orders", 0): (5, "")}) for g in same_shard[:20]]
    beat = client.heartbeat(group_id="parked", generation_id=1, member_id=a)
    assert beat.result(30).error is Errors.REBALANCE_IN_PROGRESS
    assert all(c.result(30).errors == {("orders", 0): Errors.NONE} for c in commits)
    assert not parked.done()
    rejoined = _join(client, a, group_id="parked")
    assert rejoined.result(30).error is Errors.NONE and parked.result(30).error is Errors.NONE
    assert parked.result(30).generation_id == rejoined.result(30).generation_id == 2


def test_a_join_answered_at_once_does_not_wait_for_one_that_parks_in_the_same_call(cluster):
    """A rejoin that parks until the rebalance completes and a first join answered at once travel in one
    streaming call: the first join's answer comes back while the rejoin is still parked."""
    from raygroups.client.ray_client import RayGroupClient

    client = RayGroupClient(cluster.namespace, cluster.num_partitions,
                            dataclasses.replace(cluster.config, client_linger_ms=200))
    try:
        a = _stable_member(client, group_id="mixed")
        b = _join(client, group_id="mixed").result(30).member_id
        calls = dict(client.batch_stats)
        parked = _join(client, b, group_id="mixed")  # starts a rebalance: waits for a to rejoin
        at_once = _join(client, group_id="mixed")  # a third member asking for its id
        assert at_once.result(30).error is Errors.MEMBER_ID_REQUIRED
        assert not parked.done()
        assert client.batch_stats["calls"] - calls["calls"] == 1  # both in one call (the 200 ms linger)
        assert client.batch_stats["requests"] - calls["requests"] == 2
        rejoined = _join(client, a, group_id="mixed").result(30)
        assert rejoined.error is Errors.NONE and parked.result(30).error is Errors.NONE
        assert parked.result(30).generation_id == rejoined.generation_id == 2
    finally:
        client.close()


def test_the_shard_streams_each_answer_of_a_batch_as_it_is_ready(cluster):
    """``handle_stream`` straight: answers in (index, response) lists, the one answered at once first."""
    import ray

    shard = cluster.shard(partition_for("streamed", 4))
    gen = shard.handle_stream.remote([_join_req(group_id="streamed"), HeartbeatRequest("streamed", "one", "m")])
    chunks = [ray.get(ref) for ref in gen]
    answers = dict(pair for chunk in chunks for pair in chunk)
    assert sorted(answers) == [0, 1]
    assert answers[0].error is Errors.MEMBER_ID_REQUIRED and answers[1].error is Errors.INVALID_REQUEST
    with pytest.raises(ValueError, match="handle_stream takes 1 to"):
        ray.get(next(iter(shard.handle_stream.remote([]))))


def test_joins_and_syncs_of_a_group_issued_together_complete_together(cluster):
    client = cluster.client()
    first_member = _stable_member(client, group_id="herd")
    firsts = [_join(client, group_id="herd") for _ in range(29)]
    assert {f.result(30).error for f in firsts} == {Errors.MEMBER_ID_REQUIRED}
    # The new members' second joins and the first member's rejoin: the rebalance completes once all 30
    # are in (KIP-394's pending ids hold it until then), however the client splits them into calls.
    ids = [first_member] + [f.result(30).member_id for f in firsts]
    joined = [j.result(30) for j in [_join(client, m, group_id="herd") for m in ids]]
    assert {(j.error, j.generation_id) for j in joined} == {(Errors.NONE, 2)}
    leader = joined[0].leader
    syncs = [client.sync_group(group_id="herd", generation_id=2, member_id=m,
                               assignments={x: x.encode() for x in ids} if m == leader else {}) for m in ids]
    assert [s.result(30).assignment for s in syncs] == [m.encode() for m in ids]


def test_a_batch_that_cannot_reach_its_shard_is_retried_request_by_request(cluster):
    import ray

    client = cluster.client()
    groups = [g for g in (f"r-{i}" for i in range(200)) if partition_for(g, 4) == 1][:20]
    assert all(f.result(30).errors[("orders", 0)] is Errors.NONE
               for f in [client.commit_offsets(group_id=g, offsets={("orders", 0): (1, "")}) for g in groups])
    ray.kill(cluster.shard(1), no_restart=False)  # Ray restarts it; it replays its log
    futures = [client.commit_offsets(group_id=g, offsets={("orders", 0): (2, "")}) for g in groups]
    assert all(f.result(60).errors == {("orders", 0): Errors.NONE} for f in futures)
    wait_for(lambda: all(client.fetch_offsets(group_id=g).result(30).offsets[("orders", 0)].offset == 2
                         for g in groups), 30, "every commit after the restart to be there")


def test_the_shard_refuses_a_malformed_batch_whole(cluster):
    import ray

    shard = cluster.shard(0)
    with pytest.raises(ray.exceptions.RayTaskError, match="takes a list of requests"):
        ray.get(shard.handle_batch.remote((HeartbeatRequest("g", 1, "m"),)))
    with pytest.raises(ray.exceptions.RayTaskError, match=r"1 to 1000 requests \(client.max.batch.requests\), got 1001"):
        ray.get(shard.handle_batch.remote([HeartbeatRequest("g", 1, "m")] * 1001))
    with pytest.raises(ray.exceptions.RayTaskError, match="got 0"):
        ray.get(shard.handle_batch.remote([]))
    # A malformed request in a batch is answered INVALID_REQUEST; the others as usual.
    owned = next(g for g in (f"g{i}" for i in range(100)) if partition_for(g, 4) == 0)
    answers = ray.get(shard.handle_batch.remote([HeartbeatRequest(owned, "one", "m"), OffsetFetchRequest(owned)]))
    assert answers[0].error is Errors.INVALID_REQUEST and answers[1].error is Errors.NONE


def test_a_commit_waits_behind_an_earlier_one_stuck_at_a_paused_shard(cluster):
    """Ray does not keep the order of calls to an asyncio actor; the commit lane does. A commit stuck at
    a paused (SIGSTOP) shard holds back the member's next commit, so the late one cannot overwrite it."""
    client = cluster.client()
    with paused_shard(cluster, 2, "late") as (group, lane, early):
        later = client.commit_offsets(group_id=group, offsets={("orders", 0): (20, "")})
        wait_for(lambda: len(client._lanes[lane].queue) == 1, 10, what="the later commit to queue behind it")
        assert not early.done() and not later.done()
    assert early.result(30).errors == later.result(30).errors == {("orders", 0): Errors.NONE}
    assert client.fetch_offsets(group_id=group).result(30).offsets[("orders", 0)].offset == 20


def test_a_request_its_caller_gave_up_on_does_not_hold_back_the_others(cluster):
    """A caller cancels its future (a consumer's own timeout) while the request waits in a batch: the others
    of the batch are still answered."""
    client = cluster.client()
    with paused_shard(cluster, 3, "gave-up") as (group, lane, first):
        queued = [client.commit_offsets(group_id=group, offsets={("orders", p): (2, "")}) for p in range(3)]
        wait_for(lambda: len(client._lanes[lane].queue) == 3, 10, what="three commits queued behind it")
        assert queued[1].cancel()
        first.cancel()  # in flight: its answer arrives for nobody
    assert queued[0].result(30).errors == {("orders", 0): Errors.NONE}
    assert queued[2].result(30).errors == {("orders", 2): Errors.NONE}
    offsets = client.fetch_offsets(group_id=group).result(30).offsets
    assert offsets[("orders", 0)].offset == 2 and offsets[("orders", 2)].offset == 2
    assert ("orders", 1) not in offsets  # the cancelled one never left
