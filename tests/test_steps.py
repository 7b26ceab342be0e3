"""Steps, GC events, tracked-object counts, top growing types, and the new meta and epoch fields
(issue 12, capture side). Tiny loops; counts and structure, not timings."""

import gc
import os
import time

import numpy as np
import pytest

from profiler import Session, UsageError
from profiler.capture.gc_timer import GcTimer
from profiler.capture.steps import CAPACITY, StepRecorder
from profiler.rundir import read_run
from profiler.rundir.format import GC_EVENT, STEP_RECORD, STEPS


def test_steps_are_recorded_per_epoch_with_the_gc_pause_inside_them(tmp_path):
    with Session(tmp_path / "run") as session:
        for epoch in range(3):
            with session.epoch(epoch):
                for i in range(4):
                    with session.step():
                        if epoch == 1 and i == 2:
                            gc.collect()
    run = read_run(tmp_path / "run")
    steps = run.steps()
    assert [r["steps"] for r in run.epochs] == [4, 4, 4] and len(steps) == 12
    assert list(steps["epoch"]) == [0] * 4 + [1] * 4 + [2] * 4
    assert (steps["wall_s"] >= 0).all() and (np.diff(steps["start_s"]) >= 0).all()
    collected = np.flatnonzero(steps["gc2_s"] > 0)
    assert list(collected) == [6] and steps["gc2_s"][6] <= steps["wall_s"][6]
    for record, first in zip(run.epochs, steps["start_s"][::4]):
        assert record["start_s"] <= first <= record["start_s"] + record["wall_s"]
    assert (tmp_path / "run" / "steps.bin").stat().st_size == 12 * STEP_RECORD.itemsize == 12 * 48
    assert read_run(tmp_path / "run").meta["clock_origin_ns"] > 0


def test_each_finished_epochs_steps_are_on_disk_before_the_next_begins(tmp_path):
    with Session(tmp_path / "run") as session:
        for epoch in range(3):
            with session.epoch(epoch):
                for _ in range(5):
                    session.begin_step()
                    session.end_step()
            assert (tmp_path / "run" / "steps.bin").stat().st_size == 48 * 5 * (epoch + 1)


def test_step_misuse_is_a_usage_error(tmp_path):
    with Session(tmp_path / "run") as session:
        with pytest.raises(UsageError, match="outside an epoch"):
            with session.step():
                pass
        with session.epoch(0):
            with pytest.raises(UsageError, match="end_step\\(\\) without begin_step\\(\\)"):
                session.end_step()
            session.begin_step()
            with pytest.raises(UsageError, match="steps do not nest"):
                session.begin_step()
            session.abandon_step()        # a framework's step that did not finish: not recorded
            with session.step():
                pass
    assert len(read_run(tmp_path / "run").steps()) == 1


def test_the_step_buffer_is_written_when_it_fills_and_keeps_constant_size():
    written = []
    recorder = StepRecorder(sink=lambda view: written.append(bytes(view)), drop=None, capacity=4)
    recorder.start_epoch(5)
    buffer = recorder._buffer
    for _ in range(10):
        with recorder:
            pass
    assert [len(b) for b in written] == [4 * 48, 4 * 48] and recorder.recorded == 10
    recorder.flush()
    assert [len(b) for b in written] == [192, 192, 96]
    records = np.frombuffer(b"".join(written), STEP_RECORD)
    assert len(records) == 10 and (records["epoch"] == 5).all()
    assert (records["end_ns"] >= records["start_ns"]).all() and (np.diff(records["start_ns"]) > 0).all()
    assert recorder._buffer is buffer and len(buffer) == 4 * 6


