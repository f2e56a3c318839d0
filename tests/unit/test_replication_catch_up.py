"""Leader-epoch truncation when a follower catches up (KIP-279's two steps), with real file logs and the
real ``LogServer`` and ``LeaderReplication`` classes driven in-process (no Ray): after catch-up a
follower's log is exactly the leader's, whatever divergent suffix an earlier leader left on it."""

from __future__ import annotations

import asyncio

import pytest
from raygroups.actors.log_server import LogServer
from raygroups.actors.replication import Deposed, LeaderReplication
from raygroups.coordinator.errors import Errors
from raygroups.coordinator.records import new_offset_commit_record
from raygroups.offsets_log import Batch, open_log


class Handle:
    """Stands in for a Ray actor handle: ``handle.method.remote(*args)`` returns the coroutine."""

    def __init__(self, obj) -> None:
        self._obj = obj

    def __getattr__(self, name):
        method = getattr(self._obj, name)

        class _Method:
            @staticmethod
            def remote(*args):
                return method(*args)

        return _Method()


class Controller:
    def __init__(self, epoch: int, replicas: list[str]) -> None:
        self.epoch = epoch
        self.replicas = replicas
        self.isr = list(replicas)

    async def leader_started(self, partition, node_id, ray_node_id=None, actor_id=None):
        self.epoch += 1
        return {"leader_epoch": self.epoch, "replicas": self.replicas, "isr": self.isr}

    async def shrink_isr(self, partition, epoch, node):
        self.isr = [n for n in self.isr if n != node]
        return epoch == self.epoch

    async def expand_isr(self, partition, epoch, node):
        self.isr.append(node)
        return epoch == self.epoch

    async def partition_state(self, partition, leader_epoch=None, node=None):
        return {"leader": "L", "leader_epoch": self.epoch, "replicas": self.replicas, "isr": self.isr}


async def run_io(fn, *args):
    return fn(*args)


async def until(condition, timeout_s: float = 5.0) -> None:
    """Let the event loop run until ``condition()`` holds (a background task got that far)."""
    async def poll():
        while not condition():
            await asyncio.sleep(0.001)

    await asyncio.wait_for(poll(), timeout_s)


def rec(offset: int):
    return new_offset_commit_record("g", "t", 0, offset, -1, "", 0)


def records(log) -> list:
    return [r for b in log.batches(0) for r in b.records]


def setup(tmp_path, controller_epoch=0):
    leader_log = open_log(tmp_path / "leader")
    follower = LogServer("F", str(tmp_path / "follower"), 1 << 20, None)
    controller = Controller(controller_epoch, ["L", "F"])
    replication = LeaderReplication(0, "L", Handle(controller), lambda node: Handle(follower), 2, 1_000)
    return leader_log, follower, replication


async def follower_out_of_the_isr(tmp_path):
    """A started leader whose follower F is out of the ISR (for the controller too)."""
    leader_log, follower, rep = setup(tmp_path)
    await rep.start()
    controller = rep._controller._obj
    controller.isr = ["L"]
    rep.isr.clear()
    return leader_log, follower, rep, controller


def append_local(log, epoch, *offsets):
    batch = Batch(log.log_end_offset, epoch, 0, tuple(rec(o) for o in offsets))
    log.append(batch, epoch)
    return batch


def test_a_batch_the_leader_truncated_is_removed_from_the_follower(tmp_path):
    """Review finding 1: the leader truncates a batch a slow follower applies anyway; the leader then
    continues under a fresh epoch, and catch-up removes the stale batch from the follower."""
    async def scenario():
        leader_log, follower, rep = setup(tmp_path)
        await rep.start()
        base = append_local(leader_log, rep.epoch, 1)
        assert (await follower.append(0, [base], rep.epoch))["ok"]
        alpha = append_local(leader_log, rep.epoch, 2)
        assert (await follower.append(0, [alpha], rep.epoch))["ok"]  # the slow follower applies it late
        leader_log.truncate_to(alpha.base_offset)  # ...after the leader gave up on it
        rep.isr.discard("F")
        await rep.renew_epoch()
        append_local(leader_log, rep.epoch, 3)  # beta, at the same offset alpha had
        await rep._catch_up("F", leader_log, run_io)
        assert records(follower._log(0)) == records(leader_log) == [rec(1), rec(3)]
        assert "F" in rep.isr

    asyncio.run(scenario())


