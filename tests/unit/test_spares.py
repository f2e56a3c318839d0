"""Which spares a node keeps and which adopts a partition (``placement.spares``, pure), and their
performer (``placement.spare_keeper``) against a seam that plays Ray's actors in memory."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from raygroups.placement.model import Metadata, Observations, Settings
from raygroups.placement.nodes import NodeObservation
from raygroups.placement.plan import PartitionAssignment
from raygroups.placement.spare_keeper import SpareKeeper
from raygroups.placement.spares import (
    Spare,
    SparesSeen,
    adoption_order,
    cold_spares_missing,
    cold_spares_wanted,
    followed_by,
    free_spares,
    inheritable,
    needs_spare_for_all,
    standby_spares_due,
    standby_spares_plan,
)

# --------------------------------------------------------------------------- the pure choices


def test_a_partition_is_adopted_by_its_own_spare_first_then_a_spare_for_all_never_another_partitions():
    spares = [Spare("s-all", None), Spare("s-p2", 2), Spare("s-p3", 3), Spare("s-p2-serving", 2, 2, serving=True)]
    free = free_spares(spares)
    assert [s.name for s in free] == ["s-all", "s-p2", "s-p3"]
    assert adoption_order(2, free) == ["s-p2", "s-all"]
    assert adoption_order(5, free) == ["s-all"]
    assert adoption_order(5, [Spare("s-p3", 3)]) == []
    # The cold spare (no standby) comes last: after the partition's own and the one with every standby.
    with_cold = free_spares(spares + [Spare("a-cold", None, cold=True)])
    assert adoption_order(2, with_cold) == ["s-p2", "s-all", "a-cold"]
    assert adoption_order(5, [Spare("a-cold", None, cold=True), Spare("s-p3", 3)]) == ["a-cold"]


def test_a_spare_for_all_is_started_only_without_spares_per_partition_and_when_none_is_left():
    free = [Spare("s-all", None), Spare("s-p2", 2), Spare("s-cold", None, cold=True)]
    assert not needs_spare_for_all(False, free)
    assert needs_spare_for_all(False, free, used={"s-all"})  # a cold spare is no spare for all
    assert needs_spare_for_all(False, [Spare("s-p2", 2)])
    assert not needs_spare_for_all(True, [])


def test_every_node_keeps_its_cold_spares_whatever_the_mode():
    assert cold_spares_missing([Spare("s-all", None), Spare("s-p2", 2)], 2) == 2
    assert cold_spares_missing([Spare("s-cold", None, cold=True)], 2) == 1
    assert cold_spares_missing([Spare("s-cold", None, cold=True)], 1) == 0
    assert cold_spares_missing([Spare("s-cold", None, cold=True)], 1, used={"s-cold"}) == 1
    assert cold_spares_missing([Spare("a-cold", None, cold=True), Spare("b-cold", None, cold=True)], 0) == 0


def _led(leaders: str) -> dict[int, PartitionAssignment]:
    """Eight partitions on three nodes, Kafka's round-robin replica order, led as ``leaders`` says (one digit
    per partition, the node's number)."""
    nodes = ("a", "b", "c")
    out = {}
    for p, n in enumerate(leaders):
        replicas = tuple(nodes[(p + i) % 3] for i in range(3))
        out[p] = PartitionAssignment(replicas, nodes[int(n)], 1, replicas, 1)
    return out


def test_a_node_inherits_at_most_what_one_lost_node_would_hand_it():
    live = {"a", "b", "c"}
    balanced = _led("01201201")  # every partition on its preferred replica
    # (Kafka's layout: a's partitions all name b next, b's name c, c's name a.)
    assert inheritable(balanced, live) == {"a": 2, "b": 3, "c": 3}
    gathered = _led("00000000")  # a full restart put every leader on the first node back
    assert inheritable(gathered, live) == {"a": 0, "b": 6, "c": 2}
    # A node that is not in sync inherits nothing; one lost node can hand over all.
    out_of_sync = {p: replace(a, isr=tuple(n for n in a.isr if n != "b")) for p, a in gathered.items()}
    assert inheritable(out_of_sync, live) == {"a": 0, "b": 0, "c": 8}
    assert inheritable(gathered, {"a", "b"}) == {"a": 0, "b": 8}


