"""The full client API against real shard actors (a subset of the core's scenarios through
``cluster.client()``), topic validation, bad input, and the error mapping of unavailable shards."""

from __future__ import annotations

import pytest
from raygroups.coordinator.consumer_protocol import Subscription, encode_subscription

from raygroups import Errors, partition_for

pytestmark = pytest.mark.ray

SUB = encode_subscription(Subscription(topics=("orders",)))


def _join(client, member_id="", group_id="g", **kw):
    args = dict(group_id=group_id, member_id=member_id, protocol_type="consumer", protocols=[("range", SUB)],
                session_timeout_ms=10_000, rebalance_timeout_ms=10_000, client_id="c")
    args.update(kw)
    return client.join_group(**args)


def _stable_member(client, group_id="g"):
    first = _join(client, group_id=group_id).result(30)
    assert first.error is Errors.MEMBER_ID_REQUIRED
    joined = _join(client, first.member_id, group_id=group_id).result(30)
    assert joined.error is Errors.NONE and joined.generation_id == 1 and joined.leader == first.member_id
    synced = client.sync_group(group_id=group_id, generation_id=1, member_id=joined.member_id,
                               assignments={joined.member_id: b"orders-0"}).result(30)
    assert synced.error is Errors.NONE and synced.assignment == b"orders-0"
    return joined.member_id


def test_group_lifecycle_through_the_ray_client(cluster):
    cluster.create_topic("orders", 2)
    client = cluster.client()
    member = _stable_member(client)
    assert client.heartbeat(group_id="g", generation_id=1, member_id=member).result(30).error is Errors.NONE
    assert client.heartbeat(group_id="g", generation_id=2, member_id=member).result(30).error is Errors.ILLEGAL_GENERATION
    commit = client.commit_offsets(group_id="g", offsets={("orders", 0): (7, "meta", 3)}, generation_id=1,
                                   member_id=member).result(30)
    assert commit.errors == {("orders", 0): Errors.NONE}
    fetched = client.fetch_offsets(group_id="g", partitions=[("orders", 0), ("orders", 1)]).result(30)
    assert fetched.offsets[("orders", 0)][:3] == (7, 3, "meta")
    assert fetched.offsets[("orders", 1)][:3] == (-1, -1, "")
    listed = client.list_groups(states_filter=["stable"]).result(30)
    assert [(g.group_id, g.group_state) for g in listed.groups] == [("g", "Stable")]
    described = client.describe_groups(["g", "unknown"]).result(30)
    assert described[0].group_state == "Stable" and described[0].members[0].assignment == b"orders-0"
    assert described[1].group_state == "Dead"
    assert client.delete_groups(["g"]).result(30) == {"g": Errors.NON_EMPTY_GROUP}
    left = client.leave_group(group_id="g", members=[(member, None)]).result(30)
    assert left.members[0].error is Errors.NONE
    assert client.describe_groups(["g"]).result(30)[0].group_state == "Empty"
    deleted = client.delete_offsets(group_id="g", partitions=[("orders", 0)]).result(30)
    assert deleted.error is Errors.NONE and deleted.errors == {("orders", 0): Errors.NONE}
    assert client.delete_groups(["g", "unknown"]).result(30) == {"g": Errors.NONE, "unknown": Errors.GROUP_ID_NOT_FOUND}


def test_groups_spread_over_shards_and_list_groups_fans_out(cluster):
    cluster.create_topic("orders", 1)
    client = cluster.client()
    groups = [f"group-{i}" for i in range(12)]
    assert len({partition_for(g, cluster.num_partitions) for g in groups}) == cluster.num_partitions
    for g in groups:
        r = client.commit_offsets(group_id=g, offsets={("orders", 0): (1, "")}).result(30)
        assert r.errors == {("orders", 0): Errors.NONE}
    listed = client.list_groups().result(30)
    assert listed.error is Errors.NONE
    assert sorted(g.group_id for g in listed.groups) == sorted(groups)
    assert {g.group_state for g in listed.groups} == {"Empty"}


