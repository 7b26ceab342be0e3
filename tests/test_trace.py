"""The Chrome trace: loads as JSON, holds the documented events on one microsecond time axis."""

import json

import pytest

from profiler.report import trace
from profiler.rundir import read_run

from .fixtures import epoch, stepped_run, write_run


def load(path):
    return json.loads(path.read_text())


def test_trace_of_a_stepped_run(tmp_path):
    run = stepped_run(tmp_path / "run", 3, 4, 0.010, lambda n: (2, 0.05) if n == 5 else None)
    out = tmp_path / "trace.json"
    n, recorded = trace.write_run(run, out)
    doc = load(out)
    events = doc["traceEvents"]
    assert n == len(events) and recorded == 12 and doc["displayTimeUnit"] == "ms"
    for e in events:
        assert {"name", "ph", "pid", "tid"} <= set(e)
        if e["ph"] in ("X", "C"):
            assert isinstance(e["ts"], float) or isinstance(e["ts"], int)
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"epochs", "steps", "GC gen 0", "GC gen 1", "GC gen 2 (full)"} <= names
    slices = [e for e in events if e["ph"] == "X"]
    epochs = [e for e in slices if e["cat"] == "epoch"]
    steps = [e for e in slices if e["cat"] == "step"]
    gcs = [e for e in slices if e["cat"] == "gc"]
    assert len(epochs) == 3 and len(steps) == 12 and len(gcs) == 1
    # step 5 starts at 5 x 10 ms and holds the 50 ms pause; the GC event sits inside it
    assert steps[5]["ts"] == pytest.approx(50_000) and steps[5]["dur"] == pytest.approx(60_000)
    assert gcs[0]["tid"] == trace.GC_TID + 2 and gcs[0]["dur"] == pytest.approx(50_000)
    assert steps[5]["ts"] <= gcs[0]["ts"] <= steps[5]["ts"] + steps[5]["dur"]
    counters = [e for e in events if e["ph"] == "C" and e["cat"] == "gc"]
    assert [c["args"]["gen2"] for c in counters] == [pytest.approx(50.0), 0.0]
    assert {c["name"] for c in counters} == {"GC pause in steps (ms)"}
    # the RSS counter: each epoch's reading at its end (the run has no rss.bin)
    rss = [(e["ts"], e["args"]["rss"]) for e in events if e["ph"] == "C" and e["cat"] == "memory"]
    assert [r for _, r in rss] == [200.0] * 3 and [t for t, _ in rss] == [pytest.approx(e["ts"] + e["dur"]) for e in epochs]


def test_a_run_without_steps_counts_the_pause_in_epochs(tmp_path):
    run = write_run(tmp_path / "run", [epoch(i, 0.010, start_s=0.010 * i, pause=(0.001, 0.0, 0.002)) for i in range(2)])
    trace.write_run(run, tmp_path / "t.json")
    counters = [e for e in load(tmp_path / "t.json")["traceEvents"] if e["ph"] == "C" and e["cat"] == "gc"]
    assert {c["name"] for c in counters} == {"GC pause in epochs (ms)"}
    assert [(c["ts"], c["args"]["gen2"]) for c in counters] == [(0, pytest.approx(2.0)), (10_000, 0.0),
                                                                (10_000, pytest.approx(2.0)), (20_000, 0.0)]


def test_ops_are_placed_inside_their_epoch(tmp_path):
    records = [epoch(i, 0.010, start_s=0.010 * i, ops={("a", ()): 0.006, ("b", ()): 0.008}) for i in range(2)]
    run = write_run(tmp_path / "run", records)
    out = tmp_path / "t.json"
    trace.write_run(run, out)
    ops = [e for e in load(out)["traceEvents"] if e.get("cat") == "op"]
    assert [o["name"] for o in ops] == ["b", "a", "b", "a"]
    first_b, first_a = ops[0], ops[1]
    assert first_b["ts"] == 0 and first_b["dur"] == pytest.approx(8000)
    assert first_a["dur"] == pytest.approx(2000)           # clipped at the epoch's end
    names = {e["args"]["name"] for e in load(out)["traceEvents"] if e["name"] == "thread_name"}
    assert "ops (per-epoch totals, back to back)" in names   # said once, not in every op's args


def test_runs_side_by_side_as_processes(tmp_path):
    runs = [read_run(write_run(tmp_path / str(r), [epoch(0, 0.01, start_s=0.0)])) for r in range(2)]
    out = tmp_path / "t.json"
    trace.write(out, [trace.events(run, pid=rank, offset_s=0.5 * rank) for rank, run in enumerate(runs)])
    epochs = [e for e in load(out)["traceEvents"] if e.get("cat") == "epoch"]
    assert [(e["pid"], e["ts"]) for e in epochs] == [(0, 0), (1, 500_000)]


