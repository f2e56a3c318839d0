"""A hypothesis state machine over the whole classic protocol.

Random clients (dynamic and static) join, sync, heartbeat, commit, leave and disappear while the clock
moves, appends fail and the partition is unloaded and reloaded. After every step:

* replaying the log from scratch gives exactly the live durable state;
* a Stable group's live membership equals its last GroupMetadata record;
* persisted generations of a group never decrease (until the group is deleted), and live
  generations never decrease while the shard lives;
* in one generation every topic-partition is delivered to at most one owner;
* a fetched offset is the last acknowledged commit, or -1 only after a tombstone for it.
"""

from __future__ import annotations

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from raygroups.coordinator.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from raygroups.coordinator.group import GroupState
from raygroups.coordinator.records import GroupMetadataKey, OffsetCommitKey

from raygroups import Errors
from tests.unit.compaction_variants import CompactedVariantsRule
from tests.unit.helpers import Ctx

GROUPS = ("g1", "g2")
TOPICS = ("orders", "payments")
PARTITIONS = 3
SESSION_MS = 3_000
REBALANCE_MS = 5_000
APPEND_ERRORS = (
    Errors.NOT_ENOUGH_REPLICAS,
    Errors.NOT_LEADER_OR_FOLLOWER,
    Errors.REQUEST_TIMED_OUT,
    Errors.MESSAGE_TOO_LARGE,
    Errors.KAFKA_STORAGE_ERROR,
)


class Client:
    def __init__(self, name: str, group: str, instance_id: str | None) -> None:
        self.name = name
        self.group = group
        self.instance_id = instance_id
        self.member_id = ""
        self.generation = -1
        self.leader = False
        self.members: list = []
        self.join_future = None
        self.sync_future = None
        self.sync_generation = -1


