"""RunWriter: creates a run directory and appends to it; keeps nothing in memory between epochs.

meta.json is replaced atomically (write meta.json.tmp, then rename; the .tmp is removed when the
write fails); epochs.jsonl gets one line per finished epoch, flushed at once; steps.bin and
gc_events.bin get fixed-size binary records in blocks. Every append is one unbuffered write; the
writer counts the bytes of every append written whole and cuts a file back to that count when a
write fails part-way, so no file ends in part of a record or line, and dropping the last records
(an abandoned epoch's steps) cuts exactly those. Every failure is a RunWriteError that names the
file.
"""

import json
import os
import time
from pathlib import Path

from ..errors import RunWriteError, UsageError
from .format import EPOCHS, GC_EVENTS, META, RANK_PREFIX, RSS, STEPS
from .reader import listed

def _epoch_encoder():
    """Strict compact JSON of an epoch record. CPython's C encoder, built once: JSONEncoder.encode
    builds one on every call, ~1.3 us of each epoch's bookkeeping. Its table of the containers
    being encoded (which tells a cycle in a field's value, as JSONEncoder does) is emptied before
    each call: a failed call leaves entries in it. JSONEncoder where there is no C encoder."""
    strict = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
    c_encoder = getattr(json.encoder, "c_make_encoder", None)
    if c_encoder is None:
        return strict.encode
    markers = {}
    made = c_encoder(markers, strict.default, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, False)

    def encode(record):
        markers.clear()
        return "".join(made(record, 0))
    return encode


_ENCODE = _epoch_encoder()
_now = time.perf_counter_ns
ALIVE_CHECK_NS = 100_000_000   # a removed run directory is noticed within 0.1 s


def holds_a_run(path, prefix=""):
    """UsageError (its message after `prefix`) when the directory `path` holds a run already: its
    own files, or runs in its subdirectories (a job's rank-N/, a directory of runs), which a run
    written over them would hide from the reader."""
    path = Path(path)
    for name in (EPOCHS, META):
        if (path / name).exists():
            raise _taken(path, prefix, f"{name} exists")
    try:
        runs = sorted(str(m.parent.relative_to(path))   # as the reader finds them: a run's, a job's ranks, per host
                      for m in (*path.glob("*/" + META), *path.glob(f"*/{RANK_PREFIX}*/{META}")))
    except OSError:
        runs = []
    if runs:
        raise _taken(path, prefix, f"in {listed(runs, 3)}")


def check_free(path):
    """UsageError unless `path` can become a new run directory: a file in its place, or a run in it
    already (holds_a_run), is refused. The Session calls it when built; RunWriter when it creates
    the directory, which a file made meanwhile still fails (_a_file)."""
    path = Path(path)
    if path.is_file():
        raise _a_file(path)
    if path.is_dir():
        holds_a_run(path)


def _a_file(path):
    return UsageError(f"{path} is a file, not a directory; choose a new run directory")


def _taken(path, prefix="", what=f"{EPOCHS} exists"):   # RunWriter's own: epochs.jsonl created meanwhile
    return UsageError(f"{prefix}{path} already holds a run ({what}); choose a new directory")


