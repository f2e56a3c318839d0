"""raygroups.Consumer against the in-process coordinator, deterministically.

Consumers share the coordinator's ManualClock, so they start no heartbeat thread: every step runs in
``poll()`` (or ``run_background_once_for_testing()``, standing in for the heartbeat thread) while the test
advances the clock. Nothing here waits for real time."""

from __future__ import annotations

import itertools
import time

import pytest

from raygroups.client.consumer import (
    CommitFailedError,
    Consumer,
    ConsumerRebalanceListener,
    FencedInstanceIdError,
    GroupMaxSizeReachedError,
)
from raygroups.testing import InProcessCoordinator, ManualClock

GROUP = "g"
TOPIC = "t"
PARTITIONS = 6
CONFIG = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 10}
ALL = frozenset((TOPIC, p) for p in range(PARTITIONS))


class Recorder(ConsumerRebalanceListener):
    """Records every callback; optionally commits positions inside on_partitions_revoked."""

    def __init__(self, commit_on_revoke=False):
        self.events: list[tuple[str, frozenset]] = []
        self.consumer: Consumer | None = None
        self.commit_on_revoke = commit_on_revoke

    def on_partitions_revoked(self, partitions):
        self.events.append(("revoked", frozenset(partitions)))
        if self.commit_on_revoke and partitions:
            self.consumer.commit({tp: self.consumer.position(tp) for tp in partitions})

    def on_partitions_assigned(self, partitions):
        self.events.append(("assigned", frozenset(partitions)))

    def on_partitions_lost(self, partitions):
        self.events.append(("lost", frozenset(partitions)))


class Env:
    def __init__(self, config=None):
        self.clock = ManualClock(0)
        ids = itertools.count(1)
        self.coord = InProcessCoordinator(num_partitions=1, clock=self.clock, config={**CONFIG, **(config or {})},
                                          member_id_generator=lambda prefix: f"{prefix}-{next(ids)}")
        self.coord.create_topic(TOPIC, PARTITIONS)
        self.listeners: dict[Consumer, Recorder] = {}

    def consumer(self, name, listener=None, **kw) -> Consumer:
        kw.setdefault("session_timeout_ms", 10_000)
        kw.setdefault("heartbeat_interval_ms", 1_000)
        listener = listener or Recorder()
        c = Consumer(self.coord, GROUP, [TOPIC], client_id=name, clock=self.clock, listener=listener, **kw)
        listener.consumer = c
        self.listeners[c] = listener
        return c

    def events(self, consumer) -> list[tuple[str, frozenset]]:
        return self.listeners[consumer].events

    def drive(self, consumers, until, max_steps=400, step_ms=100, each_step=None):
        for _ in range(max_steps):
            for c in consumers:
                c.poll(0)
            if each_step is not None:
                each_step()
            if until():
                return
            self.clock.advance(step_ms)
        raise AssertionError(f"not reached: {[(c.member_id, c.state, c.generation_id, sorted(c.assignment())) for c in consumers]}")

    def group(self):
        return self.coord.group_for_testing(GROUP)


def settled(consumers, partitions=ALL):
    """Every consumer stable in the coordinator's current generation, partitions split exactly."""
    def check():
        gens = {c.generation_id for c in consumers}
        owned = [c.assignment() for c in consumers]
        return (all(c.state == "STABLE" for c in consumers) and len(gens) == 1
                and frozenset().union(*owned) == partitions and sum(map(len, owned)) == len(partitions))
    return check


def test_three_consumers_form_a_group_and_split_the_partitions():
    env = Env()
    cs = [env.consumer(f"c{i}") for i in range(3)]
    env.drive(cs, settled(cs))
    assert [len(c.assignment()) for c in cs] == [2, 2, 2]
    assert sum(c.is_leader for c in cs) == 1
    assert env.group().generation_id == cs[0].generation_id
    assert env.coord.group_state_for_testing(GROUP) == "Stable"
    for c in cs:
        assert env.events(c)[-1] == ("assigned", c.assignment())
    # positions: committed offset, else 0; commit() commits positions; committed() reads them back
    c0 = cs[0]
    tp = min(c0.assignment())
    assert c0.position(tp) == 0
    c0.seek(tp, 42)
    c0.commit()
    assert cs[1].committed([tp]) == {tp: 42}
    with pytest.raises(ValueError, match="not assigned"):
        c0.seek(min(cs[1].assignment()), 1)


