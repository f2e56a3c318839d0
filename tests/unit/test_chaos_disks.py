"""The disk-full fault's parts without Ray: one small filesystem per simulated node, filled to ENOSPC and
freed (skipped where this process may not mount a tmpfs)."""

from __future__ import annotations

import errno
import os

import pytest

from raygroups.chaos.nemesis import BALLAST, fill_disk
from raygroups.chaos.run import NodeDisks


@pytest.fixture
def disks():
    d = NodeDisks(2, size_mb=4)
    if not d.mounted:
        pytest.skip(d.why)
    yield d
    d.remove()


def test_each_node_gets_its_own_filesystem_and_a_full_one_refuses_writes_until_freed(disks):
    a, b = (os.path.join(disks.root, f"node-{i}") for i in range(2))
    assert os.path.ismount(a) and os.path.ismount(b)
    ballast = os.path.join(a, BALLAST)
    filled = fill_disk(ballast)
    assert 3 << 20 < filled <= 4 << 20
    with pytest.raises(OSError) as e, open(os.path.join(a, "segment.log"), "wb") as f:
        f.write(b"x" * 8192)
        f.flush()
        os.fsync(f.fileno())
    assert e.value.errno == errno.ENOSPC
    with open(os.path.join(b, "segment.log"), "wb") as f:  # the other node's disk is not full
        f.write(b"x" * 8192)
    os.unlink(ballast)
    with open(os.path.join(a, "segment.log"), "wb") as f:
        f.write(b"x" * 8192)


def test_remove_unmounts_and_deletes():
    d = NodeDisks(1, size_mb=1)
    if not d.mounted:
        pytest.skip(d.why)
    path = os.path.join(d.root, "node-0")
    d.remove()
    assert not os.path.exists(path) and not os.path.exists(d.root)
