"""Nothing lost: kill -9 at random points, Ctrl-C, SIGTERM, a run directory removed under a live
run, and a 100,000-epoch run whose profiler memory stays flat."""

import gc
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import tracemalloc

import pytest

from profiler import Session, UsageError
from profiler.analysis import analyze
from profiler.rundir import RunWriteError, read_run
from profiler.capture.steps import CAPACITY as STEP_CAPACITY
from profiler.rundir.writer import ALIVE_CHECK_NS

LOOP = """
import sys, time
from profiler import Session
with Session(sys.argv[1]) as session:
    print("ready", flush=True)
    for epoch in range(100000):
        with session.epoch(epoch):
            with session.op("work"):
                end = time.perf_counter() + 0.003
                while time.perf_counter() < end:
                    pass
"""


def start(run_dir):
    proc = subprocess.Popen([sys.executable, "-c", LOOP, str(run_dir)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_sigkill_at_random_points_keeps_every_finished_epoch(tmp_path, seed):
    run_dir = tmp_path / "run"
    proc = start(run_dir)
    time.sleep(random.Random(seed).uniform(0.2, 1.2))
    proc.kill()
    proc.wait()
    run = read_run(run_dir)
    assert run.status == "running" and not run.complete
    assert [r["epoch"] for r in run.epochs] == list(range(len(run.epochs))) and len(run.epochs) > 10
    report = subprocess.run([sys.executable, "-m", "profiler", "report", str(run_dir)], capture_output=True, text=True)
    assert report.returncode == 0 and "the run is incomplete" in report.stdout and "never finished" in report.stdout


@pytest.mark.slow
def test_sigint_records_interrupted_and_flushes(tmp_path):
    run_dir = tmp_path / "run"
    proc = start(run_dir)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=20)
    assert proc.returncode != 0
    run = read_run(run_dir)
    assert run.status == "interrupted" and run.meta["error"] == "KeyboardInterrupt"
    assert run.meta["epochs"] == len(run.epochs) > 10


@pytest.mark.slow
def test_sigterm_records_terminated_and_ends_the_process_as_the_default_does(tmp_path):
    run_dir = tmp_path / "run"
    proc = start(run_dir)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=20)
    assert proc.returncode == -signal.SIGTERM
    run = read_run(run_dir)
    assert run.status == "terminated" and run.meta["error"] == "SIGTERM" and run.meta["finished"]
    assert run.meta["epochs"] == len(run.epochs) > 10


