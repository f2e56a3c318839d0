"""Operator tool: cut a corrupt log at the damage, keeping everything it removes in a quarantine directory.

The log itself never modifies or moves a corrupt file; this is the "on request" step. Typical use, with the
partition not served (nothing else may hold the directory)::

    try:
        replay(open_log(d), state)
    except CorruptLogError as e:
        report = quarantine_from(d, e.path, e.position)   # after a person decided to accept the loss

Guarantees: the cut is at a batch boundary (the position a ``CorruptLogError`` names); every byte removed
from the log (the rest of that segment and all later segments) is first copied or moved into
``<directory>/quarantine-<n>/`` and fsynced; the log then opens with the batches before the cut. Not
guaranteed: anything about the data after the cut (it is set aside, not recovered).
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass, field

from raygroups.offsets_log.errors import LogLockedError
from raygroups.offsets_log.fsutil import fsync_dir
from raygroups.offsets_log.log import LOCK_FILE
from raygroups.offsets_log.segment import (
    SEGMENT_RE,
    index_name,
    iter_frames,
    list_segment_files,
    segment_name,
)


@dataclass
class QuarantineReport:
    quarantine_dir: str
    cut_segment: str
    cut_position: int
    bytes_quarantined: int = 0
    moved: list[str] = field(default_factory=list)


def quarantine_from(directory: str | os.PathLike, segment_path: str, position: int) -> QuarantineReport:
    directory = os.fspath(directory)
    name = os.path.basename(segment_path)
    m = SEGMENT_RE.match(name)
    if not m or not os.path.exists(os.path.join(directory, name)):
        raise ValueError(f"{segment_path} is not a segment of {directory}")
    path = os.path.join(directory, name)
    size = os.path.getsize(path)
    if not 0 <= position <= size:
        raise ValueError(f"position {position} is outside {path} (0..{size})")
    lock_fd = os.open(os.path.join(directory, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            raise LogLockedError(f"{directory} is open by a writer; close it before repairing") from e
        end = 0
        for pos, payload in iter_frames(path, 0, position):  # raises if the prefix itself is damaged
            end = pos + 8 + len(payload)
        if end != position:
            raise ValueError(f"position {position} of {path} is not a batch boundary (last one at {end})")
        n = 0
        while os.path.exists(os.path.join(directory, f"quarantine-{n}")):
            n += 1
        qdir = os.path.join(directory, f"quarantine-{n}")
        os.mkdir(qdir)
        report = QuarantineReport(qdir, path, position)
        tail = os.path.join(qdir, f"{name}.from-{position}")
        with open(path, "rb") as src, open(tail, "wb") as dst:
            src.seek(position)
            while chunk := src.read(1 << 20):
                dst.write(chunk)
            dst.flush()
            os.fsync(dst.fileno())
        report.bytes_quarantined += size - position
        report.moved.append(tail)
        fsync_dir(qdir)
        base = int(m.group(1))
        logs, indexes = list_segment_files(directory)
        for later in [b for b in logs if b > base]:
            for later_name in (index_name(later), segment_name(later)):
                src = os.path.join(directory, later_name)
                if os.path.exists(src):
                    report.bytes_quarantined += os.path.getsize(src) if later_name.endswith(".log") else 0
                    os.rename(src, os.path.join(qdir, later_name))
                    report.moved.append(os.path.join(qdir, later_name))
        for stray in [b for b in indexes if b >= base]:  # the cut segment is now the last: no index
            src = os.path.join(directory, index_name(stray))
            if os.path.exists(src):
                os.rename(src, os.path.join(qdir, index_name(stray)))
        fsync_dir(qdir)
        os.truncate(path, position)
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(directory)
        return report
    finally:
        os.close(lock_fd)
