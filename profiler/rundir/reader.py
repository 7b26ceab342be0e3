"""read_run(path) -> Run: one run directory, checked as it is read.

A truncated last line (a crash mid-write) is dropped and reported as a problem; every other kind
of damage is a RunDirError that names the file and the line. Records are checked for the fields
analysis relies on, so analysis never meets a string where a number belongs.
"""

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import RunDirError
from .format import (EPOCH_LIMIT, EPOCHS, FORMAT, GC_EVENT_DTYPE, GC_EVENTS, LEGACY_STEP_DTYPE, META, RANK_PREFIX,
                     RSS, RSS_DTYPE, RSS_RECORD, STATUSES, STEP_DTYPE, STEP_RECORD, STEPS, capped_error, run_path)

CHUNK = 1 << 18              # records checked at a time
MAX_SECONDS = 1e7            # a time or clock reading above this (115 days) is not a measurement
MAX_BYTES = 1 << 50          # nor is a memory size above 1 PiB
MAX_COUNT = EPOCH_LIMIT      # nor is a count or an epoch index from 2**63 (steps.bin holds epochs as int64)
PAUSE_SLACK = (0.01, 1e-3)   # an epoch's GC pauses may exceed its wall time by 1% + 1 ms (clock reads)


@dataclass
class Run:
    path: Path
    meta: dict
    epochs: list
    problems: list = field(default_factory=list)  # why the run is incomplete, if it is
    cautions: list = field(default_factory=list)  # what a whole run's records leave out (GC events, collections)
    kept_steps: int | None = None  # steps() stops here: the steps after the last epoch with a line are left out
    unfinished_epoch: dict | None = None  # the record of the epoch the run stopped in (flagged "unfinished")

    @property
    def status(self):
        return self.meta.get("status", "unknown")

    @property
    def complete(self):
        return not self.problems and self.status in ("completed", "halted")

    @property
    def ends_unfinished(self):
        """Whether the last of `epochs` is the one the run stopped in (no finished epoch has steps)."""
        return bool(self.epochs) and self.epochs[-1] is self.unfinished_epoch

    @property
    def gc_policy(self):
        """The --gc-policy the run recorded (meta.json options.gc_policy), or None."""
        return (self.meta.get("options") or {}).get("gc_policy")   # a string or None (_check_meta)

    @property
    def user_meta(self):
        meta = self.meta.get("meta")
        return meta if isinstance(meta, dict) else {}

    def steps(self, every=False):
        """The steps of `epochs`: indexed by a field name (an array of that field) or by a slice (a
        structured array of format.STEP_DTYPE), read from the memory-mapped file as asked; empty
        if none. every=True: every step steps.bin holds, those after the last of `epochs` too (an
        unfinished epoch's, or those a killed process left with no line)."""
        records = _records(self.path / STEPS, _step_layout(self.meta))[:None if every else self.kept_steps]
        return records if records.dtype == LEGACY_STEP_DTYPE else Steps(records, self.meta["clock_origin_ns"])

    def gc_events(self):
        """Every recorded GC event as a read-only structured array (memory-mapped; empty if none)."""
        return _records(self.path / GC_EVENTS, GC_EVENT_DTYPE)

    def rss_samples(self):
        """The RSS read inside epochs with steps, at most once a second, as a structured array of
        format.RSS_DTYPE (seconds since the clock origin, the epoch whose steps were being written,
        resident and shared bytes); empty if none (32 bytes a reading: a day's run holds 2.8 MB)."""
        records = _records(self.path / RSS, RSS_RECORD)
        samples = np.empty(len(records), RSS_DTYPE)
        if len(records):
            samples["t_s"] = (records["t_ns"] - self.meta.get("clock_origin_ns", 0)) / 1e9
            for name in ("epoch", "rss_bytes", "shared_bytes"):
                samples[name] = records[name]
        return samples