@pytest.mark.slow
def test_sigterm_under_profiler_run_keeps_where_the_epochs_came_from(tmp_path):
    """The Session writes the final meta.json in its SIGTERM handler, before `profiler run` unwinds:
    meta.epochs_from is kept current as epochs are written, so it names their source there too."""
    script = tmp_path / "train.py"
    script.write_text("import time\ndef train_epoch():\n    time.sleep(0.02)\nprint('ready', flush=True)\n"
                      "while True:\n    train_epoch()\n")
    proc = subprocess.Popen([sys.executable, "-m", "profiler", "run", "--quiet", "--epoch-fn", "train_epoch",
                             "--out", str(tmp_path / "run"), str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=20)
    run = read_run(tmp_path / "run")
    assert run.status == "terminated" and len(run.epochs) > 5
    assert run.user_meta["epochs_from"] == "epoch-fn", run.user_meta


def test_sigterm_handler_only_while_the_session_is_open(tmp_path):
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    with Session(tmp_path / "run"):
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_programs_own_sigterm_handler_is_left_alone(tmp_path):
    def mine(signum, frame):
        pass
    previous = signal.signal(signal.SIGTERM, mine)
    try:
        with Session(tmp_path / "run"):
            assert signal.getsignal(signal.SIGTERM) is mine
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_run_directory_removed_under_a_live_run(tmp_path):
    callbacks = list(gc.callbacks)
    with pytest.raises(RunWriteError, match="cannot append .*was deleted"):
        with Session(tmp_path / "run", tracemalloc=True) as session:
            for epoch in range(5):
                with session.epoch(epoch):
                    if epoch == 2:
                        shutil.rmtree(tmp_path / "run")
                        os.chmod(tmp_path, 0o500)   # and it cannot be recreated
                        time.sleep(ALIVE_CHECK_NS / 1e9)   # the next check is due at this epoch's end
    os.chmod(tmp_path, 0o700)
    assert gc.callbacks == callbacks and not tracemalloc.is_tracing()


def test_the_run_directory_is_checked_once_per_interval_not_per_epoch(tmp_path, monkeypatch):
    checks = []
    real_fstat = os.fstat
    monkeypatch.setattr(os, "fstat", lambda fd: checks.append(fd) or real_fstat(fd))
    with Session(tmp_path / "run") as session:
        start = time.perf_counter_ns()
        for epoch in range(200):
            with session.epoch(epoch):
                pass
        elapsed = time.perf_counter_ns() - start
    assert 2 <= len(checks) <= 2 + elapsed // ALIVE_CHECK_NS   # and one as the run ends


def test_epochs_file_deleted_just_before_the_end_is_an_error_not_a_quiet_loss(tmp_path):
    with pytest.raises(RunWriteError, match="cannot finish the run .*was deleted"):
        with Session(tmp_path / "run") as session:
            for epoch in range(3):
                with session.epoch(epoch):
                    pass
            os.unlink(tmp_path / "run" / "epochs.jsonl")   # within 0.1 s of the first epoch's check


def test_a_record_json_cannot_hold_leaves_no_steps_behind(tmp_path):
    with pytest.raises(RunWriteError, match="cannot record epoch 1 .*not JSON compliant"):
        with Session(tmp_path / "run") as session:
            losses = iter([0.5, float("nan")])
            session.add_epoch_field("loss", lambda: next(losses))
            for epoch in range(2):
                with session.epoch(epoch):
                    for _ in range(3):
                        with session.step():
                            pass
    run = read_run(tmp_path / "run")
    assert [r["epoch"] for r in run.epochs] == [0] and run.meta["status"] == "failed"
    assert len(run.problems) == 1 and run.problems[0].startswith("the run failed: RunWriteError")   # no steps astray
    assert list(run.steps()["epoch"]) == [0, 0, 0]


def test_the_bodys_exception_goes_up_when_the_abandoned_epochs_steps_cannot_be_cut(tmp_path, monkeypatch, capfd):
    with pytest.raises(ZeroDivisionError):
        with Session(tmp_path / "run") as session:
            def fails(name, size):
                raise RunWriteError("cannot remove an abandoned epoch's records from steps.bin: disk gone")
            monkeypatch.setattr(session._writer, "drop_binary", fails)
            with session.epoch(0):
                for _ in range(STEP_CAPACITY + 1):   # the buffer filled: steps on disk to cut
                    with session.step():
                        pass
                monkeypatch.setattr(session._writer, "append_binary", lambda name, data: (_ for _ in ()).throw(
                    RunWriteError("cannot append to steps.bin: disk full")))   # nor can the epoch be held
                1 / 0
    err = capfd.readouterr().err
    assert "profiler: cannot append to steps.bin: disk full" in err
    assert "profiler: cannot remove an abandoned epoch's records" in err
    assert read_run(tmp_path / "run").meta["status"] == "failed"


def test_a_loop_that_catches_its_epochs_error_goes_on_after_a_cut_that_failed(tmp_path, monkeypatch):
    with Session(tmp_path / "run") as session:
        real = session._writer.drop_binary
        monkeypatch.setattr(session._writer, "drop_binary", lambda name, size: (_ for _ in ()).throw(
            RunWriteError("cannot remove an abandoned epoch's records: disk gone")))
        with pytest.raises(ZeroDivisionError):
            with session.epoch(0):
                for _ in range(STEP_CAPACITY + 1):
                    with session.step():
                        pass
                1 / 0
        with session.epoch(0):   # the held epoch's steps cannot be cut; its index is free again, no epoch left open
            pass
        monkeypatch.setattr(session._writer, "drop_binary", real)
    assert [r["epoch"] for r in read_run(tmp_path / "run").epochs] == [0]


def test_after_a_failed_cut_the_next_epoch_keeps_steps_bin_in_epoch_order(tmp_path, monkeypatch):
    with Session(tmp_path / "run") as session:
        with session.epoch(0):
            pass
        real = session._writer.drop_binary
        monkeypatch.setattr(session._writer, "drop_binary", lambda name, size: (_ for _ in ()).throw(
            RunWriteError("cannot remove an abandoned epoch's records: disk gone")))
        with pytest.raises(ZeroDivisionError):
            with session.epoch(5):
                for _ in range(STEP_CAPACITY + 1):   # the buffer filled: steps of epoch 5 on disk
                    with session.step():
                        pass
                1 / 0
        with pytest.raises(UsageError, match="epoch index 3 after epoch 4"):
            session.begin_epoch(3)   # the held epoch 5's steps could not be cut
        monkeypatch.setattr(session._writer, "drop_binary", real)
        with session.epoch() as e:
            assert e.index == 5
            with session.step():
                pass
    run = read_run(tmp_path / "run")   # steps of 5 left on disk, then the new epoch 5's: in order
    assert [r["epoch"] for r in run.epochs] == [0, 5] and set(run.steps()["epoch"]) == {5}


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, RunWriteError])
def test_an_epoch_whose_line_is_not_written_leaves_no_steps(tmp_path, monkeypatch, interrupt):
    with pytest.raises(interrupt):
        with Session(tmp_path / "run") as session:
            for epoch in range(3):
                if epoch == 2:   # the steps are on disk, the line is not: Ctrl-C or a full disk there
                    monkeypatch.setattr(session._writer, "write_epoch_line",
                                        lambda line, index: (_ for _ in ()).throw(interrupt("at the line")))
                with session.epoch(epoch):
                    for _ in range(4):
                        with session.step():
                            pass
    run = read_run(tmp_path / "run")
    assert [r["epoch"] for r in run.epochs] == [0, 1] and list(run.steps()["epoch"]) == [0] * 4 + [1] * 4
    assert not [p for p in run.problems if "step" in p]


