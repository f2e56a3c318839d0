"""The controller's decisions, without Ray: every failover case of the multi-node tests, start-up races,
restarts under a node's name, and recovery of the metadata from the nodes' disks (``placement.decide``).
Each test drives a ``World`` with a manual clock and asserts on partition states, epochs and shards."""

from __future__ import annotations

import pytest
from raygroups.placement.decide import decide
from raygroups.placement.model import (
    QUEUED_START_FACTOR,
    Commit,
    Metadata,
    NodeReport,
    Observations,
    ReplicaReport,
    Settings,
    ShardObservation,
    StartShard,
)
from raygroups.placement.nodes import (
    NodeObservation,
    coordinator_nodes,
    name_of,
    scheduling_for,
    validate_node_name,
)
from raygroups.placement.plan import PartitionAssignment
from raygroups.placement.requests import on_expand_isr, on_shrink_isr, readiness

from tests.unit.controller_world import World


def up(w: World) -> World:
    w.run_until(w.serving)
    return w


def leaders(w: World) -> dict[int, str | None]:
    return {p: a.leader for p, a in w.meta.partitions.items()}


def test_a_new_deployment_waits_for_replication_factor_nodes_then_lays_out_every_partition():
    w = World(nodes=("node-0",))
    w.run(5_000)
    assert w.meta.partitions == {}
    assert "3 coordinator nodes" in readiness(w.meta, w.observe())["waiting_for"]
    w.boot("node-1")
    w.boot("node-2")
    up(w)
    for p, a in w.meta.partitions.items():
        assert a.replicas[0] == f"node-{p % 3}" and a.leader == a.replicas[0]  # Kafka's round-robin layout
        assert set(a.isr) == set(a.replicas) == {"node-0", "node-1", "node-2"}
        assert a.leader_epoch == 1  # granted by the shard's start, above the creation's 0
        assert w.disks[a.leader].replicas[p].state == a  # persisted on the replicas before it took effect
    assert readiness(w.meta, w.observe()) == {"ready": True, "waiting_for": None, "refused": {}}


def test_a_shard_that_takes_ten_seconds_to_start_is_not_silent():
    w = up(World(start_delay_ms=10_000))
    starts = list(w.starts)
    assert len(starts) == 4  # one start per partition, none replaced while Ray was starting them
    assert all(not e["event"].startswith("failover") for e in w.events)


def test_a_shard_that_never_gets_a_process_is_replaced_after_the_queued_start_deadline():
    # Ray never starts its process (PENDING_CREATION): waiting in Ray's queue of worker starts is bounded
    # QUEUED_START_FACTOR times the start timeout, since a new actor would wait in the same queue.
    w = World(start_delay_ms=10**9, shard_start_timeout_ms=20_000)
    w.run(20_000 * QUEUED_START_FACTOR - 1_000)
    assert len(w.starts) == 4 and not [e for e in w.events if e["event"] == "failover"]
    w.run(3_000)
    failovers = [e for e in w.events if e["event"] == "failover"]
    assert len(failovers) == 4
    assert all(e["reason"] == f"shard did not get a process within {20_000 * QUEUED_START_FACTOR} ms" for e in failovers)
    assert all(a.leader != a.replicas[0] for a in w.meta.partitions.values())  # moved to the next ISR member


def test_a_shard_queued_for_its_process_longer_than_the_start_timeout_is_left_to_start():
    # Fifty shards created at once on two cores: the last ones get their process after more than the start
    # timeout. None is replaced; the timeout counts from when each process runs.
    w = up(World(start_delay_ms=45_000, shard_start_timeout_ms=20_000))
    assert len(w.starts) == 4
    assert all(e["event"] != "failover" and e["event"] != "shard-restart" for e in w.events)


def test_a_shard_restarted_by_ray_before_its_first_answer_starts_its_timers_anew():
    # Its process ran (ALIVE, no answer yet), crashed, and Ray restarts it: it queues for a worker again,
    # judged by the queued bound from the restart, not by the start timeout from its first process.
    w = World(start_delay_ms=1_000, shard_start_timeout_ms=20_000)
    w.paused.add("node-0")  # its processes run and never answer
    w.run(15_000)
    for s in w.shards.values():
        if s.node == "node-0":
            s.alive_at_ms = w.now + 10**9  # Ray restarts it from here (RESTARTING, then PENDING_CREATION)
    w.paused.clear()
    w.run(20_000)
    assert not [e for e in w.events if e["event"] == "failover"]


