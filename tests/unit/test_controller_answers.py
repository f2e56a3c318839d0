"""The controller's answers that used to be decided in the actor, as pure functions with a manual
``now_ms``: the lease gate a new leader waits behind, the epoch a started shard is given (the one the
failover elected, so a failover persists once), and the state tried again after a failed persist."""

from __future__ import annotations

from dataclasses import replace

from raygroups.placement.commits import after_persist, numbered, persist_targets
from raygroups.placement.model import Commit, Lease, Metadata, Settings
from raygroups.placement.plan import PartitionAssignment
from raygroups.placement.requests import (
    Grant,
    Wait,
    leases_at_start,
    on_granted,
    on_leader_started,
    on_lease_renewed,
)

from tests.unit.controller_world import World

NODES = ("A", "B", "C")


def serving_meta(leader="A", epoch=3, **changes) -> Metadata:
    """Partition 0 led by ``leader`` at ``epoch``; every node's disk reported and holds it."""
    a = PartitionAssignment(NODES, leader, epoch, NODES, 10)
    meta = Metadata(Settings(1, 3, 2), partitions={0: a}, incarnations={n: f"{n}#1" for n in NODES},
                    reported={n: f"{n}#1" for n in NODES}, held={n: frozenset({0}) for n in NODES})
    return replace(meta, **changes)


# --------------------------------------------------------------------------- the lease gate


def test_a_new_leader_on_another_node_waits_until_the_confirmed_lease_has_run_out():
    # A confirmed at 10 000 ms; the lease is 2/3 of shard.session.timeout.ms (3 000), at most 750 ms: it runs
    # to 10 750.
    meta = on_lease_renewed(serving_meta("A", 3), 0, 3, "A", 10_000)
    assert meta.leases[0] == Lease("A", 10_000)
    meta = replace(meta, partitions={0: replace(meta.partitions[0], leader="B", leader_epoch=4)})  # failed over
    assert on_leader_started(meta, 0, "B", "B#1", 10_250) == Wait("the previous leader's lease runs for 0.50 s more",
                                                                  500)
    assert on_leader_started(meta, 0, "B", "B#1", 10_749).retry_in_ms == 1
    granted = on_leader_started(meta, 0, "B", "B#1", 10_750)
    assert granted == Grant(replace(meta.partitions[0], leader_epoch=5, partition_epoch=11), persist=True)
    after = on_granted(meta, 0, "B", 10_750)
    assert after.leases[0] == Lease("B", 10_750)
    # B restarting in place waits for nobody: the lease it holds is its own.
    assert isinstance(on_leader_started(after, 0, "B", "B#1", 10_751), Grant)


def test_only_the_leaders_own_epoch_and_node_renew_its_lease():
    meta = serving_meta("A", 3)
    assert on_lease_renewed(meta, 0, 2, "A", 5_000).leases == {}  # an older epoch
    assert on_lease_renewed(meta, 0, 3, "B", 5_000).leases == {}  # not the leader's node
    assert on_lease_renewed(meta, 0, None, None, 5_000).leases == {}  # anyone's read
    assert on_lease_renewed(meta, 1, 3, "A", 5_000).leases == {}  # no such partition
    assert leases_at_start(meta.partitions, 7_000) == {0: Lease("A", 7_000)}


def test_a_leader_is_told_to_wait_until_its_node_and_disk_are_checked_and_refused_elsewhere():
    meta = serving_meta("A", 3)
    assert on_leader_started(meta, 0, "B", "B#1", 0) is None  # not the leader
    assert on_leader_started(replace(meta, superseded=frozenset({"A#0"})), 0, "A", "A#0", 0) is None
    assert "has not seen this incarnation" in on_leader_started(meta, 0, "A", "A#2", 0).reason
    assert "has not reported" in on_leader_started(replace(meta, reported={}), 0, "A", "A#1", 0).reason
    assert "does not hold" in on_leader_started(replace(meta, held={}), 0, "A", "A#1", 0).reason


# --------------------------------------------------------------------------- the epoch a shard is given


def test_the_epoch_a_failover_elected_is_given_once_as_it_is_then_a_fresh_one_each_time():
    meta = serving_meta("A", 3).with_partition(0, PartitionAssignment(NODES, "B", 4, ("B", "C"), 11), elected=True)
    assert meta.unclaimed == {0: 4}
    first = on_leader_started(meta, 0, "B", "B#1", 0)
    assert first == Grant(meta.partitions[0], persist=False)  # persisted and fenced by the failover's commit
    meta = on_granted(meta, 0, "B", 0)
    assert meta.unclaimed == {}
    again = on_leader_started(meta, 0, "B", "B#1", 1)  # a restart in place, or a leader renewing its epoch
    assert again == Grant(PartitionAssignment(NODES, "B", 5, ("B", "C"), 12), persist=True)


