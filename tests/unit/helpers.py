"""A small test context in the style of Kafka's GroupMetadataManagerTestContext.

``ctx = Ctx(config={...})`` builds an ``InProcessCoordinator`` on one partition with a ``ManualClock``
and deterministic member ids (``<client or instance id>-<n>``); helpers issue requests with sensible
defaults and return futures or results.
"""

from __future__ import annotations

import itertools

from raygroups import Errors
from raygroups.testing import InProcessCoordinator, ManualClock

GROUP = "group-id"
DEFAULT_CONFIG = {
    "group.min.session.timeout.ms": 10,
    "group.max.session.timeout.ms": 1_800_000,
    "group.initial.rebalance.delay.ms": 0,
}


class Ctx:
    def __init__(self, config=None, num_partitions=1, log_dir=None, now_ms=0):
        cfg = dict(DEFAULT_CONFIG)
        cfg.update(config or {})
        self.clock = ManualClock(now_ms)
        counter = itertools.count(1)
        self.coord = InProcessCoordinator(
            num_partitions=num_partitions,
            clock=self.clock,
            config=cfg,
            log_dir=log_dir,
            member_id_generator=lambda prefix: f"{prefix}-{next(counter)}",
        )

    # --- requests ---------------------------------------------------------------------------
    def join(self, member_id="", group_id=GROUP, protocols=(("range", b"meta"),), protocol_type="consumer",
             session_timeout_ms=10_000, rebalance_timeout_ms=10_000, group_instance_id=None, client_id="client",
             require_known_member_id=True):
        return self.coord.join_group(
            group_id=group_id, member_id=member_id, protocol_type=protocol_type, protocols=list(protocols),
            session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms,
            group_instance_id=group_instance_id, client_id=client_id,
            require_known_member_id=require_known_member_id,
        )

    def join_new_dynamic(self, **kw):
        """KIP-394 two-step join: returns the (parked or done) future of the second JoinGroup."""
        first = self.join(**kw).result(timeout=0)
        assert first.error is Errors.MEMBER_ID_REQUIRED, first
        kw["member_id"] = first.member_id
        return self.join(**kw)

    def sync(self, member_id, generation_id, assignments=None, group_id=GROUP, group_instance_id=None,
             protocol_type=None, protocol_name=None):
        return self.coord.sync_group(
            group_id=group_id, generation_id=generation_id, member_id=member_id, assignments=assignments or {},
            group_instance_id=group_instance_id, protocol_type=protocol_type, protocol_name=protocol_name,
        )

    def heartbeat(self, member_id, generation_id, group_id=GROUP, group_instance_id=None):
        return self.coord.heartbeat(
            group_id=group_id, generation_id=generation_id, member_id=member_id, group_instance_id=group_instance_id,
        ).result(timeout=0)

    def leave(self, members, group_id=GROUP):
        return self.coord.leave_group(group_id=group_id, members=members).result(timeout=0)

    def commit(self, offsets, group_id=GROUP, generation_id=-1, member_id="", group_instance_id=None,
               retention_time_ms=-1):
        return self.coord.commit_offsets(
            group_id=group_id, offsets=offsets, generation_id=generation_id, member_id=member_id,
            group_instance_id=group_instance_id, retention_time_ms=retention_time_ms,
        ).result(timeout=0)

    def fetch(self, partitions=None, group_id=GROUP):
        return self.coord.fetch_offsets(group_id=group_id, partitions=partitions).result(timeout=0)

    # --- composite steps -----------------------------------------------------------------------
    def stable_group(self, n=1, group_id=GROUP, **join_kw):
        """n dynamic members join and sync; returns (generation_id, [member ids], leader id)."""
        futures = [self.join_new_dynamic(group_id=group_id, **join_kw) for _ in range(n)]
        # The initial delay (KIP-134) re-arms while new members arrive (Kafka's
        # tryCompleteInitialRebalanceElseSchedule): advance until everyone is answered.
        for _ in range(n + 2):
            if all(f.done() for f in futures):
                break
            self.clock.advance(self.coord.config.group_initial_rebalance_delay_ms + 1)
        responses = [f.result(timeout=0) for f in futures]
        assert all(r.error is Errors.NONE for r in responses), responses
        gen = responses[0].generation_id
        leader = responses[0].leader
        members = [r.member_id for r in responses]
        syncs = [self.sync(m, gen, group_id=group_id) for m in members if m != leader]
        lead = self.sync(leader, gen, {m: m.encode() for m in members}, group_id=group_id).result(timeout=0)
        assert lead.error is Errors.NONE, lead
        assert all(s.result(timeout=0).error is Errors.NONE for s in syncs)
        return gen, members, leader

    def state(self, group_id=GROUP):
        return self.coord.group_state_for_testing(group_id)

    def records(self, partition=0):
        return self.coord.log_records(partition)

    def assert_replay_matches(self, partition=0):
        assert self.coord.replayed_state_for_testing(partition) == self.coord.durable_state_for_testing(partition)