def _crash_shard(w: World, p: int) -> None:
    """The process of ``p``'s shard dies; Ray restarts it, and gets it a process only much later."""
    w.shards[p].alive_at_ms = w.now + 10**9
    w.shards[p].state = "INITIAL"


def test_a_leader_shard_that_dies_after_serving_fails_over_at_once_to_an_in_sync_replica():
    w = up(World())
    p = 1
    old = w.state(p)
    _crash_shard(w, p)
    w.run_until(lambda: w.state(p).leader != old.leader, limit_ms=400)  # within the next round or two
    new = w.state(p)
    assert new.leader in old.isr and new.leader_epoch == old.leader_epoch + 1
    # Only the process died: its node's replica, which holds every acknowledged batch, stays in sync
    assert set(new.isr) == set(old.isr) and w.disks[old.leader].replicas[p].state == new
    assert [e["reason"] for e in w.events if e["event"] == "failover"] == ["leader shard died (Ray is restarting it)"]
    w.run_until(w.serving)
    assert w.shards[p].node == new.leader  # the restarting actor replaced on the new leader's node


def test_three_leader_shards_dying_in_a_row_each_fail_over_elsewhere_with_no_catch_up_between():
    # A leader flap: each new leader's process killed as soon as it serves, before any follower left out of
    # the ISR could have been caught up. The old leaders' replicas stayed in sync, so the third death still
    # finds another in-sync replica rather than waiting for Ray to restart the only one left.
    w = up(World())
    p = 1
    epochs, led = [w.state(p).leader_epoch], [w.state(p).leader]
    for _ in range(3):
        _crash_shard(w, p)
        w.run_until(lambda: w.state(p).leader != led[-1], limit_ms=400)
        w.run_until(w.serving)
        a = w.state(p)
        assert set(a.isr) == {"node-0", "node-1", "node-2"}
        led.append(a.leader)
        epochs.append(a.leader_epoch)
    assert all(a != b for a, b in zip(led, led[1:], strict=False))  # each time another node's replica
    assert epochs == sorted(set(epochs))  # every election a newer epoch
    assert not [e for e in w.events if e["event"] == "shard-restart"]


def test_a_leader_shard_that_dies_keeps_its_node_in_the_isr_only_while_that_node_lives():
    w = up(World())
    p = 1
    old = w.state(p)
    _crash_shard(w, p)
    w.kill(old.leader)  # the node goes too before the controller's next round
    w.run_until(lambda: w.state(p).leader != old.leader, limit_ms=400)
    assert old.leader not in w.state(p).isr


def test_a_controller_that_took_over_after_a_committed_failover_starts_the_shard_the_old_one_did_not():
    # The leader's node is lost and the controller commits the failover, then dies before it moves the
    # shard: the partition's name stays with the old leader's actor, which Ray restarts only once that node
    # is back. The next controller starts the new leader's shard at once, not after the queued-start bound.
    w = up(World())
    p = 1
    old = w.state(p)
    w.kill(old.leader)
    decision = decide(w.meta, w.observe(), w.now + 200)
    (commit,) = [c for c in decision.actions if isinstance(c, Commit) and c.partition == p]
    assert w.commit(p, commit.assignment, commit.previous, commit.holders, commit.elected)
    w.restart_controller(keep_gcs=True)
    new = w.state(p)
    assert new.leader != old.leader and w.shards[p].node == old.leader
    w.run_until(lambda: w.shards[p].node == new.leader, limit_ms=1_000)
    w.run_until(w.serving, limit_ms=10_000)
    assert w.state(p).leader == new.leader


def _restart_shard_unseen(w: World, p: int) -> None:
    """The process of ``p``'s shard dies and Ray restarts it in place between two of the controller's rounds:
    the same actor answers from a new process, loading its log from the start."""
    w.shards[p].process += 1
    w.shards[p].state = "INITIAL"


def test_a_leader_shard_restarted_in_place_between_rounds_fails_over_to_an_in_sync_replica():
    w = up(World())
    p = 2
    old = w.state(p)
    _restart_shard_unseen(w, p)
    w.step()
    new = w.state(p)
    # (the new process' start took an epoch of its own, fenced by the failover's)
    assert new.leader != old.leader and new.leader in old.isr and new.leader_epoch > old.leader_epoch
    assert [e["reason"] for e in w.events if e["event"] == "failover"] == ["leader shard died (Ray restarted it)"]
    w.run_until(w.serving)
    assert w.shards[p].node == new.leader


