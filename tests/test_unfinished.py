"""The epoch a run stops in: written, flagged unfinished, when the run ends on it (an exception,
sys.exit(0) included, Ctrl-C, SIGTERM), so a run of one long epoch that crashes keeps its steps; dropped when the loop
goes on or the run completes; steps written at least once a second, so a kill keeps all but the
last second of them."""

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from profiler import Session
from profiler.analysis import analyze
from profiler.capture import steps as steps_module
from profiler.capture.steps import StepRecorder
from profiler.errors import RunDirError
from profiler.report import text
from profiler.rundir import read_run
from profiler.rundir.format import STEP_RECORD, STEPS

from .fixtures import epoch, write_run


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def lines(run_dir):
    return [json.loads(line) for line in (run_dir / "epochs.jsonl").read_text().splitlines()]


def test_a_run_of_one_epoch_that_raises_keeps_its_steps_and_is_read_as_that_epoch(tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(RuntimeError, match="out of memory"):
        with Session(run_dir) as session:
            with session.epoch():
                for i in range(400):
                    with session.step():
                        spin(2e-5 * (1 + i / 100))   # the steps get 5x slower
                raise RuntimeError("out of memory")
    record, = lines(run_dir)
    assert record["unfinished"] is True and record["epoch"] == 0 and record["steps"] == 400
    run = read_run(run_dir)
    assert run.status == "failed" and run.epochs == [record] and run.unfinished_epoch == record
    assert len(run.steps()) == 400 and set(run.steps()["epoch"]) == {0}
    assert run.problems[-1].startswith("epoch 0 did not finish: the run stopped ") and run.problems[-1].endswith(
        "after 400 steps; no epoch with steps finished, so it is read as it stood then (its time runs to the stop, "
        "not a whole epoch's)")
    diagnosis = analyze(run_dir)   # before: "has no finished epochs to analyze"
    assert diagnosis.epochs == 1 and diagnosis.unfinished and diagnosis.primary_cause == "compute"
    assert text.diagnosis(diagnosis).splitlines()[0].endswith("(1 unfinished epoch, failed; the run is incomplete)")
    assert diagnosis.epoch_time.step_trend.change.relative > 1


def interrupted(run_dir, steps):
    """A run of epochs of `steps` steps each, Ctrl-C in the last one."""
    with pytest.raises(KeyboardInterrupt):
        with Session(run_dir) as session:
            for e, n in enumerate(steps):
                with session.epoch():
                    for _ in range(n):
                        with session.step():
                            pass
                    if e == len(steps) - 1:
                        raise KeyboardInterrupt
    return run_dir


def test_the_epoch_a_run_stops_in_after_finished_ones_is_left_out_of_them(tmp_path):
    run_dir = interrupted(tmp_path / "run", [5, 5, 7])
    assert [r.get("unfinished") for r in lines(run_dir)] == [None, None, True]
    run = read_run(run_dir)
    assert run.status == "interrupted" and [r["epoch"] for r in run.epochs] == [0, 1]
    assert run.unfinished_epoch["epoch"] == 2 and run.unfinished_epoch["steps"] == 7
    assert list(run.steps()["epoch"]) == [0] * 5 + [1] * 5   # the unfinished epoch's steps are on disk, apart
    assert (run_dir / STEPS).stat().st_size == 17 * STEP_RECORD.itemsize
    assert run.problems[-1].endswith("after 7 steps (its record, flagged unfinished, and its steps are left out)")
    assert not any("steps.bin ends with" in p for p in run.problems)
    assert run.meta["epochs"] == 2 and not analyze(run_dir).unfinished


def test_an_epoch_left_open_by_begin_epoch_is_written_when_the_run_fails(tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(ZeroDivisionError):
        with Session(run_dir) as session:
            session.begin_epoch()   # a framework's callbacks: no end_epoch() comes after the error
            session.begin_step()
            session.end_step()
            session.begin_step()   # the step the error cut short is not recorded
            1 / 0
    record, = lines(run_dir)
    assert record["unfinished"] is True and record["steps"] == 1 and "heap" in record
    assert len(read_run(run_dir).steps()) == 1


def test_a_loop_that_goes_on_past_its_epochs_error_drops_that_epoch(tmp_path):
    run_dir = tmp_path / "run"
    with Session(run_dir) as session:
        with pytest.raises(ValueError):
            with session.epoch(0):
                for _ in range(9000):   # more than a buffer: some on disk already
                    with session.step():
                        pass
                raise ValueError("a bad batch")
        with session.epoch(0):   # tried again under its index
            with session.step():
                pass
    assert [r.get("unfinished") for r in lines(run_dir)] == [None]
    run = read_run(run_dir)
    assert run.complete and len(run.steps()) == 1 and (run_dir / STEPS).stat().st_size == STEP_RECORD.itemsize


def test_sys_exit_0_inside_an_epoch_writes_it_flagged_unfinished_and_the_run_completed(tmp_path):
    # the run stopped there as on an error, if on purpose: the epoch had been dropped without a word (a probe)
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit):
        with Session(run_dir) as session:
            for e in range(3):
                with session.epoch(e):
                    for i in range(4):
                        with session.step():
                            if (e, i) == (2, 3):
                                sys.exit(0)
    assert [(r["epoch"], r["steps"], r.get("unfinished")) for r in lines(run_dir)] == [(0, 4, None), (1, 4, None),
                                                                                       (2, 3, True)]
    run = read_run(run_dir)
    assert run.status == "completed" and run.unfinished_epoch["steps"] == 3 and len(run.epochs) == 2
    # and one left open by begin_epoch() (a framework's callback), as a script run's --epoch-fn leaves it
    from profiler.integrations.script import run_script
    (tmp_path / "t.py").write_text("import sys\ndef step(): pass\ndef train_epoch(e):\n    for i in range(3):\n"
                                   "        step()\n        if (e, i) == (2, 1):\n            sys.exit(0)\n"
                                   "for e in range(4):\n    train_epoch(e)\n")
    result = run_script(str(tmp_path / "t.py"), [], out=tmp_path / "script", epoch_fn="train_epoch", step_fn="step",
                        window_s=60.0)
    assert isinstance(result.raised, SystemExit) and (result.epochs, result.unfinished) == (2, (2, 2)), result
    assert read_run(tmp_path / "script").user_meta["epochs_from"] == "epoch-fn"
    # a time window the run's end cuts is no epoch the run stopped in: sys.exit(main()) had written it flagged
    # unfinished, and the report called the run incomplete, where main() alone did not (a review)
    (tmp_path / "w.py").write_text("import sys, time\ndef step():\n    time.sleep(0.01)\ndef main():\n"
                                   "    end = time.monotonic() + 0.75\n    while time.monotonic() < end:\n"
                                   "        step()\n    return 0\nsys.exit(main()) if sys.argv[1] == 'exit' else main()\n")
    for how in ("exit", "return"):
        result = run_script(str(tmp_path / "w.py"), [how], out=tmp_path / how, step_fn="step", window_s=0.2)
        assert result.epochs >= 2 and result.unfinished is None and read_run(tmp_path / how).unfinished_epoch is None


def test_an_epoch_abandoned_before_the_run_completes_is_not_written(tmp_path):
    run_dir = tmp_path / "run"
    with Session(run_dir) as session:
        with session.epoch():
            with session.step():
                pass
        session.begin_epoch()   # a pass a framework began and discarded (an evaluation)
        with session.step():
            pass
        session.abandon_epoch()
    assert [r.get("unfinished") for r in lines(run_dir)] == [None]
    run = read_run(run_dir)
    assert run.complete and run.unfinished_epoch is None and (run_dir / STEPS).stat().st_size == STEP_RECORD.itemsize


def test_an_epoch_with_no_steps_is_not_held(tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(ZeroDivisionError):
        with Session(run_dir) as session:
            with session.epoch():
                pass
            with session.epoch():
                1 / 0
    assert [r.get("unfinished") for r in lines(run_dir)] == [None]


def test_steps_are_written_once_a_second_inside_a_long_epoch(monkeypatch):
    clock = [1]
    monkeypatch.setattr(steps_module, "_now", lambda: clock[0])
    written = []
    recorder = StepRecorder(sink=lambda view: written.append(view.nbytes // STEP_RECORD.itemsize), drop=None)
    recorder.start_epoch(0)
    for _ in range(3):
        with recorder:
            clock[0] += 400_000_000   # 0.4 s a step
    assert written == [3]   # the third ended 1.2 s after the epoch began
    with recorder:
        clock[0] += 1
    assert written == [3] and recorder.recorded == 4


LONG = """
import sys, time
from profiler import Session
with Session(sys.argv[1]) as session:
    with session.epoch(0):
        for i in range(10 ** 9):
            with session.step():
                end = time.perf_counter() + 0.001
                while time.perf_counter() < end:
                    pass
            if i == 500:
                print("ready", flush=True)
"""


def run_long(run_dir, seconds, sig):
    proc = subprocess.Popen([sys.executable, "-c", LONG, str(run_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(seconds)
        proc.send_signal(sig)
        proc.wait(timeout=30)
    finally:
        proc.kill()
        proc.stdout.close()
    return proc.returncode


@pytest.mark.slow
def test_sigterm_inside_a_long_epoch_keeps_its_steps(tmp_path):
    assert run_long(tmp_path / "run", 0.3, signal.SIGTERM) == -signal.SIGTERM
    run = read_run(tmp_path / "run")
    assert run.status == "terminated" and len(run.epochs) == 1 and run.epochs[0]["unfinished"]
    steps = run.steps()
    assert len(steps) == run.epochs[0]["steps"] > 500 and set(steps["epoch"]) == {0}
    assert analyze(tmp_path / "run").epochs == 1


@pytest.mark.slow
def test_a_kill_inside_a_long_epoch_leaves_all_but_its_last_second_of_steps(tmp_path):
    assert run_long(tmp_path / "run", 1.6, signal.SIGKILL) == -signal.SIGKILL
    run = read_run(tmp_path / "run")
    held = (tmp_path / "run" / STEPS).stat().st_size // STEP_RECORD.itemsize
    records = np.fromfile(tmp_path / "run" / STEPS, STEP_RECORD)
    assert held > 500 and (records["epoch"] == 0).all()
    # no epoch finished: read as the epoch it was killed in, rebuilt from its steps
    assert run.status == "running" and len(run.steps()) == held
    record, = run.epochs
    assert record is run.unfinished_epoch and record["from_steps"] and record["steps"] == held
    # its RSS read with the steps' write a second into it
    assert record["rss_bytes"] == run.rss_samples()["rss_bytes"][-1] > 0 and record["wall_s"] > 1.0
    assert run.problems[-1].startswith("epoch 0 did not finish: its steps stop ")
    assert (f"(the process was killed, or is still running), after {held:,} on disk (a kill loses the last second's); "
            f"no epoch with steps finished") in run.problems[-1]
    assert analyze(tmp_path / "run").unfinished
    report = subprocess.run([sys.executable, "-m", "profiler", "report", str(tmp_path / "run")], capture_output=True,
                            text=True, timeout=60)
    assert report.returncode == 0 and "(1 unfinished epoch, running; the run is incomplete)" in report.stdout


def test_a_killed_run_with_finished_epochs_leaves_the_steps_after_them_out(tmp_path):
    write_run(tmp_path / "r", [{**epoch(0, 1.0, steps=1), "start_s": 0.0}], status="running",
              steps=[(0, 0.0, 0.5, 0, 0, 0), (1, 1.0, 0.4, 0, 0.01, 0), (1, 1.5, 0.4, 0, 0, 0)])
    run = read_run(tmp_path / "r")
    assert [r["epoch"] for r in run.epochs] == [0] and run.unfinished_epoch is None and len(run.steps()) == 1
    assert "steps.bin ends with 2 steps of epoch 1, which epochs.jsonl has no line for (cut short or abandoned): " \
           "they are left out" in run.problems


def test_a_killed_run_read_from_its_steps_has_their_gc_pauses(tmp_path):
    write_run(tmp_path / "r", [], status="running",
              steps=[(3, 1.0, 0.4, 0.002, 0, 0), (3, 1.4, 0.5, 0, 0, 0.3), (3, 1.9, 0.1, 0.001, 0, 0)])
    (record,) = read_run(tmp_path / "r").epochs
    assert record["epoch"] == 3 and record["start_s"] == 1.0 and record["wall_s"] == pytest.approx(1.0)
    assert record["gc"]["pause_s"] == pytest.approx([0.003, 0.0, 0.3]) and record["gc"]["collections"] == [2, 0, 1]
    # a run that ended with a status of its own wrote its unfinished epoch's line: steps alone are not read so
    write_run(tmp_path / "f", [], status="failed", steps=[(0, 1.0, 0.4, 0, 0, 0)])
    assert read_run(tmp_path / "f").epochs == []


def test_an_unfinished_line_is_the_last_and_says_true(tmp_path):
    unfinished = {**epoch(1, 0.5, steps=3), "unfinished": True}
    write_run(tmp_path / "a", [epoch(0, 1.0), unfinished, epoch(2, 1.0)], status="failed")
    with pytest.raises(RunDirError, match="line 3 follows the line of unfinished epoch 1: the epoch a run stops in is "
                                          "its last line"):
        read_run(tmp_path / "a")
    write_run(tmp_path / "b", [epoch(0, 1.0), {**epoch(1, 0.5), "unfinished": 1}], status="failed")
    with pytest.raises(RunDirError, match="line 2 has unfinished 1, not true"):
        read_run(tmp_path / "b")
    write_run(tmp_path / "c", [epoch(0, 1.0, steps=1), {**epoch(1, 1.5), "unfinished": True}], status="failed",
              steps=[(0, 0.0, 0.5, 0, 0, 0), (1, 1.0, 0.4, 0, 0, 0)])
    run = read_run(tmp_path / "c")
    assert [r["epoch"] for r in run.epochs] == [0] and run.unfinished_epoch["epoch"] == 1
    assert run.problems[-1] == ("epoch 1 did not finish: the run stopped 1.5 s into it, after 0 steps (its record, "
                                "flagged unfinished, and its steps are left out)")
    assert list(run.steps()["epoch"]) == [0]


def test_a_sigterm_as_an_epoch_begins_holds_nothing_of_the_epoch_before(tmp_path, monkeypatch):
    """The handler's final records run wherever the main thread checks for signals: before the new
    epoch's clock starts there is nothing of it to hold (the last epoch's step count was taken for it)."""
    run_dir = tmp_path / "run"
    with Session(run_dir) as session:
        with session.epoch():
            for _ in range(5):
                with session.step():
                    pass
        start_epoch = StepRecorder.start_epoch

        def terminated(recorder, index):
            session._finish("terminated", "SIGTERM")   # what _on_sigterm does before the process ends
            start_epoch(recorder, index)
        monkeypatch.setattr(StepRecorder, "start_epoch", terminated)
        session.begin_epoch()
    assert [r.get("unfinished") for r in lines(run_dir)] == [None]
    run = read_run(run_dir)
    assert run.status == "terminated" and len(run.steps()) == 5 and run.unfinished_epoch is None


def test_a_sigterm_once_a_steps_write_is_done_does_not_write_them_again(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    with Session(run_dir) as session:
        session.begin_epoch()
        append = session._writer.append_binary

        def then_terminated(name, data):
            append(name, data)
            if name == STEPS:
                session._finish("terminated", "SIGTERM")   # the process ends there
        monkeypatch.setattr(session._writer, "append_binary", then_terminated)
        for _ in range(3):
            with session.step():
                pass
        session._steps.flush()   # the write once a second
    record, = lines(run_dir)
    assert record["unfinished"] and record["steps"] == 3
    assert (run_dir / STEPS).stat().st_size == 3 * STEP_RECORD.itemsize


def test_a_refused_epoch_index_keeps_the_held_epoch(tmp_path):
    from profiler import UsageError
    run_dir = tmp_path / "run"
    with pytest.raises(UsageError, match="epoch index 2 after epoch 2"):
        with Session(run_dir) as session:
            for e in range(3):
                with session.epoch(e):
                    pass
            try:
                with session.epoch(3):
                    for _ in range(7):
                        with session.step():
                            pass
                    raise ValueError
            except ValueError:
                session.begin_epoch(2)
    assert [(r["epoch"], r.get("unfinished")) for r in lines(run_dir)] == [(0, None), (1, None), (2, None), (3, True)]
    assert (run_dir / STEPS).stat().st_size == 7 * STEP_RECORD.itemsize


def test_a_step_that_raises_is_not_recorded(tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        with Session(run_dir) as session:
            with session.epoch():
                for i in range(3):
                    with session.step():
                        if i == 2:
                            time.sleep(0.2)   # hung, then Ctrl-C
                            raise KeyboardInterrupt
    record, = lines(run_dir)
    assert record["steps"] == 2 and (read_run(run_dir).steps()["wall_s"] < 0.1).all()


def test_the_epoch_a_run_stops_in_after_set_up_epochs_without_steps_is_read_with_them(tmp_path):
    """profiler run writes time windows through a script's set-up before its first DataLoader pass:
    a crash in that one long pass is still the run's training, not left out beside them."""
    run_dir = tmp_path / "run"
    with pytest.raises(RuntimeError):
        with Session(run_dir) as session:
            for _ in range(2):   # set-up: no steps
                with session.epoch():
                    pass
            with session.epoch():
                for i in range(300):
                    with session.step():
                        spin(2e-5 * (1 + i / 60))
                raise RuntimeError("out of memory")
    run = read_run(run_dir)
    assert [r.get("unfinished") for r in run.epochs] == [None, None, True] and len(run.steps()) == 300
    diagnosis = analyze(run_dir)
    assert diagnosis.unfinished and diagnosis.epoch_time.warmup_epochs_skipped == 2
    assert diagnosis.epoch_time.step_trend is not None and diagnosis.primary_cause == "compute"
    assert "(2 epochs of set-up and 1 unfinished, failed; the run is incomplete)" in text.diagnosis(diagnosis)


def test_the_timeline_draws_the_epoch_a_run_stopped_in_with_its_steps(tmp_path):
    from profiler.report.trace import write_run as write_trace
    run_dir = interrupted(tmp_path / "run", [3, 4])
    assert write_trace(run_dir, tmp_path / "t.json")[1] == 7
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert [e["name"] for e in events if e.get("cat") == "epoch"] == ["epoch 0", "epoch 1 (unfinished)"]
    assert [e["args"]["epoch"] for e in events if e.get("cat") == "step"] == [0] * 3 + [1] * 4


SIGNALLED = """
import os, signal, sys
from profiler import Session
with Session(sys.argv[1]) as session:
    session.begin_epoch()
    for _ in range(3):
        with session.step():
            pass
    append = session._writer.append_binary
    def signalled(name, data):
        if sys.argv[2] == "before":
            os.kill(os.getpid(), signal.SIGTERM)
        append(name, data)
        if sys.argv[2] == "after":
            os.kill(os.getpid(), signal.SIGTERM)
    session._writer.append_binary = signalled
    session._steps.flush()   # the write once a second
    print("not terminated", flush=True)
"""


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_sigterm_during_a_steps_write_waits_for_it(tmp_path, when):
    """Counted as written before the write, or written twice after it: the handler's line and
    steps.bin disagreed whichever side of the write the signal landed."""
    proc = subprocess.run([sys.executable, "-c", SIGNALLED, str(tmp_path / "run"), when], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == -signal.SIGTERM and "not terminated" not in proc.stdout, proc.stderr
    record, = lines(tmp_path / "run")
    assert record["unfinished"] and record["steps"] == 3
    assert (tmp_path / "run" / STEPS).stat().st_size == 3 * STEP_RECORD.itemsize
    assert read_run(tmp_path / "run").problems[0] == "the run was terminated: SIGTERM"


def test_a_second_ctrl_c_while_the_first_ones_epoch_is_held_keeps_it(tmp_path, monkeypatch):
    flush = StepRecorder.flush

    def interrupted(recorder):   # the second Ctrl-C lands as the held epoch's steps are written
        monkeypatch.setattr(StepRecorder, "flush", flush)
        signal.raise_signal(signal.SIGINT)
        flush(recorder)

    with pytest.raises(KeyboardInterrupt):
        with Session(tmp_path / "run") as session:
            with session.epoch(0):
                for _ in range(5):
                    with session.step():
                        pass
                monkeypatch.setattr(StepRecorder, "flush", interrupted)
                raise KeyboardInterrupt   # the first
    run = read_run(tmp_path / "run")
    assert run.status == "interrupted" and run.epochs[0]["unfinished"] and run.epochs[0]["steps"] == len(run.steps()) == 5
