"""Session bad input and lifecycle (issue 11): every option checked at construction, before anything
is written; epoch indices checked before the body runs; sys.exit, a failed start, a full disk."""

import errno
import gc
import json
import math
import os
import pathlib
import sys
import threading
import tracemalloc

import numpy as np
import pytest

from profiler import Session, UsageError
from profiler.rundir import RunWriteError, read_run


@pytest.mark.parametrize("option,value,accepted", [
    ("window", 0, "int >= 1"), ("window", -1, "int >= 1"), ("window", 2.5, "int >= 1"),
    ("budget", 0, "> 0 and <= 1"), ("budget", -0.5, "> 0 and <= 1"), ("budget", 1.5, "> 0 and <= 1"),
    ("budget", math.nan, "> 0"), ("budget", True, "> 0"),
    ("cooldown", -10, "int >= 0"), ("frames", 100_000, "from 1 to 65535"), ("frames", 0, "from 1 to 65535"),
    ("every", 0, "int >= 1"), ("tracemalloc", "yes", "False (light capture), True (deep capture) or 'auto'"),
    ("tracemalloc", 1, "False"), ("gc_event_threshold_s", -0.001, ">= 0"),
    ("gc_event_threshold_s", math.inf, "finite"),
])
def test_bad_option_is_refused_naming_option_value_and_what_is_accepted(tmp_path, option, value, accepted):
    with pytest.raises(UsageError) as info:
        Session(tmp_path / "run", **{option: value})
    message = str(info.value)
    assert f"{option}={value!r}" in message and accepted in message
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("meta,why", [("model=mine", "expected a dict"), ({"x": math.nan}, "not JSON-serialisable"),
                                      ({"path": pathlib.Path("a")}, "not JSON-serialisable")])
def test_bad_meta_is_refused_before_anything_is_written(tmp_path, meta, why):
    with pytest.raises(UsageError, match=why):
        Session(tmp_path / "run", meta=meta)
    assert not (tmp_path / "run").exists()


def test_circular_meta_is_refused_before_anything_is_written(tmp_path):
    meta = {"model": "mine"}
    meta["self"] = meta
    with pytest.raises(UsageError, match="not JSON-serialisable.*Circular reference"):
        Session(tmp_path / "run", meta=meta)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("run_dir", [None, 3, b"runs/x", ""])
def test_bad_run_dir_is_refused(run_dir):
    with pytest.raises(UsageError, match="Session run_dir"):
        Session(run_dir)


def test_meta_is_copied_at_construction(tmp_path):
    meta = {"tags": ["a"]}
    session = Session(tmp_path / "run", meta=meta)
    meta["tags"].append("b")
    with session:
        pass
    assert read_run(tmp_path / "run").meta["meta"] == {"tags": ["a"]}


@pytest.mark.parametrize("index", ["a", 0.5, 1.0, math.nan, True, -1, [0], 2 ** 63, 10 ** 20])
def test_bad_epoch_index_fails_before_the_body_runs(tmp_path, index):
    ran = []
    with Session(tmp_path / "run") as session:
        with pytest.raises(UsageError, match="epoch index"):
            with session.epoch(index):
                ran.append(1)
    assert not ran and read_run(tmp_path / "run").epochs == []


def test_epoch_indices_strictly_increase(tmp_path):
    ran = []
    with Session(tmp_path / "run") as session:
        with session.epoch(0):
            pass
        with session.epoch(2):
            pass
        for index in (2, 1, 0):
            with pytest.raises(UsageError, match=f"epoch index {index} after epoch 2: indices must strictly increase"):
                with session.epoch(index):
                    ran.append(index)
        with session.epoch():            # None: the next index
            pass
        with session.epoch(np.int64(7)):  # any integer type
            pass
        with session.epoch(2 ** 63 - 1):   # the last an int64 holds (steps.bin): the reader refused 2**63 (a probe)
            pass
        with pytest.raises(UsageError, match=f"epoch index {2 ** 63} after epoch {2 ** 63 - 1}: indices end below 2"):
            with session.epoch():
                ran.append("next")
    assert not ran
    assert [r["epoch"] for r in read_run(tmp_path / "run").epochs] == [0, 2, 3, 7, 2 ** 63 - 1]


