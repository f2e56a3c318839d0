"""Segment store: idempotent, resumable, CRC-verified copies with a manifest per partition."""

from __future__ import annotations

import os

import pytest
from log_testlib import append_all, simple_batches
from raygroups.offsets_log import open_log
from raygroups.offsets_log.store import SegmentStore, SegmentStoreError, file_crc32


@pytest.fixture
def closed_segments(tmp_path):
    with open_log(tmp_path / "log", segment_bytes=1024, fsync_for_testing=lambda fd: None) as log:
        append_all(log, simple_batches(60, per_batch=2))
        paths = log.segment_paths(closed_only=True)
    assert len(paths) >= 3
    return paths


def read(path):
    with open(path, "rb") as f:
        return f.read()


def test_upload_is_verified_and_idempotent(tmp_path, closed_segments):
    store = SegmentStore(tmp_path / "store")
    first = store.upload(7, closed_segments)
    assert first.copied == [os.path.basename(p) for p in closed_segments]
    manifest = store.manifest(7)
    assert [s.name for s in manifest.segments] == first.copied
    for p, s in zip(closed_segments, manifest.segments, strict=True):
        assert (s.crc32, s.size_bytes) == file_crc32(p)
        assert read(tmp_path / "store" / "7" / s.name) == read(p)
    again = store.upload(7, closed_segments)
    assert again.copied == [] and len(again.skipped) == len(closed_segments)
    assert store.verify(7) == []
    assert not [n for n in os.listdir(tmp_path / "store" / "7") if n.endswith(".tmp")]


def test_upload_resumes_after_a_crash(tmp_path, closed_segments, monkeypatch):
    store = SegmentStore(f"file://{tmp_path / 'store'}")
    calls = []
    real = SegmentStore._copy_verified

    def crash_on_second(self, path, dest, crc, size):
        calls.append(os.path.basename(path))
        if len(calls) == 2:
            raise OSError("process killed")
        real(self, path, dest, crc, size)

    monkeypatch.setattr(SegmentStore, "_copy_verified", crash_on_second)
    with pytest.raises(OSError):
        store.upload(0, closed_segments)
    assert [s.name for s in store.manifest(0).segments] == [os.path.basename(closed_segments[0])]
    monkeypatch.setattr(SegmentStore, "_copy_verified", real)
    result = store.upload(0, closed_segments)
    assert result.copied == [os.path.basename(p) for p in closed_segments[1:]]
    assert store.verify(0) == []


def test_a_copy_that_landed_before_the_manifest_update_is_adopted_not_recopied(tmp_path, closed_segments, monkeypatch):
    store = SegmentStore(tmp_path / "store")
    os.makedirs(tmp_path / "store" / "0")
    name = os.path.basename(closed_segments[0])
    with open(tmp_path / "store" / "0" / name, "wb") as f:
        f.write(read(closed_segments[0]))
    copies = []
    real = SegmentStore._copy_verified
    monkeypatch.setattr(
        SegmentStore, "_copy_verified", lambda self, p, *a: (copies.append(os.path.basename(p)), real(self, p, *a))
    )
    store.upload(0, closed_segments)
    assert name not in copies and len(copies) == len(closed_segments) - 1
    assert store.verify(0) == []


def test_a_bad_copy_is_refused_and_not_listed(tmp_path, closed_segments, monkeypatch):
    store = SegmentStore(tmp_path / "store")
    real = SegmentStore._stored_crc
    monkeypatch.setattr(
        SegmentStore, "_stored_crc", lambda self, path: (1, 1) if path.endswith(".tmp") else real(self, path)
    )
    with pytest.raises(SegmentStoreError, match="failed verification"):
        store.upload(0, closed_segments)
    assert store.manifest(0).segments == []
    assert os.listdir(tmp_path / "store" / "0") == []


def test_damage_in_the_store_is_detected_and_a_replaced_segment_is_recopied(tmp_path, closed_segments):
    store = SegmentStore(tmp_path / "store")
    store.upload(0, closed_segments)
    stored = tmp_path / "store" / "0" / os.path.basename(closed_segments[1])
    data = bytearray(read(stored))
    data[5] ^= 1
    stored.write_bytes(bytes(data))
    assert store.verify(0) == [stored.name]
    with pytest.raises(SegmentStoreError, match="fails its CRC"):
        store.download(0, tmp_path / "dl")
    # A compacted replacement of a local segment (same name, new bytes) is copied again.
    with open(closed_segments[1], "ab") as f:
        f.write(b"compacted")
    result = store.upload(0, closed_segments)
    assert result.copied == [stored.name]
    assert store.verify(0) == []
    local = store.download(0, tmp_path / "dl")
    assert [read(p) for p in local] == [read(p) for p in closed_segments]