class Steps:
    """steps.bin's records (format.STEP_RECORD, nanoseconds on the capture's clock) read as steps
    in seconds since the clock origin (format.STEP_DTYPE), a field or a slice at a time, so a
    reader that walks them in blocks needs memory for one block only."""

    def __init__(self, records, origin_ns):
        self._records, self._origin_ns = records, origin_ns

    def __len__(self):
        return len(self._records)

    def __getitem__(self, key):
        if isinstance(key, str):
            return self._field(self._records, key)
        block = self._records[key]
        one = block.ndim == 0   # an integer index: one step
        block = np.atleast_1d(block)
        steps = np.empty(len(block), STEP_DTYPE)
        for name in STEP_DTYPE.names:
            steps[name] = self._field(block, name)
        return steps[0] if one else steps

    def __array__(self, dtype=None, copy=None):
        return self[:] if dtype is None else self[:].astype(dtype)

    def _field(self, records, name):
        if name == "epoch":
            return np.asarray(records["epoch"])
        if name == "start_s":
            return (records["start_ns"] - self._origin_ns) / 1e9
        if name == "wall_s":
            return (records["end_ns"] - records["start_ns"]) / 1e9
        if name in ("gc0_s", "gc1_s", "gc2_s"):
            return records[name[:3] + "_ns"] / 1e9
        raise KeyError(name)


def _step_layout(meta):
    """steps.bin's record: nanoseconds, or seconds in a run written before clock_origin_ns."""
    return STEP_RECORD if "clock_origin_ns" in meta else LEGACY_STEP_DTYPE


def step_count(path):
    """Steps in the run directory `path`'s steps.bin, from its size (meta.json says the layout)."""
    meta = read_json(Path(path) / META)
    return len(_records(Path(path) / STEPS, _step_layout(meta)))


def _check_meta(meta, file):
    """RunDirError for the first field of meta.json that readers use and that holds what this profiler
    never writes there (a string where an object belongs, a number where a string does); an absent
    field is fine (a run from before it was written)."""
    origin = meta.get("clock_origin_ns", 0)
    if not (type(origin) is int and 0 <= origin < 1 << 63):
        raise RunDirError(f"{file} has clock_origin_ns {_shown(origin)}, not a perf_counter_ns() reading: not written "
                          f"by this profiler")
    options = meta.get("options")
    for key, value, check, what in (
            ("status", meta.get("status", ""), lambda v: isinstance(v, str), "a string"),
            ("error", meta.get("error"), lambda v: v is None or isinstance(v, str), "a string or null"),
            ("options", options, lambda v: v is None or isinstance(v, dict), "an object"),
            ("options.gc_policy", options.get("gc_policy") if isinstance(options, dict) else None,
             lambda v: v is None or isinstance(v, str),
             "a string or null"),
            ("epochs", meta.get("epochs"), lambda v: v is None or _count(v), "a count of epochs"),
            ("gc_events_dropped", meta.get("gc_events_dropped"), lambda v: v is None or _count(v),
             "a count of GC events"),
            ("finished_unix", meta.get("finished_unix"), lambda v: v is None or _number(v), "a Unix time or null")):
        if not check(value):
            raise RunDirError(f"{file} has {key} {_shown(value)}, not {what}: not written by this profiler")
    if meta.get("error") is not None:   # cut as the Session cuts it, whoever wrote it
        meta["error"] = capped_error(meta["error"])


def _check_times(block, fields, source, offset):
    """RunDirError naming the first record of `block` (a structured array read from `source`, its
    first record at index `offset`) whose `fields` hold a time that is not in 0..MAX_SECONDS."""
    for name in fields:
        values = block[name]
        bad = ~(np.isfinite(values) & (values >= 0) & (values <= MAX_SECONDS))
        if bad.any():
            i = int(np.argmax(bad))
            raise RunDirError(f"{source} record {offset + i} has {name} {float(values[i]):.6g}, not a time between 0 and "
                              f"{MAX_SECONDS:.0e} s: not written by this profiler")


def _records(file, dtype):
    try:
        if not file.exists():
            return np.zeros(0, dtype)
        if not file.is_file():   # a directory, or a pipe (which would block)
            raise RunDirError(unreadable(file))
        count = file.stat().st_size // dtype.itemsize   # a torn last record is dropped
        if count == 0:
            return np.zeros(0, dtype)
        return np.memmap(file, dtype=dtype, mode="r", shape=(count,))
    except OSError as e:
        raise RunDirError(unreadable(file, e)) from None


def _first_line(text):
    """An error's first line (a DataLoader worker's error holds the worker's whole traceback)."""
    lines = [line for line in str(text).splitlines() if line.strip()]
    return (lines[0] + (" (...)" if len(lines) > 1 else "")) if lines else str(text)


def _torn_bytes(file, dtype):
    """The bytes past `file`'s last whole record (_records drops them), 0 when it cannot be looked at."""
    try:
        return file.stat().st_size % dtype.itemsize if file.is_file() else 0
    except OSError:
        return 0


