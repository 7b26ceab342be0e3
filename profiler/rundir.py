"""The run directory: the one format between capture and analysis (docs/run-directory.md).

    meta.json     written at start, rewritten at the end (atomically: write, then rename)
    epochs.jsonl  one JSON object per finished epoch, appended and flushed as the epoch ends

The writer keeps nothing in memory between epochs. The reader tolerates a truncated last line
(a crash mid-write) and reports the run as incomplete; any other damage is a RunDirError that says
what and where.
"""

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

FORMAT = 1
META, EPOCHS = "meta.json", "epochs.jsonl"
STATUSES = ("running", "completed", "halted", "failed", "interrupted")


class RunDirError(ValueError):
    """A run directory that cannot be read as one, with the reason."""


class RunWriteError(OSError):
    """Records could not be written (disk full, directory removed, ...)."""


class RunWriter:
    def __init__(self, path):
        self.path = Path(path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            if (self.path / EPOCHS).exists():
                raise RunWriteError(f"{self.path} already holds a run ({EPOCHS} exists); choose a new directory")
            self._epochs = open(self.path / EPOCHS, "a", encoding="utf-8")
        except OSError as e:
            if isinstance(e, RunWriteError):
                raise
            raise RunWriteError(f"cannot create the run directory {self.path}: {e}") from e

    def write_meta(self, meta):
        tmp = self.path / (META + ".tmp")
        try:
            tmp.write_text(json.dumps(meta, indent=2, default=str), encoding="utf-8")
            os.replace(tmp, self.path / META)
        except OSError as e:
            raise RunWriteError(f"cannot write {self.path / META}: {e}") from e

    def append_epoch(self, record):
        try:
            if os.fstat(self._epochs.fileno()).st_nlink == 0:
                # writes to a deleted file succeed on POSIX and vanish: refuse to lose records quietly
                raise OSError(f"{EPOCHS} was deleted (was the run directory removed?)")
            self._epochs.write(json.dumps(record, separators=(",", ":")) + "\n")
            self._epochs.flush()
        except (OSError, ValueError) as e:
            raise RunWriteError(f"cannot append epoch {record.get('epoch')} to {self.path / EPOCHS}: {e}") from e

    def close(self):
        try:
            self._epochs.close()
        except OSError:
            pass


@dataclass
class Run:
    path: Path
    meta: dict
    epochs: list
    problems: list = field(default_factory=list)  # why the run is incomplete, if it is

    @property
    def status(self):
        return self.meta.get("status", "unknown")

    @property
    def complete(self):
        return not self.problems and self.status in ("completed", "halted")


def read_run(path):
    """Read a run directory; RunDirError when it is not one or is damaged beyond a torn last line."""
    path = Path(path)
    if not path.exists():
        raise RunDirError(f"{path} does not exist")
    if not path.is_dir():
        raise RunDirError(f"{path} is not a directory (a run directory holds {META} and {EPOCHS})")
    meta_file = path / META
    if not meta_file.exists():
        raise RunDirError(f"{path} is not a run directory: it has no {META}")
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RunDirError(f"{meta_file} is not valid JSON ({e})") from e
    if not isinstance(meta, dict) or "format" not in meta:
        raise RunDirError(f"{meta_file} has no 'format' field: not written by this profiler")
    if meta["format"] != FORMAT:
        raise RunDirError(f"{meta_file} is format {meta['format']!r}; this profiler reads format {FORMAT}")
    problems = []
    if meta.get("status") == "running":
        problems.append("the run never finished (status still 'running'): it crashed, was killed, or is live")
    elif meta.get("status") in ("failed", "interrupted"):
        problems.append(f"the run {meta['status']}" + (f": {meta['error']}" if meta.get("error") else ""))
    epochs = _read_epochs(path / EPOCHS, problems)
    return Run(path, meta, epochs, problems)


def _read_epochs(file, problems):
    if not file.exists():
        problems.append(f"{EPOCHS} is missing")
        return []
    lines = file.read_bytes().split(b"\n")
    torn = lines[-1] != b""   # a complete file ends with a newline
    lines = lines[:-1] if not torn else lines
    epochs = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            if number == len(lines) and torn:
                problems.append(f"{EPOCHS} line {number} is truncated (a crash mid-write); it was skipped")
                break
            raise RunDirError(f"{file} line {number} is not valid JSON ({e.msg})") from e
        if not isinstance(record, dict) or "epoch" not in record or "wall_s" not in record:
            raise RunDirError(f"{file} line {number} is not an epoch record (needs 'epoch' and 'wall_s')")
        epochs.append(record)
    return epochs