def test_a_follower_epoch_the_leader_never_kept_is_truncated(tmp_path):
    """Review finding 2: the follower's latest epoch is above every epoch in the leader's log."""
    async def scenario():
        leader_log, follower, rep = setup(tmp_path, controller_epoch=4)
        base = append_local(leader_log, 3, 1)
        assert (await follower.append(0, [base], 3))["ok"]
        stray = Batch(1, 4, 0, (rec(9),))
        assert (await follower.append(0, [stray], 4))["ok"]  # a batch of epoch 4 the leader never kept
        await rep.start()  # epoch 5
        rep.isr.discard("F")
        append_local(leader_log, rep.epoch, 2)
        await rep._catch_up("F", leader_log, run_io)
        assert records(follower._log(0)) == records(leader_log) == [rec(1), rec(2)]

    asyncio.run(scenario())


def test_second_step_uses_the_followers_own_end_for_the_answered_epoch(tmp_path):
    """Review finding 3: the leader answers with an older epoch that runs past the follower's; the
    follower's own end offset for that epoch bounds the truncation."""
    async def scenario():
        leader_log, follower, rep = setup(tmp_path, controller_epoch=7)
        g = append_local(leader_log, 0, 1)
        b = append_local(leader_log, 6, 2)
        append_local(leader_log, 6, 3)  # gamma: the leader's epoch 6 continues
        assert (await follower.append(0, [g, b], 6))["ok"]
        delta = Batch(2, 7, 0, (rec(8),))  # the follower's epoch 7 diverges at offset 2
        assert (await follower.append(0, [delta], 7))["ok"]
        await rep.start()  # epoch 8
        rep.isr.discard("F")
        await rep._catch_up("F", leader_log, run_io)
        assert records(follower._log(0)) == records(leader_log) == [rec(1), rec(2), rec(3)]

    asyncio.run(scenario())


def test_a_new_leader_levels_its_in_sync_followers_before_serving(tmp_path):
    """An in-sync follower holding a suffix the old leader never got acknowledged (it crashed before
    the rest of the ISR had it) is truncated to the new leader's log before the new leader serves.
    (Two different batches at the same epoch and offset cannot exist: a leader renews its epoch
    after truncating one.)"""
    async def scenario():
        leader_log, follower, rep = setup(tmp_path, controller_epoch=1)
        g = append_local(leader_log, 1, 1)
        unacked = Batch(1, 1, 0, (rec(7),))
        assert (await follower.append(0, [g, unacked], 1))["ok"]
        await rep.start()  # epoch 2, F in the ISR
        await rep.reconcile_isr(leader_log, run_io)
        assert "F" in rep.isr
        assert records(follower._log(0)) == records(leader_log) == [rec(1)]

    asyncio.run(scenario())


def test_too_few_in_sync_replicas_refuses_the_write_and_renews_the_epoch(tmp_path):
    async def scenario():
        leader_log, follower, rep = setup(tmp_path)
        await rep.start()
        epoch = rep.epoch
        # The controller moved on: the follower now refuses this leader's epoch, so it is deposed.
        await follower.update_partition(0, {"replicas": ["L", "F"], "leader": "F", "leader_epoch": epoch + 10,
                                            "isr": ["F"], "partition_epoch": 1})
        try:
            await rep.replicate(lambda b: run_io(leader_log.append, b, b.leader_epoch),
                                lambda o: run_io(leader_log.truncate_to, o),
                                lambda e: Batch(leader_log.log_end_offset, e, 0, (rec(1),)))
        except Exception as e:  # Deposed
            assert "fenced" in str(e)
        assert leader_log.log_end_offset == 0

        leader_log2, follower2, rep2 = setup(tmp_path / "second")
        await rep2.start()
        first = rep2.epoch
        def gone(*args):
            raise ValueError("the follower's actor is gone")  # what a dead actor's name lookup raises

        follower2.append = gone  # an unreachable follower: every push fails
        error = await rep2.replicate(lambda b: run_io(leader_log2.append, b, b.leader_epoch),
                                     lambda o: run_io(leader_log2.truncate_to, o),
                                     lambda e: Batch(leader_log2.log_end_offset, e, 0, (rec(1),)))
        assert error is Errors.NOT_ENOUGH_REPLICAS
        assert leader_log2.log_end_offset == 0 and rep2.epoch > first and "F" not in rep2.isr

    asyncio.run(scenario())


