"""RSS read inside epochs (rss.bin): written with the steps at most once a second, read back on the
run's clock, and judged when the epochs are too few to fit a growth per epoch (an LLM's one epoch,
a job the OOM killer stopped)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from profiler import Session
from profiler.analysis import analyze, findings, series
from profiler.capture import session as session_module
from profiler.capture import steps as steps_module
from profiler.errors import RunDirError
from profiler.report import figures, text, trace
from profiler.rundir import RunWriteError, read_run
from profiler.rundir.writer import RunWriter
from profiler.rundir.format import RSS, RSS_RECORD, RSS_SAMPLE

from .fixtures import MIB, epoch, write_run

SCRIPT = Path(__file__).parent / "scripts" / "torch_one_epoch.py"


def with_samples(path, records, samples, status="completed", steps=()):
    """A run of `records` whose rss.bin holds `samples` ((t_s, rss_bytes[, shared_bytes[, epoch]]), ...) on a
    clock whose origin is 0; a reading's epoch is by default the last of `records` begun at or before it."""
    write_run(path, records, status=status, steps=steps)
    begun = sorted((r["start_s"], r["epoch"]) for r in records if r.get("start_s") is not None)

    def packed(t, rss, shared=0, index=None):
        if index is None:
            index = max([e for b, e in begun if b <= t], default=0) if begun else 0
        return RSS_SAMPLE.pack(round(t * 1e9), index, int(rss), int(shared))

    (path / RSS).write_bytes(b"".join(packed(*sample) for sample in samples))
    return path


def one_epoch(path, rss_at, seconds=100.0, **kwargs):
    """One epoch of `seconds` from t=1 s, its RSS read each second as rss_at(t)."""
    times = np.arange(2.0, 1.0 + seconds, 1.0)
    return with_samples(path, [epoch(0, seconds, start_s=1.0, rss=rss_at(1.0 + seconds))],
                        [(t, rss_at(t)) for t in times], **kwargs)


ANON = "anonymous memory (RSS less its shared pages: a memory-mapped file's are no leak)"


def told(d):
    """The text report, its lines joined."""
    return " ".join(text.diagnosis(d).split())


def memory_findings(d):
    return [f for f in d.findings if f.pattern == "allocation-growth"]


# -- capture ---------------------------------------------------------------------------------------

@pytest.fixture
def clock(monkeypatch):
    """The Session's and the step recorder's clock, moved by hand."""
    now = [10_000_000_000]
    monkeypatch.setattr(session_module, "_now", lambda: now[0])
    monkeypatch.setattr(steps_module, "_now", lambda: now[0])
    return now


def test_rss_is_read_with_the_steps_writes_at_most_once_a_second(tmp_path, clock):
    with Session(tmp_path / "run") as session:
        with session.epoch(0):
            for _ in range(10):
                with session.step():
                    clock[0] += 400_000_000   # 0.4 s a step: the steps are written after steps 3, 6 and 9
        with session.epoch(1):   # a short epoch a moment later: its steps' write reads no RSS
            with session.step():
                clock[0] += 1_000
    samples = np.fromfile(tmp_path / "run" / RSS, RSS_RECORD)
    assert samples["t_ns"].tolist() == [clock[0] - 1_000 - 4_000_000_000 + d for d in
                                        (1_200_000_000, 2_400_000_000, 3_600_000_000)]
    assert (samples["rss_bytes"] > 1 << 20).all() and samples["epoch"].tolist() == [0, 0, 0]
    assert (0 < samples["shared_bytes"]).all() and (samples["shared_bytes"] < samples["rss_bytes"]).all()
    read = read_run(tmp_path / "run").rss_samples()
    assert read["t_s"] == pytest.approx((samples["t_ns"] - 10_000_000_000) / 1e9)


def test_an_rss_reading_that_cannot_be_written_stops_the_readings_not_the_training(tmp_path, clock, monkeypatch,
                                                                                    capsys):
    append = RunWriter.append_binary

    def full(self, name, data):
        if name == RSS:
            raise RunWriteError(f"cannot append to {self.path / name}: [Errno 28] No space left on device")
        append(self, name, data)

    monkeypatch.setattr(RunWriter, "append_binary", full)
    with Session(tmp_path / "run") as session:
        with session.epoch(0):
            for _ in range(10):
                with session.step():
                    clock[0] += 400_000_000
    run = read_run(tmp_path / "run")
    assert run.complete and run.epochs[0]["steps"] == len(run.steps()) == 10
    assert capsys.readouterr().err.count("No space left on device; RSS is read at each epoch's end only from now on") == 1


