"""Recovery on open and failure handling: torn tails, bit flips, missing segments, ENOSPC, crashes."""

from __future__ import annotations

import errno
import os
import shutil

import pytest
from log_testlib import append_all, make_batches, simple_batches
from raygroups.coordinator.state import DurableState
from raygroups.offsets_log import (
    CorruptLogError,
    LogError,
    LogFailedError,
    LogFullError,
    LogWriteError,
    open_log,
    replay,
)
from raygroups.offsets_log.batch import Batch
from raygroups.offsets_log.codec import encode_batch
from raygroups.offsets_log.epochs import checkpoint_path, write_checkpoint

NO_FSYNC = {"fsync_for_testing": lambda fd: None}


def build(directory, batches, segment_bytes=1024):
    with open_log(directory, segment_bytes=segment_bytes, **NO_FSYNC) as log:
        append_all(log, batches)
        return log.segment_paths()


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def write_bytes(path, data):
    with open(path, "wb") as f:
        f.write(data)


def test_torn_write_at_every_byte_of_the_last_batch(tmp_path):
    batches = simple_batches(30, per_batch=2)
    paths = build(tmp_path / "p", batches)
    assert len(paths) > 1
    last = paths[-1]
    original = read_bytes(last)
    frame = len(encode_batch(batches[-1]))
    start = len(original) - frame
    for cut in range(start + 1, len(original)):
        write_bytes(last, original[:cut])
        with open_log(tmp_path / "p", segment_bytes=1024, **NO_FSYNC) as log:
            assert log.bytes_dropped == cut - start
            assert log.log_end_offset == batches[-1].base_offset
            assert list(log.batches()) == batches[:-1]
        assert os.path.getsize(last) == start
    with open_log(tmp_path / "p", segment_bytes=1024, **NO_FSYNC) as log:
        assert log.bytes_dropped == 0
        log.append(batches[-1], batches[-1].leader_epoch)
    assert read_bytes(last) == original


def test_bit_flips_in_the_last_batch_truncate_it(tmp_path):
    batches = simple_batches(30, per_batch=2)
    paths = build(tmp_path / "p", batches)
    last = paths[-1]
    original = read_bytes(last)
    frame = len(encode_batch(batches[-1]))
    start = len(original) - frame
    for i in range(start, len(original)):
        damaged = bytearray(original)
        damaged[i] ^= 1 << (i % 8)
        write_bytes(last, bytes(damaged))
        with open_log(tmp_path / "p", segment_bytes=1024, **NO_FSYNC) as log:
            assert log.bytes_dropped == frame, i
            assert list(log.batches()) == batches[:-1]
            assert log.recovery_report.torn_reason
        write_bytes(last, original)


def test_bit_flip_before_the_tail_of_the_last_segment_refuses_to_open(tmp_path):
    batches = simple_batches(12, per_batch=1)
    (path,) = build(tmp_path / "p", batches, segment_bytes=1 << 20)
    original = read_bytes(path)
    for i in range(0, len(original) - len(encode_batch(batches[-1])), 7):
        damaged = bytearray(original)
        damaged[i] ^= 0x10
        write_bytes(path, bytes(damaged))
        with pytest.raises(CorruptLogError) as err:
            open_log(tmp_path / "p", **NO_FSYNC)
        assert err.value.path == path and err.value.position is not None
        assert path in str(err.value)
        assert read_bytes(path) == bytes(damaged), "a corrupt file must never be modified"
    write_bytes(path, original)
    open_log(tmp_path / "p").close()