def test_the_leader_rejoins_when_a_subscribed_topic_grows_after_metadata_max_age():
    # Kafka's ConsumerCoordinator: the leader's assignment snapshot no longer matches the metadata it reads
    # every metadata.max.age.ms, so it rejoins and the new partitions are assigned.
    env = Env()
    cs = [env.consumer(f"c{i}", metadata_max_age_ms=30_000) for i in range(3)]
    env.drive(cs, settled(cs))
    generation = cs[0].generation_id
    env.coord.create_topic(TOPIC, 9)
    for _ in range(29):  # heartbeating, short of metadata.max.age.ms since the assignment
        env.clock.advance(1_000)
        for c in cs:
            c.poll(0)
    assert cs[0].generation_id == generation and env.coord.group_state_for_testing(GROUP) == "Stable"
    env.clock.advance(1_000)
    grown = frozenset((TOPIC, p) for p in range(9))
    env.drive(cs, settled(cs, grown))
    assert [len(c.assignment()) for c in cs] == [3, 3, 3] and cs[0].generation_id > generation
    # Metadata that did not change leads to nothing.
    generation = cs[0].generation_id
    env.drive(cs, lambda: False if env.clock.now_ms() < 200_000 else settled(cs, grown)(), max_steps=2_100)
    assert cs[0].generation_id == generation


def test_auto_commit_commits_changed_positions_during_poll():
    env = Env()
    c = env.consumer("c", auto_commit_interval_ms=1_000)
    env.drive([c], settled([c]))
    c.seek((TOPIC, 3), 17)
    c.poll(0)
    assert c.committed([(TOPIC, 3)]) == {(TOPIC, 3): None}  # not due yet
    env.clock.advance(1_000)
    c.poll(0)
    assert c.committed([(TOPIC, 3)]) == {(TOPIC, 3): 17}


def test_closing_a_consumer_moves_its_partitions_to_the_others():
    env = Env()
    cs = [env.consumer(f"c{i}") for i in range(3)]
    env.drive(cs, settled(cs))
    gen = cs[0].generation_id
    leaving = cs[1]
    owned = leaving.assignment()
    leaving.close()
    assert env.events(leaving)[-1] == ("revoked", owned)
    assert len(env.group().members) == 2  # LeaveGroup: no need to wait for the session timeout
    rest = [cs[0], cs[2]]
    env.drive(rest, settled(rest))
    assert [len(c.assignment()) for c in rest] == [3, 3] and rest[0].generation_id == gen + 1
    # eager: each survivor revoked everything, then got the full new assignment
    for c in rest:
        assert [kind for kind, _ in env.events(c)[-2:]] == ["revoked", "assigned"]
        assert env.events(c)[-1] == ("assigned", c.assignment())
    leaving.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        leaving.poll(0)


@pytest.mark.parametrize("how", ["listener commits on revoke", "auto-commit before revocation"])
def test_positions_are_committed_before_revocation_and_handed_over(how):
    env = Env()
    if how == "listener commits on revoke":
        c0 = env.consumer("c0", listener=Recorder(commit_on_revoke=True), enable_auto_commit=False)
    else:
        c0 = env.consumer("c0", enable_auto_commit=True, auto_commit_interval_ms=1_000_000)
    env.drive([c0], settled([c0]))
    for tp in sorted(c0.assignment()):
        c0.seek(tp, 100 + tp[1])
    c1 = env.consumer("c1", enable_auto_commit=False)
    env.drive([c0, c1], settled([c0, c1]))
    moved = c1.assignment()
    assert moved and {tp: c1.position(tp) for tp in moved} == {tp: 100 + tp[1] for tp in moved}