def test_an_epoch_that_raised_frees_its_index_and_writes_nothing(tmp_path):
    with Session(tmp_path / "run") as session:
        with pytest.raises(ZeroDivisionError):
            with session.epoch():
                with session.step():
                    pass
                1 / 0
        with session.epoch():
            with session.step():
                pass
    run = read_run(tmp_path / "run")
    assert [r["epoch"] for r in run.epochs] == [0] and run.epochs[0]["steps"] == 1
    assert list(run.steps()["epoch"]) == [0]


def test_epoch_after_the_with_block_fails_at_once(tmp_path):
    with Session(tmp_path / "run") as session:
        pass
    ran = []
    with pytest.raises(UsageError, match="after its with-block ended"):
        with session.epoch(0):
            ran.append(1)
    with pytest.raises(UsageError, match="after its with-block ended"):
        session.begin_epoch()
    assert not ran


def test_epoch_before_the_with_block_fails(tmp_path):
    session = Session(tmp_path / "run")
    with pytest.raises(UsageError, match="before `with Session"):
        session.epoch(0)


def test_a_session_used_from_two_threads_names_the_threads(tmp_path):
    errors = []

    def other():
        try:
            with session.epoch():
                pass
        except UsageError as e:
            errors.append(str(e))

    with Session(tmp_path / "run") as session:
        with session.epoch(0):
            thread = threading.Thread(target=other, name="loader")
            thread.start()
            thread.join()
    assert len(errors) == 1 and "thread 'loader'" in errors[0] and "opened in thread 'MainThread'" in errors[0]
    assert "one thread's loop" in errors[0]
    assert "nest" not in errors[0]


def test_epochs_do_not_nest(tmp_path):
    with Session(tmp_path / "run") as session:
        with session.epoch(0):
            with pytest.raises(UsageError, match="epochs do not nest"):
                session.begin_epoch()


@pytest.mark.parametrize("code,status,error", [(0, "completed", None), (None, "completed", None),
                                               (3, "failed", "SystemExit: 3"), ("bye", "failed", "SystemExit: bye")])
def test_sys_exit_inside_a_session(tmp_path, code, status, error):
    with pytest.raises(SystemExit):
        with Session(tmp_path / "run") as session:
            with session.epoch(0):
                pass
            sys.exit(code)
    run = read_run(tmp_path / "run")
    assert run.status == status and run.meta["error"] == error and len(run.epochs) == 1


def test_a_start_that_fails_leaves_no_running_directory(tmp_path, monkeypatch):
    """frames=100000 is refused up front now; a start that still fails (here tracemalloc refusing)
    records 'failed' with the reason and removes every hook."""
    callbacks = list(gc.callbacks)

    def refuse(nframe):
        raise ValueError("the number of frames must be in range [1; 65535]")
    monkeypatch.setattr(tracemalloc, "start", refuse)
    with pytest.raises(ValueError):
        with Session(tmp_path / "run", tracemalloc=True):
            pass
    run = read_run(tmp_path / "run")
    assert run.status == "failed" and "could not start" in run.meta["error"]
    assert gc.callbacks == callbacks and not tracemalloc.is_tracing()
    with Session(tmp_path / "next"):   # and the failed one released its claim
        pass


def _fill_disk(monkeypatch, after_bytes=10):
    """Writes of meta.json.tmp write a few bytes, then fail as a full disk does."""
    real = pathlib.Path.write_text

    def write_text(self, text, *args, **kwargs):
        if self.name.endswith(".tmp"):
            real(self, text[:after_bytes], *args, **kwargs)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, text, *args, **kwargs)
    monkeypatch.setattr(pathlib.Path, "write_text", write_text)