def test_an_elected_epoch_overtaken_before_any_shard_had_it_is_not_given():
    meta = serving_meta("A", 3).with_partition(0, PartitionAssignment(NODES, "B", 4, NODES, 11), elected=True)
    meta = meta.with_partition(0, PartitionAssignment(NODES, "B", 6, NODES, 12))  # a disk fenced at 6 merged
    assert meta.unclaimed == {}
    assert on_leader_started(meta, 0, "B", "B#1", 0).persist
    # An ISR change under the elected epoch keeps it unclaimed.
    meta = serving_meta("A", 3).with_partition(0, PartitionAssignment(NODES, "B", 4, NODES, 11), elected=True)
    meta = meta.with_partition(0, PartitionAssignment(NODES, "B", 4, ("B", "C"), 12))
    assert meta.unclaimed == {0: 4} and not on_leader_started(meta, 0, "B", "B#1", 0).persist


def test_a_failover_persists_the_partition_state_once_and_its_shard_serves_the_elected_epoch():
    w = World(num_partitions=1)
    w.run_until(w.serving)
    old = w.state(0)
    w.persists.clear()
    w.kill(old.leader)
    w.step()
    new = w.state(0)
    assert new.leader != old.leader and new.leader_epoch == old.leader_epoch + 1
    w.run_until(w.serving)
    assert w.shards[0].epoch == new.leader_epoch == w.state(0).leader_epoch
    assert [(a.leader, a.leader_epoch) for _, a in w.persists] == [(new.leader, old.leader_epoch + 1)]


def test_a_shard_restarted_in_place_gets_a_fresh_epoch_persisted():
    w = World(num_partitions=1)
    w.run_until(w.serving)
    a = w.state(0)
    w.persists.clear()
    assert w.leader_started(0, a.leader, w.node_ids[a.leader]) == a.leader_epoch + 1
    assert [(s.leader, s.leader_epoch) for _, s in w.persists] == [(a.leader, a.leader_epoch + 1)]


# --------------------------------------------------------------------------- a failed persist


def test_followers_that_did_not_take_a_state_leave_the_isr_of_the_state_tried_next():
    a = PartitionAssignment(NODES, "A", 4, NODES, 11)
    targets, required = persist_targets(Commit(0, a, None, "x"), a, {"A", "B", "C"})
    assert targets == required == {"A", "B", "C"}
    outcome = after_persist(a, required, {"A", "B"}, {})
    assert not outcome.done and outcome.missing == {"C"}
    assert outcome.retry == PartitionAssignment(NODES, "A", 4, ("A", "B"), 12) and outcome.floor is None
    _, required = persist_targets(Commit(0, outcome.retry, a, "x"), outcome.retry, {"A", "B", "C"})
    assert required == {"A", "B"} and after_persist(outcome.retry, required, {"A", "B"}, {}).done


def test_a_state_the_leader_did_not_take_is_refused():
    a = PartitionAssignment(NODES, "A", 4, NODES, 11)
    outcome = after_persist(a, {"A", "B", "C"}, {"B", "C"}, {})
    assert outcome.missing == {"A"} and outcome.retry is None and not outcome.done


def test_a_disk_holding_a_newer_partition_epoch_makes_the_same_state_numbered_above_it():
    a = PartitionAssignment(NODES, "A", 4, NODES, 11)
    outcome = after_persist(a, {"A", "B", "C"}, {"A", "C"}, {"B": 15})
    assert outcome.retry == a and outcome.floor == 15
    assert numbered(outcome.retry, outcome.floor).partition_epoch == 16
    assert numbered(a, 3) == a


def test_a_dead_replica_is_sent_nothing_and_an_old_replica_learns_it_is_no_longer_one():
    old = PartitionAssignment(("A", "B", "D"), "A", 4, ("A", "B", "D"), 11)
    a = PartitionAssignment(NODES, "A", 4, ("A", "B"), 12)
    targets, required = persist_targets(Commit(0, a, old, "moved"), a, {"A", "B", "D"})
    assert targets == {"A", "B", "D"} and required == {"A", "B"}
    offline = PartitionAssignment(NODES, None, 5, ("B", "C"), 13)
    assert persist_targets(Commit(0, offline, a, "offline"), offline, {"A", "B"})[1] == {"B"}
