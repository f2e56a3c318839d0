"""placement.plan: the controller's pure target placement, leader election and Kafka's 10 % trigger."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from raygroups.placement.plan import (
    PartitionAssignment,
    Plan,
    elect_leader,
    leader_counts,
    needs_leader_rebalance,
    plan,
    replica_counts,
)

POOL = [f"node-{c}" for c in "abcdefgh"]
A, B, C, D, E = POOL[:5]
PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def loads(p: Plan, nodes) -> dict[str, int]:
    counts = replica_counts(p.partitions)
    return {x: counts.get(x, 0) for x in nodes}


def band(total: int, n: int, t: float) -> tuple[int, int]:
    from fractions import Fraction

    m = Fraction(total, n)
    tt = Fraction(str(t))
    return min(math.floor(m), math.ceil(m * (1 - tt))), max(math.ceil(m), math.floor(m * (1 + tt)))


def min_shifts(load: dict[str, int], t: float) -> int:
    """Fewest one-replica shifts that bring every node inside the band."""
    lower, upper = band(sum(load.values()), len(load), t)
    return max(sum(max(0, v - upper) for v in load.values()), sum(max(0, lower - v) for v in load.values()))


def offline(prev: PartitionAssignment, nodes) -> bool:
    return not any(x in nodes and x in prev.replicas for x in prev.isr)


def synced(p: Plan, nodes) -> dict[int, PartitionAssignment]:
    """What a controller does after reconciling: new replicas caught up, leader elected."""
    out = {}
    for k, a in p.partitions.items():
        caught_up = PartitionAssignment(a.replicas, a.leader, a.leader_epoch, a.replicas)
        leader = elect_leader(caught_up, set(nodes))
        out[k] = PartitionAssignment(a.replicas, leader, a.leader_epoch + (leader != a.leader), a.replicas)
    return out


def settle(partitions, nodes, previous, rf, t) -> dict[int, PartitionAssignment]:
    """Plan and sync twice: partitions brought back online by the first sync are re-placed by the second."""
    for _ in range(2):
        previous = synced(plan(partitions, nodes, previous, rf, t), nodes)
    return previous


# --------------------------------------------------------------------------- strategies

node_sets = st.lists(st.sampled_from(POOL), min_size=1, max_size=7, unique=True)
thresholds = st.sampled_from([0.0, 0.1, 0.25])


@st.composite
def histories(draw):
    """A placement reached through a few node losses/joins, with or without the controller syncing ISRs."""
    partitions = draw(st.integers(1, 24))
    rf = draw(st.integers(1, 4))
    t = draw(thresholds)
    nodes = draw(node_sets)
    current = plan(partitions, nodes, None, rf, t).partitions
    for _ in range(draw(st.integers(0, 3))):
        if len(nodes) > 1 and draw(st.booleans()):
            gone = draw(st.sampled_from(nodes))
            nodes = [x for x in nodes if x != gone]
        else:
            spare = [x for x in POOL if x not in nodes]
            if spare:
                nodes = nodes + [draw(st.sampled_from(spare))]
        p = plan(partitions, nodes, current, rf, t)
        current = synced(p, nodes) if draw(st.booleans()) else p.partitions
    return partitions, rf, t, nodes, current


# --------------------------------------------------------------------------- properties


@PROPS
@given(histories(), node_sets)
def test_every_partition_gets_min_rf_n_distinct_replicas_on_the_nodes(history, nodes):
    partitions, rf, t, _, previous = history
    result = plan(partitions, nodes, previous, rf, t)
    assert sorted(result.partitions) == list(range(partitions))
    for k, a in result.partitions.items():
        if offline(previous[k], nodes):
            assert a == previous[k]
            continue
        assert len(a.replicas) == min(rf, len(nodes))
        assert len(set(a.replicas)) == len(a.replicas)
        assert set(a.replicas) <= set(nodes)


@PROPS
@given(histories(), node_sets, st.randoms(use_true_random=False))
def test_deterministic_whatever_the_order_of_nodes_and_previous(history, nodes, rnd):
    partitions, rf, t, _, previous = history
    shuffled_nodes = list(nodes)
    rnd.shuffle(shuffled_nodes)
    keys = list(previous)
    rnd.shuffle(keys)
    reordered = {k: previous[k] for k in keys}
    first = plan(partitions, nodes, previous, rf, t)
    assert plan(partitions, shuffled_nodes, reordered, rf, t) == first
    assert plan(partitions, tuple(nodes), dict(previous), rf, t) == first


@PROPS
@given(histories())
def test_a_plan_is_its_own_fixed_point_and_inside_the_band(history):
    partitions, rf, t, nodes, previous = history
    first = plan(partitions, nodes, previous, rf, t)
    again = plan(partitions, nodes, first.partitions, rf, t)
    assert again.moves == 0
    assert again.partitions == first.partitions
    if not any(offline(a, nodes) for a in previous.values()):
        lower, upper = band(sum(loads(first, nodes).values()), len(nodes), t)
        assert all(lower <= v <= upper for v in loads(first, nodes).values())


@PROPS
@given(histories())
def test_leadership_is_carried_over_and_order_kept(history):
    partitions, rf, t, nodes, previous = history
    result = plan(partitions, nodes, previous, rf, t)
    for k, a in result.partitions.items():
        prev = previous[k]
        assert (a.leader, a.leader_epoch, a.isr) == (prev.leader, prev.leader_epoch, prev.isr)
        kept = [x for x in prev.replicas if x in a.replicas]
        assert list(a.replicas[: len(kept)]) == kept  # previous order, gains at the end
        assert result.moves >= 0
    assert result.moves == sum(len(set(a.replicas) ^ set(previous[k].replicas)) for k, a in result.partitions.items())


@PROPS
@given(st.integers(1, 40), st.integers(1, 4), node_sets, thresholds)
def test_creation_rotates_preferred_leaders_like_kafka(partitions, rf, nodes, t):
    result = plan(partitions, nodes, None, rf, t)
    ordered = sorted(nodes)
    assert result.moves == partitions * min(rf, len(nodes))
    for k, a in result.partitions.items():
        assert a.replicas[0] == ordered[k % len(ordered)]
        assert (a.leader, a.leader_epoch, a.isr) == (a.replicas[0], 0, a.replicas)
    preferred = Counter(a.replicas[0] for a in result.partitions.values())
    assert max(preferred.values()) - min(preferred.get(x, 0) for x in nodes) <= 1
    lower, upper = band(sum(loads(result, nodes).values()), len(nodes), t)
    assert all(lower <= v <= upper for v in loads(result, nodes).values())


@PROPS
@given(st.integers(1, 40), st.integers(2, 4), st.lists(st.sampled_from(POOL), min_size=3, max_size=8, unique=True),
       thresholds, st.data())
def test_losing_a_node_moves_only_the_replicas_that_were_on_it(partitions, rf, nodes, t, data):
    if rf >= len(nodes):  # nowhere to re-replicate to: see test_fewer_nodes_than_rf_then_a_node_joins
        rf = len(nodes) - 1
    before = plan(partitions, nodes, None, rf, t).partitions
    lost = data.draw(st.sampled_from(nodes))
    result = plan(partitions, [x for x in nodes if x != lost], before, rf, t)
    on_lost = 0
    for k, a in result.partitions.items():
        if lost not in before[k].replicas:
            assert a is before[k]
            continue
        on_lost += 1
        assert a.replicas[:-1] == tuple(x for x in before[k].replicas if x != lost)
        assert a.replicas[-1] not in before[k].replicas
    assert result.moves == 2 * on_lost


def optimum(partitions, nodes, previous, r, t) -> int:
    """Brute force: the fewest placement changes that put r replicas per partition on nodes, inside the band."""
    lower, upper = band(partitions * r, len(nodes), t)
    best = None
    for combo in itertools.product(list(itertools.combinations(sorted(nodes), r)), repeat=partitions):
        counts = Counter(x for reps in combo for x in reps)
        if all(lower <= counts[x] <= upper for x in nodes):
            moves = sum(len(set(reps) ^ set(previous[k].replicas)) for k, reps in enumerate(combo))
            best = moves if best is None else min(best, moves)
    return best


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3), st.lists(st.sampled_from(POOL[:5]), min_size=1, max_size=4, unique=True),
       thresholds, st.data())
def test_moves_are_the_fewest_that_reach_the_band(partitions, rf, nodes, t, data):
    """Against a brute-force oracle, from any previous placement (on any nodes) to any node set -- except an
    offline partition (left alone) and a lowered replication factor (the plan keeps the leader's replica)."""
    r = min(rf, len(nodes))
    previous = {}
    for k in range(partitions):
        reps = tuple(data.draw(st.lists(st.sampled_from(POOL[:5]), min_size=1, max_size=4, unique=True)))
        live = [x for x in reps if x in nodes]
        assume(live and len(live) <= r)
        previous[k] = PartitionAssignment(reps, reps[0], 0, reps)
    assert plan(partitions, nodes, previous, rf, t).moves == optimum(partitions, nodes, previous, r, t)


@PROPS
@given(histories(), st.data())
def test_removing_a_node_then_adding_it_back_converges_with_minimal_moves(history, data):
    partitions, rf, t, nodes, previous = history
    start = settle(partitions, nodes, previous, rf, t)
    if len(nodes) < 2:
        return
    gone = data.draw(st.sampled_from(nodes))
    survivors = [x for x in nodes if x != gone]
    without = synced(plan(partitions, survivors, start, rf, t), survivors)
    back = plan(partitions, nodes, without, rf, t)
    pinned = sum(1 for a in without.values() if offline(a, nodes))
    if min(rf, len(survivors)) == min(rf, len(nodes)):
        # a pure join: only balancing shifts, each moving one previously placed replica onto a lighter node
        assert back.moves == 2 * min_shifts(loads(Plan(without, 0), nodes), t)
    else:  # the node is needed for the replication factor: each partition gains exactly it back
        assert back.moves == partitions - pinned
        assert all(gone in a.replicas for a in back.partitions.values() if not offline(a, nodes))
    assert plan(partitions, nodes, back.partitions, rf, t).moves == 0
    if not pinned:
        lower, upper = band(sum(loads(back, nodes).values()), len(nodes), t)
        assert all(lower <= v <= upper for v in loads(back, nodes).values())


# --------------------------------------------------------------------------- scenarios


def test_three_nodes_rf3_every_partition_everywhere():
    result = plan(50, [C, A, B], None, 3)
    assert result.moves == 150
    for k, a in result.partitions.items():
        assert set(a.replicas) == {A, B, C}
        assert a.replicas[0] == [A, B, C][k % 3]
        assert a.leader == a.replicas[0] and a.leader_epoch == 0 and a.isr == a.replicas
    assert leader_counts(result.partitions) == {A: 17, B: 17, C: 16}
    assert not needs_leader_rebalance(result.partitions, [A, B, C])


def test_five_nodes_rf3_kafka_round_robin_layout_is_balanced():
    result = plan(50, [A, B, C, D, E], None, 3)
    ps = result.partitions
    assert ps[0].replicas == (A, B, C)
    assert ps[1].replicas == (B, C, D)
    assert ps[4].replicas == (E, A, B)
    assert ps[5].replicas == (A, C, D)  # the follower shift grows by one every 5 partitions
    assert replica_counts(ps) == dict.fromkeys([A, B, C, D, E], 30)
    assert leader_counts(ps) == dict.fromkeys([A, B, C, D, E], 10)
    # a node's leaderships fail over to several different nodes, not all to one
    seconds = Counter(a.replicas[1] for a in ps.values() if a.replicas[0] == A)
    assert len(seconds) == 4


def test_node_loss_replaces_only_its_replicas_and_keeps_leadership_fields():
    nodes = [A, B, C, D, E]
    before = plan(50, nodes, None, 3).partitions
    after = plan(50, [A, B, D, E], before, 3)
    assert after.moves == 60  # 30 replicas removed + 30 added
    for k, a in after.partitions.items():
        if C not in before[k].replicas:
            assert a is before[k]
        else:
            assert a.replicas[:2] == tuple(x for x in before[k].replicas if x != C)
            assert C not in a.replicas
            assert (a.leader, a.leader_epoch, a.isr) == (before[k].leader, before[k].leader_epoch, before[k].isr)
    assert sorted(replica_counts(after.partitions).values()) == [37, 37, 38, 38]


def test_node_join_moves_followers_up_to_the_band():
    before = plan(50, [A, B, C], None, 3).partitions
    after = plan(50, [A, B, C, D], before, 3)  # mean 37.5, band [34, 41]
    counts = replica_counts(after.partitions)
    assert counts[D] == 34 and after.moves == 68
    assert sorted(counts.values()) == [34, 38, 39, 39]
    for k, a in after.partitions.items():
        assert a.replicas[0] == before[k].replicas[0]  # preferred leaders never move
        assert a.leader == before[k].leader
    exact = plan(50, [A, B, C, D], before, 3, imbalance_threshold=0.0)
    assert replica_counts(exact.partitions)[D] == 37 and exact.moves == 74
    assert plan(50, [A, B, C, D], after.partitions, 3).moves == 0


def test_join_moves_only_what_the_band_requires():
    before = plan(10, [A, B, C, D, E], None, 1).partitions  # 2 each
    assert plan(10, [A, B, C, D, E, "node-f"], before, 1).moves == 2 * 1  # mean 1.67, band [1, 2]


def test_fewer_nodes_than_rf_then_a_node_joins():
    small = plan(6, [A, B], None, 3)
    assert all(len(a.replicas) == 2 for a in small.partitions.values())
    grown = plan(6, [A, B, C], small.partitions, 3)
    assert grown.moves == 6
    assert all(a.replicas[2] == C for a in grown.partitions.values())


def test_lower_replication_factor_keeps_leader_and_in_sync_replicas():
    prev = {0: PartitionAssignment((A, B, C), leader=C, leader_epoch=4, isr=(C, A))}
    result = plan(1, [A, B, C], prev, 2)
    assert result.partitions[0].replicas == (A, C)
    assert result.moves == 1


def test_partition_missing_from_previous_is_created():
    prev = plan(3, [A, B, C], None, 2).partitions
    result = plan(3, [A, B, C], {0: prev[0], 2: prev[2]}, 2)
    assert result.partitions[1] == prev[1]
    assert result.moves == 2


def test_offline_partition_is_left_for_its_in_sync_replica_to_return():
    prev = {0: PartitionAssignment((A, B, C), leader=A, leader_epoch=3, isr=(A,))}
    result = plan(1, [B, C, D], prev, 3)
    assert result.partitions[0] == prev[0] and result.moves == 0
    assert elect_leader(prev[0], {B, C, D}) is None
    assert elect_leader(prev[0], {A, B, C, D}) == A  # A comes back


def test_elect_leader_takes_the_first_live_in_sync_replica():
    a = PartitionAssignment((A, B, C), leader=A, leader_epoch=7, isr=(A, C))
    assert elect_leader(a, {A, B, C}) == A
    assert elect_leader(a, {B, C}) == C  # B is live but not in sync
    assert elect_leader(a, [C, B]) == C


def test_elect_leader_offline_without_a_live_in_sync_replica_unless_unclean():
    a = PartitionAssignment((A, B, C), leader=A, leader_epoch=7, isr=(A,))
    assert elect_leader(a, {B, C}) is None
    assert elect_leader(a, {B, C}, unclean=True) == B
    assert elect_leader(a, {D}, unclean=True) is None
    assert elect_leader(a, set(), unclean=True) is None


def test_elect_leader_returns_to_the_preferred_replica():
    a = PartitionAssignment((A, B, C), leader=B, leader_epoch=8, isr=(B, C, A))
    assert elect_leader(a, {A, B, C}) == A


def _led(preferred: str, count: int, not_led: int) -> list[PartitionAssignment]:
    out = []
    for i in range(count):
        leader = B if i < not_led else preferred
        out.append(PartitionAssignment((preferred, B, C), leader=leader, leader_epoch=1, isr=(preferred, B, C)))
    return out


@pytest.mark.parametrize(("count", "not_led", "expected"), [
    (10, 0, False), (10, 1, False), (10, 2, True), (30, 3, False), (30, 4, True), (20, 2, False), (1, 1, True),
])
def test_leader_imbalance_triggers_strictly_above_ten_percent(count, not_led, expected):
    assignments = {i: a for i, a in enumerate(_led(A, count, not_led))}
    assert needs_leader_rebalance(assignments, [A, B, C]) is expected


def test_leader_imbalance_threshold_is_exact_and_ignores_dead_preferred_leaders():
    three_of_ten = _led(A, 10, 3)
    assert needs_leader_rebalance(three_of_ten, [A, B, C], threshold=0.3) is False
    assert needs_leader_rebalance(three_of_ten, [A, B, C], threshold=0.29) is True
    assert needs_leader_rebalance(three_of_ten, [B, C]) is False  # A is dead: nothing to move back
    offline = [PartitionAssignment((A, B), leader=None, leader_epoch=2, isr=(A,))]
    assert needs_leader_rebalance(offline, [A, B]) is True
    assert leader_counts(offline) == {}


def test_leader_counts_accepts_a_mapping_or_values():
    ps = plan(6, [A, B, C], None, 2).partitions
    assert leader_counts(ps) == leader_counts(ps.values()) == {A: 2, B: 2, C: 2}


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(("kwargs", "error", "name"), [
    ({"partitions": 0}, ValueError, "partitions"),
    ({"partitions": True}, TypeError, "partitions"),
    ({"partitions": 2.0}, TypeError, "partitions"),
    ({"nodes": []}, ValueError, "nodes"),
    ({"nodes": "node-a"}, TypeError, "nodes"),
    ({"nodes": [A, A]}, ValueError, "duplicate node id"),
    ({"nodes": [A, 3]}, TypeError, "nodes"),
    ({"nodes": [A, ""]}, ValueError, "nodes"),
    ({"replication_factor": 0}, ValueError, "replication_factor"),
    ({"replication_factor": "3"}, TypeError, "replication_factor"),
    ({"imbalance_threshold": -0.1}, ValueError, "imbalance_threshold"),
    ({"imbalance_threshold": float("nan")}, ValueError, "imbalance_threshold"),
    ({"imbalance_threshold": "10%"}, TypeError, "imbalance_threshold"),
    ({"previous": [1]}, TypeError, "previous"),
    ({"previous": {5: None}}, ValueError, "previous"),
    ({"previous": {"0": None}}, TypeError, "previous"),
    ({"previous": {0: (A, B)}}, TypeError, "previous"),
])
def test_plan_rejects_bad_arguments_naming_them(kwargs, error, name):
    args = {"partitions": 3, "nodes": [A, B, C], "previous": None, "replication_factor": 2} | kwargs
    with pytest.raises(error, match=name):
        plan(**args)


@pytest.mark.parametrize(("kwargs", "error", "name"), [
    ({"replicas": ()}, ValueError, "replicas"),
    ({"replicas": (A, A)}, ValueError, "replicas"),
    ({"replicas": A}, TypeError, "replicas"),
    ({"leader": 1}, TypeError, "leader"),
    ({"leader_epoch": -1}, ValueError, "leader_epoch"),
    ({"leader_epoch": None}, TypeError, "leader_epoch"),
    ({"isr": (A, A)}, ValueError, "isr"),
])
def test_partition_assignment_rejects_bad_fields(kwargs, error, name):
    fields = {"replicas": (A, B), "leader": A, "leader_epoch": 0, "isr": (A, B)} | kwargs
    with pytest.raises(error, match=name):
        PartitionAssignment(**fields)


def test_partition_assignment_stores_lists_as_tuples():
    a = PartitionAssignment([A, B], A, 0, [A])
    assert a == PartitionAssignment((A, B), A, 0, (A,))
    assert hash(a) == hash(PartitionAssignment((A, B), A, 0, (A,)))


def test_election_and_trigger_reject_bad_arguments():
    a = PartitionAssignment((A, B), A, 0, (A, B))
    with pytest.raises(TypeError, match="live_nodes"):
        elect_leader(a, "node-a")
    with pytest.raises(TypeError, match="unclean"):
        elect_leader(a, {A}, unclean="yes")
    with pytest.raises(TypeError, match="a must be"):
        elect_leader((A, B), {A})
    with pytest.raises(ValueError, match="threshold"):
        needs_leader_rebalance({0: a}, [A], threshold=1.5)
    with pytest.raises(TypeError, match="assignments"):
        leader_counts([(A, B)])