def test_commit_inside_on_partitions_revoked_works_during_close():
    env = Env()
    c = env.consumer("c", listener=Recorder(commit_on_revoke=True), enable_auto_commit=False)
    env.drive([c], settled([c]))
    c.seek((TOPIC, 2), 33)
    c.close()
    probe = env.consumer("probe")
    assert probe.committed([(TOPIC, 2), (TOPIC, 3)]) == {(TOPIC, 2): 33, (TOPIC, 3): 0}


def test_coordinator_failover_is_ridden_out_without_a_rebalance():
    env = Env()
    cs = [env.consumer(f"c{i}") for i in range(2)]
    env.drive(cs, settled(cs))
    gen, before = cs[0].generation_id, [c.assignment() for c in cs]
    env.coord.unload(0, None)  # the shard goes away: NOT_COORDINATOR
    for _ in range(20):
        env.clock.advance(100)
        for c in cs:
            c.poll(0)
    assert any(c._member.coordinator_unknown for c in cs)
    env.coord.load(0, 1)  # back (replayed from its log), within the session timeout
    for _ in range(150):  # 15 s, longer than the session timeout: heartbeats must have resumed
        env.clock.advance(100)
        for c in cs:
            c.poll(0)
    assert settled(cs)() and all(c._member.rediscoveries >= 1 for c in cs)
    assert [c.assignment() for c in cs] == before and env.group().generation_id == gen
    assert all(c.generation_id == gen for c in cs)


@pytest.mark.parametrize("restarting", ["a", "b"])
def test_static_member_restart_within_the_session_causes_no_rebalance(restarting):
    env = Env()
    a = env.consumer("a", group_instance_id="a")
    env.drive([a], lambda: a.state == "STABLE")
    b = env.consumer("b", group_instance_id="b")
    env.drive([a, b], settled([a, b]))
    assert a.is_leader  # restarting "a" exercises the leader path (skip_assignment), "b" a follower
    gen, old = env.group().generation_id, {"a": a.assignment(), "b": b.assignment()}
    stayer, goer = (b, a) if restarting == "a" else (a, b)
    events_before = list(env.events(stayer))
    goer.close()
    assert len(env.group().members) == 2  # no LeaveGroup from a static member
    env.clock.advance(2_000)
    again = env.consumer(f"{restarting}2", group_instance_id=restarting)
    env.drive([stayer, again], lambda: again.state == "STABLE")
    env.drive([stayer, again], settled([stayer, again]), max_steps=30)  # and it stays that way
    assert again.assignment() == old[restarting] and again.generation_id == gen
    assert env.group().generation_id == gen and stayer.generation_id == gen
    assert env.events(stayer) == events_before
    assert env.events(again) == [("assigned", old[restarting])]


def test_a_consumer_that_stops_polling_leaves_and_its_commit_fails():
    env = Env()
    slow = env.consumer("slow", max_poll_interval_ms=3_000)
    fast = env.consumer("fast", max_poll_interval_ms=3_000)
    env.drive([slow, fast], settled([slow, fast]))
    owned = slow.assignment()
    tp = min(owned)
    slow.seek(tp, 9)
    for _ in range(31):  # only "fast" polls (and heartbeats) for 3.1 s
        env.clock.advance(100)
        fast.poll(0)
    slow.run_background_once_for_testing()  # its heartbeat thread notices the poll timeout: LeaveGroup
    assert slow.member_id == "" and len(env.group().members) == 1
    with pytest.raises(CommitFailedError):
        slow.commit()
    assert fast.committed([tp]) == {tp: None}
    env.drive([fast], settled([fast]))
    # the next poll rejoins; the old partitions were lost, not revoked
    env.drive([slow, fast], settled([slow, fast]))
    assert ("lost", owned) in env.events(slow)
    assert ("revoked", owned) not in env.events(slow)