def test_an_interrupt_while_rss_is_read_leaves_the_steps_unwritten_and_counted_so(tmp_path, clock, monkeypatch):
    with pytest.raises(KeyboardInterrupt):
        with Session(tmp_path / "run") as session:
            reads = [0]
            resident = session.memory.resident

            def interrupted():
                reads[0] += 1
                if reads[0] == 2:
                    raise KeyboardInterrupt
                return resident()

            monkeypatch.setattr(session.memory, "resident", interrupted)
            with session.epoch(0):
                for _ in range(10):
                    with session.step():
                        clock[0] += 400_000_000
    run = read_run(tmp_path / "run")
    # the first write's three steps landed, the second's did not: the line counts what steps.bin holds
    assert run.status == "interrupted" and run.epochs[0]["unfinished"]
    assert run.epochs[0]["steps"] == len(run.steps()) == 3


def test_a_run_without_steps_writes_no_rss_samples(tmp_path):
    with Session(tmp_path / "run") as session:
        for i in range(3):
            with session.epoch(i):
                pass
    assert not (tmp_path / "run" / RSS).exists()
    assert len(read_run(tmp_path / "run").rss_samples()) == 0


# -- the reader ------------------------------------------------------------------------------------

def test_a_torn_sample_is_skipped_and_named(tmp_path):
    path = with_samples(tmp_path / "r", [epoch(0, 3.0, start_s=0.0)], [(1.0, 100 * MIB), (2.0, 101 * MIB)])
    with open(path / RSS, "ab") as f:
        f.write(b"\x01\x02\x03")
    run = read_run(path)
    assert run.rss_samples()["rss_bytes"].tolist() == [100 * MIB, 101 * MIB]
    assert "rss.bin ends with 3 bytes of a record cut short (a crash mid-write); they were skipped" in run.problems


@pytest.mark.parametrize("sample, what", [((-1.0, MIB), "has t_s -1, not a time"),
                                          ((1.0, -5), "has rss_bytes -5, not a size between 0 and"),
                                          ((1.0, MIB, 2 * MIB), "has shared_bytes 2097152, not a size between 0 and "
                                                                "its rss_bytes"),
                                          ((1.0, MIB, 0, -1), "has epoch -1, not an epoch index"),
                                          ((0.25, MIB), "has t_s 0.25, before the reading before it")])
def test_a_sample_this_profiler_cannot_have_written_is_refused(tmp_path, sample, what):
    path = with_samples(tmp_path / "r", [epoch(0, 3.0, start_s=0.0)], [(0.5, MIB), sample])
    with pytest.raises(RunDirError, match=f"rss.bin record 1 {what}"):
        read_run(path)


def test_a_killed_run_read_from_its_steps_has_its_epochs_last_reading(tmp_path):
    # as the Session writes them: each reading just after the last step its write holds; the first, of
    # an epoch 0 that was dropped (its index taken again by the epoch killed)
    path = with_samples(tmp_path / "r", [], [(0.5, 50 * MIB, 0, 0), (2.0 + 1e-5, 60 * MIB, 0, 0),
                                             (3.0 + 1e-5, 70 * MIB, 0, 0)],
                        status="running", steps=[(0, 1.0, 1.0, 0, 0, 0), (0, 2.0, 1.0, 0, 0, 0)])
    run = read_run(path)
    (record,) = run.epochs
    assert record["from_steps"] and record["rss_bytes"] == 70 * MIB
    assert "its RSS the last read in it; no op records" in run.problems[-1]
    assert analyze(path).allocation.rss_end_bytes == 70 * MIB
    # killed before its own first reading: the dropped epoch's is not its
    path = with_samples(tmp_path / "s", [], [(0.5, 50 * MIB, 0, 0)], status="running",
                        steps=[(0, 1.0, 1.0, 0, 0, 0), (0, 2.0, 1.0, 0, 0, 0)])
    assert read_run(path).epochs[0]["rss_bytes"] is None