class RunWriter:
    def __init__(self, path):
        self.path = Path(path)
        self._created = not self.path.exists()
        check_free(self.path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise _a_file(self.path) from None
        except NotADirectoryError:
            in_the_way = next(p for p in self.path.parents if p.exists())
            raise UsageError(f"cannot create the run directory {self.path}: {in_the_way} is a file, not a "
                             f"directory; choose another path") from None
        except OSError as e:
            raise RunWriteError(f"cannot create the run directory {self.path}: {e.strerror or e}") from e
        try:   # created exclusively: of two runs started on one directory, the second stops here
            self._files = {EPOCHS: open(self.path / EPOCHS, "xb", buffering=0)}
        except FileExistsError:
            raise _taken(self.path) from None
        except OSError as e:
            raise RunWriteError(f"cannot create the run directory {self.path}: {e.strerror or e}") from e
        self._sizes = {EPOCHS: 0}   # bytes of whole appends in each file; a file whose failed write
                                    # could not be cut back stays in self._files as None
        self._next_check_ns = 0

    def write_meta(self, meta):
        tmp = self.path / (META + ".tmp")
        try:
            text = json.dumps(meta, indent=2, default=str, allow_nan=False)
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, self.path / META)
        except (OSError, ValueError) as e:
            tmp.unlink(missing_ok=True)
            raise RunWriteError(f"cannot write {self.path / META}: {e}") from e

    def _check_alive(self, force=False):
        """Writes to a deleted file succeed on POSIX and vanish: refuse to lose records quietly.
        One fstat (~10 us here) at most every ALIVE_CHECK_NS, not every epoch: what is written to a
        deleted file is lost however soon the loss is noticed."""
        now = _now()
        if now < self._next_check_ns and not force:
            return
        self._next_check_ns = now + ALIVE_CHECK_NS
        file = self._files[EPOCHS]
        if file is None:
            raise OSError(f"an earlier write to {EPOCHS} failed and could not be cut back")
        if os.fstat(file.fileno()).st_nlink == 0:
            raise OSError(f"{EPOCHS} was deleted (was the run directory removed?)")

    def check_alive(self):
        """Raise a RunWriteError now if epochs.jsonl was deleted (the run's last records are checked
        whatever the time since the last check)."""
        try:
            self._check_alive(force=True)
        except OSError as e:
            raise RunWriteError(f"cannot finish the run in {self.path}: {e}") from e

    def encode_epoch(self, record):
        """The epoch's line as bytes; a record JSON cannot hold (NaN, a value of no JSON type) is a
        RunWriteError here, before anything of the epoch is written."""
        try:
            return (_ENCODE(record) + "\n").encode("ascii")   # the encoder escapes all else
        except (ValueError, TypeError, RecursionError) as e:   # RecursionError: a field's value nested too deep
            raise RunWriteError(f"cannot record epoch {record.get('epoch')} in {self.path / EPOCHS}: {e}") from e

    def append_epoch(self, record):
        self.write_epoch_line(self.encode_epoch(record), record.get("epoch"))

    def write_epoch_line(self, line, index):
        """Append an epoch's line (encode_epoch's), whole or not at all."""
        try:
            self._check_alive()
        except OSError as e:
            raise RunWriteError(f"{self._what(EPOCHS, index)}: {e}") from e
        self._append(EPOCHS, line, index)

    def append_binary(self, name, data):
        """Append packed records to `name` (STEPS, GC_EVENTS or RSS), all of them or none. A removed run
        directory is caught by the epoch lines written after them (_check_alive)."""
        if data:
            self._append(name, data)

    def _what(self, name, index=None):
        """What failed, for the error (built only then: a path join costs tens of us with the
        caches cold after training)."""
        return f"cannot append {'' if index is None else f'epoch {index} '}to {self.path / name}"

    def _append(self, name, data, index=None):
        """One unbuffered write of all of `data`; one that fails part-way (a full disk, an
        interrupt) is cut back to the whole appends before it, so the file never ends in part of a
        record (or of a line a later close would complete)."""
        file = self._files.get(name)
        try:
            if file is None:
                file = self._open(name, self._what(name, index))
            done = file.write(data)
            size = memoryview(data).nbytes
            if done < size:   # a short write: the rest, or the error that stopped it
                view = memoryview(data).cast("B")
                while done < size:
                    done += file.write(view[done:])
        except RunWriteError:   # _open's: the file is broken already
            raise
        except BaseException as e:
            if file is not None:
                try:
                    os.ftruncate(file.fileno(), self._sizes[name])
                except OSError:
                    self._files[name] = None
                    try:
                        file.close()
                    except OSError:
                        pass
            if isinstance(e, OSError) and e.errno is not None:   # the write's own; not a signal handler's TimeoutError
                raise RunWriteError(f"{self._what(name, index)}: {e}") from e
            raise
        self._sizes[name] += done

    def size(self, name):
        """Bytes of the whole appends to `name` so far."""
        return self._sizes.get(name, 0)

    def holds(self, name, size):
        """Whether `name` on disk is at least `size` bytes long (an append landed whole whose
        caller was interrupted before it could note it); False for a file that cannot be looked at."""
        file = self._files.get(name)
        try:
            return file is not None and os.fstat(file.fileno()).st_size >= size
        except OSError:
            return False

    def _open(self, name, what):
        if name in self._files:   # there, but None: broken
            raise RunWriteError(f"{what}: an earlier write to it failed and could not be cut back")
        file = open(self.path / name, "ab", buffering=0)
        self._sizes[name] = file.tell()   # "a" mode opens at the end
        self._files[name] = file
        return file

    def drop_binary(self, name, size):
        """Remove the last `size` bytes appended to `name` (an abandoned epoch's steps)."""
        if not size:
            return
        what = f"cannot remove an abandoned epoch's records from {self.path / name}"
        file = self._files.get(name) or self._open(name, what)
        try:
            os.ftruncate(file.fileno(), self._sizes[name] - size)
        except OSError as e:
            raise RunWriteError(f"{what}: {e}") from e
        self._sizes[name] -= size

    def close(self):
        for file in filter(None, self._files.values()):
            try:
                file.close()
            except OSError:
                pass

    def discard(self):
        """Remove what this writer created (a run whose start failed leaves no unusable directory)."""
        self.close()
        for name in (EPOCHS, STEPS, GC_EVENTS, RSS, META + ".tmp"):
            try:
                (self.path / name).unlink(missing_ok=True)
            except OSError:
                pass
        if self._created:
            try:
                self.path.rmdir()
            except OSError:
                pass


__all__ = ["RunWriter", "RunWriteError", "STEPS", "GC_EVENTS"]