def test_full_disk_at_start_leaves_no_tmp_and_no_unusable_directory(tmp_path, monkeypatch):
    _fill_disk(monkeypatch)
    callbacks = list(gc.callbacks)
    with pytest.raises(RunWriteError, match="No space left on device"):
        with Session(tmp_path / "run"):
            pass
    assert not (tmp_path / "run").exists() and gc.callbacks == callbacks


def test_full_disk_at_the_end_leaves_no_meta_tmp(tmp_path, monkeypatch, capsys):
    with pytest.raises(RunWriteError):
        with Session(tmp_path / "run") as session:
            with session.epoch(0):
                pass
            _fill_disk(monkeypatch)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["epochs.jsonl", "meta.json"]
    assert json.loads((tmp_path / "run" / "meta.json").read_text())["status"] == "running"


@pytest.mark.parametrize("name,tags", [("", {}), (None, {}), ("conv", {"layout": [1]}), ("conv", {"x": math.nan})])
def test_bad_op_identity(tmp_path, name, tags):
    with Session(tmp_path / "run") as session:
        with session.epoch(0):
            with pytest.raises(UsageError, match="session.op"):
                session.op(name, **tags)


def test_op_identity_is_structured(tmp_path):
    """op("conv[fast]") and op("conv", layout="fast") never merge; tag order does not matter;
    different tag names with the same value are different ops."""
    with Session(tmp_path / "run") as session:
        with session.epoch(0):
            for _ in range(2):
                with session.op("conv", layout="fast"):
                    pass
            with session.op("conv[fast]"):
                pass
            with session.op("conv", mode="fast"):
                pass
            with session.op("mm", a=1, b=2):
                pass
            with session.op("mm", b=2, a=1):
                pass
    ops = read_run(tmp_path / "run").epochs[0]["ops"]
    identities = sorted((v["name"], sorted(v["tags"].items()), v["calls"]) for v in ops.values())
    assert identities == [("conv", [("layout", "fast")], 2), ("conv", [("mode", "fast")], 1),
                          ("conv[fast]", [], 1), ("mm", [("a", 1), ("b", 2)], 2)]
    assert len(ops) == 4 and ops["conv[fast]"]["name"] == "conv"   # the first one keeps the plain label


def test_a_directory_that_holds_a_run_already_is_a_usage_error_and_stays(tmp_path):
    with Session(tmp_path / "run") as session:
        with session.epoch(0):
            pass
    before = {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir()}
    with pytest.raises(UsageError, match="already holds a run .*choose a new directory"):
        with Session(tmp_path / "run"):
            pass
    assert {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir()} == before


def test_a_directory_that_holds_runs_below_it_is_a_usage_error_and_stays(tmp_path):
    """A job's rank-N/ directories, or a directory of runs, under the run directory: a run written
    over them would hide them from the reader (report read the new run, not the job)."""
    for held in ("job/rank-0", "job/rank-1", "runs/a", "runs/b", "hosts/host-0/rank-0"):
        with Session(tmp_path / held) as session:
            with session.epoch(0):
                pass
    (tmp_path / "meta-only").mkdir()
    (tmp_path / "meta-only" / "meta.json").write_text("{}")
    for parent, words in [("job", "in rank-0, rank-1"), ("runs", "in a, b"), ("hosts", "in host-0/rank-0"),
                          ("meta-only", "meta.json exists")]:
        before = sorted(p.relative_to(tmp_path) for p in (tmp_path / parent).rglob("*"))
        with pytest.raises(UsageError, match=f"already holds a run .*{words}.*choose a new directory"):
            with Session(tmp_path / parent):
                pass
        assert sorted(p.relative_to(tmp_path) for p in (tmp_path / parent).rglob("*")) == before


def test_a_file_where_the_run_directory_belongs_says_so(tmp_path):
    (tmp_path / "afile").write_text("mine")
    with pytest.raises(UsageError, match="afile is a file, not a directory; choose a new run directory"):
        with Session(tmp_path / "afile"):
            pass
    assert (tmp_path / "afile").read_text() == "mine"
    with pytest.raises(UsageError, match="afile/run: .*afile is a file, not a directory; choose another path"):
        with Session(tmp_path / "afile" / "run"):   # was a RunWriteError (exit 1) for what is bad input
            pass
    # a directory the system refuses: its reason, not Python's "[Errno 2] ...: '/proc/x'" (a probe)
    with pytest.raises(RunWriteError) as refused:
        with Session("/proc/profiler-probe/run"):
            pass
    assert str(refused.value) == "cannot create the run directory /proc/profiler-probe/run: No such file or directory"