# -- analysis: known answers -----------------------------------------------------------------------

def test_one_epoch_whose_memory_keeps_growing_is_allocation_growth(tmp_path):
    d = analyze(one_epoch(tmp_path / "r", lambda t: 500 * MIB + t * MIB))
    (f,) = memory_findings(d)
    e = f.evidence
    assert isinstance(e, findings.MemoryTrend) and f.cause == "allocation" and d.primary_cause == "allocation"
    # 99 readings; the levels are the first tenth's, first third's and last tenth's medians
    assert e.shape == "grows" and e.late_bytes_per_s == pytest.approx(MIB) and e.samples == 99 and e.epochs == 1
    assert e.span_s == pytest.approx(98.0) and (e.start_bytes, e.early_bytes, e.end_bytes) == (506 * MIB, 518 * MIB,
                                                                                                 596 * MIB)
    assert e.freed_bytes == 0 and d.allocation.rss_trend == e
    assert text.evidence(f) == (f"{ANON[0].upper() + ANON[1:]} grows through the epoch, 1.0 MiB a second in the last "
                                f"third of its readings, and keeps growing to the end (506.0 MiB at first, 596.0 MiB at "
                                f"the end, over 98 s, read 99 times)")
    assert text.remedy(f).startswith("Look for what each step keeps: a loss kept with its graph (keep loss.item())")
    assert "memory RSS -/epoch anonymous 506.0 MiB -> 596.0 MiB through the epoch (grows)" in told(d)


def test_pages_of_mapped_files_are_no_growth(tmp_path):
    # RSS grows 1 MiB a second, all of it the shared pages of a memory-mapped data file read through
    path = with_samples(tmp_path / "r", [epoch(0, 100.0, start_s=1.0)],
                        [(t, 500 * MIB + t * MIB, 20 * MIB + t * MIB) for t in np.arange(2.0, 101.0)])
    d = analyze(path)
    assert not memory_findings(d) and d.allocation.rss_trend.start_bytes == 480 * MIB
    assert f"memory does not grow through the epoch ({ANON}: 480.0 MiB at first" in told(d)


def test_growth_over_ten_minutes_is_told_a_minute(tmp_path):
    d = analyze(one_epoch(tmp_path / "r", lambda t: 500 * MIB + t * MIB, seconds=1200.0))
    (f,) = memory_findings(d)
    assert " grows through the epoch, 60.0 MiB a minute in the last third of its readings, " in text.evidence(f)


def test_growth_that_starts_late_is_found_at_its_rate(tmp_path):
    # flat for 70 s, then 2 MiB a second to the end (the shape before an OOM kill)
    d = analyze(one_epoch(tmp_path / "r", lambda t: 500 * MIB + max(t - 70, 0) * 2 * MIB))
    (f,) = memory_findings(d)
    assert f.evidence.late_bytes_per_s == pytest.approx(2 * MIB)


@pytest.mark.parametrize("rss_at, shape, said", [
    # noise around a level: a tenth of a MiB each way
    (lambda t: 800 * MIB + (t % 3) * 100_000, "flat", "memory does not grow through the epoch ("),
    # growth under the limit: 10 MiB over the epoch against max(16 MiB, 5% of 800 MiB)
    (lambda t: 800 * MIB + t * MIB / 10, "flat", "read 99 times; under the 40.0 MiB that counts as growing)"),
    # memory that falls
    (lambda t: 800 * MIB - t * MIB, "flat", "memory does not grow through the epoch ("),
    # the warm-up: 300 MiB in the first 10 s, then a level
    (lambda t: 500 * MIB + min(t, 10.0) * 30 * MIB, "early",
     f"memory held after it rose early in the epoch ({ANON}: 680.0 MiB at first, 800.0 MiB at the end, over 98 s, "
     f"read 99 times)"),
    # a ramp for 40 s, then a level
    (lambda t: 500 * MIB + min(t, 40.0) * MIB, "early", "memory held after it rose early in the epoch ("),
    # a buffer allocated in the last third
    (lambda t: 500 * MIB + (80 * MIB if t >= 85 else 0), "step", "memory rose in a step, not steadily, through the "
                                                               "epoch ("),
    # up for 70 s, then back down
    (lambda t: 500 * MIB + (t if t <= 70 else 70 - (t - 70) * 2.3) * MIB, "cycles",
     "memory grew and was freed again through the epoch ("),
    # a cache that fills for 40 s and is cleared
    (lambda t: 500 * MIB + (t % 40) * 3 * MIB, "cycles", "freed)"),
    # growth that stopped at 60%
    (lambda t: 500 * MIB + min(t, 60.0) * MIB, "levels", "; it stopped by the last third)"),
])
def test_one_epoch_whose_memory_does_not_keep_growing_has_no_finding(tmp_path, rss_at, shape, said):
    d = analyze(one_epoch(tmp_path / "r", rss_at))
    assert not memory_findings(d) and d.allocation.rss_trend.shape == shape
    assert said in told(d)