def _alone_in_its_isr(w: World, p: int):
    """Every follower of ``p`` lost: its leader alone in the ISR. Returns the state before, and the epoch then."""
    old = w.state(p)
    for n in old.isr:
        if n != old.leader:
            w.kill(n)
    w.run_until(lambda: w.state(p).isr == (old.leader,))
    return old, w.state(p).leader_epoch


def test_a_leader_shard_restarted_in_place_alone_in_its_isr_loads_again_and_serves():
    w = up(World())
    p = 2
    old, epoch = _alone_in_its_isr(w, p)
    _restart_shard_unseen(w, p)
    w.run_until(lambda: w.shards[p].state == "ACTIVE", limit_ms=2_000)
    assert w.state(p).leader == old.leader and w.state(p).leader_epoch == epoch + 1  # the new process' start
    assert not [e for e in w.events if e["event"] == "failover" and e.get("partition") == p]


def test_a_leader_shard_that_dies_alone_in_its_isr_is_left_to_ray_to_restart():
    w = up(World())
    p = 1
    old, epoch = _alone_in_its_isr(w, p)
    _crash_shard(w, p)
    w.run(5_000)
    assert w.state(p).leader == old.leader and w.state(p).leader_epoch == epoch  # no failover, no restart of ours
    assert not [e for e in w.events if e.get("reason") == "leader shard died (Ray is restarting it)"]
    w.shards[p].alive_at_ms = w.now  # Ray's restart gets its process: the same leader serves again
    w.run_until(lambda: w.shards[p].state == "ACTIVE", limit_ms=2_000)
    assert w.state(p).leader == old.leader


def test_a_shard_whose_process_runs_but_never_answers_is_replaced_after_the_start_timeout_from_then():
    w = World(start_delay_ms=30_000, shard_start_timeout_ms=20_000)
    w.paused.add("node-0")  # its processes run (ALIVE) and never answer
    w.run(30_000 + 19_000)
    assert not [e for e in w.events if e["event"] == "failover"]
    w.run(2_000)
    failovers = [e for e in w.events if e["event"] == "failover"]
    assert failovers and all(e["reason"] == "shard did not answer after its process started within 20000 ms"
                             for e in failovers)
    assert all(w.state(p).leader != "node-0" for p, a in w.meta.partitions.items() if a.replicas[0] == "node-0")


def _pause_leader_until_failover(w, p: int, silence_ms: int):
    """Pause the leader of ``p``: no failover before ``silence_ms`` of silence, one soon after."""
    old = w.state(p)
    w.paused.add(old.leader)
    w.run(silence_ms - 200)
    assert w.state(p).leader == old.leader  # the silence not reached yet
    w.run_until(lambda: w.state(p).leader != old.leader, limit_ms=2_000)
    return old, w.state(p)


def test_a_paused_leader_is_failed_over_after_the_silence_and_its_shard_replaced():
    w = up(World())
    p = 1
    old, new = _pause_leader_until_failover(w, p, 3_000)
    assert new.leader in old.isr and new.leader_epoch > old.leader_epoch and old.leader not in new.isr
    assert all(w.disks[n].replicas[p].fenced_epoch >= new.leader_epoch for n in old.replicas)  # all fenced
    assert w.shards[p].node == new.leader  # the paused actor was replaced, on the new leader's node
    # The paused node resumes: its old shard is gone, the new leader serves, it is caught up and rejoins.
    w.paused.clear()
    w.run_until(w.serving)
    w.catch_up(p)
    assert old.leader in w.state(p).isr


def test_a_stall_of_the_controller_itself_is_no_silence_of_the_shards():
    # The controller's rounds stop for 30 s (a loaded machine): every shard's last answer is then 30 s old.
    # A probe left unanswered right after is no silence yet: only probes unanswered for half the silence are.
    w = up(World())
    p = 1
    old = w.state(p)
    w.paused.add(old.leader)
    w.now += 30_000
    w.step()
    assert w.state(p).leader == old.leader
    w.paused.clear()
    w.run(5_000)
    assert w.state(p) == old and not [e for e in w.events if e["event"] == "failover"]
    # Silent for real after such a stall: failed over once its probes go unanswered for half the silence.
    w.paused.add(old.leader)
    w.now += 30_000
    w.run(1_200)
    assert w.state(p).leader == old.leader
    w.run_until(lambda: w.state(p).leader != old.leader, limit_ms=1_000)
    assert w.state(p).leader_epoch == old.leader_epoch + 1