def test_a_relative_run_directory_stays_put_when_the_program_changes_directory(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    with Session("run") as session:
        with session.epoch(0):
            pass
        os.chdir(tmp_path / "b")
        with session.epoch(1):
            with session.step():
                pass
    run = read_run(tmp_path / "a" / "run")
    assert run.status == "completed" and len(run.epochs) == 2 and len(run.steps()) == 1
    assert not (tmp_path / "b" / "run").exists()


def test_a_run_directory_taken_already_is_refused_when_the_session_is_built(tmp_path):
    (tmp_path / "afile").write_text("mine")
    with pytest.raises(UsageError, match="afile is a file"):
        Session(tmp_path / "afile")
    with Session(tmp_path / "run") as session:
        with session.epoch(0):
            pass
    with pytest.raises(UsageError, match="already holds a run"):
        Session(tmp_path / "run")


def test_a_null_byte_in_the_run_directory_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="Session run_dir .*null byte"):
        Session(str(tmp_path / "r\0un"))


def test_a_signal_handlers_oserror_during_a_write_reaches_the_loop_as_it_is(tmp_path, monkeypatch):
    """An alarm's TimeoutError (an OSError with no errno) raised in a signal handler that runs
    inside a write is the program's own, not a RunWriteError; a write's own error (ENOSPC) is."""
    from profiler.rundir.writer import RunWriter
    writer = RunWriter(tmp_path / "run")
    writer.append_binary("steps.bin", b"1234")
    real_open = writer._open

    def failing(error):
        def open_(name, what):
            file = real_open(name, what)

            class File:
                def write(self, data):
                    raise error

                def __getattr__(self, attr):
                    return getattr(file, attr)
            return File()
        return open_

    for error, raised in [(TimeoutError("alarm"), TimeoutError), (OSError(errno.ENOSPC, "No space left"), RunWriteError)]:
        writer._files.pop("steps.bin").close()
        monkeypatch.setattr(writer, "_open", failing(error))
        with pytest.raises(raised) as info:
            writer.append_binary("steps.bin", b"5678")
        assert type(info.value) is raised
        assert (tmp_path / "run" / "steps.bin").read_bytes() == b"1234"   # nothing of the failed write kept


def test_a_second_run_started_on_a_directory_in_use_stops_before_writing(tmp_path):
    # two runs started together on one directory (a sweep given the same --out): the first one's
    # epochs.jsonl is created exclusively, so the second cannot append to it
    from profiler.rundir.writer import RunWriter
    first = RunWriter(tmp_path / "run")
    try:
        with pytest.raises(UsageError, match="already holds a run"):
            RunWriter(tmp_path / "run")
    finally:
        first.close()


def test_the_epoch_encoder_writes_what_json_writes_and_refuses_what_it_refuses():
    # built once from CPython's C encoder (JSONEncoder.encode builds one per call, ~1.3 us an epoch)
    from profiler.rundir import writer
    record = {"epoch": 3, "start_s": 1.25, "gap_s": 1e-5, "gc": {"pause_s": [0.0, 1.5e-3, 0.25], "tracked": None},
              "ops": {"conv[NHWC]": {"name": "conv", "tags": {"layout": "NHWC", "k": 3, "ok": True}}}, "note": "é\n\""}
    assert writer._ENCODE(record) == json.dumps(record, separators=(",", ":"), allow_nan=False)
    for bad, error in (({"x": float("nan")}, ValueError), ({"x": float("inf")}, ValueError),
                       ({"x": np.float32(1.0)}, TypeError), ({"x": object()}, TypeError)):
        with pytest.raises(error):
            writer._ENCODE(bad)
