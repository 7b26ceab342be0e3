"""The files a command writes (--html, --out): each path is checked before the work starts, so a
directory or a file in the way is one clear line, not an OSError after minutes of work."""

import sys
from pathlib import Path

from ..errors import RunWriteError, UsageError


def output_file(path, flag, example):
    """`path` (given with `flag`, e.g. "--html") as a file to write, its parent directories created;
    UsageError when it is a directory (`example`: a file name to suggest in it) or a file stands
    where a parent directory belongs."""
    if not str(path).strip():
        raise UsageError(f"{flag} {str(path)!r}: give a file name, e.g. {flag} {example}")
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{flag} {path} is a directory: give a file name, e.g. {flag} {path / example}")
    _no_file_in_the_way(path, path.parents, flag)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunWriteError(f"cannot create {path.parent} for {flag} {path}: {e.strerror or e}") from e
    return path


def output_dir(path, flag):
    """`path` (given with `flag`) as a directory for runs; UsageError when a file stands there or
    where one of its parent directories belongs."""
    path = Path(path)
    _no_file_in_the_way(path, (path, *path.parents), flag)
    return path


def _no_file_in_the_way(path, directories, flag):
    """UsageError when the first of `directories` (innermost first) that exists is not one."""
    for candidate in directories:
        if candidate.exists():
            if not candidate.is_dir():
                raise UsageError(f"{flag} {path}: {candidate} is a file, not a directory; choose another path")
            return


def write_html(path, **sections):
    """Render an HTML page (report.html.render(**sections)) to `path`, checked by output_file."""
    from ..report import html
    page = html.render(**sections)
    try:
        Path(path).write_text(page, encoding="utf-8")
    except OSError as e:
        raise RunWriteError(f"cannot write the HTML page to {path}: {e.strerror or e}") from e
    print(f"wrote {path}", file=sys.stderr)
