"""The shard's one write path without Ray: the table of append failures, and the local writer on a real
log file (a fenced epoch steps down, a storage failure does not, a good batch lands at the log end)."""

from __future__ import annotations

import asyncio

import pytest
from raygroups.actors.partition_writer import AppendFailed, LocalWriter, append_failure
from raygroups.actors.replication import Deposed
from raygroups.coordinator.errors import AppendError, Errors, map_append_error
from raygroups.coordinator.records import new_offset_commit_record
from raygroups.coordinator.state import DurableState
from raygroups.offsets_log import open_log, replay
from raygroups.offsets_log.errors import CorruptLogError, StaleEpochError


@pytest.mark.parametrize(("failure", "replicated", "error", "step_down", "client_error"), [
    (Deposed("newer leader"), True, Errors.NOT_LEADER_OR_FOLLOWER, True, Errors.NOT_COORDINATOR),
    (StaleEpochError("epoch 3 < 4"), False, Errors.NOT_LEADER_OR_FOLLOWER, True, Errors.NOT_COORDINATOR),
    (AppendError(Errors.NOT_LEADER_OR_FOLLOWER), False, Errors.NOT_LEADER_OR_FOLLOWER, True, Errors.NOT_COORDINATOR),
    (AppendError(Errors.KAFKA_STORAGE_ERROR), False, Errors.KAFKA_STORAGE_ERROR, False, Errors.NOT_COORDINATOR),
    (AppendError(Errors.KAFKA_STORAGE_ERROR), True, Errors.KAFKA_STORAGE_ERROR, True, Errors.NOT_COORDINATOR),
    (OSError(28, "No space left on device"), False, Errors.KAFKA_STORAGE_ERROR, False, Errors.NOT_COORDINATOR),
    (CorruptLogError("p", 0, "bad"), True, Errors.KAFKA_STORAGE_ERROR, True, Errors.NOT_COORDINATOR),
    (RuntimeError("bug"), False, Errors.UNKNOWN_SERVER_ERROR, False, Errors.UNKNOWN_SERVER_ERROR),
    (RuntimeError("bug"), True, Errors.KAFKA_STORAGE_ERROR, True, Errors.NOT_COORDINATOR),
    (AppendFailed(Errors.NOT_ENOUGH_REPLICAS, False), True, Errors.NOT_ENOUGH_REPLICAS, False,
     Errors.COORDINATOR_NOT_AVAILABLE),
])
def test_one_table_maps_every_failure(failure, replicated, error, step_down, client_error):
    failed = append_failure(failure, replicated=replicated)
    assert (failed.error, failed.step_down, map_append_error(failed.error)) == (error, step_down, client_error)


def _io(fn, *args):
    async def run():
        return fn(*args)
    return run()


def _append(writer, plog, records):
    asyncio.run(writer.append(plog, records, _io))


def test_local_writer_serves_above_every_epoch_of_its_log_and_appends_at_its_end(tmp_path):
    plog = open_log(tmp_path / "p")
    try:
        writer = LocalWriter()
        assert asyncio.run(writer.start(0)) == 0 and writer.opened(plog) == 0
        _append(writer, plog, [new_offset_commit_record("g", "t", 0, 5, -1, "", 1)])
        assert (plog.log_end_offset, plog.latest_epoch) == (1, 0)
        again = LocalWriter()
        asyncio.run(again.start(0))
        assert again.opened(plog) == 1  # a restart fences the writer of epoch 0
        _append(again, plog, [new_offset_commit_record("g", "t", 0, 6, -1, "", 2)])
        with pytest.raises(AppendFailed) as fenced:
            _append(writer, plog, [new_offset_commit_record("g", "t", 0, 7, -1, "", 3)])
        assert (fenced.value.error, fenced.value.step_down) == (Errors.NOT_LEADER_OR_FOLLOWER, True)
        state = DurableState()
        replay(plog, state)
        assert state.offset("g", "t", 0).offset == 6 and plog.log_end_offset == 2
    finally:
        plog.close()


def test_local_writer_without_a_log_is_no_leader():
    writer = LocalWriter()
    asyncio.run(writer.start(2))
    with pytest.raises(AppendFailed) as failed:
        _append(writer, None, [new_offset_commit_record("g", "t", 0, 1, -1, "", 1)])
    assert (failed.value.error, failed.value.step_down) == (Errors.NOT_LEADER_OR_FOLLOWER, True)


def test_the_upkeep_of_a_new_leader_starts_at_once_and_ends_when_it_steps_down(monkeypatch):
    """The first maintenance round (lease renewal, catch-up of the replicas out of the ISR) runs as soon as the
    partition is served, not an interval later; a round that finds the leader deposed steps it down, and the
    upkeep ends. While the partition is not served, rounds are skipped."""
    from types import SimpleNamespace

    from raygroups.actors import partition_writer
    from raygroups.coordinator.lifecycle import PartitionState

    steps: list[str] = []
    served = SimpleNamespace(ctx=SimpleNamespace(state=PartitionState.LOADING, log=None), run_io=_io, partition=3,
                             config=SimpleNamespace(shard_session_timeout_ms=3_000))

    async def sleep(seconds):
        steps.append(f"sleep {seconds:g}")
        if len(steps) == 1:
            served.ctx.state = PartitionState.ACTIVE  # loaded meanwhile

    async def maintain(partition_log, run_io):
        steps.append("maintain")
        if steps.count("maintain") == 2:
            raise append_failure(Deposed("partition 3 moved on"), replicated=True)

    def step_down(why):
        steps.append(f"step down: {why}")
        served.ctx.state = PartitionState.FAILED

    served.writer = SimpleNamespace(maintain=maintain)
    served.step_down = step_down
    monkeypatch.setattr(partition_writer.asyncio, "sleep", sleep)
    asyncio.run(partition_writer.maintenance_loop(served))
    nap = f"sleep {partition_writer.maintenance_interval_s(3_000):g}"
    assert steps[:4] == [nap, "maintain", nap, "maintain"] and steps[5:] == [nap]
    assert steps[4].startswith("step down: ") and "partition 3 moved on" in steps[4]
