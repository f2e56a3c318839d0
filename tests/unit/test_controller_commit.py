"""The controller actor's write path, without Ray: the real ``Controller`` class and real ``LogServer``s on
real files, reached through a factory that plays only Ray's actor-call layer (``handle.method.remote``).
A partition state takes effect only once the leader's and in-sync replicas' disks hold it; an unreachable
follower leaves the ISR; a partition epoch a failed commit left on a disk is never reused; leaders asking
for an epoch before the controller has checked their node are told to wait."""

from __future__ import annotations

import asyncio

import pytest
from raygroups.actors.log_server import LogServer
from raygroups.offsets_log.replica_state import partition_dir, read_replica_state
from raygroups.placement.controller import Controller
from raygroups.placement.decide import decide
from raygroups.placement.model import Commit, NodeReport, Observations, ReplicaReport, Settings
from raygroups.placement.nodes import NodeObservation
from raygroups.placement.plan import PartitionAssignment

NODES = ("A", "B", "C")


class Handle:
    """Stands in for a Ray actor handle: ``handle.method.remote(*args)`` returns the coroutine."""

    def __init__(self, obj, down: set, name: str) -> None:
        self._obj, self._down, self._name = obj, down, name

    def __getattr__(self, method):
        target = getattr(self._obj, method)
        down, name = self._down, self._name

        class _Method:
            @staticmethod
            def remote(*args):
                if name in down:
                    raise ValueError(f"{name} is unreachable")  # what a missing actor's lookup raises
                return target(*args)

        return _Method()


class Actors:
    def __init__(self, tmp_path) -> None:
        self.servers = {n: LogServer(n, str(tmp_path / n), 1 << 20, None, 1, 2) for n in NODES}
        self.down: set[str] = set()
        self.partitions: bytes | None = None  # the GCS cache

    def log_server(self, node):
        return Handle(self.servers[node], self.down, node)

    def load_partitions(self):
        return self.partitions

    def store_partitions(self, value):
        self.partitions = value

    def read_topics(self):
        return {}, 0

    shards: dict = {}  # partition -> the actor id registered under its shard's name

    def shard(self, partition):
        if partition not in self.shards:
            raise ValueError(f"no shard actor for partition {partition}")  # what a missing name raises
        return self.shards[partition]

    def actor_id(self, handle):
        return handle


def setup(tmp_path):
    actors = Actors(tmp_path)
    controller = Controller("ns", Settings(1, 3, 2), actors)
    return actors, controller


def observe(controller, actors, nodes=NODES) -> None:
    """One observation: every node alive, its LogServer's report as read from its disk."""
    obs_nodes = {n: NodeObservation(n, f"{n}#1", True, True) for n in NODES}
    reports = {}
    for n in nodes:
        raw = asyncio.run(actors.servers[n].report())
        replicas = {p: ReplicaReport(None if r["state"] is None else PartitionAssignment(
            tuple(r["state"]["replicas"]), r["state"]["leader"], r["state"]["leader_epoch"],
            tuple(r["state"]["isr"]), r["state"]["partition_epoch"]), r["fenced_epoch"])
            for p, r in raw["replicas"].items()}
        reports[n] = NodeReport(f"{n}#1", 1, replicas)
    controller._obs = Observations(obs_nodes, {}, reports)
    controller._meta = decide(controller._meta, controller._obs, 0).metadata


def created(controller, actors) -> PartitionAssignment:
    observe(controller, actors)
    a = PartitionAssignment(NODES, "A", 0, NODES, 1)
    assert asyncio.run(controller._commit(Commit(0, a, None, "created", frozenset(NODES))))
    return controller._meta.partitions[0]


def on_disk(tmp_path, node):
    return read_replica_state(partition_dir(str(tmp_path / node), 0))


def test_a_state_takes_effect_only_once_the_leader_and_isr_disks_hold_it(tmp_path):
    actors, controller = setup(tmp_path)
    a = created(controller, actors)
    for n in NODES:
        state, fence = on_disk(tmp_path, n)
        assert state["partition_epoch"] == a.partition_epoch and fence == 0
    actors.down = {"A"}  # the leader's LogServer does not answer
    new = PartitionAssignment(NODES, "A", 1, NODES, a.partition_epoch + 1)
    assert not asyncio.run(controller._commit(Commit(0, new, a, "leader started")))
    assert controller._meta.partitions[0] == a  # nothing applied