def listed(items, most):
    """'a, b, c' or 'a, b and 3 more': at most `most` of `items` named, for a RunDirError."""
    items = [str(i) for i in items]
    return ", ".join(items[:most]) + (f" and {len(items) - most} more" if len(items) > most else "")


def unreadable(file, error=None):
    """Why `file` of a run directory cannot be read, for a RunDirError."""
    if file.exists() and not file.is_file():
        return f"cannot read {file}: it is a {'directory' if file.is_dir() else 'special file'}, where the profiler " \
               f"writes a file"
    return f"cannot read {file}: {error.strerror or error}"


def _short_tracebacks(meta, epochs):
    """A caution when tracemalloc kept fewer frames than the run asked for: the program (or python
    -X tracemalloc) started it first, and the profiler does not restart another's tracer."""
    asked = (meta.get("options") or {}).get("frames")
    kept = min((r["heap"]["frames"] for r in epochs if r.get("heap") and "frames" in r["heap"]), default=None)
    if kept is None or type(asked) is not int or kept >= asked:
        return []
    return [f"tracemalloc kept {kept} frame{'s' if kept > 1 else ''} of each allocation's traceback, not the {asked} "
            f"asked for, as the program (or python -X tracemalloc) started it first: an allocation made deeper than "
            f"that inside a library is put on the library's line, not the line of yours that called it; start it "
            f"with tracemalloc.start({asked}) or -X tracemalloc={asked}, or leave it to the profiler"]


def read_run(path):
    """Read a run directory; RunDirError when it is not one or is damaged beyond a torn last line."""
    path = run_path(path, "run directory")
    if not path.exists():
        raise RunDirError(f"{path} is a symbolic link to nothing that exists (a loop, or a target gone)"
                          if path.is_symlink() else f"{path} does not exist")
    if not path.is_dir():
        raise RunDirError(f"{path} is not a directory (a run directory holds {META} and {EPOCHS})")
    meta_file = path / META
    if not meta_file.exists():
        if any(path.glob(RANK_PREFIX + "*/" + META)):
            raise RunDirError(f"{path} is a multi-rank run ({RANK_PREFIX}N/ directories): read one of its ranks")
        runs = sorted(p.parent.name for p in path.glob("*/" + META))
        if runs:
            raise RunDirError(f"{path} is not a run directory but holds {len(runs)} ({listed(runs, 5)}): give one of them")
        raise RunDirError(f"{path} is not a run directory: it has no {META}")
    meta = read_json(meta_file)
    if not isinstance(meta, dict):
        raise RunDirError(f"{meta_file} is not a JSON object: not written by this profiler")
    if "format" not in meta:
        raise RunDirError(f"{meta_file} has no 'format' field: not written by this profiler")
    if meta["format"] != FORMAT or type(meta["format"]) is not int:   # JSON's true equals 1 in Python
        raise RunDirError(f"{meta_file} is format {meta['format']!r}; this profiler reads format {FORMAT}")
    _check_meta(meta, meta_file)
    problems, cautions = [], []
    status = meta.get("status")
    if status == "running":
        problems.append("the run never finished (status still 'running'): it crashed, was killed, or is live")
    elif status in ("failed", "interrupted", "terminated"):
        how = {"failed": "failed", "interrupted": "was interrupted", "terminated": "was terminated"}[status]
        problems.append(f"the run {how}" + (f": {_first_line(meta['error'])}" if meta.get("error") else ""))
    elif status not in STATUSES:
        problems.append(f"{META} has status {status!r}, not one this profiler writes ({', '.join(STATUSES)})")
    dropped = meta.get("gc_events_dropped")
    if dropped:
        cautions.append(f"{dropped} GC events could not be written, so {GC_EVENTS} lacks them (the GC totals per "
                        f"epoch and step are whole)")
    epochs = _read_epochs(path / EPOCHS, problems, cautions)
    unfinished = epochs.pop() if epochs and epochs[-1].get("unfinished") else None
    written = meta.get("epochs")
    if status in ("completed", "halted") and type(written) is int and written != len(epochs):
        problems.append(f"{META} counts {written} epochs but {EPOCHS} holds {len(epochs)}: lines were lost "
                        f"or removed after the run")
    trained = any(r.get("steps") for r in epochs)   # a finished epoch has steps: not just set-up's time windows
    if unfinished is not None:
        problems.append(_stopped_in(unfinished, promoted=not trained))
        if not trained:   # a run of one long epoch that crashed (after set-up's time windows): read as it stood
            epochs = [*epochs, unfinished]
    missed = {r["epoch"]: sum(r["gc"]["missed"]) for r in epochs if sum(r["gc"].get("missed") or ())}
    if missed:
        n = sum(missed.values())
        cautions.append(f"{n:,} collection{'s' if n > 1 else ''} in epoch{'s' if len(missed) > 1 else ''} "
                        f"{listed(missed, 3)} {'were' if n > 1 else 'was'} not timed: the program took the profiler's callback out of "
                        f"gc.callbacks for a while (or rebound gc.callbacks to a list of its own before the profiler "
                        f"was imported), so the GC pauses leave {'them' if n > 1 else 'it'} out")
    cautions += _short_tracebacks(meta, epochs)
    run = Run(path, meta, epochs, problems, cautions, unfinished_epoch=unfinished)
    lined = {r["epoch"] for r in epochs}
    step_epochs, kept = _check_records(run, max(lined, default=-1))
    if unfinished is None and not trained and status == "running":
        _killed_in(run, kept)
    _unlined_steps(run, step_epochs - {r["epoch"] for r in run.epochs}, kept)
    for name, dtype in ((STEPS, _step_layout(meta)), (GC_EVENTS, GC_EVENT_DTYPE), (RSS, RSS_RECORD)):
        torn = _torn_bytes(path / name, dtype)
        if torn:
            problems.append(f"{name} ends with {torn} bytes of a record cut short (a crash mid-write); they were "
                            f"skipped")
    counted, held = sum(r.get("steps") or 0 for r in epochs), len(run.steps())
    if counted > held:   # more steps are written than counted (the unfinished epoch's), never fewer
        problems.append(f"{STEPS} holds {held} steps but {EPOCHS} counts {counted}: steps were lost "
                        f"(was {STEPS} deleted or cut during the run?)")
    return run