def test_leadership_lease_expires_without_confirmation(tmp_path):
    """A leader the controller has not confirmed for its lease (a paused process) stops answering; a
    maintenance round that confirms it renews the lease."""

    async def scenario():
        leader_log, follower, rep = setup(tmp_path)
        await rep.start()
        assert rep.lease_s == 0.75  # the longest lease (below 2/3 of the default shard.session.timeout.ms)
        assert rep.lease_valid()
        rep.confirmed_at -= rep.lease_s + 0.1  # as after a pause
        assert not rep.lease_valid()
        await rep.maintain(leader_log, run_io)
        assert rep.lease_valid()

    asyncio.run(scenario())


def test_a_stepped_down_leader_catches_nobody_up_and_an_old_epochs_deposal_is_dropped(tmp_path):
    """After ``stop_catch_up`` (the leader stepped down) no round starts a catch-up again; a catch-up that
    met a follower fenced above the epoch it ran at deposes nobody once the leader holds a newer epoch."""
    async def scenario():
        leader_log, follower, rep, _ = await follower_out_of_the_isr(tmp_path)
        rep._catch_up_deposed = (rep.epoch - 1, Deposed("F is fenced above an epoch this leader left"))
        await rep.maintain(leader_log, run_io)  # the stale deposal is dropped; a catch-up starts
        assert rep._catching_up is not None
        rep.stop_catch_up()
        await rep.maintain(leader_log, run_io)
        assert rep._catching_up is None

    asyncio.run(scenario())


def test_a_new_leader_told_to_wait_asks_again_when_the_controller_said(tmp_path, monkeypatch):
    """While the previous leader's lease runs the controller answers "wait" with how long; the new leader
    sleeps that long (a hair more) rather than polling, and gets its epoch on the next ask."""
    from raygroups.actors import replication

    async def scenario():
        leader_log, follower, rep = setup(tmp_path)
        controller = rep._controller._obj
        answers = [{"wait": "the previous leader's lease runs for 0.37 s more", "retry_in_s": 0.37},
                   {"wait": "the controller has not looked at the cluster yet"}]
        real = controller.leader_started

        async def leader_started(*args):
            return answers.pop(0) if answers else await real(*args)

        controller.leader_started = leader_started
        slept = []

        async def sleep(seconds):
            slept.append(round(seconds, 3))

        monkeypatch.setattr(replication.asyncio, "sleep", sleep)
        assert await rep.start() == 1
        assert slept == pytest.approx([0.375, replication.START_POLL_S + 0.005])

    asyncio.run(scenario())


def test_a_hanging_follower_does_not_hold_back_the_lease_renewal(tmp_path):
    """The catch-up of a follower out of the ISR may wait ``replica.lag.time.max.ms`` per call for one that
    hangs; the lease is renewed in every round meanwhile, one catch-up runs at a time, and a catch-up that
    learns this leader was deposed makes the next round step down."""
    async def scenario():
        leader_log, follower, rep, controller = await follower_out_of_the_isr(tmp_path)
        calls = []
        release = asyncio.Event()

        async def hangs(*args):
            calls.append(args)
            await release.wait()
            return {"node": "F", "log_end_offset": 0, "latest_epoch": -1, "fenced_epoch": rep.epoch + 1}

        follower.state = hangs
        rep.lag_s = 60.0  # the follower's calls wait this long before they count as failed
        for _ in range(3):
            rep.confirmed_at -= rep.lease_s + 0.1  # as if the last renewal were a lease ago
            await asyncio.wait_for(rep.maintain(leader_log, run_io), 1.0)
            assert rep.lease_valid()
            await asyncio.sleep(0)
        assert len(calls) == 1  # the one catch-up still waits on the follower; no second was started
        release.set()  # the follower answers: fenced above our epoch, so this leader was deposed
        await until(rep._catching_up.done)
        with pytest.raises(Deposed, match="fenced"):
            await rep.maintain(leader_log, run_io)

    asyncio.run(scenario())


