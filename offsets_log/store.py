"""Segment store: copies of closed segments under a ``storage_uri``, one directory and manifest per partition.

``storage_uri`` is a local directory (the default) or anything ``pyarrow.fs.FileSystem.from_uri``
understands (``s3://bucket/prefix`` on a real cluster). Layout::

    <root>/<partition>/00000000000000000000.log
    <root>/<partition>/manifest.json   {"version": 1, "partition": ..., "segments": [{name, base_offset,
                                         size_bytes, crc32}, ...]}

Guarantees: ``upload`` is idempotent and resumable. A segment is copied to a temporary name, read back
and CRC-checked, renamed into place, and only then added to the manifest (which is itself replaced via a
temporary file), so the manifest never lists a segment whose stored bytes were not verified; rerunning
after a crash copies only what is missing or changed (a compacted segment replacing the original has the
same name and a new CRC). Not guaranteed: atomic multi-segment updates, or protection against two
uploaders of one partition at the same time (the partition's leader is the only uploader).
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import asdict, dataclass, field

from pyarrow import fs as pafs
from raygroups.offsets_log.errors import LogError
from raygroups.offsets_log.segment import SEGMENT_RE

MANIFEST = "manifest.json"
COPY_CHUNK_BYTES = 4 << 20


class SegmentStoreError(LogError):
    """A copy could not be verified, or the store holds something that contradicts its manifest."""


@dataclass(frozen=True)
class StoredSegment:
    name: str
    base_offset: int
    size_bytes: int
    crc32: int


@dataclass
class Manifest:
    partition: str
    segments: list[StoredSegment] = field(default_factory=list)

    def get(self, name: str) -> StoredSegment | None:
        return next((s for s in self.segments if s.name == name), None)


@dataclass
class UploadResult:
    copied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    manifest: Manifest | None = None


def file_crc32(path: str) -> tuple[int, int]:
    """``(crc32, size)`` of a local file, streamed."""
    crc = 0
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(COPY_CHUNK_BYTES):
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
    return crc, size


class SegmentStore:
    def __init__(self, storage_uri: str | os.PathLike, *, filesystem: pafs.FileSystem | None = None) -> None:
        uri = os.fspath(storage_uri)
        self.uri = uri if ("://" in uri or filesystem is not None) else os.path.abspath(uri)
        if filesystem is not None:
            self.fs, self.root = filesystem, uri
        elif "://" in uri:
            self.fs, self.root = pafs.FileSystem.from_uri(uri)
        else:
            self.fs, self.root = pafs.LocalFileSystem(), os.path.abspath(uri)
        self.root = self.root.rstrip("/")

    def _dir(self, partition) -> str:
        return f"{self.root}/{partition}"

    # ------------------------------------------------------------------------------------ manifest

    def manifest(self, partition) -> Manifest:
        path = f"{self._dir(partition)}/{MANIFEST}"
        if self.fs.get_file_info(path).type == pafs.FileType.NotFound:
            return Manifest(str(partition))
        with self.fs.open_input_stream(path) as f:
            data = json.loads(f.read().decode("utf-8"))
        if data.get("version") != 1:
            raise SegmentStoreError(f"{path}: unknown manifest version {data.get('version')!r}")
        return Manifest(data["partition"], [StoredSegment(**s) for s in data["segments"]])

    def _write_manifest(self, partition, manifest: Manifest) -> None:
        d = self._dir(partition)
        body = {"version": 1, "partition": manifest.partition, "segments": [asdict(s) for s in manifest.segments]}
        tmp = f"{d}/{MANIFEST}.tmp"
        with self.fs.open_output_stream(tmp) as f:
            f.write(json.dumps(body, indent=1, sort_keys=True).encode("utf-8"))
        self.fs.move(tmp, f"{d}/{MANIFEST}")

    # -------------------------------------------------------------------------------------- upload

    def upload(self, partition, segment_paths: list[str]) -> UploadResult:
        """Copy closed segments (local paths) of ``partition`` into the store; see the module docstring."""
        d = self._dir(partition)
        self.fs.create_dir(d, recursive=True)
        manifest = self.manifest(partition)
        result = UploadResult(manifest=manifest)
        for path in segment_paths:
            name = os.path.basename(path)
            m = SEGMENT_RE.match(name)
            if not m:
                raise ValueError(f"{path} is not a segment file (expected <20 digits>.log)")
            crc, size = file_crc32(path)
            entry = StoredSegment(name, int(m.group(1)), size, crc)
            if manifest.get(name) == entry:
                result.skipped.append(name)
                continue
            dest = f"{d}/{name}"
            if self._stored_crc(dest) != (crc, size):
                self._copy_verified(path, dest, crc, size)
            manifest.segments = sorted(
                [s for s in manifest.segments if s.name != name] + [entry], key=lambda s: s.base_offset
            )
            self._write_manifest(partition, manifest)
            result.copied.append(name)
        return result

    def _copy_verified(self, path: str, dest: str, crc: int, size: int) -> None:
        tmp = dest + ".tmp"
        with open(path, "rb") as src, self.fs.open_output_stream(tmp) as out:
            while chunk := src.read(COPY_CHUNK_BYTES):
                out.write(chunk)
        if self._stored_crc(tmp) != (crc, size):
            self.fs.delete_file(tmp)
            raise SegmentStoreError(f"copy of {path} to {dest} failed verification (CRC or size mismatch)")
        self.fs.move(tmp, dest)

    def _stored_crc(self, path: str) -> tuple[int, int] | None:
        if self.fs.get_file_info(path).type == pafs.FileType.NotFound:
            return None
        crc = 0
        size = 0
        with self.fs.open_input_stream(path) as f:
            while chunk := f.read(COPY_CHUNK_BYTES):
                crc = zlib.crc32(chunk, crc)
                size += len(chunk)
        return crc, size

    # ------------------------------------------------------------------------------- read / check

    def verify(self, partition) -> list[str]:
        """Names of the manifest's segments whose stored bytes are missing or do not match their CRC."""
        bad = []
        for s in self.manifest(partition).segments:
            if self._stored_crc(f"{self._dir(partition)}/{s.name}") != (s.crc32, s.size_bytes):
                bad.append(s.name)
        return bad

    def forget(self, partition, names: list[str]) -> None:
        """Drop segments from the manifest (their stored copies are bad): the next ``upload`` copies them again."""
        manifest = self.manifest(partition)
        manifest.segments = [s for s in manifest.segments if s.name not in set(names)]
        self._write_manifest(partition, manifest)

    def read(self, partition, segment: StoredSegment) -> bytes:
        """A stored segment's bytes, checked against the manifest entry (size and CRC)."""
        with self.fs.open_input_stream(f"{self._dir(partition)}/{segment.name}") as f:
            data = f.read()
        if len(data) != segment.size_bytes or zlib.crc32(data) != segment.crc32:
            raise SegmentStoreError(f"stored segment {segment.name} of partition {partition} fails its CRC or size "
                                    f"check ({len(data)} bytes, {segment.size_bytes} in the manifest)")
        return data

    def put(self, path: str, data: bytes) -> None:
        """Write ``data`` at ``path`` under the root, verified, under a temporary name first, so that a
        reader never sees a partial file."""
        dest = f"{self.root}/{path}"
        self.fs.create_dir(dest.rsplit("/", 1)[0], recursive=True)
        tmp = dest + ".tmp"
        with self.fs.open_output_stream(tmp) as out:
            out.write(data)
        if self._stored_crc(tmp) != (zlib.crc32(data), len(data)):
            self.fs.delete_file(tmp)
            raise SegmentStoreError(f"write of {dest} failed verification (CRC or size mismatch)")
        self.fs.move(tmp, dest)

    def get(self, path: str) -> bytes:
        with self.fs.open_input_stream(f"{self.root}/{path}") as f:
            return f.read()

    def download(self, partition, dest_dir: str | os.PathLike) -> list[str]:
        """Copy the manifest's segments into a local directory, CRC-checked; returns the local paths."""
        dest_dir = os.fspath(dest_dir)
        os.makedirs(dest_dir, exist_ok=True)
        out = []
        for s in self.manifest(partition).segments:
            local = os.path.join(dest_dir, s.name)
            crc = 0
            with self.fs.open_input_stream(f"{self._dir(partition)}/{s.name}") as f, open(local, "wb") as w:
                while chunk := f.read(COPY_CHUNK_BYTES):
                    crc = zlib.crc32(chunk, crc)
                    w.write(chunk)
            if crc != s.crc32:
                raise SegmentStoreError(f"stored segment {s.name} of partition {partition} fails its CRC")
            out.append(local)
        return out