def test_a_shorter_session_timeout_fails_a_paused_leader_over_sooner():
    w = up(World(shard_silence_ms=1_000))
    start = w.now
    old, new = _pause_leader_until_failover(w, 1, 1_000)
    assert new.leader in old.isr and new.leader_epoch > old.leader_epoch and w.now - start < 2_000


def test_a_killed_leader_node_fails_over_and_the_node_returning_under_its_name_rejoins():
    w = up(World())
    victim = "node-0"
    led = [p for p, n in leaders(w).items() if n == victim]
    epochs = {p: w.state(p).leader_epoch for p in led}
    w.kill(victim)
    w.step()
    for p in range(4):
        a = w.state(p)
        assert a.leader != victim and victim not in a.isr and victim in a.replicas  # kept as a replica
    for p in led:
        assert w.state(p).leader_epoch > epochs[p]
    w.run_until(w.serving)
    w.boot(victim)  # same name, new Ray node id, same disk
    w.run(1_000)
    assert any(e["event"] == "node-restarted" for e in w.events)
    for p in led:  # its disk named it leader; it was told who leads now
        assert w.disks[victim].replicas[p].state.leader == w.state(p).leader != victim
    for p in range(4):
        w.catch_up(p)
        assert victim in w.state(p).isr and victim in w.state(p).replicas
    w.run(12_000)  # preferred-leader balancing brings leadership back
    assert [p for p, n in leaders(w).items() if n == victim] == led
    assert w.serving()


def test_an_offline_partition_comes_back_when_an_in_sync_replica_returns_and_never_elects_outside_the_isr():
    w = up(World(num_partitions=1))
    p = 0
    a = w.state(p)
    f1, f2 = [n for n in a.replicas if n != a.leader]
    assert w.shrink(p, f1)  # f1 fell behind and left the ISR
    w.kill(f2)
    w.step()
    w.kill(a.leader)
    w.step()
    off = w.state(p)
    assert off.leader is None and set(off.isr) == {a.leader}  # f2 dropped while the leader lived
    w.run(10_000)
    assert w.state(p).leader is None  # f1 is alive but out of sync: no unclean election
    assert f1 not in w.state(p).isr
    w.boot(a.leader)
    w.run_until(w.serving)
    back = w.state(p)
    assert back.leader == a.leader and back.leader_epoch > off.leader_epoch


def test_a_node_back_under_its_name_with_an_empty_disk_is_never_elected():
    w = up(World(num_partitions=1))
    a = w.state(0)
    for n in a.replicas:
        if n != a.leader:
            w.kill(n)
            w.step()
    w.kill(a.leader)
    w.step()
    assert w.state(0).leader is None and w.state(0).isr == (a.leader,)
    w.wipe(a.leader)  # its disk was lost: the name is the same, the replica is not
    w.boot(a.leader)
    w.run(10_000)
    assert w.state(0).leader is None  # offline rather than serve an empty log
    others = [n for n in a.replicas if n != a.leader]
    w.boot(others[0])
    w.run(2_000)
    assert w.state(0).leader is None  # out of sync: not electable either


def test_an_election_waits_for_the_returning_replica_to_report_its_disk():
    w = up(World(num_partitions=1))
    a = w.state(0)
    for n in [n for n in a.replicas if n != a.leader] + [a.leader]:
        w.kill(n)
        w.step()
    w.boot(a.leader)
    obs = w.observe()
    silent = type(obs)(obs.nodes, obs.shards, {})  # its report has not arrived yet
    d = decide(w.meta, silent, w.now + 200)
    assert not d.of(Commit)  # nothing elected from an unread disk
    w.run_until(w.serving)
    assert w.state(0).leader == a.leader


def test_unclean_election_when_configured():
    w = up(World(num_partitions=1, unclean_election=True))
    a = w.state(0)
    f1, f2 = [n for n in a.replicas if n != a.leader]
    w.shrink(0, f1)
    w.kill(f2)
    w.step()
    w.kill(a.leader)
    w.run_until(w.serving)
    assert w.state(0).leader == f1 and w.state(0).isr == (f1,)


