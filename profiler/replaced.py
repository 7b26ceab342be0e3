"""Output files replaced whole: written beside their path and renamed onto it when finished, so a
write that stops part-way (damaged input, a full disk, a command too short to record) leaves an
earlier file as it was and no half-written one."""

import contextlib
import os
from pathlib import Path


@contextlib.contextmanager
def replaced(path):
    """The path to write instead of `path` (PATH.part), renamed onto `path` when the block ends
    without an exception and removed otherwise. A symlink, or a path that is no regular file
    (/dev/stdout, a pipe, a directory: the write's own error says so), is written in place."""
    path = Path(path)
    if path.is_symlink() or (path.exists() and not path.is_file()):
        yield path
        return
    part = path.with_name(path.name + ".part")
    try:
        yield part
        os.replace(part, path)
    finally:
        with contextlib.suppress(OSError):   # a read-only file system refuses even a missing file's unlink
            part.unlink()