# --- added for the offsets / admin / expiration / load tests ---------------------------------------
def consumer_protocols(*topics, name="range"):
    """JoinGroup protocols of a ``consumer`` member subscribed to ``topics`` (Kafka's binary Subscription),
    so that the coordinator knows the group's subscribed topics."""
    from raygroups.coordinator.consumer_protocol import Subscription, encode_subscription

    return ((name, encode_subscription(Subscription(topics=tuple(topics)))),)


def offset_record(group, topic, partition, offset, commit_ms, leader_epoch=-1, metadata="", expire_ms=None):
    """The (key, value) pair an OffsetCommit writes."""
    from raygroups.coordinator.records import new_offset_commit_record

    return new_offset_commit_record(group, topic, partition, offset, leader_epoch, metadata, commit_ms, expire_ms)


def offset_tombstone(group, topic, partition):
    from raygroups.coordinator.records import new_offset_commit_tombstone_record

    return new_offset_commit_tombstone_record(group, topic, partition)


def group_tombstone(group):
    from raygroups.coordinator.records import new_group_metadata_tombstone_record

    return new_group_metadata_tombstone_record(group)


# --- added for the group-protocol scenario tests (join/sync/heartbeat/leave/rebalance timing) ------
def group_values(ctx, group_id=GROUP, partition=0):
    """The GroupMetadata values written for ``group_id``, in log order (``None`` = tombstone)."""
    from raygroups.coordinator.records import GroupMetadataKey

    return [v for k, v in ctx.records(partition) if type(k) is GroupMetadataKey and k.group == group_id]


def complete_initial_join(ctx, futures, max_rounds=10):
    """Advance the clock by (initial delay + 1) until every parked JoinGroup in ``futures`` is answered."""
    for _ in range(max_rounds):
        if all(f.done() for f in futures):
            break
        ctx.clock.advance(ctx.coord.config.group_initial_rebalance_delay_ms + 1)
    return [f.result(timeout=0) for f in futures]


def stable_static_group(ctx, instance_ids, group_id=GROUP, **join_kw):
    """Static members (no MEMBER_ID_REQUIRED round trip) join and sync; each gets ``member_id.encode()`` as
    assignment. Returns (generation_id, {instance_id: member_id}, leader id)."""
    futures = [ctx.join(group_id=group_id, group_instance_id=i, **join_kw) for i in instance_ids]
    responses = complete_initial_join(ctx, futures)
    assert all(r.error is Errors.NONE for r in responses), responses
    gen, leader = responses[0].generation_id, responses[0].leader
    ids = {i: r.member_id for i, r in zip(instance_ids, responses, strict=True)}
    syncs = [ctx.sync(m, gen, group_id=group_id, group_instance_id=i) for i, m in ids.items() if m != leader]
    leader_instance = next(i for i, m in ids.items() if m == leader)
    lead = ctx.sync(leader, gen, {m: m.encode() for m in ids.values()}, group_id=group_id,
                    group_instance_id=leader_instance).result(timeout=0)
    assert lead.error is Errors.NONE, lead
    assert all(s.result(timeout=0).error is Errors.NONE for s in syncs)
    return gen, ids, leader


def replay_matches_after_test(monkeypatch):
    """Generator for an autouse fixture: records every ``Ctx`` a test builds and, after the test, checks
    that replaying each active partition-0 log gives exactly its live durable state."""
    created = []
    original_init = Ctx.__init__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        created.append(self)

    monkeypatch.setattr(Ctx, "__init__", init)
    yield created
    for ctx in created:
        if ctx.coord.partition_state_for_testing(0) == "ACTIVE":
            ctx.assert_replay_matches()