def test_a_controller_restart_mid_failover_starts_the_new_leaders_shard_and_replaces_the_old_one():
    w = up(World(num_partitions=1))
    old = w.state(0)
    new_leader = old.isr[1]
    # The failover was committed (disks and GCS) but the controller stopped before starting the shard:
    moved = Commit(0, old.__class__(old.replicas, new_leader, old.leader_epoch + 1,
                                    tuple(n for n in old.isr if n != old.leader), old.partition_epoch + 1), old, "x")
    assert w.commit(moved.partition, moved.assignment, moved.previous)
    w.restart_controller(keep_gcs=True)
    w.step()
    assert w.shards[0].node == new_leader  # the stale shard on the old leader was replaced
    w.run_until(w.serving)
    assert w.state(0).leader == new_leader


def test_a_controller_restart_changes_nothing_when_all_is_well():
    w = up(World())
    before = dict(w.meta.partitions)
    starts = len(w.starts)
    w.restart_controller(keep_gcs=True)
    w.run(5_000)
    assert w.meta.partitions == before and len(w.starts) == starts


def test_a_full_restart_recovers_every_partition_from_the_disks():
    w = up(World())
    before = dict(w.meta.partitions)
    w.full_restart(["node-0", "node-1", "node-2"])
    up(w)
    for p, a in w.meta.partitions.items():
        b = before[p]
        assert (a.leader, a.replicas, a.isr) == (b.leader, b.replicas, b.isr)
        assert a.leader_epoch > b.leader_epoch and a.partition_epoch > b.partition_epoch


def test_a_full_restart_with_one_node_missing_recovers_and_elects_from_the_last_isr():
    w = up(World())
    before = dict(w.meta.partitions)
    w.full_restart(["node-1", "node-2"])
    up(w)
    for p, a in w.meta.partitions.items():
        assert a.leader in before[p].isr and a.leader != "node-0"
        assert a.replicas == before[p].replicas  # node-0 keeps its replicas for the replacement delay
    w.boot("node-0")
    w.run(1_000)
    for p in range(4):
        w.catch_up(p)
    assert all("node-0" in a.isr for a in w.meta.partitions.values())


def test_a_full_restart_with_one_node_alone_waits_for_a_quorum_of_disks():
    w = up(World())
    w.full_restart(["node-2"])
    w.run(10_000)
    assert w.meta.partitions == {}  # 1 of 3 replicas: its state may be stale, nothing is elected
    assert "to be recovered" in readiness(w.meta, w.observe())["waiting_for"]
    w.boot("node-0")
    up(w)


def test_a_stale_lone_replica_never_leads_after_a_full_restart():
    # The stale replica died while in the ISR; the survivors dropped it and acknowledged writes without
    # it, then were lost with the head: its own disk still names it in-sync.
    w = up(World(num_partitions=1))
    a = w.state(0)
    stale = [n for n in a.replicas if n != a.leader][-1]
    w.kill(stale)
    w.run(1_000)
    assert stale not in w.state(0).isr and stale in w.disks[stale].replicas[0].state.isr
    w.full_restart([stale])
    w.run(30_000)
    assert w.meta.partitions == {}


def test_a_flapping_leader_keeps_electing_from_the_isr_with_growing_epochs():
    w = up(World(num_partitions=1))
    epochs = [w.state(0).leader_epoch]
    for _ in range(6):
        victim = w.state(0).leader
        w.kill(victim)
        w.run_until(lambda v=victim: w.serving() and w.state(0).leader != v)
        a = w.state(0)
        assert a.leader in a.isr and a.leader_epoch > epochs[-1]
        epochs.append(a.leader_epoch)
        w.boot(victim)
        w.run(1_000)
        w.catch_up(0)
    assert epochs == sorted(set(epochs))


def test_leaders_are_not_rebalanced_while_the_deployment_is_starting():
    w = World(start_delay_ms=30_000, leader_balance_interval_ms=1_000)
    w.run(1_000)
    w.kill("node-0")  # its partitions move to their second replicas while every shard is still starting
    w.run(1_000)
    w.boot("node-0")
    w.run(1_000)
    for p in range(4):
        w.catch_up(p)
    assert [p for p, n in leaders(w).items() if n == "node-0"] == []  # imbalanced: node-0 prefers 0 and 3
    w.run(25_000)
    assert w.meta.started_ms is None and not any(e["event"] == "preferred-leader" for e in w.events)
    w.run_until(lambda: any(e["event"] == "preferred-leader" for e in w.events), limit_ms=60_000)
    w.run_until(w.serving)
    assert [p for p, n in leaders(w).items() if n == "node-0"] == [0, 3]