def test_a_gc_pause_is_kept_only_for_the_step_it_ran_in():
    """A pause added to a step that is then abandoned, or to a step written already, does not
    reach the next step that takes its place in the buffer."""
    written, dropped = [], []
    recorder = StepRecorder(sink=lambda view: written.append(bytes(view)), drop=dropped.append, capacity=4)
    recorder.start_epoch(0)
    recorder.begin()
    recorder.add_gc(2, 7_000)
    recorder.add_gc(0, 5)
    recorder.end()
    recorder.begin()
    recorder.add_gc(1, 9)
    recorder.abandon()            # its pause goes with it
    recorder.begin()
    recorder.end()
    recorder.flush()
    recorder.start_epoch(1)
    recorder.begin()
    recorder.end()                # in the slot the first step had
    recorder.flush()
    records = np.frombuffer(b"".join(written), STEP_RECORD)
    assert list(records["epoch"]) == [0, 0, 1]
    assert [list(r) for r in records[["gc0_ns", "gc1_ns", "gc2_ns"]].tolist()] == [[5, 0, 7000], [0, 0, 0], [0, 0, 0]]
    recorder.begin()
    recorder.add_gc(2, 3)
    recorder.end()
    recorder.discard()            # an abandoned epoch: its steps and their pauses go, written ones too
    assert dropped == [1]
    recorder.begin()
    recorder.end()
    recorder.flush()
    assert np.frombuffer(written[-1], STEP_RECORD)[["gc0_ns", "gc1_ns", "gc2_ns"]].tolist() == [(0, 0, 0)]


def test_many_collections_in_one_step_keep_one_entry_and_a_failed_write_frees_the_buffer():
    recorder = StepRecorder(sink=lambda view: None, drop=None, capacity=2)
    recorder.start_epoch(0)
    recorder.begin()
    for _ in range(1000):
        recorder.add_gc(0, 1)
    recorder.end()
    assert recorder._gc_slots == [0] and recorder._buffer[3] == 1000

    def refuse(view):
        raise OSError("disk full")
    recorder.sink = refuse
    recorder.begin()
    with pytest.raises(OSError):
        recorder.end()            # the buffer filled: its write failed
    assert recorder._slot == 0 and recorder._gc_slots == [] and recorder._buffer[3] == 0
    recorder.begin()              # the next steps have the whole buffer
    recorder.add_gc(2, 5)
    recorder.end()


def test_an_abandoned_epoch_leaves_no_steps_even_those_a_full_buffer_wrote(tmp_path):
    with Session(tmp_path / "run") as session:
        with session.epoch(0):
            with session.step():
                pass
        with pytest.raises(KeyError):
            with session.epoch(1):
                for _ in range(CAPACITY + 10):   # the buffer fills and is written once
                    with session.step():
                        pass
                raise KeyError("a failed epoch")
        with session.epoch(1):   # its index again
            for _ in range(3):
                with session.step():
                    pass
    run = read_run(tmp_path / "run")
    assert list(run.steps()["epoch"]) == [0, 1, 1, 1] and not run.problems
    assert os.path.getsize(tmp_path / "run" / STEPS) == 4 * STEP_RECORD.itemsize


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_forked_child_writes_no_steps_into_the_parents_run(tmp_path):
    with Session(tmp_path / "run") as session:
        with session.epoch(0):
            with session.step():
                pass
            pid = os.fork()
            if pid == 0:   # the child: its steps (a buffer's worth) go nowhere
                try:
                    session._steps.epoch = 0
                    for _ in range(2 * 8192):
                        session._steps.begin()
                        session._steps.end()
                finally:
                    os._exit(0)
            assert os.waitpid(pid, 0)[1] == 0
    assert len(read_run(tmp_path / "run").steps()) == 1


@pytest.mark.slow
def test_a_million_steps_constant_memory_and_48_bytes_each(tmp_path):
    from profiler.capture.memory import MemoryProbe
    probe = MemoryProbe()
    rss = []
    with Session(tmp_path / "run") as session:
        step = session.step()
        for epoch in range(10):
            with session.epoch(epoch):
                for _ in range(100_000):
                    with step:
                        pass
            rss.append(probe.rss())
    size = (tmp_path / "run" / "steps.bin").stat().st_size
    assert size == 48 * 1_000_000
    assert max(rss[1:]) - min(rss[1:]) < 2 << 20, [r >> 10 for r in rss]
    assert [r["steps"] for r in read_run(tmp_path / "run").epochs] == [100_000] * 10