def test_noise_of_tens_of_mib_a_reading_hides_neither_a_leak_nor_makes_one(tmp_path):
    # a training step's buffers move RSS by tens of MiB from one reading to the next
    found = {True: 0, False: 0}
    for seed in range(20):
        noise = np.random.default_rng(seed).normal(0, 20 * MIB, 102)
        for leak in (True, False):
            d = analyze(one_epoch(tmp_path / f"{seed}-{leak}", lambda t: 500 * MIB + leak * t * MIB + noise[int(t)]))
            found[leak] += bool(memory_findings(d))
    assert found[False] == 0 and found[True] >= 16   # 1 MiB a second: 100 MiB over the epoch


def test_too_few_readings_tell_no_trend(tmp_path):
    samples = [(t, 100 * MIB + t * 10 * MIB) for t in np.arange(1.5, 10.0, 1.0)]   # nine
    d = analyze(with_samples(tmp_path / "r", [epoch(0, 9.5, start_s=1.0)], samples))
    assert d.allocation.rss_trend is None and not memory_findings(d)
    assert "memory cannot show a trend in one epoch (RSS is read about once a second inside epochs with steps, and " \
           "a trend needs 10 readings)" in told(d)


def test_the_readings_of_the_epoch_a_failed_run_stopped_in_follow_the_analysed_ones(tmp_path):
    # two finished epochs of flat memory, then one that grew until the run failed: the epoch is kept apart,
    # its readings are the memory's way to the failure
    records = [epoch(0, 30.0, start_s=0.0, steps=1), epoch(1, 30.0, start_s=30.0, steps=1),
               {**epoch(2, 30.0, start_s=60.0, steps=1), "unfinished": True}]
    samples = [(t + 0.5, 300 * MIB + max(t - 60, 0) * 10 * MIB) for t in range(90)]
    steps = [(e, 30.0 * e, 1.0, 0, 0, 0) for e in range(3)]
    d = analyze(with_samples(tmp_path / "r", records, samples, status="failed", steps=steps))
    trend = d.allocation.rss_trend
    assert d.epochs == 2 and (trend.samples, trend.epochs, trend.stopped_in, trend.shape) == (90, 2, True, "grows")


def test_memory_that_climbs_in_the_epoch_a_run_was_killed_in_is_told(tmp_path):
    # epoch 0 flat and written; epoch 1 grew 2 MiB a second until a kill (no line: the OOM killer)
    samples = [(t + 0.5, 500 * MIB + max(t - 30, 0) * 2 * MIB, 0, 0 if t < 30 else 1) for t in range(90)]
    path = with_samples(tmp_path / "r", [epoch(0, 30.0, start_s=0.0, steps=1)], samples, status="running",
                        steps=[(0, 0.0, 1.0, 0, 0, 0), (1, 30.0, 1.0, 0, 0, 0)])
    d = analyze(path)
    trend = d.allocation.rss_trend
    assert d.epochs == 1 and trend.samples == 90 and trend.epochs == 1 and trend.stopped_in and trend.shape == "grows"
    assert " grows through the epoch and the one the run stopped in, 2.0 MiB a second " in text.evidence(
        memory_findings(d)[0])
    # the same readings in a run that completed: a dropped epoch's, after the last line, are no epoch's
    path = with_samples(tmp_path / "c", [epoch(0, 30.0, start_s=0.0, steps=1)], samples,
                        steps=[(0, 0.0, 1.0, 0, 0, 0)])
    assert analyze(path).allocation.rss_trend.samples == 30 and not analyze(path).allocation.rss_trend.stopped_in