def test_a_dead_node_is_replaced_after_the_replacement_delay():
    w = up(World(nodes=("node-0", "node-1", "node-2", "node-3"), num_partitions=4, node_replacement_delay_ms=30_000))
    w.kill("node-3")
    w.run(20_000)
    assert any("node-3" in a.replicas for a in w.meta.partitions.values())  # still expected back
    w.run(12_000)
    assert all("node-3" not in a.replicas for a in w.meta.partitions.values())
    assert all(len(a.replicas) == 3 for a in w.meta.partitions.values())


def test_a_node_whose_disk_belongs_to_another_deployment_is_refused():
    w = World(nodes=("node-0", "node-1", "node-2", "node-3"))
    w.disks["node-3"].num_partitions = 8
    up(w)
    assert "node-3" in w.meta.refused and all("node-3" not in a.replicas for a in w.meta.partitions.values())
    r = readiness(w.meta, w.observe())
    assert r["ready"] and "not 4" in r["refused"]["node-3"]  # the others serve; the refusal is shown


def test_a_newer_state_on_disk_than_in_the_cache_wins():
    w = up(World(num_partitions=1))
    a = w.state(0)
    newer = PartitionAssignment(a.replicas, a.leader, a.leader_epoch + 3, a.isr, a.partition_epoch + 5)
    w.disks["node-1"].replicas[0] = ReplicaReport(newer, newer.leader_epoch)
    w.restart_controller(keep_gcs=True)
    w.step()
    assert w.state(0).partition_epoch > newer.partition_epoch and w.state(0).leader_epoch >= newer.leader_epoch


def test_isr_requests_are_epoch_checked():
    w = up(World(num_partitions=1))
    a = w.state(0)
    f = a.isr[1]
    assert on_shrink_isr(w.meta, 0, a.leader_epoch - 1, f) == (False, None)
    assert on_shrink_isr(w.meta, 0, a.leader_epoch, a.leader) == (False, None)  # a leader never drops itself
    ok, new = on_shrink_isr(w.meta, 0, a.leader_epoch, f)
    assert ok and f not in new.isr and new.partition_epoch == a.partition_epoch + 1
    assert on_expand_isr(w.meta, 0, a.leader_epoch - 1, f) == (False, None)  # deposed
    assert on_expand_isr(w.meta, 0, a.leader_epoch, "node-9") == (True, None)  # no replica (moved): not added
    assert on_expand_isr(w.meta, 0, a.leader_epoch, f) == (True, None)


def test_a_shard_found_on_another_node_than_the_leaders_is_replaced():
    w = up(World(num_partitions=1))
    a = w.state(0)
    obs = w.observe()
    shards = {0: ShardObservation("ALIVE", "someone-else", "ACTIVE", a.isr[1])}
    d = decide(w.meta, Observations(obs.nodes, shards, {}), w.now + 200)
    assert [(s.partition, s.node) for s in d.of(StartShard)] == [(0, a.leader)]


def test_node_names_come_from_the_label_and_unlabelled_nodes_are_named_by_id():
    labelled = {"NodeID": "ab" * 28, "Alive": True, "Resources": {"coordinator": 1.0},
                "Labels": {"raygroups.io/node": "node-7"}}
    plain = {"NodeID": "cd" * 28, "Alive": True, "Resources": {"coordinator": 1.0}, "Labels": {}}
    head = {"NodeID": "ef" * 28, "Alive": True, "Resources": {"head": 1.0}, "Labels": {}}
    old = {**labelled, "NodeID": "00" * 28, "Alive": False}
    nodes = coordinator_nodes([old, labelled, plain, head])
    assert sorted(nodes) == ["node-7", "ray-cdcdcdcdcdcd"]
    assert nodes["node-7"].node_id == "ab" * 28 and nodes["node-7"].alive
    assert name_of(plain) == ("ray-cdcdcdcdcdcd", False)
    assert scheduling_for(nodes["node-7"], "node-7") == {"label_selector": {"raygroups.io/node": "node-7"}}
    assert scheduling_for(nodes["ray-cdcdcdcdcdcd"], "ray-cdcdcdcdcdcd") == {"node_id": "cd" * 28}
    restarted = {**labelled, "NodeID": "11" * 28}
    # Two alive incarnations under one name (restarted before the old one was declared dead): the new one.
    assert coordinator_nodes([labelled, restarted], {"node-7": "ab" * 28})["node-7"].node_id == "11" * 28
    assert validate_node_name("node-0") == "node-0"
    with pytest.raises(ValueError, match="not a valid Ray label value"):
        validate_node_name("bad name")


