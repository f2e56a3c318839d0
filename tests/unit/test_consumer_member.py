"""The consumer protocol's member state machine against the in-process coordinator, with a manual clock:
members join, reconcile at their own pace (one never waits for another's barrier), are fenced and
rejoin with their member id, leave and close; no partition is ever owned by two of them."""

from __future__ import annotations

from raygroups.membership.consumer_member import ConsumerProtocolMember
from raygroups.membership.events import JoinComplete, PrepareJoin

from raygroups import Errors
from tests.unit.helpers import Ctx

G = "cg"
CONFIG = {"group.consumer.heartbeat.interval.ms": 500, "group.consumer.min.heartbeat.interval.ms": 100,
          "group.consumer.session.timeout.ms": 3_000, "group.consumer.min.session.timeout.ms": 1_000}


class World:
    def __init__(self, partitions=6):
        self.ctx = Ctx(config=CONFIG)
        self.coord = self.ctx.coord
        self.coord.create_topic("t", partitions)
        self.members: dict[str, ConsumerProtocolMember] = {}
        self.events: list[tuple[str, str, frozenset]] = []

    def add(self, name, instance_id=None):
        m = ConsumerProtocolMember(G, ["t"], name, group_instance_id=instance_id, rebalance_timeout_ms=10_000,
                                   now_ms=self.ctx.clock.now_ms())
        self.members[name] = m
        return m

    def send(self, m, request):
        response = self.coord.send(request).result(0)
        m.on_heartbeat_response(request, response, self.ctx.clock.now_ms())  # a leave's answer is ignored
        return response

    def step(self, names=None):
        """One round: each member heartbeats if due, then reconciles in its application thread."""
        now = self.ctx.clock.now_ms()
        for name in names or list(self.members):
            m = self.members[name]
            request = m.poll_background(now)
            if request is not None:
                self.send(m, request)
            while (action := m.poll_rebalance(now)) is not None:
                if isinstance(action, PrepareJoin):
                    for e in action.events:
                        self.events.append((name, e.method, e.partitions))
                    m.finish_join_prepare(action)
                else:
                    assert isinstance(action, JoinComplete)
                    m.finish_join(action)
                    self.events.append((name, "on_partitions_assigned", action.added))
            self.assert_one_owner()

    def assert_one_owner(self):
        seen = {}
        for name, m in self.members.items():
            for tp in m.assignment:
                assert tp not in seen, f"{tp} owned by {seen[tp]} and {name}"
                seen[tp] = name

    def run(self, rounds=10, advance_ms=100, names=None):
        for _ in range(rounds):
            self.step(names)
            self.ctx.clock.advance(advance_ms)

    def described(self):
        return self.coord.consumer_group_describe([G]).result(0)[0]


def test_members_join_and_split_without_a_barrier():
    w = World()
    a = w.add("a")
    w.run(3)
    assert len(a.assignment) == 6 and a.stable and a.member_epoch == 1
    b = w.add("b")
    w.run(2, names=["b"])  # only b heartbeats: it joins at the assignment epoch, with nothing yet (KIP-1263:
    assert b.member_epoch == 1 and b.assignment == frozenset()  # a target at most once a second)
    w.ctx.clock.advance(1_000)
    w.run(2, names=["b"])  # the interval has passed: b's heartbeat computes epoch 2's target; a has not
    assert b.member_epoch == 2 and b.assignment == frozenset() and len(a.assignment) == 6  # released yet
    w.run(6)  # a hears it must revoke, revokes, acknowledges; b takes them
    assert len(a.assignment) == 3 and len(b.assignment) == 3 and a.stable and b.stable
    assert w.described().group_state == "Stable"
    revoked = [e for e in w.events if e[0] == "a" and e[1] == "on_partitions_revoked"]
    assert len(revoked) == 1 and len(revoked[0][2]) == 3


def test_a_fenced_member_loses_its_partitions_and_rejoins_with_its_id():
    w = World()
    a = w.add("a")
    w.run(3)
    w.ctx.clock.advance(3_000)  # a goes silent past the session: fenced by the coordinator
    assert w.described().members == []
    w.send(a, a.poll_background(w.ctx.clock.now_ms()))  # UNKNOWN_MEMBER_ID: every partition is lost
    # No rejoin before the application thread has given them up (nothing it still believes it owns can be
    # committed at the epoch it would rejoin with).
    assert a.poll_background(w.ctx.clock.now_ms()) is None and len(a.assignment) == 6
    w.run(3)
    assert ("a", "on_partitions_lost", frozenset(("t", p) for p in range(6))) in w.events
    assert a.member_id == "a" and a.stable and len(a.assignment) == 6
    assert [m.member_id for m in w.described().members] == ["a"]