def test_an_unreachable_follower_leaves_the_isr_and_the_state_is_fenced_on_the_others(tmp_path):
    actors, controller = setup(tmp_path)
    a = created(controller, actors)
    actors.down = {"C"}
    new = PartitionAssignment(NODES, "A", 1, NODES, a.partition_epoch + 1)
    assert asyncio.run(controller._commit(Commit(0, new, a, "leader started")))
    b = controller._meta.partitions[0]
    assert b.isr == ("A", "B") and b.leader_epoch == 1
    assert on_disk(tmp_path, "B") == ({"replicas": list(NODES), "leader": "A", "leader_epoch": 1, "isr": ["A", "B"],
                                       "partition_epoch": b.partition_epoch}, 1)


def test_a_partition_epoch_a_failed_commit_left_on_a_disk_is_never_reused(tmp_path):
    actors, controller = setup(tmp_path)
    a = created(controller, actors)
    other = {"replicas": list(NODES), "leader": "A", "leader_epoch": 0, "isr": ["A", "C"],
             "partition_epoch": a.partition_epoch + 1}
    assert asyncio.run(actors.servers["B"].update_partition(0, other))["ok"]  # left by a commit that failed
    new = PartitionAssignment(NODES, "A", 0, ("A", "B"), a.partition_epoch + 1)
    assert asyncio.run(controller._commit(Commit(0, new, a, "C lagging")))
    b = controller._meta.partitions[0]
    assert b.partition_epoch > other["partition_epoch"] and b.isr == ("A", "B")
    assert on_disk(tmp_path, "B")[0]["isr"] == ["A", "B"]


def test_a_leader_asking_for_its_epoch_waits_until_its_node_is_checked(tmp_path):
    actors, controller = setup(tmp_path)
    controller._lock = asyncio.Lock()
    controller._task = True  # no loop: the test plays the rounds
    assert asyncio.run(controller.leader_started(0, "A", "A#1")) == {
        "wait": "the controller has not looked at the cluster yet"}
    created(controller, actors)
    assert "has not seen this incarnation" in asyncio.run(controller.leader_started(0, "A", "A#2"))["wait"]
    granted = asyncio.run(controller.leader_started(0, "A", "A#1"))
    assert granted["leader_epoch"] == 1 and granted["isr"] == list(NODES)
    assert all(on_disk(tmp_path, n)[1] == 1 for n in NODES)  # every replica fenced at the new epoch
    assert asyncio.run(controller.leader_started(0, "B", "B#1")) is None  # not the leader


def test_a_new_leader_on_another_node_waits_out_the_lease_the_controller_last_confirmed(tmp_path, monkeypatch):
    """The controller answers a leader's renewal (its epoch and node named) and then fails it over: the new
    leader on another node gets no epoch until the old leader's lease -- which counts from when it asked,
    before this answer -- has run out, so a paused old leader that resumes cannot answer beside it. A
    leader restarting on the same node does not wait; a plain state read renews nothing."""
    import dataclasses

    import raygroups.placement.controller as controller_module

    now = [1000.0]
    monkeypatch.setattr(controller_module.time, "monotonic", lambda: now[0])
    actors, controller = setup(tmp_path)
    controller._lock = asyncio.Lock()
    controller._task = True
    created(controller, actors)
    granted = asyncio.run(controller.leader_started(0, "A", "A#1"))
    assert asyncio.run(controller.partition_state(0, granted["leader_epoch"], "A"))["leader"] == "A"  # renewal
    now[0] += 0.25
    a = controller._meta.partitions[0]
    controller._meta = dataclasses.replace(controller._meta, partitions={  # the controller fails A over to B
        0: dataclasses.replace(a, leader="B", leader_epoch=a.leader_epoch + 1, partition_epoch=a.partition_epoch + 1)})
    asyncio.run(controller.partition_state(0))  # anyone's read: no renewal
    assert asyncio.run(controller.partition_state(0, granted["leader_epoch"], "A"))["leader"] == "B"  # deposed
    waiting = asyncio.run(controller.leader_started(0, "B", "B#1"))
    assert waiting["wait"] == "the previous leader's lease runs for 0.50 s more"  # 0.75 s lease at 3 s
    assert waiting["retry_in_s"] == pytest.approx(0.5)  # the new leader asks again then, not every 0.2 s
    now[0] += 0.5
    assert asyncio.run(controller.leader_started(0, "B", "B#1"))["leader_epoch"] > granted["leader_epoch"]
    now[0] += 0.1  # B (just confirmed) restarts in place: nothing to wait for
    assert "leader_epoch" in asyncio.run(controller.leader_started(0, "B", "B#1"))


