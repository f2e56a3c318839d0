"""A hypothesis state machine over KIP-848 consumer groups.

Random members (dynamic and static) join, heartbeat like a consumer (reporting what they own, revoking
what they are told to, or sometimes holding on), leave for good or temporarily, commit with their epoch
and go silent, while topics grow, the clock moves, appends fail and the partition is unloaded and
reloaded. After every step:

* replaying the log from scratch gives exactly the live durable state, derived indexes included;
* no partition is owned (assigned or pending revocation) by two members;
* a group's epoch never decreases while the group exists, the assignment epoch never passes it, and a
  member's epoch never decreases (but for its temporary leave, -2);
* a member's target covers only topics it subscribes to, and every subscribed partition has one target.
"""

from __future__ import annotations

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from raygroups.coordinator.shard_consumer import rebalance_key, session_key
from raygroups.coordinator.state import DurableState

from raygroups import Errors
from tests.unit.compaction_variants import CompactedVariantsRule
from tests.unit.helpers import Ctx

GROUPS = ("c1", "c2")
SESSION_MS = 3_000
CONFIG = {
    "group.consumer.session.timeout.ms": SESSION_MS,
    "group.consumer.min.session.timeout.ms": 1_000,
    "group.consumer.heartbeat.interval.ms": 500,
    "group.consumer.min.heartbeat.interval.ms": 100,
    "group.consumer.max.size": 4,
}
APPEND_ERRORS = (Errors.NOT_ENOUGH_REPLICAS, Errors.NOT_LEADER_OR_FOLLOWER, Errors.REQUEST_TIMED_OUT)


class Member:
    def __init__(self, name: str, group: str, instance_id: str | None, topics: tuple[str, ...]) -> None:
        self.name = name
        self.group = group
        self.instance_id = instance_id
        self.topics = topics
        self.member_id = ""
        self.epoch = 0
        self.owned: dict[str, list[int]] = {}
        self.joined = False