def test_a_node_keeps_more_cold_spares_while_it_would_inherit_more_than_its_spares_cover_up_to_a_limit():
    assert cold_spares_wanted(2, 3, False, 6) == 2  # the spare with the standbys and two cold spares cover three
    assert cold_spares_wanted(2, 6, False, 6) == 5  # the spare with the standbys takes the first of six
    assert cold_spares_wanted(2, 17, False, 6) == 6  # 50 partitions on 3 nodes: shard.cold.spares.max
    assert cold_spares_wanted(3, 17, False, 1) == 3  # the setting is a floor, whatever the limit
    assert cold_spares_wanted(0, 0, False, 6) == 0
    assert cold_spares_wanted(2, 6, True, 6) == 2  # spares per partition: each has its own


def test_spares_per_partition_follow_the_followed_partitions_and_leave_adopting_ones_alone():
    free = [Spare("a-p1", 1), Spare("b-p1", 1), Spare("c-p4", 4), Spare("d-p5", 5, bound=5), Spare("e-all", None)]
    start, stop = standby_spares_plan({1, 2}, free)
    assert start == [2]  # 1 has its spare; 2 gets one
    assert stop == ["b-p1", "c-p4"]  # a second for 1; 4 no longer followed; d-p5 is adopting, e-all is not ours
    assert standby_spares_plan(frozenset(), []) == ([], [])


def node(name, incarnation, alive=True):
    return NodeObservation(name, incarnation, alive, True)


def test_the_spare_schedule_names_a_node_when_what_it_follows_or_its_incarnation_changed_or_every_recheck():
    parts = {0: PartitionAssignment(("A", "B"), "A", 1, ("A", "B"), 1),
             1: PartitionAssignment(("B", "C"), "B", 1, ("B", "C"), 1)}
    meta = Metadata(Settings(2, 2, 1), partitions=parts, reported={"A": "A#1", "B": "B#1", "C": "C#1", "D": "D#1"},
                    refused={"D": "another deployment"})
    obs = Observations({"A": node("A", "A#1"), "B": node("B", "B#1"), "C": node("C", "C#2"), "D": node("D", "D#1"),
                        "E": node("E", "E#1", alive=False)})
    assert followed_by(parts, "B") == {0} and followed_by(parts, "C") == {1}
    # C's new incarnation has not reported; D is refused; E is down.
    assert standby_spares_due(meta, obs, {}, 1_000, 10_000) == {"A": ("A#1", frozenset()), "B": ("B#1", frozenset({0}))}
    seen = {"A": SparesSeen("A#1", frozenset(), 1_000), "B": SparesSeen("B#1", frozenset({0}), 1_000)}
    assert standby_spares_due(meta, obs, seen, 11_000, 10_000) == {}
    assert list(standby_spares_due(meta, obs, seen, 11_001, 10_000)) == ["A", "B"]  # the recheck
    failed_over = {**parts, 1: PartitionAssignment(("B", "C"), "C", 2, ("B", "C"), 2)}
    meta = replace(meta, partitions=failed_over)
    assert standby_spares_due(meta, obs, seen, 2_000, 10_000) == {"B": ("B#1", frozenset({0, 1}))}
    restarted = Observations({**obs.nodes, "A": node("A", "A#2")})
    meta = replace(meta, partitions=parts, reported={**meta.reported, "A": "A#2"})
    assert standby_spares_due(meta, restarted, seen, 2_000, 10_000) == {"A": ("A#2", frozenset())}


# --------------------------------------------------------------------------- the performer


class Seam:
    """A node's spares as the Ray seam would list and treat them, in memory."""

    def __init__(self, per_partition=False, cold_spares=1) -> None:
        self.standby_per_partition = per_partition
        self.cold_spares = cold_spares
        self.spares: dict[str, Spare] = {}
        self.starting: set[str] = set()
        self.refuses: set[str] = set()  # spares whose adopt call fails
        self.actions: list[tuple] = []
        self._n = 0

    def list_spares(self, node):
        return list(self.spares.values())

    def adopt(self, partition, name):
        if name not in self.spares:
            return None, "gone"
        if name in self.starting:
            return None, "starting"
        if name in self.refuses:
            del self.spares[name]
            self.actions.append(("gave up on", name))
            return None, "failed"
        self.spares[name] = Spare(name, self.spares[name].standby_for, partition, serving=True)
        self.actions.append(("adopted", partition, name))
        return name, "adopted"

    def kill_shard(self, partition):
        self.actions.append(("killed shard", partition))

    def start_shard(self, partition, node, scheduling, timeout_s):
        self.actions.append(("started shard", partition, node))
        return f"shard-{partition}"

    def create_spare(self, node, scheduling, standby_for=None, cold=False):
        self._n += 1
        name = f"{node}-new{self._n}" + ("-c" if cold else "" if standby_for is None else f"-p{standby_for}")
        self.spares[name] = Spare(name, standby_for, cold=cold)
        self.actions.append(("new cold spare",) if cold else ("new spare", standby_for))

    def kill_spare(self, name):
        del self.spares[name]
        self.actions.append(("stopped", name))