def test_a_run_with_no_finished_epoch_has_no_trace(tmp_path):
    from profiler.rundir import RunDirError
    run = write_run(tmp_path / "run", [], status="running")
    with pytest.raises(RunDirError, match="has no finished epochs to draw .*never finished"):
        trace.write_run(run, tmp_path / "trace.json")
    assert not (tmp_path / "trace.json").exists()


def test_unwritable_trace_is_one_clear_error(tmp_path):
    from profiler.errors import RunWriteError
    run = write_run(tmp_path / "run", [epoch(0, 0.01)])
    with pytest.raises(RunWriteError, match="cannot write the trace"):
        trace.write_run(run, tmp_path / "no" / "such" / "dir" / "t.json")


def test_step_ending_before_it_starts_is_one_clear_error(tmp_path):
    from profiler.errors import RunDirError
    run = write_run(tmp_path / "run", [epoch(0, 0.01)], steps=[(0, 0.0, 0.01, 0, 0, 0), (0, 0.01, -0.02, 0, 0, 0)])
    with pytest.raises(RunDirError, match="steps.bin record 1 has wall_s -0.02"):
        trace.write_run(run, tmp_path / "t.json")
    assert not (tmp_path / "t.json").exists()


def test_huge_finite_step_start_is_one_clear_error_and_no_file(tmp_path):
    """A start_s beyond any run (4e9 s, the most steps.bin's nanoseconds hold is 9.2e9) is refused by
    name, not written into the trace."""
    from profiler.errors import RunDirError
    run = write_run(tmp_path / "run", [epoch(0, 0.01)], steps=[(0, 0.0, 0.01, 0, 0, 0), (0, 4e9, 0.01, 0, 0, 0)])
    with pytest.raises(RunDirError, match=r"steps.bin record 1 has start_s 4e\+09, not a time"):
        trace.write_run(run, tmp_path / "t.json")
    assert not (tmp_path / "t.json").exists()


def test_directory_as_the_trace_path_is_one_clear_error_and_stays(tmp_path):
    from profiler.errors import RunWriteError
    run = write_run(tmp_path / "run", [epoch(0, 0.01)])
    (tmp_path / "d").mkdir()
    with pytest.raises(RunWriteError, match="cannot write the trace to"):
        trace.write_run(run, tmp_path / "d")
    assert (tmp_path / "d").is_dir()


def test_a_trace_that_cannot_be_finished_leaves_an_earlier_one_as_it_was(tmp_path):
    from profiler.errors import RunDirError
    out = tmp_path / "t.json"
    trace.write_run(write_run(tmp_path / "run", [epoch(0, 0.01)]), out)
    good = out.read_text()

    def damaged_rank():   # a multi-rank trace reads each rank as it is written
        yield {"name": "x", "ph": "i", "ts": 0, "pid": 0}
        raise RunDirError("rank-1/gc_events.bin record 0 has duration_s nan")
    with pytest.raises(RunDirError):
        trace.write(out, [damaged_rank()])
    assert out.read_text() == good and sorted(p.name for p in tmp_path.iterdir()) == ["run", "t.json"]


def test_a_symlinked_trace_path_is_written_through_the_link(tmp_path):
    out, link = tmp_path / "real.json", tmp_path / "link.json"
    out.write_text("old")
    link.symlink_to(out)
    trace.write_run(write_run(tmp_path / "run", [epoch(0, 0.01)]), link)
    assert link.is_symlink() and load(out)["traceEvents"] and not list(tmp_path.glob("*.part"))


def test_the_steps_drawn_are_a_window_of_indices(tmp_path, capsys):
    run = stepped_run(tmp_path / "run", 4, 25, 0.010, lambda n: None)
    out = tmp_path / "t.json"
    n, recorded = trace.write_run(run, out, steps=slice(30, 40))
    steps = [e["args"]["step"] for e in load(out)["traceEvents"] if e.get("cat") == "step"]
    assert recorded == 100 and steps == list(range(30, 40))
    assert len([e for e in load(out)["traceEvents"] if e.get("cat") == "epoch"]) == 4   # epochs stay whole
    from profiler.cli import main
    assert main(["timeline", str(run), "--out", str(out), "--steps", "90:"]) in (0, None)
    assert "; steps 90 to 99 of 100 (--steps A:B for others)" in capsys.readouterr().out
    assert main(["timeline", str(run), "--out", str(out)]) in (0, None)
    assert "of 100" not in capsys.readouterr().out   # all drawn: nothing to say