def test_commits_to_unregistered_topics_or_partitions_fail_per_partition(cluster):
    cluster.create_topic("orders", 2)
    client = cluster.client()
    r = client.commit_offsets(group_id="g", offsets={("orders", 1): (5, ""), ("orders", 2): (5, ""),
                                                     ("nope", 0): (5, "")}).result(30)
    assert r.errors == {("orders", 1): Errors.NONE, ("orders", 2): Errors.UNKNOWN_TOPIC_OR_PARTITION,
                        ("nope", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION}
    fetched = client.fetch_offsets(group_id="g").result(30)
    assert list(fetched.offsets) == [("orders", 1)]
    with pytest.raises(ValueError, match="shrink"):
        cluster.create_topic("orders", 1)
    assert cluster.topics() == {"orders": 2}


def test_bad_input_raises_in_the_caller_and_changes_nothing(cluster):
    cluster.create_topic("orders", 1)
    client = cluster.client()
    with pytest.raises(TypeError, match="session_timeout_ms"):
        _join(client, session_timeout_ms="soon")
    with pytest.raises(ValueError, match="partition"):
        client.commit_offsets(group_id="g", offsets={("orders", -1): (1, "")})
    with pytest.raises(TypeError, match="group_ids"):
        client.describe_groups("g")
    assert _join(client, group_id=None).result(30).error is Errors.INVALID_GROUP_ID
    assert client.list_groups().result(30).groups == []


def test_a_shard_that_never_comes_back_surfaces_not_coordinator_after_the_timeout(ray_session, tmp_path):
    import ray

    from raygroups.deployment.start import start_local

    with start_local(num_partitions=1, data_dir=tmp_path, config={"request.timeout.ms": 1_000},
                     namespace="test-gone") as c:
        c.create_topic("orders", 1)
        ray.kill(c.shard(0), no_restart=True)
        r = c.client().commit_offsets(group_id="g", offsets={("orders", 0): (1, "")}).result(30)
        assert r.errors == {("orders", 0): Errors.NOT_COORDINATOR}


def test_connect_attaches_and_shutdown_removes_every_actor(ray_session, tmp_path):
    import ray

    from raygroups import connect, start_local

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    owner = start_local(num_partitions=2, data_dir=tmp_path, namespace="test-connect")
    owner.create_topic("orders", 1)
    attached = connect(namespace="test-connect")
    assert (attached.namespace, attached.num_partitions, attached.topics()) == ("test-connect", 2, {"orders": 1})
    r = attached.client().commit_offsets(group_id="g", offsets={("orders", 0): (3, "")}).result(30)
    assert r.errors == {("orders", 0): Errors.NONE}
    attached.shutdown()  # a handle that created nothing removes nothing
    assert owner.client().fetch_offsets(group_id="g").result(30).offsets[("orders", 0)].offset == 3
    owner.shutdown()
    for p in range(2):
        with pytest.raises(ValueError):
            ray.get_actor(f"raygroups-shard-{p}", namespace="test-connect")
    with pytest.raises(ValueError, match="no raygroups deployment"):
        connect(namespace="test-connect")


def test_a_kip848_consumer_group_through_the_ray_client_survives_its_shard_restart(cluster):
    """ConsumerGroupHeartbeat and ConsumerGroupDescribe through ``cluster.client()``: two members reconcile
    (the second waits for the first to revoke), commit with their epochs, and after the group's shard is
    killed and replays its log the group, its epochs and assignments are all there."""
    from tests.conditions import wait_for

    cluster.create_topic("events", 4)
    client = cluster.client()
    hb = client.consumer_group_heartbeat
    a = hb(group_id="kg", rebalance_timeout_ms=10_000, subscribed_topic_names=["events"], topic_partitions={}).result(30)
    assert a.error is Errors.NONE and a.member_epoch == 1 and a.assignment == {"events": [0, 1, 2, 3]}
    b = hb(group_id="kg", member_id="b-id", rebalance_timeout_ms=10_000, subscribed_topic_names=["events"],
           topic_partitions={}).result(30)
    # KIP-1263: within the assignment interval (1 s) b joins at the assignment epoch with nothing; its first
    # heartbeat after the interval computes epoch 2's target.
    assert (b.member_id, b.assignment) == ("b-id", {}) and b.member_epoch in (1, 2)
    epoch = [b.member_epoch]

    def b_at_epoch_2() -> bool:
        r = hb(group_id="kg", member_id="b-id", member_epoch=epoch[0], topic_partitions={}).result(30)
        assert r.error is Errors.NONE, r
        epoch[0] = r.member_epoch
        return r.member_epoch == 2

    wait_for(b_at_epoch_2, timeout_s=30, interval_s=0.2, what="the target of epoch 2")
    revoke = hb(group_id="kg", member_id=a.member_id, member_epoch=1, topic_partitions=a.assignment).result(30)
    assert revoke.member_epoch == 1 and len(revoke.assignment["events"]) == 2
    acked = hb(group_id="kg", member_id=a.member_id, member_epoch=1, topic_partitions=revoke.assignment).result(30)
    assert acked.member_epoch == 2
    got = hb(group_id="kg", member_id="b-id", member_epoch=2, topic_partitions={}).result(30)
    assert sorted(got.assignment["events"] + revoke.assignment["events"]) == [0, 1, 2, 3]
    commit = client.commit_offsets(group_id="kg", offsets={("events", 0): (9, "")}, generation_id=2,
                                   member_id="b-id").result(30)
    assert commit.errors == {("events", 0): Errors.NONE}
    stale = client.commit_offsets(group_id="kg", offsets={("events", 0): (10, "")}, generation_id=1,
                                  member_id="b-id").result(30)
    assert stale.errors == {("events", 0): Errors.STALE_MEMBER_EPOCH}
    before = client.consumer_group_describe(["kg", "nope"]).result(30)
    assert before[0].group_state == "Stable" and before[1].error is Errors.GROUP_ID_NOT_FOUND
    listed = client.list_groups(types_filter=["consumer"]).result(30).groups
    assert [(g.group_id, g.group_type) for g in listed] == [("kg", "consumer")]

    p = partition_for("kg", cluster.num_partitions)
    pid = cluster.shard_status()[p]["pid"]
    cluster.kill_shard(p)
    wait_for(lambda: cluster.shard_status()[p]["pid"] != pid, what="the shard to restart")
    cluster.wait_ready()
    after = client.consumer_group_describe(["kg"]).result(30)[0]
    assert (after.group_epoch, after.assignment_epoch, after.group_state) == (2, 2, "Stable")
    assert [(m.member_id, m.member_epoch, m.assignment) for m in after.members] == [
        (m.member_id, m.member_epoch, m.assignment) for m in before[0].members]
    assert hb(group_id="kg", member_id="b-id", member_epoch=2).result(30).error is Errors.NONE
    assert client.fetch_offsets(group_id="kg", member_id="b-id", member_epoch=2).result(30).offsets[
        ("events", 0)].offset == 9


def _stand_in_shards(namespace: str, refusing: dict | None = None, **holds: float) -> dict:
    """Stand-in shard actors named after ``holds`` (each holds its first call that long, answers the others
    at once with a heartbeat's NONE; those named in ``refusing`` answer every call with the error it gives
    them, as a deposed shard does), and a client of a one-partition deployment in ``namespace``."""
    import asyncio

    import ray
    from raygroups.coordinator.messages import HeartbeatResponse

    @ray.remote
    class StandIn:
        def __init__(self, hold_s: float, refuses) -> None:
            self.hold_s, self.refuses, self.calls, self.log = hold_s, refuses, 0, []

        async def handle(self, request):
            self.calls += 1
            n = self.calls
            self.log.append(("start", n))
            if n == 1:
                await asyncio.sleep(self.hold_s)
            self.log.append(("end", n))
            return HeartbeatResponse(self.refuses or Errors.NONE)

        async def handle_batch(self, requests):
            return [await self.handle(r) for r in requests]

        def called(self) -> int:
            return self.calls

        def order(self) -> list:
            return self.log

    return {name: StandIn.options(name=name, namespace=namespace).remote(hold, (refusing or {}).get(name))
            for name, hold in holds.items()}


def test_a_call_held_by_a_deposed_shard_goes_to_the_partitions_new_shard(ray_session):
    """Ray holds a call to an actor it restarts, or to a paused one, until that actor answers. When the
    partition moves to another actor meanwhile (the GCS names the new shard), the client stops waiting on the
    old one and sends the request again to the new one. The two shards are stand-ins that answer the call
    (one never does in time); the client, the GCS and the lookup are the real ones."""
    import uuid

    import ray
    from raygroups.coordinator.config import CoordinatorConfig

    from raygroups.client.ray_client import RayGroupClient
    from raygroups.deployment.seam import _shard_actor_key, kv_put
    from tests.conditions import wait_for

    namespace = f"moved-{uuid.uuid4().hex[:8]}"
    shards = _stand_in_shards(namespace, **{"old-shard": 120.0, "new-shard": 0.0})  # the old one: a held call
    old, new = shards["old-shard"], shards["new-shard"]
    kv_put(_shard_actor_key(0), b"old-shard", namespace)
    client = RayGroupClient(namespace, 1, CoordinatorConfig(request_timeout_ms=60_000))
    try:
        answer = client.heartbeat(group_id="g", generation_id=1, member_id="m")
        wait_for(lambda: ray.get(old.called.remote(), timeout=30) == 1, what="the call held by the old shard")
        kv_put(_shard_actor_key(0), b"new-shard", namespace)  # the controller moved the partition
        assert answer.result(30).error is Errors.NONE  # long before the held call's 120 s
        assert ray.get(new.called.remote(), timeout=30) == 1
        assert client.heartbeat(group_id="g", generation_id=1, member_id="m").result(30).error is Errors.NONE
        assert ray.get(new.called.remote(), timeout=30) == 2 and ray.get(old.called.remote(), timeout=30) == 1
    finally:
        client.close()
        for actor in shards.values():
            ray.kill(actor)


@pytest.mark.parametrize("refusal", [Errors.NOT_COORDINATOR, Errors.COORDINATOR_LOAD_IN_PROGRESS], ids=lambda e: e.name)
def test_a_deposed_shard_that_lives_on_and_refuses_sends_the_retries_to_the_partitions_new_shard(ray_session, refusal):
    """A leader cut off from the controller but not from its clients is deposed, and its process lives on,
    answering NOT_COORDINATOR to every call until it dies. Kafka's client marks the coordinator unknown on
    that answer and runs FindCoordinator again (``AbstractCoordinator.markCoordinatorUnknown``); so does this
    one: once the GCS names the partition's new shard, the retries go there. A leader Ray restarted in place
    (same actor) answers COORDINATOR_LOAD_IN_PROGRESS until it learns a spare took over: that asks too. The
    old shard is a stand-in that refuses; the client, the GCS and the lookups are the real ones."""
    import uuid

    import ray
    from raygroups.coordinator.config import CoordinatorConfig

    from raygroups.client.ray_client import RayGroupClient
    from raygroups.deployment.seam import _shard_actor_key, kv_put
    from tests.conditions import wait_for

    namespace = f"refused-{uuid.uuid4().hex[:8]}"
    shards = _stand_in_shards(namespace, refusing={"deposed-shard": refusal}, **{"deposed-shard": 0.0, "new-shard": 0.0})
    old, new = shards["deposed-shard"], shards["new-shard"]
    kv_put(_shard_actor_key(0), b"deposed-shard", namespace)
    client = RayGroupClient(namespace, 1, CoordinatorConfig(request_timeout_ms=60_000))
    try:
        answer = client.heartbeat(group_id="g", generation_id=1, member_id="m")
        wait_for(lambda: ray.get(old.called.remote(), timeout=30) >= 3, what="the deposed shard refusing retries")
        assert not answer.done()  # retried within the request timeout: the partition has no other shard yet
        kv_put(_shard_actor_key(0), b"new-shard", namespace)  # the controller moved the partition
        assert answer.result(30).error is Errors.NONE  # long before the request timeout's 60 s
        refused = ray.get(old.called.remote(), timeout=30)
        assert client.heartbeat(group_id="g", generation_id=1, member_id="m").result(30).error is Errors.NONE
        assert ray.get(new.called.remote(), timeout=30) == 2 and ray.get(old.called.remote(), timeout=30) == refused
    finally:
        client.close()
        for actor in shards.values():
            ray.kill(actor)


def test_a_held_call_its_caller_gave_up_on_still_goes_first_in_its_lane(ray_session):
    """Commits (and heartbeats) share a lane with one call in flight. When the shard holds that call and its
    caller gives up (cancels, as a caller's timeout does), the next request still waits for the held call to
    be answered: the shard may yet apply it, and one sent meanwhile could overtake it -- an abandoned commit
    applied after a newer one takes the committed offset back (the chaos checker's lost-acked-commit found
    that when the lane let go of such a call)."""
    import uuid

    import ray
    from raygroups.coordinator.config import CoordinatorConfig

    from raygroups.client.ray_client import RayGroupClient
    from raygroups.deployment.seam import _shard_actor_key, kv_put
    from tests.conditions import wait_for

    namespace = f"held-{uuid.uuid4().hex[:8]}"
    shard = _stand_in_shards(namespace, **{"slow-shard": 3.0})["slow-shard"]
    kv_put(_shard_actor_key(0), b"slow-shard", namespace)
    client = RayGroupClient(namespace, 1, CoordinatorConfig(request_timeout_ms=60_000))
    try:
        held = client.heartbeat(group_id="g", generation_id=1, member_id="m")
        wait_for(lambda: ray.get(shard.called.remote(), timeout=30) == 1, what="the held call")
        held.cancel()
        assert client.heartbeat(group_id="g", generation_id=1, member_id="m").result(30).error is Errors.NONE
        assert ray.get(shard.order.remote(), timeout=30) == [("start", 1), ("end", 1), ("start", 2), ("end", 2)]
    finally:
        client.close()
        ray.kill(shard)