def test_a_renewal_answered_before_an_isr_expansion_does_not_drop_the_follower(tmp_path):
    """The catch-up counts a follower back in before the controller records it; a lease renewal whose
    answer predates that record must not drop the follower again (the controller would count it in sync
    while this leader acknowledged batches without it)."""
    async def scenario():
        leader_log, follower, rep, controller = await follower_out_of_the_isr(tmp_path)
        recorded = asyncio.Event()
        real_expand = controller.expand_isr

        async def slow_expand(partition, epoch, node):
            await recorded.wait()
            return await real_expand(partition, epoch, node)

        controller.expand_isr = slow_expand
        base = append_local(leader_log, rep.epoch, 1)
        assert (await follower.append(0, [base], rep.epoch))["ok"]
        append_local(leader_log, rep.epoch, 2)  # the follower lacks this one
        await rep.maintain(leader_log, run_io)  # starts the catch-up
        await until(lambda: "F" in rep.isr)
        assert controller.isr == ["L"]  # counted in, not yet recorded
        await rep.maintain(leader_log, run_io)  # answered with the ISR before the expansion
        assert "F" in rep.isr
        recorded.set()
        await until(lambda: controller.isr == ["L", "F"])
        await rep.maintain(leader_log, run_io)
        assert rep.isr == {"F"}

    asyncio.run(scenario())


def test_a_follower_the_controller_cannot_drop_now_leaves_the_batch_unacknowledged_without_deposing(tmp_path):
    """Kafka's leader keeps a follower in the ISR until its AlterPartition succeeds: a batch that follower
    missed is not acknowledged (refused with NOT_ENOUGH_REPLICAS, truncated, under a fresh epoch), and the
    leader does not step down for it; once the controller takes the change, writes go on without it."""
    async def scenario():
        leader_log, follower, rep = setup(tmp_path)
        rep.min_isr = 1
        await rep.start()
        first = rep.epoch
        controller = rep._controller._obj

        def gone(*args):
            raise ValueError("the follower's actor is gone")

        follower.append = gone
        real_shrink = controller.shrink_isr

        async def cannot_persist(*args):
            raise RuntimeError("could not persist the state of partition 0 (F lagging); try again")

        controller.shrink_isr = cannot_persist
        write = (lambda b: run_io(leader_log.append, b, b.leader_epoch), lambda o: run_io(leader_log.truncate_to, o),
                 lambda e: Batch(leader_log.log_end_offset, e, 0, (rec(1),)))
        assert await rep.replicate(*write) is Errors.NOT_ENOUGH_REPLICAS
        assert leader_log.log_end_offset == 0 and rep.epoch > first and "F" in rep.isr
        controller.shrink_isr = real_shrink
        assert await rep.replicate(*write) is Errors.NONE
        assert leader_log.log_end_offset == 1 and "F" not in rep.isr

    asyncio.run(scenario())


def test_lease_and_confirmation_follow_the_session_timeout():
    """shard.session.timeout.ms sets the lease (2/3 of it, below the controller's silence threshold, at most
    0.75 s so that it has run out when Ray declares a crashed node dead) and how often the leader renews it
    (four times per lease, at most every 0.5 s)."""
    from raygroups.actors.replication import maintenance_interval_s
    from raygroups.coordinator.config import leadership_lease_s

    assert leadership_lease_s(3_000) == 0.75
    assert maintenance_interval_s(3_000) == 0.1875
    assert leadership_lease_s(900) == 0.6
    assert maintenance_interval_s(900) == 0.15
    assert leadership_lease_s(30_000) == 0.75 and maintenance_interval_s(30_000) == 0.1875