def test_the_readings_of_a_dropped_attempt_at_the_stopped_epochs_index_are_not_its(tmp_path):
    # epoch 1 climbed, raised and was dropped; the loop went on and epoch 1 again, flat, failed the run
    records = [epoch(0, 30.0, start_s=0.0, steps=1), {**epoch(1, 30.0, start_s=60.0, steps=1), "unfinished": True}]
    samples = [(t + 0.5, 300 * MIB + (20 * (t - 30) * MIB if 30 <= t < 60 else 0), 0, 0 if t < 30 else 1)
               for t in range(90)]
    d = analyze(with_samples(tmp_path / "r", records, samples, status="failed",
                             steps=[(0, 0.0, 1.0, 0, 0, 0), (1, 60.0, 1.0, 0, 0, 0)]))
    trend = d.allocation.rss_trend
    assert (trend.samples, trend.stopped_in, trend.shape) == (60, True, "flat")


def test_a_run_whose_analysed_epochs_have_no_readings_names_the_one_it_stopped_in(tmp_path):
    records = [epoch(i, 0.5, start_s=0.5 * i, steps=1) for i in range(3)]
    samples = [(1.5 + t, 300 * MIB + t * 2 * MIB, 0, 3) for t in range(20)]   # epoch 3's, killed
    d = analyze(with_samples(tmp_path / "r", records, samples, status="running",
                             steps=[(e, 0.5 * e, 0.4, 0, 0, 0) for e in range(3)] + [(3, 1.5, 1.0, 0, 0, 0)]))
    (f,) = memory_findings(d)
    assert f.evidence.epochs == 0 and " grows through the epoch the run stopped in, " in text.evidence(f)


def test_a_reading_taken_as_an_epoch_ends_is_that_epochs(tmp_path):
    # the end's steps are written after its clock stops: the last reading falls just after the epoch
    samples = [(t, 500 * MIB + t * MIB) for t in np.arange(2.0, 101.0)] + [(101.0 + 1e-4, 601 * MIB)]
    d = analyze(with_samples(tmp_path / "r", [epoch(0, 100.0, start_s=1.0)], samples))
    assert d.allocation.rss_trend.samples == 100


def test_a_level_that_drops_in_the_last_readings_is_still_growth_with_its_level_at_the_end(tmp_path):
    d = analyze(one_epoch(tmp_path / "r", lambda t: 500 * MIB + (t * MIB if t < 98 else 0)))
    (f,) = memory_findings(d)
    assert f.evidence.end_bytes > 590 * MIB   # not the last reading's 500 MiB


def test_the_warm_up_epochs_readings_are_left_out(tmp_path):
    # 4 epochs of which the first is the warm-up: RSS grows 300 MiB inside it, then holds
    records = [epoch(i, 20.0, start_s=20.0 * i, rss=800 * MIB) for i in range(4)]
    samples = [(t + 0.5, 500 * MIB + min(t, 19) * 15 * MIB) for t in range(80)]
    d = analyze(with_samples(tmp_path / "r", records, samples))
    assert d.epoch_time.warmup_epochs_skipped == 1 and not memory_findings(d)
    assert d.allocation.rss_trend.start_bytes == 785 * MIB and d.allocation.rss_trend.epochs == 3


def test_enough_epochs_are_judged_by_their_own_readings(tmp_path):
    records = [epoch(i, 10.0, start_s=10.0 * i, rss=300 * MIB) for i in range(6)]
    samples = [(t + 0.5, 300 * MIB + t * MIB) for t in range(60)]   # readings that grow inside flat epochs
    d = analyze(with_samples(tmp_path / "r", records, samples))
    assert d.allocation.rss_trend is None and not memory_findings(d)


def test_growth_through_two_epochs_names_them(tmp_path):
    records = [epoch(i, 30.0, start_s=1.0 + 30.0 * i, rss=(431 + 30 * i) * MIB) for i in range(2)]
    samples = [(t, 400 * MIB + t * MIB) for t in np.arange(2.0, 60.0, 1.0)]
    d = analyze(with_samples(tmp_path / "r", records, samples))
    (f,) = memory_findings(d)
    assert f.evidence.epochs == 2 and " grows through the 2 epochs, " in text.evidence(f)