def _into(record):
    wall = record["wall_s"]
    return f"{wall:,.1f} s" if wall >= 1 else f"{wall * 1e3:.3g} ms"


def _stopped_in(record, promoted):
    """The problem of a run that stopped inside an epoch (its record flagged unfinished)."""
    steps = record.get("steps") or 0
    told = (f"epoch {record['epoch']} did not finish: the run stopped {_into(record)} into it, after "
            f"{steps:,} step{'' if steps == 1 else 's'}")
    return told + ("; no epoch with steps finished, so it is read as it stood then (its time runs to the stop, not "
                   "a whole epoch's)" if promoted else
                   " (its record, flagged unfinished, and its steps are left out)")


def _killed_in(run, kept):
    """A run killed inside its first epoch with steps (SIGKILL, the OOM killer: no final status, no
    line), or still live in it, with its steps on disk (written at least once a second) is read as
    that epoch, rebuilt from them a chunk at a time: an unfinished record with its steps' time and
    GC pauses, its RSS its last reading (rss.bin), and no op records."""
    steps = run.steps(every=True)
    n = len(steps) - kept
    if not n or steps[kept]["epoch"] != steps[-1]["epoch"]:
        return
    end, pause, paused = 0.0, np.zeros(3), np.zeros(3, np.int64)
    for a in range(kept, len(steps), CHUNK):
        block = steps[a:a + CHUNK]
        end = max(end, float(np.max(block["start_s"] + block["wall_s"])))
        gc = np.stack([block[f"gc{g}_s"] for g in range(3)])
        pause += gc.sum(axis=1)
        paused += np.count_nonzero(gc, axis=1)
    start = float(steps[kept]["start_s"])
    samples = run.rss_samples()
    index = int(steps[kept]["epoch"])
    read = samples["rss_bytes"][(samples["epoch"] == index) & (samples["t_s"] >= start)]   # not a dropped one's
    record = {"epoch": index, "start_s": start, "wall_s": end - start, "steps": n,
              "gc": {"pause_s": pause.tolist(), "collections": paused.tolist()},
              "rss_bytes": int(read[-1]) if len(read) else None, "malloc_bytes": None, "heap": None, "ops": {},
              "unfinished": True, "from_steps": True}
    run.unfinished_epoch, run.epochs, run.kept_steps = record, [*run.epochs, record], None
    memory = "its RSS the last read in it" if len(read) else "no memory records"
    run.problems.append(f"epoch {record['epoch']} did not finish: its steps stop {_into(record)} into it (the "
                        f"process was killed, or is still running), after {n:,} on disk (a kill loses the last "
                        f"second's); no epoch with steps finished, so "
                        f"it is read from those steps (its time runs to the last of them, not a whole epoch's; "
                        f"{memory}; no op records; collections counted as the steps they paused)")


