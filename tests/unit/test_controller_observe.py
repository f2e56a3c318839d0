"""The controller's observation round, without Ray: the real ``Controller`` reached through a factory that plays
Ray's node table and actor calls. A probe of a shard whose node is gone hangs until its timeout; the node's
death, once Ray's node table says it, must not wait for it: the round goes on with the node dead and that
probe unanswered, so the failover is decided in the same round."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from raygroups.placement import controller as controller_module
from raygroups.placement.controller import Controller
from raygroups.placement.model import Observations, Settings, ShardObservation
from raygroups.placement.nodes import COORDINATOR_RESOURCE, NODE_LABEL, coordinator_nodes
from raygroups.placement.plan import PartitionAssignment

NODES = ("A", "B", "C")


def _table(dead: set[str]) -> list[dict]:
    return [{"NodeID": f"{n}#1", "Alive": n not in dead, "Labels": {NODE_LABEL: n},
             "Resources": {COORDINATOR_RESOURCE: 1.0}} for n in NODES]


class Shard:
    """A shard actor's handle: ``probe.remote()`` answers at once, or never (its node is gone)."""

    def __init__(self, node: str, answers: bool) -> None:
        self.node, self.answers = node, answers

    @property
    def probe(self):
        shard = self

        class _Probe:
            @staticmethod
            async def remote():
                if not shard.answers:
                    await asyncio.Event().wait()  # never set: only the probe's timeout would end it
                return {"state": "ACTIVE", "node": shard.node}

        return _Probe()


class Actors:
    def __init__(self, shards: dict[int, Shard]) -> None:
        self.shards = shards
        self.dead_after_first_read: set[str] = set()
        self.reads = 0

    def ray_nodes(self) -> list[dict]:
        self.reads += 1
        return _table(set() if self.reads == 1 else self.dead_after_first_read)

    def shard(self, partition: int) -> Shard:
        if partition not in self.shards:
            raise ValueError(f"no shard actor for partition {partition}")
        return self.shards[partition]

    def actor_id(self, handle: Shard) -> str:
        return f"actor-{handle.node}"

    def actor_state(self, actor_id: str) -> str:
        return "ALIVE"  # Ray marks the actors of a dead node dead a little later

    def actor_node_id(self, actor_id: str) -> str:
        return f"{actor_id.removeprefix('actor-')}#1"  # the Ray node it last ran on


def _controller(actors: Actors) -> Controller:
    controller = Controller("ns", Settings(2, 3, 2), actors)
    controller._meta = dataclasses.replace(controller._meta, partitions={
        0: PartitionAssignment(NODES, "A", 1, NODES, 1), 1: PartitionAssignment(("B", "C", "A"), "B", 1, NODES, 1)})
    return controller


def _probe_round(controller: Controller, actors: Actors):
    nodes = coordinator_nodes(actors.ray_nodes())
    return asyncio.run(controller._probe_shards(nodes))


def test_a_node_declared_dead_while_its_shards_probe_hangs_is_seen_dead_in_the_same_round(monkeypatch):
    # Without the re-read, this round would wait out the hanging probe (30 s here) and see A alive.
    monkeypatch.setattr(controller_module, "PROBE_TIMEOUT_S", 30.0)
    actors = Actors({0: Shard("A", answers=False), 1: Shard("B", answers=True)})
    actors.dead_after_first_read = {"A"}
    controller = _controller(actors)
    controller.settings = Settings(2, 3, 2, shard_silence_ms=10_000_000)
    nodes, shards = _probe_round(controller, actors)
    assert not nodes["A"].alive and nodes["B"].alive and nodes["C"].alive
    assert shards[0] == ShardObservation("ALIVE", "actor-A")  # unanswered, as a timed-out probe
    assert shards[1] == ShardObservation("ALIVE", "actor-B", "ACTIVE", "B")


def test_when_every_probe_answers_the_round_keeps_its_first_node_table():
    actors = Actors({0: Shard("A", answers=True), 1: Shard("B", answers=True)})
    actors.dead_after_first_read = {"A"}  # would be seen only by a second read
    nodes, shards = _probe_round(_controller(actors), actors)
    assert actors.reads == 1 and all(o.alive for o in nodes.values())
    assert {p: o.answer for p, o in shards.items()} == {0: "ACTIVE", 1: "ACTIVE"}


def test_a_missing_shard_actor_is_observed_as_none():
    actors = Actors({1: Shard("B", answers=True)})
    _, shards = _probe_round(_controller(actors), actors)
    assert shards[0] == ShardObservation(None)


