"""Compaction on replicated partitions, with real file logs, a real segment store and the real
``LogServer`` and ``LeaderReplication`` classes driven in-process (no Ray): followers swap the leader's
compacted segments under the leader's epoch, all or none; a follower fenced by a newer leader keeps its
originals; one that missed a run is brought along by the next (lineage); and a follower out of the ISR
catches up across compacted batches (merged, empty) and rejoins."""

from __future__ import annotations

import asyncio
import os

from raygroups.actors.log_compaction import accepted_versions, swap, upload
from raygroups.actors.log_server import LogServer
from raygroups.actors.replication import LeaderReplication
from raygroups.coordinator.records import new_offset_commit_record
from raygroups.coordinator.state import DurableState
from raygroups.offsets_log import Batch, open_log, replay
from raygroups.offsets_log.store import SegmentStore, file_crc32

from raygroups.compaction import _record_lineage
from raygroups.compaction.job import staging_dir
from tests.log.log_testlib import stage_compacted
from tests.unit.test_replication_catch_up import Controller, Handle, run_io

SEGMENT_BYTES = 1024


def _state(log) -> DurableState:
    state = DurableState()
    replay(log, state)
    return state


def _crcs(log) -> dict[str, tuple[int, int]]:
    return {os.path.basename(p): file_crc32(p) for p in log.segment_paths(closed_only=True)}


def _commit(i: int, groups: int):
    return new_offset_commit_record(f"g{i % groups}", "t", i % 2, i, -1, "m", 1_000 + i)


async def _setup(tmp_path, n: int, groups: int = 4, push: bool = True):
    """A leader and one follower LogServer; ``n`` one-record batches appended to the leader (and pushed to
    the follower when ``push``)."""
    leader_log = open_log(tmp_path / "leader", segment_bytes=SEGMENT_BYTES)
    follower = LogServer("F", str(tmp_path / "follower"), SEGMENT_BYTES, None)
    controller = Controller(0, ["L", "F"])
    rep = LeaderReplication(0, "L", Handle(controller), lambda node: Handle(follower), 1, 1_000)
    await rep.start()
    await follower.update_partition(0, {"replicas": ["L", "F"], "leader": "L", "leader_epoch": rep.epoch,
                                        "isr": ["L", "F"], "partition_epoch": 1})
    for i in range(n):
        batch = Batch(leader_log.log_end_offset, rep.epoch, 1_000, (_commit(i, groups),))
        leader_log.append(batch, rep.epoch)
        if push:
            assert (await follower.append(0, [batch], rep.epoch))["ok"]
    return leader_log, follower, rep, SegmentStore(tmp_path / "store")


def _compact_leader(leader_log, store, run_id: str, out_dir, **kw):
    up = upload(leader_log, store.uri, 0, run_id)
    outputs = stage_compacted(store, 0, run_id, leader_log.segment_paths(closed_only=True), out_dir, **kw)
    done = swap(leader_log, store.uri, staging_dir(0, run_id), up["segments"], outputs)
    assert done["swapped"] > 0 and done["swapped"] + done["already"] == len(outputs)
    return up, outputs


def test_a_follower_swaps_the_leaders_compacted_segments_under_the_leaders_epoch(tmp_path):
    async def scenario():
        leader_log, follower, rep, store = await _setup(tmp_path, 120)
        assert _crcs(leader_log) == _crcs(follower._log(0))  # followers hold the leader's very bytes
        before = _state(leader_log)
        up, outputs = _compact_leader(leader_log, store, "A", tmp_path / "a")
        answers = await rep.swap_followers(store.uri, staging_dir(0, "A"), outputs,
                                           accepted_versions(up["segments"]), 10)
        assert answers["F"]["ok"] and answers["F"]["swapped"] == len(outputs) > 2, answers
        assert _crcs(follower._log(0)) == _crcs(leader_log)
        assert _state(follower._log(0)) == _state(leader_log) == before
        assert follower._log(0).cleaned_offset == leader_log.cleaned_offset > 0
        # Asked again (a retried swap), it finds its segments in place.
        again = await rep.swap_followers(store.uri, staging_dir(0, "A"), outputs, accepted_versions(up["segments"]), 10)
        assert again["F"]["ok"] and again["F"]["swapped"] == 0

    asyncio.run(scenario())


def test_a_follower_that_follows_a_newer_leader_keeps_its_originals(tmp_path):
    async def scenario():
        leader_log, follower, rep, store = await _setup(tmp_path, 120)
        originals = _crcs(follower._log(0))
        up, outputs = _compact_leader(leader_log, store, "A", tmp_path / "a")
        # Leadership moved on (a new leader at a higher epoch) between the leader's swap and the follower's.
        await follower.update_partition(0, {"replicas": ["L", "F"], "leader": "F", "leader_epoch": rep.epoch + 1,
                                            "isr": ["F"], "partition_epoch": 2})
        await follower.update_partition(0, {"replicas": ["L", "F"], "leader": "L", "leader_epoch": rep.epoch + 2,
                                            "isr": ["L", "F"], "partition_epoch": 3})
        answers = await rep.swap_followers(store.uri, staging_dir(0, "A"), outputs,
                                           accepted_versions(up["segments"]), 10)
        assert answers["F"] == {"ok": False, "reason": "fenced", "detail": answers["F"]["detail"]}
        assert "not 1" in answers["F"]["detail"]
        assert _crcs(follower._log(0)) == originals
        assert not os.path.exists(str(tmp_path / "follower" / "__consumer_offsets-0.compaction"))

    asyncio.run(scenario())


