"""``FileLog.replace_segments`` is all or nothing: a process killed before any one of its file operations
(every fsync, rename and unlink), or an I/O error at any one of them, leaves the log -- once reopened --
with either every original closed segment or every compacted one, never a mix, and replaying to the
same state either way."""

from __future__ import annotations

import errno
import os
import shutil

import pytest
from raygroups.coordinator.records import new_offset_commit_record
from raygroups.coordinator.state import DurableState
from raygroups.offsets_log import LogFailedError, LogWriteError, open_log, replay
from raygroups.offsets_log.cleaning import CLEANER_CHECKPOINT, SWAP_MARKER, read_cleaner_checkpoint
from raygroups.offsets_log.compactor import compact_segments
from raygroups.offsets_log.store import file_crc32

from tests.log.log_testlib import append_all, make_batches

STEPS = ("fsync", "replace", "unlink")  # the file operations a crash or an error is injected before
LATE_FSYNC = {"fsync_for_testing": lambda fd: os.fsync(fd)}  # the log's fsync, looked up when called


def _state(log) -> DurableState:
    state = DurableState()
    replay(log, state)
    return state


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A log with several closed segments, their compacted copies, and what each version looks like."""
    root = tmp_path_factory.mktemp("swap")
    recs = [[new_offset_commit_record(f"g{i % 3}", "t", i % 2, i, -1, "m", 1_000 + i)] for i in range(150)]
    with open_log(root / "log", segment_bytes=1024) as log:
        append_all(log, make_batches(recs, timestamp_ms=1_000))
        closed = log.segment_paths(closed_only=True)
        state = _state(log)
        end = os.path.basename(log.segment_paths()[-1])
    compact_segments(closed, root / "out", delete_retention_ms=0, now_ms=10_000)
    names = [os.path.basename(p) for p in closed]
    old = {n: file_crc32(str(root / "log" / n)) for n in names}
    new = {n: file_crc32(str(root / "out" / n)) for n in names}
    assert len(names) >= 3 and all(old[n] != new[n] for n in names)
    return root, names, old, new, state, int(end[:20])


class _Injected(Exception):
    pass


def _arm(k: int, action):
    """Wrap the file operations so that ``action`` runs just before the k-th of them (0-based)."""
    count = [0]
    originals = {name: getattr(os, name) for name in STEPS}

    def wrap(name):
        def call(*args, **kwargs):
            count[0] += 1
            if count[0] == k + 1:
                action(name)
            return originals[name](*args, **kwargs)
        return call

    for name in STEPS:
        setattr(os, name, wrap(name))
    return originals


def _check(directory, names, old, new, state, cleaned_end) -> str:
    """Reopen: all old or all new, nothing left over, same state. Returns which."""
    with open_log(directory, segment_bytes=1024) as log:
        crcs = {n: file_crc32(os.path.join(directory, n)) for n in names}
        assert crcs in (old, new), "a mix of original and compacted segments"
        assert _state(log) == state
        log.verify()
        which = "new" if crcs == new else "old"
        assert log.cleaned_offset == (cleaned_end if which == "new" else 0)
    left = [f for f in os.listdir(directory) if f.endswith((".swap", ".tmp")) or f == SWAP_MARKER]
    assert not left, left
    return which


def _run_in_child(directory, out_paths, k: int) -> int:
    """Open the log and swap in a child process killed (SIGKILL-like ``_exit``) before operation k; its
    exit status: 0 if the swap finished first."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            log = open_log(directory, segment_bytes=1024, **LATE_FSYNC)
            _arm(k, lambda _name: os._exit(9))
            log.replace_segments(out_paths)
            os._exit(0)
        except BaseException:  # noqa: BLE001 - any failure in the child is its exit status
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_crash_before_any_file_operation_of_a_swap_leaves_all_old_or_all_new(pristine, tmp_path):
    root, names, old, new, state, end = pristine
    out_paths = [str(root / "out" / n) for n in names]
    seen = []
    for k in range(200):
        directory = tmp_path / f"crash-{k}"
        shutil.copytree(root / "log", directory)
        code = _run_in_child(str(directory), out_paths, k)
        assert code in (0, 9), f"the child failed (exit {code}) before operation {k}"
        seen.append(_check(str(directory), names, old, new, state, end))
        if code == 0:
            break
    else:
        pytest.fail("the swap never finished")
    # Both outcomes occur: early crashes keep the originals, late ones finish the swap on reopen.
    assert seen[0] == "old" and seen[-1] == "new" and len(seen) > 2 * len(names)
    assert seen == sorted(seen, key=lambda w: w == "new"), "once committed, a swap never rolls back"


def test_an_io_error_at_any_step_of_a_swap_leaves_the_log_whole(pristine, tmp_path):
    root, names, old, new, state, end = pristine
    out_paths = [str(root / "out" / n) for n in names]
    k = 0
    outcomes = set()
    while True:
        directory = tmp_path / f"error-{k}"
        shutil.copytree(root / "log", directory)
        log = open_log(directory, segment_bytes=1024, **LATE_FSYNC)

        def fail(name):
            raise OSError(errno.EIO, f"injected before {name}")

        originals = _arm(k, fail)
        try:
            log.replace_segments(out_paths)
            outcome = "finished"
        except LogFailedError:  # after the commit point: the log refuses work until reopened
            outcome = "failed"
            with pytest.raises(LogFailedError):
                log.read(0, 1 << 20)
        except LogWriteError:  # before it: nothing changed and the log goes on
            outcome = "refused"
            assert _state(log) == state
        finally:
            for name, fn in originals.items():
                setattr(os, name, fn)
        log.close()
        outcomes.add(outcome)
        assert _check(str(directory), names, old, new, state, end) == ("old" if outcome == "refused" else "new")
        if outcome == "finished":
            assert read_cleaner_checkpoint(str(directory)) == end
            assert os.path.exists(directory / CLEANER_CHECKPOINT)
            break
        k += 1
    assert outcomes == {"refused", "failed", "finished"}
