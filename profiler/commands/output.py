"""Where a command's results go: the files it writes (--html, --out), each path checked before the
work starts, so a directory or a file in the way is one clear line, not an OSError after minutes of
work; and standard output, whose failed writes (a full disk, a closed terminal) are one line too."""

import os
import sys
from pathlib import Path

from ..errors import RunWriteError, UsageError


def output_file(path, flag, example, reads=()):
    """`path` (given with `flag`, e.g. "--html") as a file to write, its parent directories created;
    UsageError when it is a directory (`example`: a file name to suggest in it), a file stands
    where a parent directory belongs, or it is one of the records of a run (its meta.json,
    epochs.jsonl, ...): of a run the command `reads` (or a rank's), the output would replace what it
    is made of; of another run, a record of that run."""
    if not str(path).strip():
        raise UsageError(f"{flag} {str(path)!r}: give a file name, e.g. {flag} {example}")
    if str(path) == "-":   # not standard output: a file named "-" would surprise
        raise UsageError(f"{flag} -: writing to standard output is not supported; give a file name, e.g. "
                         f"{flag} {example}")
    named_a_directory = str(path).endswith(("/", os.sep))   # Path drops the slash: it would write a file there
    path = Path(path)
    if path.is_dir() or named_a_directory:
        raise UsageError(f"{flag} {path}{os.sep if named_a_directory else ''} is a directory: give a file name, e.g. "
                         f"{flag} {path / example}")
    _no_file_in_the_way(path, path.parents, flag)
    _not_a_record(path, flag, example, reads)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunWriteError(f"cannot create {path.parent} for {flag} {path}: {e.strerror or e}") from e
    return path


def _not_a_record(path, flag, example, runs):
    """UsageError when `path` is a record of a run: of one the command reads (in a rank's or a host's
    directory below it too), or of any run directory (a meta.json beside it), whose record it would replace."""
    from ..rundir.format import META, RECORDS   # numpy with it: not at the CLI's start
    target = path.resolve()
    if target.name not in RECORDS:
        return
    for run in map(Path, runs):
        if run.resolve() in target.parents:   # the run's, a rank's, a host's rank's
            raise UsageError(f"{flag} {path} is a record of the run {run} that this command reads: give another "
                             f"file, e.g. {flag} {run / example}")
    if (target.parent / META).is_file():   # named as resolved: a link's own directory may be no run
        raise UsageError(f"{flag} {path} is a record of the run {target.parent}, which writing it would destroy: give "
                         f"another file, e.g. {flag} {target.parent / example}")


def output_dir(path, flag):
    """`path` (given with `flag`) as a directory for runs; UsageError when a file stands there or
    where one of its parent directories belongs, or it is a run directory itself (runs written into
    it would hide in it)."""
    from ..rundir.format import EPOCHS, META   # numpy with it: not at the CLI's start
    path = Path(path)
    _no_file_in_the_way(path, (path, *path.parents), flag)
    for name in (META, EPOCHS):
        if (path / name).exists():
            raise UsageError(f"{flag} {path} already holds a run ({name} exists); choose a new directory")
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


def show(*lines):
    """Print `lines` on standard output and flush them. A write that fails is a RunWriteError that
    says so (the OSError of a print named no file), with stdout then pointed at os.devnull so the
    interpreter's flush at exit does not fail on the same bytes again; a reader that went away
    stays a BrokenPipeError (the CLI's quiet 141). A standard output that is closed (`>&-`, where
    Python sets sys.stdout to None and print() writes nothing) is such a failed write too: the
    lines would be lost without a word."""
    if closed(sys.stdout):
        raise RunWriteError("cannot write to standard output: it is closed")
    try:
        for line in lines:
            print(line)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        stdout_to_devnull()
        raise RunWriteError(f"cannot write to standard output: {e.strerror or e}") from e
    except ValueError:   # closed while we wrote (I/O operation on closed file)
        if not closed(sys.stdout):
            raise
        raise RunWriteError("cannot write to standard output: it is closed") from None


def closed(stream):
    """Whether a standard stream is closed: None (closed at start) or closed since."""
    return stream is None or getattr(stream, "closed", False)


def stdout_to_devnull():
    """Point stdout at os.devnull so the interpreter's flush at exit does not fail again on a
    closed pipe or a full disk (the Python documentation's "Note on SIGPIPE"). A stdout that is
    None or closed is left as it is: the interpreter flushes neither, and its descriptor may be
    another file's by now."""
    if closed(sys.stdout):
        return
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):   # stdout is not a file descriptor: nothing is flushed to it at exit
        pass