def test_a_failover_adopts_the_running_spare_of_its_partition_and_keeps_the_others():
    seam = Seam(per_partition=True)
    seam.spares = {"p2": Spare("p2", 2), "p3": Spare("p3", 3)}
    assert SpareKeeper(seam).replace_shard(2, "n", {}) == "p2"
    assert seam.actions == [("killed shard", 2), ("adopted", 2, "p2")]  # no spare for all in this mode


def test_a_starting_or_refusing_spare_is_passed_over_for_the_next_then_a_new_process_and_a_new_spare():
    seam = Seam()
    seam.spares = {"p2": Spare("p2", 2), "all-a": Spare("all-a", None), "all-b": Spare("all-b", None)}
    seam.starting, seam.refuses = {"p2"}, {"all-a"}
    keeper = SpareKeeper(seam)
    assert keeper.replace_shard(2, "n", {}) == "all-b"
    assert seam.actions == [("killed shard", 2), ("gave up on", "all-a"), ("adopted", 2, "all-b")]
    # The node's next spare for every partition, and its cold spare, come after, off the failover's path,
    # and once.
    assert keeper.replenish("n", {}) is True and keeper.replenish("n", {}) is False
    assert seam.actions[-2:] == [("new spare", None), ("new cold spare",)]
    seam.actions.clear()
    seam.starting.update({"n-new1", "n-new2-c"})  # both still starting: a new process
    assert keeper.replace_shard(4, "n", {}) == "shard-4" and keeper.replenish("n", {}) is False
    assert seam.actions == [("killed shard", 4), ("started shard", 4, "n")]  # and they stay the next spares
    seam.actions.clear()
    seam.starting.clear()
    del seam.spares["n-new1"]  # gone: the cold spare is the one left for partition 4, and adopts it
    assert keeper.replace_shard(4, "n", {}) == "n-new2-c" and keeper.replenish("n", {}) is True
    assert seam.actions == [("killed shard", 4), ("adopted", 4, "n-new2-c"), ("new spare", None),
                            ("new cold spare",)]


def test_a_node_gets_a_spare_for_all_unless_it_keeps_spares_per_partition_and_a_cold_spare_either_way():
    seam = Seam()
    keeper = SpareKeeper(seam)
    assert keeper.ensure_spare("n", {}) is True and keeper.ensure_spare("n", {}) is False
    assert seam.actions == [("new spare", None), ("new cold spare",)]
    assert keeper.ensure_standby_spares("n", {1}, {}) == ([], [])  # not this mode
    per = Seam(per_partition=True)
    assert SpareKeeper(per).ensure_spare("n", {}) is True and per.actions == [("new cold spare",)]


def test_a_node_keeps_shard_cold_spares_of_them_and_a_lost_nodes_partitions_adopt_them_all():
    """Two cold spares (the default): a node handed three partitions at once (a lost node's leaders) adopts its
    spare with the standbys and both cold spares, and starts no process; then all three are replaced."""
    seam = Seam(cold_spares=2)
    keeper = SpareKeeper(seam)
    assert keeper.ensure_spare("n", {}) is True
    assert seam.actions == [("new spare", None), ("new cold spare",), ("new cold spare",)]
    seam.actions.clear()
    assert [keeper.replace_shard(p, "n", {}) for p in (1, 5, 7)] == ["n-new1", "n-new2-c", "n-new3-c"]
    assert ("started shard", 7, "n") not in seam.actions
    assert keeper.replenish("n", {}) is True and keeper.replenish("n", {}) is False
    assert seam.actions[-3:] == [("new spare", None), ("new cold spare",), ("new cold spare",)]


