"""The leader's side of a compaction run (actors/log_compaction.py) on a real log and store, without Ray:
a swap needs the very segments that were uploaded (so of two runs over the same segments only the first
swaps), and a compacted segment that is not what the job wrote changes nothing."""

from __future__ import annotations

import os

import pytest
from raygroups.actors.log_compaction import CompactionRefused, swap, tail_dir, upload
from raygroups.coordinator.records import new_offset_commit_record
from raygroups.coordinator.state import DurableState
from raygroups.offsets_log import open_log, replay
from raygroups.offsets_log.store import SegmentStore, file_crc32

from raygroups.compaction.job import staging_dir
from tests.log.log_testlib import append_all, make_batches, stage_compacted

NO_FSYNC = {"fsync_for_testing": lambda fd: None}


def _state(log) -> DurableState:
    state = DurableState()
    replay(log, state)
    return state


def _stage(store: SegmentStore, run_id: str, closed: list[str], out_dir, max_batch_records: int = 1000) -> list[dict]:
    return stage_compacted(store, 0, run_id, closed, out_dir, max_batch_records=max_batch_records)


@pytest.fixture
def log_and_store(tmp_path):
    recs = [[new_offset_commit_record(f"g{i % 4}", "t", i % 3, i, -1, "m", 1_000 + i)] for i in range(120)]
    with open_log(tmp_path / "log", segment_bytes=1024, **NO_FSYNC) as log:
        append_all(log, make_batches(recs, timestamp_ms=1_000))
        yield log, SegmentStore(tmp_path / "store"), tmp_path


def test_of_two_runs_over_the_same_segments_only_the_first_swaps(log_and_store):
    log, store, tmp = log_and_store
    before = _state(log)
    size_before = log.size_bytes
    closed = log.segment_paths(closed_only=True)
    up_a, up_b = upload(log, store.uri, 0, "A"), upload(log, store.uri, 0, "B")
    assert up_a["segments"] == up_b["segments"] and len(up_a["segments"]) == len(closed) > 2
    tail_name, tail_base, tail_size = up_a["tail"]
    assert tail_base == int(os.path.basename(log.segment_paths()[-1])[:20])
    assert len(store.get(f"{tail_dir(0, 'A')}/{tail_name}")) == tail_size == log.active_segment_size
    outputs = _stage(store, "A", closed, tmp / "ref-a")
    outputs_b = _stage(store, "B", closed, tmp / "ref-b", max_batch_records=2)  # other bytes, same state
    assert swap(log, store.uri, staging_dir(0, "A"), up_a["segments"], outputs)["swapped"] == len(closed)
    assert log.size_bytes < size_before and _state(log) == before
    with pytest.raises(CompactionRefused, match="changed since it was uploaded"):
        swap(log, store.uri, staging_dir(0, "B"), up_b["segments"], outputs_b)
    assert _state(log) == before
    # The same run's swap again (a retry) finds its segments in place and changes nothing.
    assert swap(log, store.uri, staging_dir(0, "A"), up_a["segments"], outputs) | {"log_end_offset": 0} == \
        {"swapped": 0, "already": len(closed), "log_end_offset": 0, "cleaned_offset": log.cleaned_offset}


def test_a_staged_segment_that_is_not_what_the_job_wrote_changes_nothing(log_and_store):
    log, store, tmp = log_and_store
    closed = log.segment_paths(closed_only=True)
    crcs = [file_crc32(p) for p in closed]
    up = upload(log, store.uri, 0, "C")
    outputs = _stage(store, "C", closed, tmp / "ref")
    bad = f"{staging_dir(0, 'C')}/{outputs[-1]['name']}"
    data = bytearray(store.get(bad))
    data[-1] ^= 0xFF
    store.put(bad, bytes(data))
    with pytest.raises(CompactionRefused, match="is not what the job wrote"):
        swap(log, store.uri, staging_dir(0, "C"), up["segments"], outputs)
    assert [file_crc32(p) for p in closed] == crcs  # not one segment was swapped
    assert not os.path.exists(os.path.join(log.directory, "compaction.tmp"))