def test_settings_and_reports_are_validated():
    with pytest.raises(ValueError, match="replication_factor must be >= 1"):
        Settings(4, 0, 1)
    s = Settings(4, 3, 2)
    assert [s.recovery_quorum(n) for n in (1, 2, 3, 5)] == [1, 1, 2, 4]
    meta = Metadata(s)
    obs = Observations({"node-0": NodeObservation("node-0", "id0", True, True)},
                       reports={"node-0": NodeReport("stale-incarnation", 4, {})})
    d = decide(meta, obs, 0)
    assert "node-0" not in d.metadata.reported  # a report from an incarnation that is gone is ignored


# --- what a second read found: disks that lost the partition, failed commits, torn creations ----------------


def test_after_a_full_restart_a_leader_whose_disk_was_wiped_never_leads():
    w = up(World(num_partitions=1))
    a = w.state(0)
    w.full_restart([])
    w.wipe(a.leader)
    for n in ("node-0", "node-1", "node-2"):
        w.boot(n)
    up(w)
    b = w.state(0)
    assert b.leader != a.leader and a.leader not in b.isr and w.holds(b.leader, 0)


def test_a_controller_restart_does_not_keep_a_leader_whose_disk_was_wiped():
    w = up(World(num_partitions=1))
    a = w.state(0)
    w.restart_controller(keep_gcs=True)
    w.wipe(a.leader)
    w.boot(a.leader)  # rebooted with a new disk while the controller was down
    w.run(1_000)
    up(w)
    assert w.state(0).leader != a.leader and a.leader not in w.state(0).isr


def test_a_follower_back_with_an_empty_disk_leaves_the_isr_and_is_not_made_electable_by_a_state_file():
    w = up(World(num_partitions=1))
    a = w.state(0)
    wiped, other = a.isr[1], a.isr[2]
    w.restart_controller(keep_gcs=True)
    w.wipe(wiped)
    w.boot(wiped)
    w.run(1_000)
    assert wiped not in w.state(0).isr
    assert w.shrink(0, other)  # a commit writes a state file on the wiped node's empty disk
    assert w.holds(wiped, 0) and 0 not in w.meta.held.get(wiped, ())
    w.kill(a.leader)
    w.run(3_000)
    assert w.state(0).leader != wiped  # offline rather than elect the empty replica
    w.catch_up(0)  # nothing happens while offline: the wiped node is not caught up by anyone
    assert wiped not in w.state(0).isr


def test_a_restart_is_not_forgotten_when_the_commit_it_calls_for_fails():
    w = up(World(num_partitions=1))
    a = w.state(0)
    w.wipe(a.leader)
    w.boot(a.leader)  # the leader's node restarted under its name (quicker than Ray declared it dead)
    w.refuse_writes = set(w.alive) - {a.leader}  # the other LogServers take no state: the failover fails
    w.run(2_000)
    assert w.state(0).leader == a.leader  # nothing took effect
    w.shards[0] = type(w.shards[0])(0, a.leader, "restarted-by-ray", w.now, w.node_ids[a.leader])
    w.run(2_000)  # Ray restarted the detached shard on the node's new incarnation: it is told to wait
    assert w.shards[0].epoch is None
    w.refuse_writes = set()
    up(w)
    assert w.state(0).leader != a.leader and a.leader not in w.state(0).isr


def test_a_creation_cut_short_is_finished_after_a_controller_restart():
    w = World(num_partitions=2)
    commit = w.commit

    def cut_short(p, a, previous, holders=frozenset(), elected=False):
        if p == 1 and previous is None:  # partition 1's creation reaches node-1's disk, then the controller dies
            w.persist("node-1", p, a)
            return False
        return commit(p, a, previous, holders, elected)

    w.commit = cut_short
    w.step()
    w.commit = commit
    assert 1 not in w.meta.partitions and w.holds("node-1", 1)
    w.restart_controller(keep_gcs=True)
    up(w)  # never led (epoch 0) and a quorum of its replicas reported: recovered


