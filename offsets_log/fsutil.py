"""Small durable-file helpers: atomic replace and directory fsync."""

from __future__ import annotations

import os


def fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes) -> None:
    """Replace ``path`` by ``data`` so that a crash leaves either the old or the new content.

    Writes a temporary sibling, fsyncs it, renames it over ``path`` and fsyncs the directory. On failure
    the temporary file is removed and the error propagates; ``path`` is untouched."""
    tmp = path + ".tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(os.path.dirname(path) or ".")