def test_cooperative_sticky_adding_a_member_keeps_unaffected_partitions_owned():
    env = Env()
    c1 = env.consumer("c1", assignors=("cooperative-sticky",))
    c2 = env.consumer("c2", assignors=("cooperative-sticky",))
    env.drive([c1, c2], settled([c1, c2]))
    gen = c1.generation_id
    before = {c: c.assignment() for c in (c1, c2)}
    for c in (c1, c2):
        env.events(c).clear()
    c3 = env.consumer("c3", assignors=("cooperative-sticky",))
    kept = {}

    def check_kept():
        # between polls, a surviving member always owns what it keeps at the end
        for c in (c1, c2):
            kept.setdefault(c, []).append(c.assignment())

    env.drive([c1, c2, c3], settled([c1, c2, c3]), each_step=check_kept)
    assert sorted(len(c.assignment()) for c in (c1, c2, c3)) == [2, 2, 2]
    assert c1.generation_id == gen + 2  # two rounds: revoke, then assign the freed partitions
    for c in (c1, c2):
        final = c.assignment()
        assert final <= before[c]
        assert all(final <= seen for seen in kept[c])
        revoked = frozenset().union(*(tps for kind, tps in env.events(c) if kind == "revoked"))
        assert revoked == before[c] - final and revoked <= c3.assignment()
        assert all(kind != "lost" for kind, _ in env.events(c))
    assert env.events(c3)[-1] == ("assigned", c3.assignment())


def test_another_instance_with_the_same_group_instance_id_fences_the_first():
    env = Env()
    first = env.consumer("x1", group_instance_id="x")
    env.drive([first], settled([first]))
    second = env.consumer("x2", group_instance_id="x")
    env.drive([second], lambda: second.state == "STABLE")
    with pytest.raises(FencedInstanceIdError):
        first.heartbeat_now_for_testing()
        first.poll(0)
    with pytest.raises(FencedInstanceIdError):
        first.poll(0)
    with pytest.raises(FencedInstanceIdError):
        first.commit({(TOPIC, 0): 1})
    first.close()  # still closes cleanly, without touching the group
    env.drive([second], settled([second]), max_steps=20)
    assert second.generation_id == env.group().generation_id


def test_group_max_size_reached_is_fatal():
    env = Env({"group.max.size": 1})
    c1 = env.consumer("c1")
    env.drive([c1], settled([c1]))
    c2 = env.consumer("c2")
    with pytest.raises(GroupMaxSizeReachedError):
        env.drive([c2], lambda: False, max_steps=5)
    with pytest.raises(GroupMaxSizeReachedError):
        c2.poll(0)


def test_coordinator_loading_is_retried_until_it_serves():
    env = Env()
    c = env.consumer("c")
    env.coord.set_loading_for_testing(0, True)
    for _ in range(5):
        c.poll(0)
        env.clock.advance(100)
    assert c.state == "UNJOINED"
    env.coord.set_loading_for_testing(0, False)
    env.drive([c], settled([c]))


def test_wall_clock_consumer_runs_a_heartbeat_thread_and_close_stops_it():
    env = Env()
    c = Consumer(env.coord, GROUP, [TOPIC], session_timeout_ms=5_000, heartbeat_interval_ms=10)
    for _ in range(50):
        c.poll(0)
        if c.state == "STABLE":
            break
        env.clock.advance(0)  # the coordinator's timers run on its ManualClock
    assert c.assignment() == ALL
    thread = c._thread
    assert thread is not None and thread.is_alive()
    c.close()
    assert not thread.is_alive()
    assert env.coord.group_state_for_testing(GROUP) in ("PreparingRebalance", "Empty")