def test_a_shard_replaced_while_asking_for_its_epoch_gets_none(tmp_path):
    """A shard actor replaced (a new actor under the partition's name) while its leader_started call was
    in flight is not given the new epoch; the actor now registered is."""
    actors, controller = setup(tmp_path)
    controller._lock = asyncio.Lock()
    controller._task = True
    created(controller, actors)
    actors.shards = {0: "actor-2"}  # the controller replaced actor-1 by actor-2
    assert asyncio.run(controller.leader_started(0, "A", "A#1", "actor-1")) is None
    assert all(on_disk(tmp_path, n)[1] == 0 for n in NODES)  # nobody fenced for the old actor
    actors.shards = {}
    assert asyncio.run(controller.leader_started(0, "A", "A#1", "actor-1")) is None  # no shard registered
    actors.shards = {0: "actor-2"}
    granted = asyncio.run(controller.leader_started(0, "A", "A#1", "actor-2"))
    assert granted["leader_epoch"] == 1 and all(on_disk(tmp_path, n)[1] == 1 for n in NODES)


def test_an_isr_change_does_not_wait_for_the_replica_it_leaves_out(tmp_path, monkeypatch):
    """A dead node that Ray has not declared dead yet answers nothing: the commit that drops it from the ISR
    completes once the leader and the remaining in-sync replicas hold it, while that node's call hangs."""
    import raygroups.placement.controller as controller_module

    monkeypatch.setattr(controller_module, "PERSIST_TIMEOUT_S", 3600.0)  # only the hang's end releases it
    actors, controller = setup(tmp_path)
    a = created(controller, actors)
    released = []

    async def scenario():
        hang = asyncio.Event()
        server = actors.servers["C"]
        real = server.update_partition

        async def never_answers(partition, state):
            await hang.wait()
            released.append(state["partition_epoch"])
            return await real(partition, state)

        server.update_partition = never_answers
        shrunk = PartitionAssignment(NODES, "A", a.leader_epoch, ("A", "B"), a.partition_epoch + 1)
        assert await asyncio.wait_for(controller._commit(Commit(0, shrunk, a, "C lagging")), 60)
        assert controller._meta.partitions[0].isr == ("A", "B") and released == []
        hang.set()  # the node answers late: it takes the state then
        await asyncio.sleep(0.05)
        assert released == [controller._meta.partitions[0].partition_epoch]

    asyncio.run(scenario())
    assert on_disk(tmp_path, "C")[0]["isr"] == ["A", "B"]


def test_a_leader_elected_by_a_commit_is_given_that_epoch_without_another_persist(tmp_path):
    """A failover's commit fences the replicas at the new leader's epoch: the shard started for it is given
    that epoch as it is (the partition state is persisted once per failover); its next request, or another
    shard's, gets a fresh epoch, persisted."""
    actors, controller = setup(tmp_path)
    controller._lock = asyncio.Lock()
    controller._task = True
    a = created(controller, actors)
    failover = PartitionAssignment(NODES, "B", 1, ("B", "C"), a.partition_epoch + 1)
    assert asyncio.run(controller._commit(Commit(0, failover, a, "leader node A dead", elected=True)))
    assert all(on_disk(tmp_path, n) == (on_disk(tmp_path, "B")[0], 1) for n in NODES)
    granted = asyncio.run(controller.leader_started(0, "B", "B#1"))
    assert granted == {"leader_epoch": 1, "replicas": list(NODES), "isr": ["B", "C"]}
    assert controller._meta.partitions[0] == failover and on_disk(tmp_path, "B")[0]["partition_epoch"] == 2
    again = asyncio.run(controller.leader_started(0, "B", "B#1"))
    assert again["leader_epoch"] == 2 and on_disk(tmp_path, "B") == (
        {"replicas": list(NODES), "leader": "B", "leader_epoch": 2, "isr": ["B", "C"], "partition_epoch": 3}, 2)