def _unlined_steps(run, unlined, kept):
    """Steps of epochs with no line in epochs.jsonl: after the last line (an epoch cut short by a
    kill, or one abandoned whose steps could not be cut) they are left out, as the epoch is, and
    so are those of an unfinished epoch the run's epochs do not include; before the last line (a
    line removed) they are named."""
    if not unlined:
        return
    last = max((r["epoch"] for r in run.epochs), default=-1)
    after, before = sorted(e for e in unlined if e > last), sorted(e for e in unlined if e <= last)
    if after:
        run.kept_steps = kept
    told = run.unfinished_epoch if run.unfinished_epoch is not None and run.unfinished_epoch["epoch"] in after else None
    after = [e for e in after if told is None or e != told["epoch"]]
    if after:
        held = len(_records(run.path / STEPS, _step_layout(run.meta))) - ((told.get("steps") or 0) if told else 0)
        run.problems.append(f"{STEPS} ends with {held - kept:,} steps of epoch {listed(after, 3)}, which {EPOCHS} "
                            f"has no line for (cut short or abandoned): they are left out")
    if before:
        run.problems.append(f"{STEPS} holds steps of epoch {listed(before, 3)}, which {EPOCHS} "
                            f"has no line for (removed after the run?): they are counted with the others")


def _check_records(run, last_lined):
    """RunDirError for the first record of steps.bin, gc_events.bin or rss.bin this profiler cannot
    have written: a time outside 0..MAX_SECONDS, an epoch index below 0 or below the one before it
    (steps are written epoch by epoch), a GC generation other than 0, 1 or 2, a reading's
    negative epoch, RSS outside 0..MAX_BYTES, shared part above it, or time before the one before
    it. Steps and events are read a chunk at a time, so the check needs memory for one chunk only. Returns (the steps' epoch indices, how
    many steps belong to epochs up to `last_lined`: a prefix, as steps are in epoch order)."""
    source = run.path / GC_EVENTS
    events = run.gc_events()
    for a in range(0, len(events), CHUNK):
        block = np.array(events[a:a + CHUNK])
        _check_times(block, ("start_s", "duration_s"), source, a)
        if (block["generation"] > 2).any():
            i = int(np.argmax(block["generation"] > 2))
            raise RunDirError(f"{source} record {a + i} has generation {int(block['generation'][i])}, not 0, 1 or 2: "
                              f"not written by this profiler")
    source, samples = run.path / RSS, run.rss_samples()   # 32 bytes a second: read whole
    _check_times(samples, ("t_s",), source, 0)
    rss, shared, t, epoch = samples["rss_bytes"], samples["shared_bytes"], samples["t_s"], samples["epoch"]
    for bad, shown in ((epoch < 0, lambda i: f"epoch {epoch[i]}, not an epoch index"),
                       ((rss < 0) | (rss > MAX_BYTES), lambda i: f"rss_bytes {rss[i]}, not a size between 0 and "
                                                                 f"{MAX_BYTES} bytes"),
                       ((shared < 0) | (shared > rss), lambda i: f"shared_bytes {shared[i]}, not a size between 0 and "
                                                                 f"its rss_bytes"),
                       (np.diff(t, prepend=0.0) < 0, lambda i: f"t_s {t[i]:.6g}, before the reading before it")):
        if bad.any():
            i = int(np.argmax(bad))
            raise RunDirError(f"{source} record {i} has {shown(i)}: not written by this profiler")
    source, steps, last = run.path / STEPS, run.steps(), 0
    seen, kept = set(), 0
    for a in range(0, len(steps), CHUNK):
        block = steps[a:a + CHUNK]
        _check_times(block, ("start_s", "wall_s", "gc0_s", "gc1_s", "gc2_s"), source, a)
        epochs = np.asarray(block["epoch"], np.int64)
        back = epochs < np.concatenate(([last], epochs[:-1]))   # compared, not subtracted: no overflow
        if back.any():
            i = int(np.argmax(back))
            before = int(epochs[i - 1]) if i else last
            what = f"after epoch {before}" if a + i else "not a non-negative integer"
            raise RunDirError(f"{source} record {a + i} has epoch {int(epochs[i])}, {what}: not written by this "
                              f"profiler (steps are written epoch by epoch)")
        last = int(epochs[-1])
        seen.update(np.unique(epochs).tolist())
        kept += int(np.count_nonzero(epochs <= last_lined))
    return seen, kept