def test_wall_clock_heartbeat_thread_leaves_when_poll_is_not_called_in_time():
    env = Env()
    c = Consumer(env.coord, GROUP, [TOPIC], session_timeout_ms=5_000, heartbeat_interval_ms=5,
                 max_poll_interval_ms=100)
    for _ in range(50):
        if c.poll(0) and c.state == "STABLE":
            break
        env.clock.advance(0)
    assert c.state == "STABLE"
    deadline = time.monotonic() + 10.0  # a bound, not an expectation: the thread acts after ~100 ms
    while c.member_id and time.monotonic() < deadline:
        time.sleep(0.005)
    assert c.member_id == "" and len(env.group().members) == 0
    with pytest.raises(CommitFailedError):
        c.commit({(TOPIC, 0): 1})
    c.close()


@pytest.mark.parametrize("kwargs,exc,name", [
    ({"group_id": ""}, ValueError, "group_id"),
    ({"group_id": 3}, TypeError, "group_id"),
    ({"topics": "t"}, TypeError, "topics"),
    ({"topics": []}, ValueError, "topics"),
    ({"topics": ["t", 1]}, TypeError, "topics"),
    ({"assignors": ("nope",)}, ValueError, "assignors"),
    ({"assignors": ()}, ValueError, "assignors"),
    ({"assignors": "range"}, TypeError, "assignors"),
    ({"group_instance_id": ""}, ValueError, "group_instance_id"),
    ({"session_timeout_ms": 0}, ValueError, "session_timeout_ms"),
    ({"heartbeat_interval_ms": 45_000}, ValueError, "heartbeat_interval_ms"),
    ({"heartbeat_interval_ms": 1.5}, TypeError, "heartbeat_interval_ms"),
    ({"max_poll_interval_ms": -1}, ValueError, "max_poll_interval_ms"),
    ({"auto_commit_interval_ms": True}, TypeError, "auto_commit_interval_ms"),
    ({"enable_auto_commit": "yes"}, TypeError, "enable_auto_commit"),
    ({"listener": object()}, TypeError, "listener"),
    ({"client_id": 5}, TypeError, "client_id"),
    ({"clock": object()}, TypeError, "clock"),
    ({"metadata_max_age_ms": -1}, ValueError, "metadata_max_age_ms"),
])
def test_constructor_rejects_bad_arguments_naming_them(kwargs, exc, name):
    env = Env()
    args = {"group_id": GROUP, "topics": [TOPIC], **kwargs}
    with pytest.raises(exc, match=name):
        Consumer(env.coord, **args)
    assert env.group() is None  # nothing was sent


def test_bad_calls_name_the_argument():
    env = Env()
    c = env.consumer("c")
    with pytest.raises(TypeError, match="offsets"):
        c.commit([((TOPIC, 0), 1)])
    with pytest.raises(ValueError, match="offsets"):
        c.commit({(TOPIC, 0): -1})
    with pytest.raises(ValueError, match="timeout_s"):
        c.poll(-1)
    with pytest.raises(TypeError, match="partition"):
        c.seek(("t",), 1)
    with pytest.raises(TypeError, match="partitions"):
        c.committed((TOPIC, 0))
    c.close()


def test_a_commit_that_times_out_is_cancelled_not_retried_in_the_background():
    """A commit whose answer does not come in time raises TimeoutError and its request is cancelled: a
    client retrying it in the background could apply this older offset after a newer commit (found by the
    chaos benchmark as a lost acknowledged commit)."""
    import concurrent.futures

    env = Env()
    c = env.consumer("c")
    env.drive([c], settled([c]))
    stuck: list[concurrent.futures.Future] = []

    class NeverAnswers:
        def __init__(self, client):
            self._client = client

        def __getattr__(self, name):
            return getattr(self._client, name)

        def send(self, request):
            if type(request).__name__ != "OffsetCommitRequest":
                return self._client.send(request)
            stuck.append(concurrent.futures.Future())
            return stuck[-1]

    c._calls.client = NeverAnswers(c._calls.client)
    with pytest.raises(TimeoutError):
        c.commit({(TOPIC, 0): 5}, timeout_s=0.05)
    assert stuck and all(f.cancelled() for f in stuck)