def test_a_follower_that_missed_a_run_is_brought_along_by_the_next_one(tmp_path):
    async def scenario():
        leader_log, follower, rep, store = await _setup(tmp_path, 120, groups=40)
        originals = _crcs(follower._log(0))
        before = _state(follower._log(0))
        up_a, outputs_a = _compact_leader(leader_log, store, "A", tmp_path / "a", max_batch_records=2)
        lineage = _record_lineage(store, 0, up_a["segments"], outputs_a)  # run A proved; F never swapped
        # Run B compacts the leader's compacted segments again (other batch sizes: other bytes).
        up_b, outputs_b = _compact_leader(leader_log, store, "B", tmp_path / "b")
        # Without the lineage, F's originals are not what run B uploaded: refused, nothing changed.
        refused = await rep.swap_followers(store.uri, staging_dir(0, "B"), outputs_b,
                                           accepted_versions(up_b["segments"]), 10)
        assert not refused["F"]["ok"] and "changed since it was uploaded" in refused["F"]["detail"]
        assert _crcs(follower._log(0)) == originals
        lineage = _record_lineage(store, 0, up_b["segments"], outputs_b)
        answers = await rep.swap_followers(store.uri, staging_dir(0, "B"), outputs_b,
                                           accepted_versions(up_b["segments"], lineage), 10)
        assert answers["F"]["ok"] and answers["F"]["swapped"] == len(outputs_b), answers
        assert _crcs(follower._log(0)) == _crcs(leader_log)
        assert _state(follower._log(0)) == before

    asyncio.run(scenario())


def test_a_follower_out_of_the_isr_catches_up_across_compacted_batches(tmp_path):
    async def scenario():
        # Two groups overwritten again and again: early segments compact to empty batches that only hold
        # their offsets, later ones to one merged batch each.
        leader_log, follower, rep, store = await _setup(tmp_path, 150, groups=2, push=False)
        first = list(leader_log.batches(0))[:3]
        assert (await follower.append(0, first, rep.epoch))["ok"]  # F has 3 original batches, then fell behind
        _compact_leader(leader_log, store, "A", tmp_path / "a")
        compacted = list(leader_log.batches(0))
        assert any(not b.records for b in compacted), "expected an empty compacted batch"
        assert compacted[0].next_offset > 3, "F's log end must fall inside a merged batch"
        rep.isr.discard("F")
        await rep._catch_up("F", leader_log, run_io)
        follower_log = follower._log(0)
        assert "F" in rep.isr
        assert follower_log.log_end_offset == leader_log.log_end_offset
        assert _state(follower_log) == _state(leader_log)
        assert [b.base_offset for b in follower_log.batches(0)] == [b.base_offset for b in compacted]
        # And it keeps following: a new batch reaches it as usual.
        batch = Batch(leader_log.log_end_offset, rep.epoch, 2_000, (_commit(999, 2),))
        leader_log.append(batch, rep.epoch)
        assert (await follower.append(0, [batch], rep.epoch))["ok"]
        follower_log.verify()

    asyncio.run(scenario())


def test_a_follower_swap_interrupted_after_its_commit_point_is_finished_when_the_log_reopens(tmp_path, monkeypatch):
    import errno

    from raygroups.offsets_log import log as file_log

    async def scenario():
        leader_log, follower, rep, store = await _setup(tmp_path, 120)
        before = _state(follower._log(0))
        up, outputs = _compact_leader(leader_log, store, "A", tmp_path / "a")

        def disk_error(directory, offset):
            raise OSError(errno.EIO, "injected: the cleaner checkpoint cannot be written")

        monkeypatch.setattr(file_log, "write_cleaner_checkpoint", disk_error)
        answers = await rep.swap_followers(store.uri, staging_dir(0, "A"), outputs,
                                           accepted_versions(up["segments"]), 10)
        assert not answers["F"]["ok"] and "LogFailedError" in answers["F"]["detail"], answers
        monkeypatch.undo()
        # The LogServer let the failed log go; its next use reopens it and recovery finishes the swap.
        assert 0 not in follower._logs
        reopened = follower._log(0)
        assert reopened.recovery_report.finished_swap and _crcs(reopened) == _crcs(leader_log)
        assert _state(reopened) == before and reopened.cleaned_offset == leader_log.cleaned_offset

    asyncio.run(scenario())