def read_json(file):
    """The JSON value in `file`, or a RunDirError saying why it cannot be read."""
    if file.exists() and not file.is_file():   # a directory, or a pipe or device (which would block, or never end)
        raise RunDirError(unreadable(file))
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except OSError as e:
        raise RunDirError(unreadable(file, e)) from None
    except (ValueError, RecursionError) as e:   # JSONDecodeError, UnicodeDecodeError, an int of 4,301+ digits
        raise RunDirError(f"{file} is not valid JSON ({why_not_json(e)})") from None


def why_not_json(error):
    if isinstance(error, json.JSONDecodeError):   # its msg alone ends mid-sentence: "Invalid control character at"
        return f"{error.msg}: " + (f"line {error.lineno} column {error.colno}" if error.lineno > 1 else
                                   f"column {error.colno}")   # a JSONL line's is always line 1
    if isinstance(error, UnicodeDecodeError):
        return f"not UTF-8: {error.reason}"
    if isinstance(error, ValueError):   # int(): sys.get_int_max_str_digits()
        return f"an integer of more than {sys.get_int_max_str_digits():,} digits"
    return "nested too deeply"


def _number(value, nonneg=True, limit=MAX_COUNT):
    # type(), not isinstance(): JSON gives int, float or bool, and a bool is not a number here.
    # Compared, not converted: an int of 400 digits is refused, not an OverflowError of float()
    return (type(value) in (int, float) and (type(value) is int or math.isfinite(value))
            and (value >= 0 or not nonneg) and -limit <= value <= limit)


def _count(value):
    """A non-negative int below 2**63 (what an int64 holds: steps.bin's epoch index)."""
    return type(value) is int and 0 <= value < MAX_COUNT


def _shown(value):
    """repr(value) for a RunDirError; an integer of more than 24 digits by its first ones and length."""
    text = repr(value)
    return f"{text[:12]}... ({len(text)} digits)" if type(value) is int and len(text) > 24 else text


def _seconds(value):
    return _number(value, limit=MAX_SECONDS)


def _bytes(value):
    return _number(value, limit=MAX_BYTES)


def _numbers(values, count=3, check=_number):
    return type(values) is list and len(values) == count and all(map(check, values))


SECONDS = f"a number of seconds between 0 and {MAX_SECONDS:.0e}"
BYTES = "a number of bytes between 0 and 1 PiB"


def _check_optional(record):
    """Why an optional field of `record` is unusable, or None (absent fields are fine)."""
    for key, check, what in (("start_s", _seconds, SECONDS), ("gap_s", _seconds, SECONDS),
                             ("malloc_bytes", _bytes, BYTES), ("steps", _number, "a non-negative number")):
        if record.get(key) is not None and not check(record[key]):
            return f"has {key} {_shown(record[key])}, not {what}"
    gc = record["gc"]
    for key in ("collected", "tracked"):
        if gc.get(key) is not None and not _numbers(gc[key]):
            return f"has gc.{key} {gc[key]!r}, not three non-negative numbers"
    if "unfinished" in record and record["unfinished"] is not True:
        return f"has unfinished {_shown(record['unfinished'])}, not true"
    if "missed" in gc and not _numbers(gc["missed"], check=_count):   # absent, or counts
        return f"has gc.missed {gc['missed']!r}, not three counts (non-negative integers)"
    if gc.get("max_pause_s") is not None and not _seconds(gc["max_pause_s"]):
        return f"has gc.max_pause_s {_shown(gc['max_pause_s'])}, not {SECONDS}"
    forced = _check_forced(gc)
    if forced:
        return forced
    before = record.get("gc_before")
    if before is not None:
        if not (isinstance(before, dict) and _numbers(before.get("collections"), check=_count)
                and _numbers(before.get("pause_s"), check=_seconds)):
            return (f"has gc_before {before!r}, not an object with collections (three counts) and pause_s (three "
                    f"numbers of seconds)")
        forced = _check_forced(before, "gc_before")
        if forced:
            return forced
    for key, op in record.get("ops", {}).items():
        if not (isinstance(op, dict) and _number(op.get("calls")) and _seconds(op.get("total_s"))):
            return f"has ops[{key!r}] {op!r}, not {{'calls': int, 'total_s': seconds}}"
        if not isinstance(op.get("name", ""), str) or not isinstance(op.get("tags", {}), dict):
            return f"has ops[{key!r}] whose name is not a string or whose tags are not an object"
        if not all(v is None or type(v) in (str, int, bool) or (type(v) is float and math.isfinite(v))
                   for v in op.get("tags", {}).values()):
            return f"has ops[{key!r}] tags {op['tags']!r}: tag values are strings, finite numbers, booleans or null"
        if op.get("timed") is not None and not _count(op["timed"]):
            return f"has ops[{key!r}] timed {_shown(op['timed'])}, not a count of timed calls"
    heap = record.get("heap")
    if heap is not None:
        if not isinstance(heap, dict) or not _bytes(heap.get("traced_bytes")):
            return f"has heap {heap!r}, not an object with traced_bytes ({BYTES})"
        for key, name, fields in (("top_growth", "site", ("size_diff",)), ("top_types", "type", ("count", "count_diff"))):
            items = heap.get(key) or []
            if not isinstance(items, list) or not all(
                    isinstance(i, dict) and isinstance(i.get(name), str)
                    and all(_number(i.get(f), nonneg=False) for f in fields) for i in items):
                return f"has heap.{key} that is not a list of objects with {name}, {', '.join(fields)}"
        if "frames" in heap and not (_count(heap["frames"]) and heap["frames"] > 0):
            return f"has heap.frames {_shown(heap['frames'])}, not a positive count of frames"
    return None