class ProtocolMachine(CompactedVariantsRule, RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ctx = Ctx(config={
            "group.initial.rebalance.delay.ms": 100,
            "group.max.size": 4,
            "offsets.retention.minutes": 1,
            "offsets.retention.check.interval.ms": 20_000,
        })
        self.coord = self.ctx.coord
        self.epoch = 0
        self.clients: list[Client] = []
        self.acked: dict[tuple[str, str, int], int] = {}
        self.owners: dict[tuple[str, int], dict[tuple[str, int], str]] = {}
        self.max_persisted_generation: dict[str, int] = {}
        self.max_live_generation: dict[str, int] = {}
        self.live_groups: dict = {}

    # ------------------------------------------------------------------------------------------
    def _subscription(self) -> bytes:
        return encode_subscription(Subscription(topics=TOPICS))

    def _poll(self) -> None:
        for c in self.clients:
            if c.join_future is not None and c.join_future.done():
                r = c.join_future.result()
                c.join_future = None
                event(f"join answered {r.error.name}")
                if r.error is Errors.NONE:
                    c.member_id, c.generation = r.member_id, r.generation_id
                    c.leader = r.leader == r.member_id
                    c.members = [m.member_id for m in r.members]
                elif r.error is Errors.MEMBER_ID_REQUIRED:
                    c.member_id = r.member_id
                elif r.error in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID, Errors.GROUP_MAX_SIZE_REACHED):
                    c.member_id, c.generation = "", -1
            if c.sync_future is not None and c.sync_future.done():
                r = c.sync_future.result()
                c.sync_future = None
                event(f"sync answered {r.error.name}")
                if r.error is Errors.NONE:
                    self._record_assignment(c, c.sync_generation, r.assignment)
                elif r.error in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID):
                    c.member_id, c.generation = "", -1

    def _record_assignment(self, c: Client, generation: int, data: bytes) -> None:
        owner = c.instance_id or c.member_id
        owned = self.owners.setdefault((c.group, generation), {})
        for tp in decode_assignment(data).partitions:
            previous = owned.setdefault(tp, owner)
            assert previous == owner, f"{tp} owned by {previous} and {owner} in {c.group} generation {generation}"

    # ------------------------------------------------------------------------------------------
    @precondition(lambda self: len(self.clients) < 6)
    @rule(group=st.sampled_from(GROUPS), static=st.booleans())
    def new_client(self, group, static):
        name = f"c{len(self.clients)}"
        self.clients.append(Client(name, group, f"inst-{name}" if static else None))

    @precondition(lambda self: self.clients)
    @rule(i=st.integers(0, 5))
    def join(self, i):
        c = self.clients[i % len(self.clients)]
        if c.join_future is not None:
            return
        c.join_future = self.ctx.join(
            member_id=c.member_id, group_id=c.group, protocols=[("range", self._subscription())],
            session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS, group_instance_id=c.instance_id,
            client_id=c.name,
        )
        self._poll()

    @precondition(lambda self: self.clients)
    @rule(i=st.integers(0, 5))
    def sync(self, i):
        c = self.clients[i % len(self.clients)]
        if c.sync_future is not None or c.generation < 0 or not c.member_id:
            return
        assignments = {}
        if c.leader and c.members:
            tps = [(t, p) for t in TOPICS for p in range(PARTITIONS)]
            for k, member in enumerate(c.members):
                mine = tuple(tps[k :: len(c.members)])
                assignments[member] = encode_assignment(Assignment(partitions=mine))
        c.sync_generation = c.generation
        c.sync_future = self.ctx.sync(c.member_id, c.generation, assignments, group_id=c.group,
                                      group_instance_id=c.instance_id)
        self._poll()

    def _act_like_a_consumer(self, i):
        """What a real client does next: join (twice for KIP-394), sync after a join, else heartbeat."""
        c = self.clients[i % len(self.clients)]
        self._poll()
        if c.join_future is not None or c.sync_future is not None:
            return
        if c.generation < 0:
            self.join(i)
            if c.join_future is None and c.member_id and c.generation < 0 and c.instance_id is None:
                self.join(i)  # the second half of the KIP-394 handshake
        elif c.sync_generation != c.generation:
            self.sync(i)
        else:
            self.heartbeat(i)

    @precondition(lambda self: self.clients)
    @rule(i=st.integers(0, 5))
    def consumer_step(self, i):
        self._act_like_a_consumer(i)

    @precondition(lambda self: self.clients)
    @rule(i=st.integers(0, 5))
    def another_consumer_step(self, i):
        self._act_like_a_consumer(i)

    @precondition(lambda self: self.clients)
    @rule()
    def all_consumers_step(self):
        for i in range(len(self.clients)):
            self._act_like_a_consumer(i)

    @precondition(lambda self: self.clients)
    @rule(i=st.integers(0, 5))
    def heartbeat(self, i):
        c = self.clients[i % len(self.clients)]
        if c.member_id:
            r = self.ctx.heartbeat(c.member_id, c.generation, group_id=c.group, group_instance_id=c.instance_id)
            if r.error in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID):
                c.member_id, c.generation = "", -1
            elif r.error in (Errors.ILLEGAL_GENERATION, Errors.REBALANCE_IN_PROGRESS):
                c.generation = -1  # rejoin keeping the member id

    @precondition(lambda self: self.clients)
    @rule(i=st.integers(0, 5), topic=st.sampled_from(TOPICS), partition=st.integers(0, PARTITIONS - 1),
          offset=st.integers(0, 1_000), simple=st.booleans())
    def commit(self, i, topic, partition, offset, simple):
        c = self.clients[i % len(self.clients)]
        group = "simple" if simple else c.group
        kw = {} if simple else {"generation_id": c.generation, "member_id": c.member_id,
                                "group_instance_id": c.instance_id}
        r = self.ctx.commit({(topic, partition): (offset, "m")}, group_id=group, **kw)
        event(f"commit answered {r.errors[(topic, partition)].name}")
        if r.errors[(topic, partition)] is Errors.NONE:
            self.acked[(group, topic, partition)] = offset

    @precondition(lambda self: self.clients)
    @rule(i=st.integers(0, 5))
    def leave(self, i):
        c = self.clients[i % len(self.clients)]
        if c.member_id:
            self.ctx.leave([(c.member_id, c.instance_id)], group_id=c.group)
            c.member_id, c.generation = "", -1
        self._poll()

    @rule(ms=st.sampled_from([1, 50, 101, 1_000, 3_001, 5_001, 20_001, 60_001]))
    def advance(self, ms):
        self.ctx.clock.advance(ms)
        self._poll()

    @rule(error=st.sampled_from(APPEND_ERRORS))
    def fail_next_append(self, error):
        self.coord.fail_next_append_for_testing(0, error)

    @rule()
    def reload(self):
        self.coord.unload(0, self.epoch)
        self.epoch += 1
        assert self.coord.load(0, self.epoch) is not None
        # The new shard starts from the log: live generations are those persisted.
        self.max_live_generation.clear()
        self._poll()

    @rule(group=st.sampled_from(GROUPS + ("simple",)))
    def delete_group(self, group):
        result = self.coord.delete_groups([group]).result(timeout=0)
        if result[group] is Errors.NONE:
            for key in [k for k in self.acked if k[0] == group]:
                del self.acked[key]
            self.max_persisted_generation.pop(group, None)
            self.owners = {k: v for k, v in self.owners.items() if k[0] != group}

    # ------------------------------------------------------------------------------------------
    @invariant()
    def no_handler_crashed(self):
        assert self.coord._runtime.last_exception is None, repr(self.coord._runtime.last_exception)

    @invariant()
    def pending_member_count_is_exact(self):
        count, recount = self.coord.pending_member_count_for_testing(0)
        assert count == recount

    @invariant()
    def replay_equals_live_state(self):
        self.ctx.assert_replay_matches()

    @invariant()
    def stable_groups_match_their_record(self):
        state = self.coord.durable_state_for_testing(0)
        for group_id in GROUPS:
            group = self.coord.group_for_testing(group_id)
            if group is None or not group.is_in(GroupState.STABLE):
                continue
            value = state.groups[group_id]
            assert value is not None
            assert value.generation == group.generation_id
            assert value.leader == group.leader_id
            assert value.protocol == group.protocol_name
            assert [(m.member_id, m.group_instance_id, m.assignment) for m in value.members] == [
                (m.member_id, m.group_instance_id, m.assignment) for m in group.members.values()
            ]

    @invariant()
    def generations_never_decrease(self):
        state = self.coord.durable_state_for_testing(0)
        for group_id in GROUPS:
            value = state.groups.get(group_id)
            if group_id not in state.groups:
                # Deleted (DeleteGroups or expiration): a new group with this id starts again at 0.
                self.max_persisted_generation.pop(group_id, None)
                self.owners = {k: v for k, v in self.owners.items() if k[0] != group_id}
            elif value is not None:
                assert value.generation >= self.max_persisted_generation.get(group_id, 0)
                self.max_persisted_generation[group_id] = value.generation
            group = self.coord.group_for_testing(group_id)
            if group is not self.live_groups.get(group_id):
                # A new group object (after a deletion or a reload) starts from what was persisted.
                self.max_live_generation.pop(group_id, None)
                self.live_groups[group_id] = group
            if group is not None:
                assert group.generation_id >= self.max_live_generation.get(group_id, 0)
                self.max_live_generation[group_id] = group.generation_id

    @invariant()
    def offsets_are_the_last_acknowledged_commits(self):
        records = self.coord.log_records(0)
        last: dict = {}
        for key, value in records:
            if isinstance(key, OffsetCommitKey):
                last[(key.group, key.topic, key.partition)] = value
            elif isinstance(key, GroupMetadataKey) and value is None:
                for k in [k for k in last if k[0] == key.group]:
                    last[k] = None
        for (group, topic, partition), offset in list(self.acked.items()):
            fetched = self.ctx.fetch([(topic, partition)], group_id=group).offsets[(topic, partition)]
            if fetched.offset == -1:
                assert last.get((group, topic, partition), "absent") is None, (group, topic, partition)
                del self.acked[(group, topic, partition)]
            else:
                assert fetched.offset == offset, (group, topic, partition, fetched, offset)

    def teardown(self):
        self.coord.close()


ProtocolMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestProtocolMachine = ProtocolMachine.TestCase