def test_commits_carry_the_member_epoch_and_a_stale_one_is_retried():
    w = World()
    a = w.add("a")
    w.run(3)
    request = a.commit_request({("t", 0): 5})
    assert request.generation_id == a.member_epoch == 1
    assert a.on_commit_response(request, w.coord.send(request).result(0), 0)
    w.add("b")
    w.run(12)
    assert a.member_epoch == 2
    stale = type(request)(G, {("t", 0): (6, "", -1)}, 1, "a")
    answer = w.coord.send(stale).result(0)
    assert answer.errors[("t", 0)] is Errors.STALE_MEMBER_EPOCH
    assert a.on_commit_response(stale, answer, 0) is False


def test_close_leaves_and_a_static_member_comes_back_to_its_assignment():
    w = World()
    a, b = w.add("a"), w.add("b", instance_id="i-b")
    w.run(8)
    held = b.assignment
    epoch = w.described().group_epoch
    leave = b.close()
    assert leave.member_epoch == -2
    w.send(b, leave)
    assert w.described().group_epoch == epoch  # a static leave moves nothing
    b2 = w.members["b2"] = ConsumerProtocolMember(G, ["t"], "b2", group_instance_id="i-b", now_ms=0)
    w.run(3, names=["b2"])
    assert b2.assignment == held and w.described().group_epoch == epoch
    w.send(a, a.close())
    assert [m.member_id for m in w.described().members] == ["b2"]


def test_a_poll_timeout_leaves_the_group():
    w = World()
    a = w.add("a")
    w.run(3)
    leave = a.on_poll(w.ctx.clock.now_ms() + 10_000)
    assert leave is not None and leave.member_epoch == -1
    w.send(a, leave)
    assert w.described().members == []


# --- raygroups.Consumer(group_protocol="consumer") on the in-process coordinator --------------------------
def test_consumers_with_the_consumer_protocol_split_commit_and_take_over():
    import itertools

    from raygroups.client.consumer import Consumer
    from raygroups.testing import InProcessCoordinator, ManualClock

    clock = ManualClock(0)
    ids = itertools.count(1)
    coord = InProcessCoordinator(num_partitions=1, clock=clock, config=CONFIG,
                                 member_id_generator=lambda prefix: f"{prefix}-{next(ids)}")
    coord.create_topic("t", 4)
    events: list = []

    class Listener:
        def __init__(self, name):
            self.name = name

        def on_partitions_revoked(self, partitions):
            events.append((self.name, "revoked", frozenset(partitions)))

        def on_partitions_assigned(self, partitions):
            events.append((self.name, "assigned", frozenset(partitions)))

        def on_partitions_lost(self, partitions):
            events.append((self.name, "lost", frozenset(partitions)))

    a = Consumer(coord, G, ["t"], group_protocol="consumer", clock=clock, listener=Listener("a"),
                 enable_auto_commit=False)
    b = Consumer(coord, G, ["t"], group_protocol="consumer", clock=clock, listener=Listener("b"),
                 enable_auto_commit=False)

    def rounds(n, consumers):
        for _ in range(n):
            for c in consumers:
                c.run_background_once_for_testing()
                c.poll(0)
            clock.advance(100)

    rounds(3, [a])
    assert a.assignment() == frozenset(("t", p) for p in range(4)) and a.state == "STABLE"
    rounds(20, [a, b])
    assert len(a.assignment()) == 2 and len(b.assignment()) == 2 and not (a.assignment() & b.assignment())
    assert ("a", "revoked", frozenset(("t", p) for p in range(4)) - a.assignment()) in events
    tp = sorted(b.assignment())[0]
    b.commit({tp: 7})
    assert b.committed([tp]) == {tp: 7}
    assert coord.consumer_group_describe([G]).result(0)[0].group_state == "Stable"
    b.close()
    rounds(20, [a])
    assert a.assignment() == frozenset(("t", p) for p in range(4))
    assert [m.member_id for m in coord.consumer_group_describe([G]).result(0)[0].members] == [a.member_id]
    a.close()
    assert coord.consumer_group_describe([G]).result(0)[0].group_state == "Empty"


def test_the_heartbeat_thread_leaves_when_the_application_stops_polling():
    w = World()
    a = w.add("a")
    w.run(3)
    leave = a.poll_background(w.ctx.clock.now_ms() + 10_000)
    assert leave is not None and leave.member_epoch == -1
    w.send(a, leave)
    assert w.described().members == []
    assert a.on_poll(w.ctx.clock.now_ms() + 10_000) is None  # it already left; polling again rejoins
    w.run(3)
    assert [m.member_id for m in w.described().members] == ["a"] and a.stable