def _odd_workers(workers):
    """Whether an epoch record's `workers` is not the record of a program's worker processes that
    `profiler run` writes (capture/workers.py): sizes in bytes, counts whole, at most `count` new."""
    sizes = ("uss_growth_bytes", "uss_growth_max_bytes", "carried_uss_bytes", "gc_copied_bytes",
             "gc_copied_max_bytes", "spawned_uss_bytes", "batch_bytes")
    return not (isinstance(workers, dict) and _count(workers.get("count"))
                and all(_bytes(workers.get(k)) for k in ("uss_bytes", "pss_bytes"))
                and all(_bytes(workers.get(k, 0)) for k in sizes)
                and all(_count(workers.get(k, 0)) for k in ("full_collections", "spawned"))
                and (workers.get("prefetch_factor") is None or _count(workers["prefetch_factor"]))   # None: no workers
                and type(workers.get("new", 0)) is int and 0 <= workers.get("new", 0) <= workers["count"])


def _check_forced(gc, name="gc"):
    """Why the program's own collections in an epoch's gc record (or its gc_before) are unusable, or None."""
    if ("forced" in gc) != ("forced_pause_s" in gc) or ("forced_sites" in gc and "forced" not in gc):
        return (f"has {name}.forced, {name}.forced_pause_s or {name}.forced_sites without the others (forced and "
                f"forced_pause_s come together, and forced_sites with them)")
    if "forced" not in gc:
        return None
    if not _numbers(gc["forced"], check=_count):
        return f"has {name}.forced {gc['forced']!r}, not three counts (non-negative integers)"
    if not _numbers(gc["forced_pause_s"], check=_seconds):
        return (f"has {name}.forced_pause_s {gc['forced_pause_s']!r}, not three numbers of seconds between 0 and "
                f"{MAX_SECONDS:.0e}")
    for part, whole in (("forced", "collections"), ("forced_pause_s", "pause_s")):
        if any(p > w for p, w in zip(gc[part], gc[whole])):
            return f"has {name}.{part} {gc[part]!r} above {name}.{whole} {gc[whole]!r}: a part of them"
    if any(p and not n for n, p in zip(gc["forced"], gc["forced_pause_s"])):
        return (f"has {name}.forced_pause_s {gc['forced_pause_s']!r}, a pause where {name}.forced {gc['forced']!r} "
                f"has no collection")
    sites = gc.get("forced_sites", [])
    if not (isinstance(sites, list) and all(
            isinstance(i, dict) and isinstance(i.get("site"), str) and i["site"] and isinstance(i.get("via", "x"), str)
            and i.get("via", "x")
            and _count(i.get("collections")) and _seconds(i.get("pause_s")) for i in sites)):
        return (f"has {name}.forced_sites that is not a list of objects with a site, collections and pause_s (and a "
                f"via)")
    if sum(i["collections"] for i in sites) > sum(gc["forced"]):
        return f"has {name}.forced_sites counting more collections than {name}.forced"
    return None


