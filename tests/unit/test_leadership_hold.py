"""A leader whose controller does not answer (the head is down, the controller restarting) has its
leadership held by its in-sync followers (``LogServer.hold_leadership``) and serves on; a held follower
takes no newer leader epoch until the hold ends, so nobody else is elected meanwhile. Real
``LogServer`` and ``LeaderReplication`` objects with real files, driven in-process, a manual clock for
the holds."""

from __future__ import annotations

import asyncio

import pytest
from raygroups.actors import log_server as log_server_module
from raygroups.actors.log_server import LogServer
from raygroups.actors.replication import Deposed, LeaderReplication
from raygroups.placement.commits import after_persist
from raygroups.placement.plan import PartitionAssignment

from tests.unit.test_replication_catch_up import Controller, Handle, open_log, run_io


class Clock:
    """``time`` for ``actors.log_server``: a monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(log_server_module, "time", c)
    return c


def state(leader="L", epoch=1, isr=("L", "F"), pe=2):
    return {"replicas": ["L", "F"], "leader": leader, "leader_epoch": epoch, "isr": list(isr), "partition_epoch": pe}


class SilentController(Controller):
    """The controller of a head that is down: calls to it never come back."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.silent = False

    async def partition_state(self, partition, leader_epoch=None, node=None):
        if self.silent:
            await asyncio.Event().wait()
        return await super().partition_state(partition, leader_epoch, node)


async def started_leader(tmp_path, follower: LogServer | None = None):
    """Leader L of partition 0 at epoch 1 with follower F in sync (F's disk holds that state); a lease of
    0.2 s, so that a silent controller is given up on after 0.1 s."""
    follower = follower or LogServer("F", str(tmp_path / "F"), 1 << 20, None)
    controller = SilentController(0, ["L", "F"])
    rep = LeaderReplication(0, "L", Handle(controller), lambda node: Handle(follower), 2, 1_000)
    assert await rep.start() == 1
    assert (await follower.update_partition(0, state()))["ok"]
    rep.lease_s = 0.2
    return rep, follower, controller


def test_the_followers_hold_the_leadership_while_the_controller_does_not_answer(tmp_path, clock):
    async def scenario():
        rep, follower, controller = await started_leader(tmp_path)
        leader_log = open_log(tmp_path / "leader")
        controller.silent = True
        rep.confirmed_at -= 0.15  # most of the lease gone since the controller's last renewal
        await rep.maintain(leader_log, run_io)
        assert rep.lease_valid()  # counted from the asking, as a renewal is
        assert follower._holds == {0: (1, 1_000.2)}
        # Meanwhile a controller elsewhere elects F at epoch 2: F's disk refuses the new state...
        refused = await follower.update_partition(0, state(leader="F", epoch=2, isr=("F",), pe=3))
        assert refused == {"ok": False, "reason": "held", "node": "F", "held_for_s": 0.2}
        # ...so the commit of that election is refused (F would be its leader), and nothing changed on F.
        a = PartitionAssignment(("L", "F"), "F", 2, ("F",), 3)
        assert not after_persist(a, {"F"}, set(), {}).done
        assert (await follower.state(0))["fenced_epoch"] == 1
        # An ISR change under the held epoch is no newer leader: it is taken.
        assert (await follower.update_partition(0, state(isr=("L", "F"), pe=3)))["ok"]
        clock.now += 0.2  # the hold ends with the lease it backs: the election goes through
        assert (await follower.update_partition(0, state(leader="F", epoch=2, isr=("F",), pe=4)))["ok"]
        # The old leader asks F to hold again: F is fenced above its epoch, so it was deposed.
        rep.confirmed_at -= 0.15
        with pytest.raises(Deposed, match="fenced above epoch 1"):
            await rep.maintain(leader_log, run_io)

    asyncio.run(scenario())


def test_a_controller_answering_again_renews_the_lease_itself(tmp_path, clock):
    async def scenario():
        rep, follower, controller = await started_leader(tmp_path)
        leader_log = open_log(tmp_path / "leader")
        controller.silent = True
        await rep.maintain(leader_log, run_io)
        assert rep._held is True
        controller.silent = False
        rep.confirmed_at -= 0.3
        await rep.maintain(leader_log, run_io)
        assert rep.lease_valid() and rep._held is None

    asyncio.run(scenario())