SIGTERM_AFTER_THE_LINE = """
import sys
from profiler import Session
run, torn = sys.argv[1], sys.argv[2] == "torn"
with Session(run) as session:
    real = session._writer._files["epochs.jsonl"]

    class Terminated:   # the Session's SIGTERM handler runs at the first check after epoch 1's write
        lines = 0

        def write(self, data):
            self.lines += 1
            if self.lines != 2:
                return real.write(data)
            done = real.write(data[:len(data) // 2] if torn else data)
            session._on_sigterm(15, None)

        def __getattr__(self, name):
            return getattr(real, name)
    session._writer._files["epochs.jsonl"] = Terminated()
    for epoch in range(3):
        with session.epoch(epoch):
            for _ in range(4):
                with session.step():
                    pass
"""


@pytest.mark.slow
@pytest.mark.parametrize("line", ["whole", "torn"])
def test_sigterm_just_after_an_epochs_line_keeps_its_steps_only_if_the_line_is_whole(tmp_path, line):
    proc = subprocess.run([sys.executable, "-c", SIGTERM_AFTER_THE_LINE, str(tmp_path / "run"), line],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    run = read_run(tmp_path / "run")
    lined = [0, 1] if line == "whole" else [0]
    assert run.status == "terminated" and run.meta["epochs"] == len(lined)
    assert [r["epoch"] for r in run.epochs] == lined and list(run.steps()["epoch"]) == [e for e in lined for _ in range(4)]
    assert not [p for p in run.problems if "step" in p]


def test_a_loop_that_catches_an_epoch_blocks_write_error_goes_on(tmp_path):
    with Session(tmp_path / "run") as session:
        losses = iter([0.5, float("nan"), 0.25])
        session.add_epoch_field("loss", lambda: next(losses))
        for epoch in range(3):
            try:
                with session.epoch():
                    with session.step():
                        pass
            except RunWriteError:
                pass   # the NaN epoch is dropped at the end of its block, not left open
    run = read_run(tmp_path / "run")
    assert [(r["epoch"], r["loss"]) for r in run.epochs] == [(0, 0.5), (1, 0.25)] and run.status == "completed"
    assert list(run.steps()["epoch"]) == [0, 1] and not run.problems


def test_gc_events_that_cannot_be_written_at_the_end_still_let_the_status_be_recorded(tmp_path, monkeypatch,
                                                                                      capfd):
    with Session(tmp_path / "run") as session:
        with session.epoch(0):
            pass
        monkeypatch.setattr(session._writer, "append_binary", lambda name, data: (_ for _ in ()).throw(
            RunWriteError("cannot append to gc_events.bin: disk gone")))
        gc.collect()   # a generation-2 collection: one GC event, written when the Session ends
    meta = read_run(tmp_path / "run").meta
    assert meta["status"] == "completed" and meta["gc_events_dropped"] >= 1   # automatic long collections may add more
    assert capfd.readouterr().err.strip() == "profiler: cannot append to gc_events.bin: disk gone"


FILE_SIZE_LIMIT = """
import resource, signal, sys
from profiler.rundir.writer import RunWriter, RunWriteError, STEPS
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)      # past the limit a write comes back short, then EFBIG
writer = RunWriter(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, resource.RLIM_INFINITY))
writer.append_binary(STEPS, bytes(range(48)) * 10)   # 480 bytes
try:
    writer.append_binary(STEPS, bytes(48) * 20)      # 960 more: 520 fit, then the limit
except RunWriteError as e:
    print("refused:", e)
writer.drop_binary(STEPS, 48 * 5)
writer.append_epoch({"epoch": 0, "pad": "x" * 100})     # 116 bytes: steps.bin's 240 and this fit
try:
    writer.append_epoch({"epoch": 1, "pad": "x" * 1000})   # part of it fits: cut, not finished by close()
except RunWriteError as e:
    print("refused:", e)
writer.close()
"""


def test_a_block_that_fails_part_way_is_cut_and_drops_cut_whole_records(tmp_path):
    out = subprocess.run([sys.executable, "-c", FILE_SIZE_LIMIT, str(tmp_path / "run")], capture_output=True,
                         text=True, timeout=60)
    assert "refused: cannot append to" in out.stdout and "refused: cannot append epoch 1" in out.stdout, out.stderr
    assert (tmp_path / "run" / "steps.bin").read_bytes() == bytes(range(48)) * 5
    assert (tmp_path / "run" / "epochs.jsonl").read_text() == json.dumps({"epoch": 0, "pad": "x" * 100},
                                                                        separators=(",", ":")) + "\n"


def test_a_write_that_cannot_be_cut_back_refuses_every_later_one(tmp_path, monkeypatch):
    from profiler.rundir.writer import EPOCHS, STEPS, RunWriter

    class Full:   # writes half of what it is given, then the disk is full
        def __init__(self, file):
            self.file, self.calls = file, 0

        def write(self, data):
            self.calls += 1
            if self.calls > 1:
                raise OSError(28, "No space left on device")
            return self.file.write(data[:len(data) // 2])

        def __getattr__(self, name):
            return getattr(self.file, name)
    writer = RunWriter(tmp_path / "run")
    writer.append_binary(STEPS, bytes(48))
    writer.append_epoch({"epoch": 0})
    writer._files[STEPS] = Full(writer._files[STEPS])
    writer._files[EPOCHS] = Full(writer._files[EPOCHS])
    monkeypatch.setattr(os, "ftruncate", lambda fd, size: (_ for _ in ()).throw(OSError(5, "I/O error")))
    with pytest.raises(RunWriteError, match="No space left"):
        writer.append_binary(STEPS, bytes(96))
    with pytest.raises(RunWriteError, match="No space left"):
        writer.append_epoch({"epoch": 1, "pad": "x" * 100})
    monkeypatch.undo()
    for attempt in (lambda: writer.append_binary(STEPS, bytes(48)), lambda: writer.drop_binary(STEPS, 48),
                    lambda: writer.append_epoch({"epoch": 1}), writer.check_alive):
        with pytest.raises(RunWriteError, match="could not be cut back") as e:
            attempt()
        assert str(e.value).count(str(tmp_path)) == 1, e.value   # said once, not wrapped again
    writer.close()


def test_steps_are_cut_once_when_an_interrupt_leaves_both_marks_set(tmp_path):
    with Session(tmp_path / "run") as session:
        with session.epoch(0):
            for _ in range(4):
                with session.step():
                    pass
        session.begin_epoch(1)
        for _ in range(3):
            session.begin_step()
            session.end_step()
        session._steps.flush()            # end_epoch(1) got this far, and set its mark for them...
        session._unlined = (3, session._writer.size("epochs.jsonl"))   # ...when Ctrl-C came, before the
                                                                        # epoch was marked closed
        session._cut_unwritten()
        session._cut_unwritten()          # an integration's abandon, then the Session's end
    run = read_run(tmp_path / "run")
    assert [r["epoch"] for r in run.epochs] == [0] and list(run.steps()["epoch"]) == [0] * 4


@pytest.mark.slow
def test_exception_in_a_handler_marks_the_run_failed(tmp_path):
    from profiler.workloads import scenarios
    from profiler.workloads.engine import Events, Loop
    sc = scenarios.build("mlp", samples=100)
    with pytest.raises(ZeroDivisionError):
        with Session(tmp_path / "run") as session:
            loop = Loop(sc.model, sc.optimizer, sc.data, max_epochs=10, session=session)
            loop.on(Events.EPOCH_COMPLETED, lambda s: 1 / 0, once=2)
            loop.run()
    run = read_run(tmp_path / "run")
    assert run.status == "failed" and "ZeroDivisionError" in run.meta["error"] and len(run.epochs) == 2
    assert gc.get_freeze_count() == 0


@pytest.mark.slow
def test_100k_epochs_flat_profiler_memory_linear_directory_fast_report(tmp_path):
    run_dir = tmp_path / "long"
    sizes, rss = [], []
    with Session(run_dir) as session:
        for epoch in range(100_000):
            with session.epoch(epoch):
                with session.op("step", layout="NHWC"):
                    pass
            if epoch % 20_000 == 19_999:
                sizes.append((run_dir / "epochs.jsonl").stat().st_size)
                rss.append(session.memory.read()[0])
    assert max(rss) - min(rss) < 5 << 20, [r >> 20 for r in rss]
    per_epoch = [b / (20_000 * (i + 1)) for i, b in enumerate(sizes)]
    assert max(per_epoch) / min(per_epoch) < 1.05
    start = time.perf_counter()
    d = analyze(run_dir)
    assert d.epochs == 100_000 and time.perf_counter() - start < 30


@pytest.mark.slow
def test_a_forked_child_drops_the_sessions_hooks_and_writes_nothing(tmp_path):
    """DataLoader workers and multiprocessing children are forks of the profiled process: they must
    not record into, or finish, the parent's run."""
    with Session(tmp_path / "run") as session:
        with session.epoch(0):
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:   # the child: report what it inherited, then try to end the Session
                hooked = any(getattr(cb, "__self__", None) is session.gc_timer for cb in gc.callbacks)
                os.write(write, f"{hooked} {signal.getsignal(signal.SIGTERM) is signal.SIG_DFL}".encode())
                session.__exit__(None, None, None)
                os._exit(0)
            os.close(write)
            child = os.read(read, 100).decode()
            os.close(read)
            os.waitpid(pid, 0)
            assert json.loads((tmp_path / "run" / "meta.json").read_text())["status"] == "running"
    assert child == "False True"
    run = read_run(tmp_path / "run")
    assert run.status == "completed" and len(run.epochs) == 1