def _check_epoch(record):
    """Why `record` is not a usable epoch record, or None."""
    if not isinstance(record, dict):
        return "is not a JSON object"
    missing = [key for key in ("epoch", "wall_s", "rss_bytes") if key not in record]   # 'gc': below
    if missing:
        return f"has no {', '.join(map(repr, missing))}"
    epoch = record.get("epoch")
    if not _count(epoch):
        return f"has epoch {_shown(epoch)}, not a non-negative integer below 2**63"
    wall = record.get("wall_s")
    if not _seconds(wall):
        return f"has wall_s {_shown(wall)}, not {SECONDS}"
    gc = record.get("gc")
    if not isinstance(gc, dict):
        return "has no 'gc' object"
    if not _numbers(gc.get("collections")):
        return f"has gc.collections {gc.get('collections')!r}, not three non-negative numbers"
    if not _numbers(gc.get("pause_s"), check=_seconds):
        return f"has gc.pause_s {gc.get('pause_s')!r}, not three numbers of seconds between 0 and {MAX_SECONDS:.0e}"
    if sum(gc["pause_s"]) > wall * (1 + PAUSE_SLACK[0]) + PAUSE_SLACK[1]:
        return f"has GC pauses of {sum(gc['pause_s']):.6g} s in an epoch of {wall:.6g} s (wall_s), more than it lasted"
    if not _bytes(record.get("rss_bytes")):
        return f"has rss_bytes {_shown(record.get('rss_bytes'))}, not {BYTES}"
    if not isinstance(record.get("ops", {}), dict):
        return "has 'ops' that is not an object"
    return _check_optional(record)


def _read_epochs(file, problems, cautions):
    if not file.exists():
        problems.append(f"{EPOCHS} is missing")
        return []
    if not file.is_file():   # a directory, or a pipe or device (which would block, or never end)
        raise RunDirError(unreadable(file))
    try:
        with open(file, "rb") as f:   # line by line: a file of 10^7 op entries is a gigabyte
            return _parse_epochs(f, file, problems, cautions)
    except OSError as e:
        raise RunDirError(unreadable(file, e)) from None


def _parse_epochs(lines, file, problems, cautions):
    """The epoch records of `lines`; a `workers` field that is not the profiler's (a field the
    program added under that name: add_epoch_field's names are its own) is left out, said once in
    `cautions`, not the run refused."""
    epochs, blank, odd = [], None, []   # blank: the number of a blank line not yet known to be the last
    for number, line in enumerate(lines, start=1):
        if blank is not None:   # the profiler writes none: a line blanked after the run
            problems.append(f"{EPOCHS} line {blank} is blank (not written by this profiler); it was skipped")
            blank = None
        if not line.strip():
            blank = number
            continue
        try:
            record = json.loads(line.decode("utf-8"))
        except (ValueError, RecursionError) as e:
            if not line.endswith(b"\n"):   # the last line, with no newline: a complete file ends with one
                problems.append(f"{EPOCHS} line {number} is truncated (a crash mid-write); it was skipped")
                break
            raise RunDirError(f"{file} line {number} is not valid JSON ({why_not_json(e)})") from None
        why = _check_epoch(record)
        if why:
            raise RunDirError(f"{file} line {number} {why}: not an epoch record written by this profiler")
        if epochs and record["epoch"] <= epochs[-1]["epoch"]:
            raise RunDirError(f"{file} line {number} has epoch {record['epoch']} after epoch {epochs[-1]['epoch']}: "
                              f"epoch indices must strictly increase (each epoch is written once, in order)")
        if epochs and epochs[-1].get("unfinished"):
            raise RunDirError(f"{file} line {number} follows the line of unfinished epoch {epochs[-1]['epoch']}: "
                              f"the epoch a run stops in is its last line")
        if record.get("workers") is not None and _odd_workers(record["workers"]):
            odd.append(number)
            del record["workers"]
        epochs.append(record)
    if odd:
        more = f" (and {len(odd) - 1} more)" if len(odd) > 1 else ""
        cautions.append(f"the workers field of {EPOCHS} line {odd[0]}{more} is not the profiler's record of worker "
                        f"processes (a field the program added under that name?), so it is left out")
    return epochs