def test_without_every_in_sync_follower_holding_it_the_lease_runs_out(tmp_path, clock):
    async def scenario():
        rep, follower, controller = await started_leader(tmp_path)
        leader_log = open_log(tmp_path / "leader")
        controller.silent = True
        await follower.close()
        follower.hold_leadership = _unreachable
        rep.confirmed_at -= 0.15
        before = rep.confirmed_at
        await rep.maintain(leader_log, run_io)
        assert rep._held is False and rep.confirmed_at == before  # not renewed
        await asyncio.sleep(0.06)
        assert not rep.lease_valid()
        # Alone in the ISR, nobody can hold it either: it lapses too.
        rep2, _, controller2 = await started_leader(tmp_path / "alone")
        controller2.silent = True
        rep2.isr.clear()
        rep2.confirmed_at -= 0.15
        before = rep2.confirmed_at
        await rep2.maintain(leader_log, run_io)
        assert rep2._held is False and rep2.confirmed_at == before
        assert not rep2.lease_valid()

    asyncio.run(scenario())


def test_a_slow_controllers_answer_within_the_lease_still_renews_it(tmp_path, clock):
    """An answer later than half a lease (the controller busy, not gone) renews the lease from the asking,
    even when no follower could hold it; one later than the lease does not."""
    async def scenario():
        rep, follower, controller = await started_leader(tmp_path)
        leader_log = open_log(tmp_path / "leader")
        follower.hold_leadership = _unreachable
        answer_in = [0.15]
        renew = controller.partition_state

        async def slow(*args):
            await asyncio.sleep(answer_in[0])
            return await renew(*args)

        controller.partition_state = slow
        rep.confirmed_at -= 0.15
        asked = asyncio.get_running_loop().time()
        await rep.maintain(leader_log, run_io)
        assert rep._held is None and rep.lease_valid()
        assert asyncio.get_running_loop().time() - asked >= 0.15  # it waited for the late answer
        answer_in[0] = 0.5  # now later than the lease: the lease is not renewed by it
        before = rep.confirmed_at
        await rep.maintain(leader_log, run_io)
        assert rep._held is False and rep.confirmed_at == before

    asyncio.run(scenario())


async def _unreachable(*args):
    raise TimeoutError("the follower does not answer")


def test_a_hold_is_refused_to_a_deposed_leader_and_validated(tmp_path, clock):
    async def scenario():
        follower = LogServer("F", str(tmp_path / "F"), 1 << 20, None)
        assert await follower.hold_leadership(0, 1, "L", 2.0) == {"ok": False, "reason": "unknown", "node": "F"}
        assert (await follower.update_partition(0, state(leader="F", epoch=3)))["ok"]
        assert await follower.hold_leadership(0, 2, "L", 2.0) == {"ok": False, "reason": "fenced", "node": "F",
                                                                  "fenced_epoch": 3}
        with pytest.raises(ValueError, match="at most 60 s"):
            await follower.hold_leadership(0, 3, "L", 61)
        with pytest.raises(TypeError, match="leader epoch"):
            await follower.hold_leadership(0, "3", "L", 1)
        assert follower._holds == {}

    asyncio.run(scenario())


def test_a_restarted_log_server_holds_every_partition_for_a_lease(tmp_path, clock, monkeypatch):
    """Ray restarted the server: the holds it gave are forgotten, so for the longest hold (a lease) it takes
    no newer leader epoch of any partition it holds a state of; a first start waits for nothing."""
    async def scenario():
        first = LogServer("F", str(tmp_path / "F"), 1 << 20, None, hold_guard_s=2.0)
        assert (await first.update_partition(0, state()))["ok"]
        await first.close()
        monkeypatch.setattr(log_server_module, "_restarted", lambda: True)
        again = LogServer("F", str(tmp_path / "F"), 1 << 20, None, hold_guard_s=2.0)
        assert (await again.update_partition(0, state(leader="F", epoch=2, pe=3)))["reason"] == "held"
        assert (await again.update_partition(1, state(leader="F", epoch=5, pe=1)))["ok"]  # a new partition
        clock.now += 2.0
        assert (await again.update_partition(0, state(leader="F", epoch=2, pe=3)))["ok"]

    asyncio.run(scenario())