def test_a_node_wanting_more_cold_spares_gets_them_then_keeps_what_it_has_when_it_wants_fewer():
    seam = Seam(cold_spares=2)
    keeper = SpareKeeper(seam)
    keeper.ensure_spare("n", {})
    assert keeper.want_cold("n", 2) is False and keeper.want_cold("n", 4) is True
    assert keeper.ensure_spare("n", {}) is True
    assert Counter(a for a in seam.actions) == {("new spare", None): 1, ("new cold spare",): 4}
    # Leadership spread again: no spare stopped, and the ones failovers adopt are replaced up to two only.
    assert keeper.want_cold("n", 2) is False
    assert [keeper.replace_shard(p, "n", {}) for p in (1, 2, 3, 4)] == ["n-new1", "n-new2-c", "n-new3-c", "n-new4-c"]
    assert not [a for a in seam.actions if a[0] == "stopped"]
    seam.actions.clear()
    keeper.replenish("n", {})
    assert seam.actions == [("new spare", None), ("new cold spare",)]  # one cold spare left, one more makes two


def test_spares_per_partition_are_started_and_stopped_and_an_adopting_one_is_never_stopped():
    seam = Seam(per_partition=True)
    keeper = SpareKeeper(seam)
    assert keeper.ensure_standby_spares("n", {1, 2}, {}) == ([1, 2], [])
    keeper.replace_shard(2, "n", {})  # adopted: no longer free, recorded as adopting
    seam.spares["p9"] = Spare("p9", 9, bound=9)  # recorded as adopting partition 9 (its adoption under way)
    started, stopped = keeper.ensure_standby_spares("n", {1, 3}, {})
    assert started == [3] and stopped == []
    assert sorted(s.standby_for for s in free_spares(seam.list_spares("n")) if s.bound is None) == [1, 3]
    assert "p9" in seam.spares
    assert keeper.ensure_standby_spares("n", {3}, {}) == ([], ["n-new1-p1"])


def test_choosing_among_a_nodes_spares_lists_decides_and_acts_under_one_lock():
    seam = Seam(per_partition=True)
    seam.spares = {"p2": Spare("p2", 2), "p7": Spare("p7", 7)}
    keeper = SpareKeeper(seam)
    held = []

    def under_lock(name, real):
        def checked(*args, **kwargs):
            held.append((name, keeper._lock.locked()))
            return real(*args, **kwargs)
        return checked

    for method in ("list_spares", "adopt", "kill_shard", "create_spare", "kill_spare"):
        setattr(seam, method, under_lock(method, getattr(seam, method)))
    keeper.replace_shard(2, "n", {})
    keeper.replenish("n", {})  # the cold spare the failover used: created outside the lock
    assert held[-1] == ("create_spare", False) and seam.actions[-1] == ("new cold spare",)
    del held[-1]
    keeper.ensure_standby_spares("n", {1}, {})
    assert {name for name, _ in held} == {"list_spares", "adopt", "kill_shard", "create_spare", "kill_spare"}
    assert all(locked for _, locked in held)


def test_spares_being_created_outside_the_lock_count_as_there_for_the_decisions_meanwhile():
    """While a node's replacement spares are being created (outside the lock), a failover onto the node and
    the background check neither want nor start them a second time; an error creating one forgets it."""
    seam = Seam(cold_spares=2)
    keeper = SpareKeeper(seam)
    seam.spares = {"all": Spare("all", None), "c1": Spare("c1", None, cold=True), "c2": Spare("c2", None, cold=True)}
    assert keeper.replace_shard(1, "n", {}) == "all"
    during = []
    create = seam.create_spare

    def slow_create(node, scheduling, standby_for=None, cold=False):
        if not during:  # the first creation: meanwhile, another failover and the background check
            during.append(keeper.replace_shard(2, "n", {}))
            during.append(keeper.ensure_spare("n", {}))
        return create(node, scheduling, standby_for, cold)

    seam.create_spare = slow_create
    assert keeper.replenish("n", {}) is True
    assert during == ["c1", False]  # c1 adopted; the spare for all being created is not wanted again
    assert +keeper._creating == Counter()
    # The cold spare c1's adoption took: wanted once, and started by the next replenish.
    assert keeper.replenish("n", {}) is True and keeper.replenish("n", {}) is False
    assert [a for a in seam.actions if a[0].startswith("new")] == [("new spare", None), ("new cold spare",)]

    def failing(node, scheduling, standby_for=None, cold=False):
        raise RuntimeError("the GCS did not answer")

    seam.create_spare = failing
    keeper._wanting[("n", True)] = 2
    with pytest.raises(RuntimeError):
        keeper.replenish("n", {})
    assert +keeper._creating == Counter()  # nothing is left counted as being created