@pytest.mark.parametrize("answers", [True, False])
def test_a_probe_that_times_out_is_unanswered_with_rays_actor_state(monkeypatch, answers):
    monkeypatch.setattr(controller_module, "PROBE_TIMEOUT_S", 0.01)
    actors = Actors({0: Shard("A", answers=answers), 1: Shard("B", answers=True)})
    nodes, shards = _probe_round(_controller(actors), actors)
    assert all(o.alive for o in nodes.values())
    assert shards[0].answer == ("ACTIVE" if answers else None) and shards[0].actor_state == "ALIVE"


def test_a_shard_seen_restarting_after_the_node_table_was_read_makes_the_round_read_it_again(monkeypatch):
    # A's raylet dies after the round's last read of the node table: Ray then moves A's shard to RESTARTING,
    # which its probe sees. Decided on the older table, A would look alive with a dead process (and stay in
    # the ISR); the round reads the table again and sees the node gone.
    monkeypatch.setattr(controller_module, "PROBE_STATE_CHECK_S", 0.01)
    monkeypatch.setattr(controller_module, "NODES_RECHECK_S", 5.0)  # no read while the probes are out

    class NodeDies(Actors):
        def actor_state(self, actor_id: str) -> str:
            self.dead_after_first_read = {"A"}
            return "RESTARTING"

    actors = NodeDies({0: Shard("A", answers=False), 1: Shard("B", answers=True)})
    nodes, shards = _probe_round(_controller(actors), actors)
    assert shards[0] == ShardObservation("RESTARTING", "actor-A", node="A")  # where it last ran
    assert not nodes["A"].alive and nodes["B"].alive and actors.reads == 2


class SpareActors(Actors):
    """Also the seam's spares: none listed, and every creation recorded."""

    standby_per_partition = False
    cold_spares = 2
    cold_spares_max = 6

    def __init__(self) -> None:
        super().__init__({})
        self.created: list[tuple[str, bool]] = []

    def list_spares(self, node: str) -> list:
        return []

    def create_spare(self, node: str, scheduling: dict, standby_for=None, cold: bool = False) -> None:
        self.created.append((node, cold))


def _gathered_on_a(actors: Actors) -> tuple[Controller, dict]:
    """A controller of eight partitions all led by A (as after a full restart), every node reported."""
    controller = Controller("ns", Settings(8, 3, 2), actors)
    layout = {p: PartitionAssignment(tuple(NODES[(p + i) % 3] for i in range(3)), "A", 1, NODES, 1) for p in range(8)}
    nodes = coordinator_nodes(_table(set()))
    controller._meta = dataclasses.replace(controller._meta, partitions=layout,
                                           reported={n: o.node_id for n, o in nodes.items()})
    controller._obs = Observations(nodes)
    return controller, nodes


def _seeing_to_cold_spares(controller: Controller):
    """A round's cold-spare upkeep, run to its end."""
    def see_to() -> None:
        async def once() -> None:
            controller._see_to_cold_spares()
            if controller._cold_task is not None:
                await controller._cold_task
        asyncio.run(once())
    return see_to


def test_a_node_that_would_inherit_more_than_its_spares_cover_gets_cold_spares_before_the_loss():
    # A full restart put every leader on A: losing A would hand B six partitions and C two. B gets a cold
    # spare for each beyond its spare with the standbys before that loss; C keeps the configured two.
    actors = SpareActors()
    controller, nodes = _gathered_on_a(actors)
    see_to = _seeing_to_cold_spares(controller)
    see_to()
    assert actors.created == [("B", False)] + [("B", True)] * 5
    assert controller._spares.cold_wanted("B") == 5 and controller._spares.cold_wanted("C") == 2
    actors.created.clear()
    see_to()
    assert actors.created == []  # wanted as before: nothing more started
    # A new incarnation of B reports its disk: back to the setting until its rounds say more.
    controller._spares.forget_cold("B")
    controller._meta = dataclasses.replace(controller._meta, reported={**controller._meta.reported, "B": "B#2"})
    controller._obs = Observations({**nodes, "B": dataclasses.replace(nodes["B"], node_id="B#2")})
    see_to()
    assert actors.created == [("B", False)] + [("B", True)] * 5


def test_cold_spares_that_could_not_be_started_are_wanted_again_the_next_round():
    actors = SpareActors()
    fail = [True]

    def create_spare(node, scheduling, standby_for=None, cold=False):
        if fail[0]:
            raise RuntimeError("the GCS did not answer")
        actors.created.append((node, cold))

    actors.create_spare = create_spare
    controller, nodes = _gathered_on_a(actors)
    see_to = _seeing_to_cold_spares(controller)
    see_to()
    assert actors.created == [] and controller._spares.cold_wanted("B") == 2
    fail[0] = False
    see_to()
    assert actors.created == [("B", False)] + [("B", True)] * 5