def test_gc_events_every_full_collection_and_long_ones(tmp_path):
    with Session(tmp_path / "run", gc_event_threshold_s=10.0) as session:   # only generation 2 qualifies
        with session.epoch(0):
            junk = [[i] for i in range(1000)]
            del junk
            gc.collect(0)
            gc.collect(1)
            cycle = []
            cycle.append(cycle)
            del cycle
            gc.collect()
    events = read_run(tmp_path / "run").gc_events()
    assert list(events["generation"]) == [2] and events["collected"][0] >= 1
    assert 0 <= events["start_s"][0] and events["duration_s"][0] > 0
    assert (tmp_path / "run" / "gc_events.bin").stat().st_size == GC_EVENT.size == 17


def test_gc_event_threshold_zero_records_every_collection(tmp_path):
    with Session(tmp_path / "run", gc_event_threshold_s=0) as session:
        with session.epoch(0):
            for generation in (0, 1, 2, 0):
                gc.collect(generation)
    record = read_run(tmp_path / "run").epochs[0]
    events = read_run(tmp_path / "run").gc_events()
    assert len(events) == sum(record["gc"]["collections"]) >= 4
    assert list(events["generation"][-4:]) == [0, 1, 2, 0]


def test_a_full_event_buffer_is_handed_over_from_the_callback():
    handed = []
    timer = GcTimer(origin_ns=0, event_threshold_s=0, on_full=handed.append, capacity=2)
    timer.install()
    try:
        for _ in range(5):
            gc.collect(0)
    finally:
        timer.uninstall()
    rest = timer.take_events()
    assert [len(b) // 17 for b in handed] == [2, 2] and len(rest) // 17 == 1


def test_epoch_records_carry_start_steps_and_tracked_counts(tmp_path):
    with Session(tmp_path / "run") as session:
        with session.epoch(0):
            pass
    record = read_run(tmp_path / "run").epochs[0]
    assert record["steps"] == 0 and record["start_s"] >= 0
    tracked = record["gc"]["tracked"]   # the first epoch is always counted
    assert len(tracked) == 3 and all(isinstance(n, int) and n >= 0 for n in tracked) and tracked[2] > 100


def test_meta_has_clock_origin_and_torchrun_ranks(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    before = time.time()
    with Session(tmp_path / "run"):
        pass
    meta = read_run(tmp_path / "run").meta
    assert (meta["rank"], meta["local_rank"], meta["world_size"]) == (3, 1, 4)
    assert before - 1 <= meta["clock_origin_unix"] <= time.time()
    assert meta["options"]["gc_event_threshold_s"] == 0.001
    import importlib.metadata   # the Session reads versions without it (and without importing numba)
    assert meta["numba"] == importlib.metadata.version("numba") and meta["numpy"] == np.__version__


def test_meta_ranks_are_null_outside_torchrun(tmp_path, monkeypatch):
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    with Session(tmp_path / "run"):
        pass
    meta = read_run(tmp_path / "run").meta
    assert (meta["rank"], meta["local_rank"], meta["world_size"]) == (None, None, None)


def grow(keep):
    keep.extend([i] for i in range(1000))   # tracked lists that live on


@pytest.mark.slow
def test_deep_capture_names_the_growing_type_and_where_it_is_allocated(tmp_path):
    keep = []
    with Session(tmp_path / "run", tracemalloc=True) as session:
        for epoch in range(3):
            with session.epoch(epoch):
                grow(keep)
    # the last snapshot's (in a test process holding many objects, a snapshot's type count can pass
    # 0.5 s, and then the next waits for the run to cover it: longer than these 3 short epochs)
    heap = [r["heap"] for r in read_run(tmp_path / "run").epochs if r["heap"]["snapshot"]][-1]
    top = heap["top_types"][0]
    assert top["type"] == "list" and top["count_diff"] >= 900 and top["count"] >= top["count_diff"]
    assert top["site"].endswith(f"test_steps.py:{grow.__code__.co_firstlineno + 1}")


def test_add_epoch_field(tmp_path):
    with Session(tmp_path / "run") as session:
        session.add_epoch_field("workers", lambda: {"count": 0, "uss_bytes": 0, "pss_bytes": 0})
        for own in ("gc", "gap_s", "gc_before", "unfinished", "from_steps"):   # the reader refused the run (a probe)
            with pytest.raises(UsageError, match=f"add_epoch_field\\('{own}'\\): '{own}' is a field the Session writes"):
                session.add_epoch_field(own, dict)
        with pytest.raises(UsageError, match="the name must be a non-empty string"):
            session.add_epoch_field(5, dict)
        with pytest.raises(UsageError, match="read must be a function"):
            session.add_epoch_field("loss", 0.5)
        with pytest.raises(UsageError, match="a field 'workers' was added already"):
            session.add_epoch_field("workers", dict)
        with session.epoch(0):
            pass
    assert read_run(tmp_path / "run").epochs[0]["workers"] == {"count": 0, "uss_bytes": 0, "pss_bytes": 0}
    for late in (lambda: session.add_epoch_field("loss", dict), session.mark_halted):
        with pytest.raises(UsageError, match="after its with-block ended"):
            late()


def test_fields_may_be_added_before_the_session_begins_and_halts_marked_from_any_thread(tmp_path):
    import threading
    session = Session(tmp_path / "run")
    session.add_epoch_field("loss", lambda: 0.5)
    with session:
        with session.epoch(0):
            watchdog = threading.Thread(target=session.mark_halted)
            watchdog.start()
            watchdog.join()
    run = read_run(tmp_path / "run")
    assert run.epochs[0]["loss"] == 0.5 and run.status == "halted"


def test_an_epoch_begun_and_never_ended_is_said_at_the_end(tmp_path, capsys):
    with Session(tmp_path / "run") as session:
        session.begin_epoch()
    assert "profiler: epoch 0 began but did not end (begin_epoch() without end_epoch()): it is not written" \
        in capsys.readouterr().err
    run = read_run(tmp_path / "run")
    assert run.epochs == [] and run.status == "completed"


@pytest.mark.slow
def test_the_engine_records_its_steps(tmp_path):
    from profiler.workloads import scenarios
    from profiler.workloads.engine import Loop
    sc = scenarios.build("mlp", samples=1000)
    with Session(tmp_path / "run") as session:
        Loop(sc.model, sc.optimizer, sc.data, max_epochs=3, session=session).run()
    run = read_run(tmp_path / "run")
    assert [r["steps"] for r in run.epochs] == [len(sc.data)] * 3
    assert len(run.steps()) == 3 * len(sc.data)


def test_no_steps_file_without_steps(tmp_path):
    with Session(tmp_path / "run") as session:
        with session.epoch(0):
            pass
    assert not os.path.exists(tmp_path / "run" / "steps.bin")


def test_an_unended_epoch_said_to_a_closed_stderr_leaves_no_hook(tmp_path, monkeypatch):
    import io
    closed = io.StringIO()
    closed.close()
    callbacks = list(gc.callbacks)
    with Session(tmp_path / "run") as session:
        session.begin_epoch()
        monkeypatch.setattr("sys.stderr", closed)
    monkeypatch.undo()
    assert gc.callbacks == callbacks and read_run(tmp_path / "run").status == "completed"
    with Session(tmp_path / "next"):   # no Session is left active
        pass