def test_memory_freed_at_each_epochs_end_is_no_growth(tmp_path):
    # 2 epochs of 45 s, each gaining 3 MiB a second and freeing it all at its end
    records = [epoch(i, 45.0, start_s=45.0 * i, rss=635 * MIB) for i in range(2)]
    samples = [(t + 0.5, 500 * MIB + (t % 45) * 3 * MIB) for t in range(90)]
    d = analyze(with_samples(tmp_path / "r", records, samples))
    assert not memory_findings(d) and d.allocation.rss_trend.shape == "cycles"


# -- renderers -------------------------------------------------------------------------------------

def test_the_report_json_is_strict_and_holds_the_trend(tmp_path):
    path = one_epoch(tmp_path / "r", lambda t: 500 * MIB + t * MIB)
    out = subprocess.run([sys.executable, "-m", "profiler", "report", "--json", str(path)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    assert data["allocation"]["rss_trend"]["samples"] == 99
    assert data["findings"][0]["data"]["late_bytes_per_s"] == pytest.approx(MIB)


def test_the_trace_has_an_rss_counter_with_the_samples_and_the_epochs_ends(tmp_path):
    path = with_samples(tmp_path / "r", [epoch(0, 3.0, start_s=0.0, rss=130 * MIB)],
                        [(1.0, 110 * MIB), (2.0, 120 * MIB)])
    counters = [e for e in trace.events(read_run(path)) if e["name"] == "RSS (MiB)"]
    assert [(c["ts"], c["args"]["rss"], c["ph"]) for c in counters] == [(1e6, 110.0, "C"), (2e6, 120.0, "C"),
                                                                       (3e6, 130.0, "C")]


def test_the_trace_has_the_rss_at_the_end_of_the_epoch_a_run_stopped_in(tmp_path):
    records = [epoch(0, 1.0, start_s=0.0, steps=1, rss=100 * MIB),
               {**epoch(1, 1.0, start_s=1.0, steps=1, rss=140 * MIB), "unfinished": True}]
    path = with_samples(tmp_path / "r", records, [], status="failed",
                        steps=[(0, 0.0, 1.0, 0, 0, 0), (1, 1.0, 1.0, 0, 0, 0)])
    run = read_run(path)
    assert run.unfinished_epoch is not None and not run.ends_unfinished   # kept apart
    assert [(c["ts"], c["args"]["rss"]) for c in trace.events(run) if c["name"] == "RSS (MiB)"] == [(1e6, 100.0),
                                                                                                (2e6, 140.0)]


def test_the_memory_figure_in_time_draws_the_readings(tmp_path):
    times = np.arange(2.0, 101.0)
    path = with_samples(tmp_path / "r", [epoch(0, 100.0, start_s=1.0)], [(t, (500 + t) * MIB, 30 * MIB) for t in times])
    fig = figures.memory_in_time(series(path))
    rss, anon = fig.axes[0].get_lines()
    assert rss.get_xdata().tolist() == anon.get_xdata().tolist() == times.tolist()
    assert rss.get_ydata() == pytest.approx(500 + times) and anon.get_ydata() == pytest.approx(470 + times)
    figures.plt.close(fig)


# -- end to end: an unmodified PyTorch script of one epoch ------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("leak", [True, False])
def test_a_torch_script_of_one_epoch_that_keeps_its_activations_is_told_so(tmp_path, leak):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    args = [sys.executable, "-m", "profiler", "run", "--quiet", "--out", str(out), str(SCRIPT)]
    done = subprocess.run(args + ([] if leak else ["--no-leak"]), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    kept = json.loads(done.stdout.strip().splitlines()[-1])   # the script's own count of what it kept
    d = analyze(out)
    assert d.epochs == 1 and d.allocation.rss_trend is not None and d.allocation.rss_trend.samples >= 10
    grown = memory_findings(d)
    if leak:
        (f,) = grown
        kept_per_s = kept["bytes"] / kept["seconds"]
        # the tensors kept are RSS's growth, give or take the allocator's rounding and its pages
        assert 0.7 * kept_per_s < f.evidence.late_bytes_per_s < 1.6 * kept_per_s
    else:
        assert not grown and kept["bytes"] == 0
