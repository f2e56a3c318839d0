"""FileLog API: round trips across reopen, truncation, segment rolls, epochs, locking, input validation."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_testlib import append_all, make_batches, record_lists, simple_batches
from raygroups.offsets_log import (
    InMemoryLog,
    LogError,
    LogLockedError,
    NonMonotonicAppendError,
    OffsetOutOfRangeError,
    StaleEpochError,
    open_log,
)
from raygroups.offsets_log.batch import Batch
from raygroups.offsets_log.codec import encode_batch

NO_FSYNC = {"fsync_for_testing": lambda fd: None}
PROPS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def fresh_dir(tmp_path, name="p"):
    d = tmp_path / name
    n = 0
    while d.exists():
        n += 1
        d = tmp_path / f"{name}{n}"
    return d


def non_decreasing_epochs(n):
    return st.lists(st.integers(0, 2), min_size=n, max_size=n).map(lambda xs: [sum(xs[: i + 1]) for i in range(n)])


@PROPS
@given(data=st.data(), recs=record_lists, segment_bytes=st.integers(1024, 4096))
def test_append_reopen_read_back_identical(tmp_path, data, recs, segment_bytes):
    epochs = data.draw(non_decreasing_epochs(len(recs)))
    batches = make_batches(recs, epochs)
    d = fresh_dir(tmp_path)
    with open_log(d, segment_bytes=segment_bytes, **NO_FSYNC) as log:
        append_all(log, batches)
        assert list(log.batches()) == batches
    with open_log(d, segment_bytes=segment_bytes, **NO_FSYNC) as log:
        assert list(log.batches()) == batches
        assert log.log_end_offset == (batches[-1].next_offset if batches else 0)
        assert log.recovery_report.bytes_dropped == 0
        assert log.recovery_report.rebuilt_indexes == []
        assert log.verify() == len(batches)
        mem = InMemoryLog()
        append_all(mem, batches)
        for offset in range(log.log_end_offset + 1):
            assert list(log.batches(offset)) == list(mem.batches(offset))
            max_bytes = data.draw(st.integers(1, 600))
            assert log.read(offset, max_bytes) == mem.read(offset, max_bytes)
        for epoch in range(-1, (epochs[-1] if epochs else 0) + 2):
            assert log.end_offset_for_epoch(epoch) == mem.end_offset_for_epoch(epoch)


@PROPS
@given(data=st.data(), recs=record_lists.filter(bool), more=record_lists, segment_bytes=st.integers(1024, 2048))
def test_truncate_to_then_append(tmp_path, data, recs, more, segment_bytes):
    epochs = data.draw(non_decreasing_epochs(len(recs)))
    batches = make_batches(recs, epochs)
    k = data.draw(st.integers(0, len(batches)))
    boundary = batches[k].base_offset if k < len(batches) else batches[-1].next_offset
    d = fresh_dir(tmp_path)
    mem = InMemoryLog()
    append_all(mem, batches)
    with open_log(d, segment_bytes=segment_bytes, **NO_FSYNC) as log:
        append_all(log, batches)
        log.truncate_to(boundary)
        mem.truncate_to(boundary)
        assert list(log.batches()) == batches[:k]
        assert log.log_end_offset == boundary
        assert log.latest_epoch == mem.latest_epoch
        new_epoch = max(mem.latest_epoch, 0) + data.draw(st.integers(0, 2))
        tail = make_batches(more, [new_epoch] * len(more), start_offset=boundary)
        append_all(log, tail)
        append_all(mem, tail)
    with open_log(d, segment_bytes=segment_bytes, **NO_FSYNC) as log:
        assert list(log.batches()) == list(mem.batches())
        assert log.latest_epoch == mem.latest_epoch
        for epoch in range(-1, new_epoch + 2):
            assert log.end_offset_for_epoch(epoch) == mem.end_offset_for_epoch(epoch)


@PROPS
@given(recs=record_lists.filter(bool), segment_bytes=st.integers(1024, 3000))
def test_segments_roll_exactly_at_the_size_boundary(tmp_path, recs, segment_bytes):
    batches = make_batches(recs)
    sizes = [len(encode_batch(b)) for b in batches]
    expected = []  # (base offset, bytes) of each segment, by the rule "roll if this batch would not fit"
    base, used = 0, 0
    for b, size in zip(batches, sizes, strict=True):
        if used > 0 and used + size > segment_bytes:
            expected.append((base, used))
            base, used = b.base_offset, 0
        used += size
    expected.append((base, used))
    d = fresh_dir(tmp_path)
    with open_log(d, segment_bytes=segment_bytes, **NO_FSYNC) as log:
        append_all(log, batches)
        paths = log.segment_paths()
    assert [(int(os.path.basename(p)[:20]), os.path.getsize(p)) for p in paths] == expected
    for p in paths[:-1]:
        assert os.path.exists(p[:-4] + ".index")


@PROPS
@given(ops=st.lists(st.tuples(st.sampled_from(["append", "reopen", "truncate"]), st.integers(0, 3)), max_size=25))
def test_epoch_checkpoint_survives_restarts(tmp_path, ops):
    d = fresh_dir(tmp_path)
    mem = InMemoryLog()
    log = open_log(d, segment_bytes=1024, **NO_FSYNC)
    try:
        for op, arg in ops:
            if op == "append":
                epoch = max(mem.latest_epoch, 0) + (arg % 2)
                b = Batch(mem.log_end_offset, epoch, 0, simple_batches(1, per_batch=arg + 1)[0].records)
                log.append(b, epoch)
                mem.append(b, epoch)
            elif op == "reopen":
                log.close()
                log = open_log(d, segment_bytes=1024, **NO_FSYNC)
            else:
                boundaries = [0] + [b.next_offset for b in mem.batches()]
                target = boundaries[max(0, len(boundaries) - 1 - arg)]
                log.truncate_to(target)
                mem.truncate_to(target)
            assert log.latest_epoch == mem.latest_epoch
            assert log.epoch_entries == mem._epochs.entries
            for epoch in range(-1, mem.latest_epoch + 2):
                assert log.end_offset_for_epoch(epoch) == mem.end_offset_for_epoch(epoch)
    finally:
        log.close()


def test_one_writer_per_directory(tmp_path):
    log = open_log(tmp_path / "p")
    with pytest.raises(LogLockedError, match="already open by another writer"):
        open_log(tmp_path / "p")
    code = f"from raygroups import offsets_log\nimport sys\ntry:\n offsets_log.open_log({str(tmp_path / 'p')!r})\nexcept offsets_log.LogLockedError:\n sys.exit(3)\n"
    assert subprocess.run([sys.executable, "-c", code], cwd=os.path.dirname(os.path.dirname(__file__))).returncode == 3
    log.close()
    open_log(tmp_path / "p").close()


def test_inputs_are_validated_with_field_and_limit(tmp_path):
    with pytest.raises(ValueError, match="segment_bytes must be an int >= 1024"):
        open_log(tmp_path / "a", segment_bytes=1023)
    with pytest.raises(ValueError, match="fsync_interval_ms"):
        open_log(tmp_path / "a", fsync_interval_ms=-1)
    with open_log(tmp_path / "b", **NO_FSYNC) as log:
        batches = simple_batches(3, per_batch=2, epoch=2)
        append_all(log, batches)
        with pytest.raises(StaleEpochError):
            log.append(Batch(6, 1, 0, batches[0].records), 1)
        with pytest.raises(StaleEpochError):
            log.append(Batch(6, 3, 0, batches[0].records), 2)
        with pytest.raises(NonMonotonicAppendError):
            log.append(Batch(7, 2, 0, batches[0].records), 2)
        with pytest.raises(ValueError, match="empty batch"):
            log.append(Batch(6, 2, 0, ()), 2)
        with pytest.raises(ValueError, match="max_bytes must be an int >= 1"):
            log.read(0, 0)
        with pytest.raises(OffsetOutOfRangeError):
            log.read(7, 100)
        with pytest.raises(ValueError, match="inside the batch"):
            log.truncate_to(3)
        with pytest.raises(OffsetOutOfRangeError):
            log.truncate_to(9)
        assert list(log.batches()) == batches
    with pytest.raises(LogError, match="closed"):
        log.append(batches[0], 2)


def test_sparse_index_points_into_the_segment_and_is_rebuilt_if_lost(tmp_path):
    batches = simple_batches(400, per_batch=3)
    with open_log(tmp_path / "p", segment_bytes=16 * 1024, index_interval_bytes=512, **NO_FSYNC) as log:
        append_all(log, batches)
        seg = log._segments[0]
        assert len(seg.index.offsets) > 10
        base, pos = seg.index.lookup(300)
        assert 0 < pos and base <= 300
        assert log.read(300, 1)[0].base_offset == 300
        paths = log.segment_paths()
    assert len(paths) > 1
    os.unlink(paths[0][:-4] + ".index")
    with open_log(tmp_path / "p", segment_bytes=16 * 1024, index_interval_bytes=512, **NO_FSYNC) as log:
        assert log.recovery_report.rebuilt_indexes == [paths[0][:-4] + ".index"]
        assert list(log.batches()) == batches


def test_fsync_interval_policy_and_default_fsync_every_batch(tmp_path):
    calls = []
    with open_log(tmp_path / "a", fsync_for_testing=calls.append) as log:
        append_all(log, simple_batches(5))
    assert len(calls) == 5
    calls.clear()
    with open_log(tmp_path / "b", fsync_interval_ms=60_000, fsync_for_testing=calls.append) as log:
        append_all(log, simple_batches(5))
        assert calls == []
        log.flush()
        assert len(calls) == 1