class ConsumerMachine(CompactedVariantsRule, RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ctx = Ctx(config=CONFIG)
        self.coord = self.ctx.coord
        self.coord.create_topic("a", 3)
        self.coord.create_topic("b", 2)
        self.load_epoch = 0
        self.members: list[Member] = []
        self.max_group_epoch: dict[str, int] = {}
        self.max_member_epoch: dict[tuple[str, str], int] = {}

    def _send(self, m: Member, **kw):
        r = self.coord.consumer_group_heartbeat(group_id=m.group, member_id=m.member_id, instance_id=m.instance_id,
                                                **kw).result(timeout=0)
        event(f"heartbeat answered {r.error.name}")
        return r

    @rule(group=st.sampled_from(GROUPS), static=st.booleans(), topics=st.sampled_from([("a",), ("a", "b"), ("b",)]))
    def new_member(self, group, static, topics):
        if len(self.members) < 8:
            n = len(self.members)
            self.members.append(Member(f"m{n}", group, f"i{n % 3}" if static else None, topics))

    @precondition(lambda self: self.members)
    @rule(i=st.integers(0, 7), honest=st.booleans())
    def heartbeat(self, i, honest):
        m = self.members[i % len(self.members)]
        if not m.joined:
            r = self._send(m, member_epoch=0, rebalance_timeout_ms=2_000, subscribed_topic_names=list(m.topics),
                           topic_partitions={})
            if r.error is Errors.NONE:
                m.member_id, m.epoch, m.joined = r.member_id, r.member_epoch, True
                m.owned = r.assignment or {}
            return
        r = self._send(m, member_epoch=m.epoch, topic_partitions=dict(m.owned))
        if r.error is Errors.NONE:
            m.epoch = r.member_epoch
            if r.assignment is not None:
                # An honest member gives up what it lost and takes what it got; a slow one keeps what it had
                # and only adds (it revokes later, or is fenced by its rebalance timeout).
                if honest:
                    m.owned = r.assignment
                else:
                    merged = {t: sorted(set(m.owned.get(t, [])) | set(ps)) for t, ps in r.assignment.items()}
                    m.owned = {**m.owned, **merged}
        elif r.error in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_MEMBER_EPOCH, Errors.FENCED_INSTANCE_ID):
            m.joined, m.member_id, m.epoch, m.owned = False, "", 0, {}

    @precondition(lambda self: self.members)
    @rule(i=st.integers(0, 7), temporary=st.booleans())
    def leave(self, i, temporary):
        m = self.members[i % len(self.members)]
        if not m.joined:
            return
        epoch = -2 if temporary and m.instance_id is not None else -1
        self._send(m, member_epoch=epoch)
        m.joined, m.epoch, m.owned = False, 0, {}
        if epoch == -1:
            m.member_id = ""

    @precondition(lambda self: self.members)
    @rule(i=st.integers(0, 7), offset=st.integers(0, 100))
    def commit(self, i, offset):
        m = self.members[i % len(self.members)]
        r = self.coord.commit_offsets(group_id=m.group, offsets={("a", 0): (offset, "")}, generation_id=m.epoch,
                                      member_id=m.member_id).result(timeout=0)
        event(f"commit answered {r.errors[('a', 0)].name}")

    @rule(topic=st.sampled_from(["a", "b"]), more=st.integers(1, 2))
    def grow_topic(self, topic, more):
        self.coord.create_topic(topic, min(self.coord.topics()[topic] + more, 6))

    @rule(ms=st.sampled_from([10, 600, 2_001, 3_001]))
    def advance(self, ms):
        self.ctx.clock.advance(ms)

    @rule(error=st.sampled_from(APPEND_ERRORS))
    def fail_next_append(self, error):
        self.coord.fail_next_append_for_testing(0, error)

    @rule()
    def reload(self):
        self.coord.unload(0, self.load_epoch)
        self.load_epoch += 1
        assert self.coord.load(0, self.load_epoch) is not None

    @rule(group=st.sampled_from(GROUPS))
    def delete_group(self, group):
        if self.coord.delete_groups([group]).result(timeout=0)[group] is Errors.NONE:
            self.max_group_epoch.pop(group, None)
            self.max_member_epoch = {k: v for k, v in self.max_member_epoch.items() if k[0] != group}

    # ------------------------------------------------------------------------------------------
    @invariant()
    def no_handler_crashed(self):
        assert self.coord._runtime.last_exception is None, repr(self.coord._runtime.last_exception)

    @invariant()
    def replay_equals_live_state_and_its_indexes(self):
        live = self.coord.durable_state_for_testing(0)
        replayed = self.coord.replayed_state_for_testing(0)
        assert replayed == live
        for group_id, group in live.consumer_groups.items():
            fresh = replayed.consumer_groups[group_id]
            for index in ("owners", "topic_subscribers", "regex_subscribers", "static_members"):
                assert getattr(group, index) == getattr(fresh, index), index
        assert isinstance(live, DurableState)

    @invariant()
    def one_owner_per_partition(self):
        for group in self.coord.durable_state_for_testing(0).consumer_groups.values():
            seen: dict = {}
            for member_id, current in group.current.items():
                for topic, ps in current.assigned + current.pending_revocation:
                    for p in ps:
                        assert (topic, p) not in seen, f"{topic}:{p} owned by {seen[(topic, p)]} and {member_id}"
                        seen[(topic, p)] = member_id

    @invariant()
    def every_member_is_guarded_by_its_timers(self):
        """A member nobody hears from is fenced in the end: its session timer is armed, and so is its
        rebalance timer while it must revoke (a failed append must not leave a member unguarded)."""
        shard = self.coord._shard(0)
        for group in shard.state.consumer_groups.values():
            for member_id in group.members:
                assert shard.timers.is_scheduled(session_key(group.group_id, member_id)), member_id
                if group.member_assignment(member_id).state == "unrevoked_partitions":
                    assert shard.timers.is_scheduled(rebalance_key(group.group_id, member_id)), member_id

    @invariant()
    def epochs_never_decrease(self):
        groups = self.coord.durable_state_for_testing(0).consumer_groups
        for group_id in GROUPS:
            group = groups.get(group_id)
            if group is None:
                continue
            assert group.group_epoch >= self.max_group_epoch.get(group_id, 0)
            assert group.assignment_epoch <= group.group_epoch
            self.max_group_epoch[group_id] = group.group_epoch
            for member_id, current in group.current.items():
                key = (group_id, member_id)
                if current.member_epoch == -2:
                    continue
                assert current.member_epoch >= self.max_member_epoch.get(key, 0), key
                self.max_member_epoch[key] = current.member_epoch

    @invariant()
    def targets_follow_subscriptions(self):
        topics = self.coord.topics()
        for group in self.coord.durable_state_for_testing(0).consumer_groups.values():
            if group.assignment_epoch != group.group_epoch or not group.members:
                continue
            targeted: dict = {}
            for member_id, target in group.targets.items():
                if member_id not in group.members:
                    continue
                subscribed = set(group.members[member_id].subscribed_topic_names)
                for topic, ps in target:
                    assert topic in subscribed, (member_id, topic)
                    for p in ps:
                        assert (topic, p) not in targeted
                        targeted[(topic, p)] = member_id
            metadata = dict(group.subscription_metadata)
            wanted = {(t, p) for t, n in metadata.items() for p in range(n)}
            if metadata == {t: topics[t] for t in metadata}:
                assert set(targeted) == wanted

    def teardown(self):
        self.coord.close()


ConsumerMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TestConsumerMachine = ConsumerMachine.TestCase