def test_a_partition_epoch_left_by_a_failed_commit_is_never_reused():
    w = up(World(num_partitions=1))
    a = w.state(0)
    follower = a.isr[1]
    left = PartitionAssignment(a.replicas, a.leader, a.leader_epoch, (a.leader, a.isr[2]), a.partition_epoch + 1)
    w.disks[follower].replicas[0] = ReplicaReport(left, a.leader_epoch)  # another state under the next epoch
    assert w.shrink(0, a.isr[2])
    b = w.state(0)
    assert b.partition_epoch > left.partition_epoch and w.disks[follower].replicas[0].state == b


def test_a_deployment_of_replication_factor_one_never_recreates_a_partition_whose_node_is_away():
    w = up(World(num_partitions=3, rf=1, min_isr=1))
    w.run(1_000)  # the layout is recorded on the disks once every partition exists
    owner = w.state(2).leader
    w.full_restart([n for n in w.node_ids if n != owner])
    w.run(10_000)
    assert 2 not in w.meta.partitions  # waits for its only replica, never laid out afresh elsewhere
    w.boot(owner)
    up(w)
    assert w.state(2).replicas == (owner,)


def test_the_recovery_quorum_counts_the_lowest_min_isr_the_disks_recorded():
    w = up(World(num_partitions=1))
    w.recorded_min_isr = 1  # it once ran with min.insync.replicas=1: a write may be on one replica only
    w.full_restart(["node-0", "node-1"])
    w.run(10_000)
    assert w.meta.partitions == {}  # 2 of 3 replicas is not enough under min.insync.replicas=1
    w.boot("node-2")
    up(w)


def test_two_live_incarnations_of_one_name_do_not_flip_flop():
    old = {"NodeID": "aa" * 28, "Alive": True, "Resources": {"coordinator": 1.0}, "Labels": {"raygroups.io/node": "n"}}
    new = {**old, "NodeID": "bb" * 28}
    first = coordinator_nodes([old, new], {"n": "aa" * 28})["n"]
    assert first.node_id == "bb" * 28  # the restarted one
    for _ in range(3):  # once superseded, the old incarnation stays dead to the controller
        again = coordinator_nodes([old, new], {"n": "bb" * 28}, {"aa" * 28})["n"]
        assert (again.node_id, again.alive) == ("bb" * 28, True)
    w = up(World(num_partitions=1))
    w.boot("node-1")
    w.step()
    assert w.meta.superseded  # the decision remembers which incarnation was replaced


def test_followers_lost_one_after_the_other_leave_the_isr_and_rejoin_when_they_return():
    w = up(World(num_partitions=1))
    a = w.state(0)
    f1, f2 = [n for n in a.replicas if n != a.leader]
    w.kill(f1)
    w.step()
    assert w.state(0).isr == tuple(n for n in a.isr if n != f1) and w.state(0).leader == a.leader
    w.kill(f2)
    w.step()
    assert w.state(0).isr == (a.leader,)  # below min.insync.replicas: the leader refuses writes, stays leader
    assert w.state(0).leader_epoch == a.leader_epoch  # no failover: the leader is fine
    for n in (f1, f2):
        w.boot(n)
    w.run(1_000)
    w.catch_up(0)
    assert set(w.state(0).isr) == set(a.replicas) and w.state(0).leader == a.leader


def test_a_new_node_is_not_given_replicas_before_its_disk_has_reported():
    """A node that joins while a dead node's replicas are due to move gets none of them until its disk has
    reported -- and none at all if the report refuses it (its disk belongs to another deployment)."""
    w = up(World(nodes=("node-0", "node-1", "node-2"), num_partitions=4, node_replacement_delay_ms=5_000))
    w.boot("node-3")
    w.disks["node-3"].num_partitions = 8
    w.unreachable.add("node-3")  # its LogServer is still starting: no report yet
    w.kill("node-2")
    w.run(10_000)
    assert all("node-3" not in a.replicas for a in w.meta.partitions.values())
    w.unreachable.discard("node-3")
    w.run(2_000)
    assert "node-3" in w.meta.refused
    assert all("node-3" not in a.replicas for a in w.meta.partitions.values())