def test_bit_flip_in_an_earlier_segment_is_refused_naming_the_file(tmp_path):
    batches = simple_batches(40, per_batch=2)
    paths = build(tmp_path / "p", batches)
    first = paths[0]
    damaged = bytearray(read_bytes(first))
    damaged[len(damaged) // 2] ^= 0x01
    write_bytes(first, bytes(damaged))
    # The index footer still matches, so open is cheap and succeeds; every read checks CRCs.
    with open_log(tmp_path / "p", segment_bytes=1024, **NO_FSYNC) as log:
        with pytest.raises(CorruptLogError, match=first):
            replay(log, DurableState())
        with pytest.raises(CorruptLogError, match=first):
            log.verify()
    # Without a trusted index the segment is scanned on open and refused.
    os.unlink(first[:-4] + ".index")
    with pytest.raises(CorruptLogError, match=first):
        open_log(tmp_path / "p", segment_bytes=1024)
    assert read_bytes(first) == bytes(damaged)


def test_missing_segments_are_refused(tmp_path):
    batches = simple_batches(40, per_batch=2)
    paths = build(tmp_path / "p", batches)
    assert len(paths) >= 3
    cases = [
        (paths[1], "a segment is missing"),
        (paths[0], "earlier segments are missing"),
        (paths[-1], "the segment after it is missing"),
    ]
    for n, (victim, match) in enumerate(cases):
        d = tmp_path / f"copy{n}"
        shutil.copytree(tmp_path / "p", d)
        os.unlink(os.path.join(d, os.path.basename(victim)))
        with pytest.raises(CorruptLogError, match=match):
            open_log(d)


def test_offsets_that_do_not_increase_are_refused(tmp_path):
    b0, b1 = simple_batches(2, per_batch=2)
    d = tmp_path / "p"
    d.mkdir()
    bad = Batch(1, 0, 0, b1.records)  # overlaps b0 (offsets 0-1)
    write_bytes(d / "00000000000000000000.log", encode_batch(b0) + encode_batch(bad) + encode_batch(b1))
    with pytest.raises(CorruptLogError, match="offset 2 was expected"):
        open_log(d)


def failing_writer(budget):
    """A write wrapper that lets ``budget`` bytes through and then fails with ENOSPC."""
    state = {"left": budget}

    def write(fd, data):
        if state["left"] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = os.write(fd, bytes(data[: state["left"]]))
        state["left"] -= n
        return n

    return write, state


@pytest.mark.parametrize("budget_into_batch", [0, 1, 7, 8, 30, -1])
def test_enospc_during_append_acknowledges_nothing_and_the_log_stays_usable(tmp_path, budget_into_batch):
    batches = simple_batches(6, per_batch=3)
    frame = len(encode_batch(batches[5]))
    good = sum(len(encode_batch(b)) for b in batches[:5])
    budget = good + (budget_into_batch if budget_into_batch >= 0 else frame - 1)
    write, state = failing_writer(budget)
    d = tmp_path / "p"
    log = open_log(d, segment_bytes=1 << 20, write_for_testing=write)
    append_all(log, batches[:5])
    with pytest.raises(LogFullError, match="disk full"):
        log.append(batches[5], 0)
    assert log.log_end_offset == batches[5].base_offset
    assert os.path.getsize(log.segment_paths()[-1]) == good
    state["left"] = 1 << 20  # space freed
    log.append(batches[5], 0)
    log.close()
    with open_log(d) as log:
        assert list(log.batches()) == batches
        assert log.bytes_dropped == 0


def test_other_write_errors_are_typed_and_an_undo_failure_fences_the_log(tmp_path, monkeypatch):
    batches = simple_batches(3)

    def eio(fd, data):
        os.write(fd, bytes(data[:5]))
        raise OSError(errno.EIO, "I/O error")

    d = tmp_path / "p"
    log = open_log(d, write_for_testing=eio)
    with pytest.raises(LogWriteError) as err:
        log.append(batches[0], 0)
    assert not isinstance(err.value, LogFullError)
    assert log.log_end_offset == 0
    monkeypatch.setattr(os, "ftruncate", lambda fd, n: (_ for _ in ()).throw(OSError(errno.EIO, "EIO")))
    with pytest.raises(LogFailedError):
        log.append(batches[0], 0)
    with pytest.raises(LogFailedError):
        log.append(batches[0], 0)
    monkeypatch.undo()
    log.close()
    with open_log(d) as log:  # the partial write is a torn tail: truncated on reopen
        assert log.bytes_dropped == 5  # the first failed write was undone in place
        assert log.log_end_offset == 0
        append_all(log, batches)


def test_fsync_failure_fails_the_append_and_removes_the_batch(tmp_path):
    calls = {"n": 0}

    def fsync(fd):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(errno.EIO, "fsync failed")
        os.fsync(fd)

    batches = simple_batches(3)
    with open_log(tmp_path / "p", fsync_for_testing=fsync) as log:
        log.append(batches[0], 0)
        with pytest.raises(LogWriteError):
            log.append(batches[1], 0)
        assert log.log_end_offset == 1
        log.append(batches[1], 0)
        log.append(batches[2], 0)
    with open_log(tmp_path / "p") as log:
        assert list(log.batches()) == batches


def test_process_died_between_write_and_fsync(tmp_path):
    """A crash can leave any prefix of the unsynced batch, or all of it, on disk."""
    batches = make_batches([b.records for b in simple_batches(5, per_batch=2)], [1, 1, 1, 1, 2])
    d = tmp_path / "p"
    (path,) = build(d, batches[:4], segment_bytes=1 << 20)
    frame = encode_batch(batches[4])
    with open(path, "ab") as f:  # the dying process got 2/3 of its write out
        f.write(frame[: 2 * len(frame) // 3])
    with open_log(d) as log:
        assert log.bytes_dropped == 2 * len(frame) // 3
        assert list(log.batches()) == batches[:4]
        assert log.epoch_entries == [(1, 0)]
    with open(path, "ab") as f:  # this time the whole batch reached the disk, the checkpoint did not
        f.write(frame)
    with open_log(d) as log:
        assert log.bytes_dropped == 0
        assert list(log.batches()) == batches
        assert log.epoch_entries == [(1, 0), (2, 8)]
        assert log.recovery_report.epoch_checkpoint_repaired


def test_checkpoint_entries_past_the_log_end_are_dropped_and_a_lost_checkpoint_is_rebuilt(tmp_path):
    batches = make_batches([b.records for b in simple_batches(30, per_batch=2)], [0] * 10 + [3] * 10 + [5] * 10)
    d = tmp_path / "p"
    build(d, batches)
    write_checkpoint(checkpoint_path(str(d)), [(0, 0), (3, 20), (5, 40), (9, 60)])
    with open_log(d, segment_bytes=1024) as log:
        assert log.epoch_entries == [(0, 0), (3, 20), (5, 40)]
    os.unlink(checkpoint_path(str(d)))
    with open_log(d, segment_bytes=1024) as log:
        assert log.epoch_entries == [(0, 0), (3, 20), (5, 40)]
        assert log.end_offset_for_epoch(4) == (3, 40)


def test_fsync_failure_in_interval_mode_fences_the_log(tmp_path):
    failures = [OSError(errno.EIO, "fsync failed")]

    def fsync(fd):
        if failures:
            raise failures.pop()

    batches = simple_batches(3)
    log = open_log(tmp_path / "p", fsync_interval_ms=0, fsync_for_testing=fsync)
    with pytest.raises(LogWriteError):
        log.append(batches[0], 0)
    with pytest.raises(LogFailedError, match="reopen"):
        log.append(batches[0], 0)
    log.close()
    with open_log(tmp_path / "p") as log:
        append_all(log, batches)


def test_operator_quarantine_cuts_at_the_damage_and_keeps_what_it_removes(tmp_path):
    from raygroups.offsets_log.repair import quarantine_from

    batches = simple_batches(40, per_batch=2)
    d = tmp_path / "p"
    paths = build(d, batches)
    victim = paths[1]
    damaged = bytearray(read_bytes(victim))
    damaged[len(damaged) // 2] ^= 0x04
    write_bytes(victim, bytes(damaged))
    with open_log(d, segment_bytes=1024) as log:
        with pytest.raises(CorruptLogError) as err:
            replay(log, DurableState())
        with pytest.raises(LogError, match="close it"):
            quarantine_from(d, err.value.path, err.value.position)
    total = sum(os.path.getsize(p) for p in paths)
    report = quarantine_from(d, err.value.path, err.value.position)
    with open_log(d, segment_bytes=1024) as log:
        kept = list(log.batches())
        assert kept == batches[: len(kept)] and len(kept) < len(batches)
        assert log.size_bytes + report.bytes_quarantined == total
        log.append(Batch(log.log_end_offset, 0, 0, batches[0].records), 0)
    assert os.path.isdir(report.quarantine_dir) and len(report.moved) >= 2


def test_leftovers_of_interrupted_atomic_writes_are_removed(tmp_path):
    d = tmp_path / "p"
    build(d, simple_batches(3))
    for name in ["leader-epoch-checkpoint.tmp", "00000000000000000000.index.tmp", "00000000000000000000.log.swap"]:
        (d / name).write_bytes(b"partial")
    (d / "notes.tmp").write_bytes(b"not ours")
    with open_log(d) as log:
        assert sorted(log.recovery_report.removed_temporary_files) == [
            "00000000000000000000.index.tmp",
            "00000000000000000000.log.swap",
            "leader-epoch-checkpoint.tmp",
        ]
        assert log.log_end_offset == 3
    assert (d / "notes.tmp").exists()
