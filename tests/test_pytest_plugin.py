"""The pytest plugin (entry point pytest11 `profiler`): a test that leaks fails with the finding
in its message, a clean one passes; limits are checked; pytest's start-up imports nothing heavy."""

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from profiler.integrations.pytest_plugin import Limits, growth_per_epoch, peak_rss, rss_growth_past
from profiler.rundir import read_run
from tests.fixtures import epoch, write_run

pytest_plugins = ["pytester"]

LOOPS = """
import pytest
kept = []

@pytest.mark.profile_epochs(max_growth_bytes_per_epoch=1_000_000)
def test_leaks(profile_session):
    for epoch in range(8):
        with profile_session.epoch():
            kept.append(bytearray(4_000_000))

@pytest.mark.profile_epochs(max_growth_bytes_per_epoch=1_000_000, max_slowdown=0.5)
def test_clean(profile_session):
    for epoch in range(8):
        with profile_session.epoch():
            scratch = bytearray(4_000_000)
            del scratch

def test_unmarked():
    assert True
"""

TORCH = """
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

def train(keep_graphs):
    model = torch.nn.Sequential(torch.nn.Linear(32, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = DataLoader(TensorDataset(torch.randn(256, 32), torch.randint(0, 2, (256,))), batch_size=32)
    history = []
    for epoch in range(6):
        for x, y in data:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        val = sum(torch.nn.functional.cross_entropy(model(x), y) for x, y in data)  # no torch.no_grad()
        history.append(val if keep_graphs else val.item())

@pytest.mark.profile_epochs(max_growth_bytes_per_epoch=1_000_000)
def test_keeps_validation_graphs():
    train(keep_graphs=True)

@pytest.mark.profile_epochs(max_growth_bytes_per_epoch=1_000_000)
def test_keeps_numbers():
    train(keep_graphs=False)
"""


def test_registered_as_a_pytest11_entry_point():
    points = importlib.metadata.entry_points(group="pytest11")
    assert any(p.name == "profiler" and p.value == "profiler.integrations.pytest_plugin" for p in points)


@pytest.mark.parametrize("kwargs,words", [
    ({}, ["give max_slowdown"]),
    ({"max_slowdown": -0.1}, ["max_slowdown=-0.1"]),
    ({"max_growth_bytes_per_epoch": "1MB"}, ["max_growth_bytes_per_epoch='1MB'"]),
    ({"max_slowdown": float("nan")}, ["max_slowdown=nan"]),
    ({"max_slowdown": 0.2, "min_epochs": "x"}, ["min_epochs='x'"]),
    ({"max_slowdown": 0.2, "min_epochs": 0}, ["min_epochs=0"]),
    ({"max_slowdown": 0.2, "tracemalloc": "on"}, ["tracemalloc='on'", "False, True or 'auto'"]),
    ({"max_slowdown": 0.2, "tracemalloc": 1}, ["tracemalloc=1"]),
])
def test_limits_refused(kwargs, words):
    with pytest.raises(pytest.UsageError) as e:
        Limits(**kwargs)
    assert all(w in str(e.value) for w in words)


def test_the_marker_turns_deep_capture_on(pytester):
    """tracemalloc= in the marker reaches the test's Session, with or without profile_session."""
    pytester.makepyfile(test_deep="""
import pytest, tracemalloc

@pytest.mark.profile_epochs(max_slowdown=10, min_epochs=1, tracemalloc=True)
def test_own(profile_session):
    with profile_session.epoch():
        assert tracemalloc.is_tracing()

@pytest.mark.profile_epochs(max_slowdown=10, min_epochs=1, tracemalloc="auto")
def test_auto(profile_session):
    with profile_session.epoch():
        assert profile_session.options["tracemalloc"] == "auto"

@pytest.mark.profile_epochs(max_slowdown=10, min_epochs=1)
def test_light(profile_session):
    with profile_session.epoch():
        assert not tracemalloc.is_tracing()

@pytest.mark.profile_epochs(max_slowdown=10, min_epochs=1, tracemalloc=True)
def test_found():   # no fixture: the plugin's own Session, its epochs found as profiler run finds them
    assert tracemalloc.is_tracing()
""")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA", timeout=120)
    out = result.stdout.str()
    assert "PASSED test_deep.py::test_own" in out and "PASSED test_deep.py::test_auto" in out
    assert "PASSED test_deep.py::test_light" in out and "PASSED test_deep.py::test_found" in out


def _allocation(rss=1_300_000, malloc=2_000, traced=None):
    return SimpleNamespace(allocation=SimpleNamespace(
        rss_growth_bytes_per_epoch=rss, malloc_growth_bytes_per_epoch=malloc, traced_growth_bytes_per_epoch=traced))


def test_memory_growth_is_the_fastest_measure_with_rss_judged_past_the_peak(tmp_path):
    assert growth_per_epoch(_allocation()) == 1_300_000
    assert growth_per_epoch(_allocation(), rss_rate=0.0) == 2_000       # RSS regrew to where it was
    assert growth_per_epoch(_allocation(traced=5e6), rss_rate=0.0) == 5e6
    assert growth_per_epoch(_allocation(malloc=None), rss_rate=None) == 1_300_000
    assert growth_per_epoch(_allocation(rss=None, malloc=None)) == 0.0
    limits = Limits(max_growth_bytes_per_epoch=1_000_000)
    clean = SimpleNamespace(epochs=6, epoch_time=SimpleNamespace(slowdown=False), **vars(_allocation()))
    assert limits.breaches(clean, rss_rate=0.0) == []
    assert limits.breaches(clean) == ["memory grows 1,300,000 bytes per epoch (limit 1,000,000)"]
    # pages an earlier test freed, faulted in again: 1 MiB an epoch up to the peak, then past it
    mib = 1 << 20
    write_run(tmp_path / "regrows", [epoch(i, 0.01, rss=(390 + i) * mib) for i in range(12)])
    write_run(tmp_path / "passes", [epoch(i, 0.01, rss=(390 + 2 * i) * mib) for i in range(12)])
    assert rss_growth_past(tmp_path / "regrows", peak=406 * mib) == 0.0
    assert rss_growth_past(tmp_path / "regrows", peak=0) == pytest.approx(mib)
    assert rss_growth_past(tmp_path / "passes", peak=406 * mib) == pytest.approx(2 * mib)   # epochs 9-11


def test_peak_rss_is_the_process_own_high_water_mark_not_its_parents():
    code = ("import os; from profiler.integrations.pytest_plugin import peak_rss; "
            "rss = int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE'); print(rss, peak_rss())")
    ballast = bytearray(512 << 20)   # this process's peak: 512 MiB above what the child will reach
    ballast[::4096] = b"x" * len(ballast[::4096])
    rss, peak = map(int, subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                                        check=True).stdout.split())
    assert rss <= peak < rss + (256 << 20) and peak_rss() >= 512 << 20


@pytest.mark.slow
def test_a_leaking_test_fails_with_the_finding_and_a_clean_one_passes(pytester, monkeypatch, tmp_path):
    pytester.makepyfile(test_loops=LOOPS)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=300)
    result.assert_outcomes(failed=1, passed=2)
    out = result.stdout.str()
    assert "FAILED test_loops.py::test_leaks" in out
    assert "profile_epochs: memory grows" in out and "allocation-growth" in out
    # the passing test's temporary run directory is removed; the failing one's, named in its message, kept
    kept = list(tmp_path.glob("profile-epochs-*"))
    assert len(kept) == 1 and f"(run directory: {kept[0] / 'run'};" in out.replace("\n", "")


@pytest.mark.slow
def test_torch_epochs_found_in_a_test_without_edits(pytester):
    # not imported here: pytester takes modules imported during a test out of sys.modules, and torch
    # imported again later in this process crashed the GC (seen as a segfault in test_capture.py)
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    pytester.makepyfile(test_torch=TORCH)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=300)
    result.assert_outcomes(failed=1, passed=1)
    assert "FAILED test_torch.py::test_keeps_validation_graphs" in result.stdout.str()
    assert "(6 epochs, completed)" in result.stdout.str()


@pytest.mark.slow
def test_loading_the_plugin_imports_nothing_heavy():
    code = ("import sys, profiler.integrations.pytest_plugin; "
            "print([m for m in ('numpy', 'psutil', 'scipy', 'matplotlib', 'numba', 'torch') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == "[]"


MARKERS = """
import pytest
kept = []

@pytest.mark.profile_epochs()
def test_no_limits():
    pass

@pytest.mark.profile_epochs(max_slow=0.2)
def test_misspelt():
    pass

@pytest.mark.profile_epochs(max_slowdown=0.2, min_epochs="x")
def test_min_epochs_text():
    pass

@pytest.mark.profile_epochs(max_slowdown=float("nan"))
def test_nan():
    pass

@pytest.mark.profile_epochs(max_slowdown=0.2)
def test_no_epochs(profile_session):
    pass

@pytest.mark.profile_epochs(max_slowdown=0.2, min_epochs=3)
def test_one_epoch(profile_session):
    with profile_session.epoch():
        pass

@pytest.mark.profile_epochs(max_slowdown=0.2)
def test_windows_only():   # no fixture and nothing to find: one time window, not three
    pass

@pytest.mark.profile_epochs(max_growth_bytes_per_epoch=1_000_000)
def test_python_objects_leak(profile_session):
    for epoch in range(8):
        with profile_session.epoch():
            kept.append([(i, str(i)) for i in range(60_000)])   # pymalloc arenas, ~9 MiB per epoch
"""


def _report_of_one_epoch():
    """The text report of a run of one epoch: what a too-few-epochs failure must not print."""
    import tempfile
    from profiler.analysis import analyze
    from profiler.report import text
    with tempfile.TemporaryDirectory() as tmp:
        return text.diagnosis(analyze(write_run(os.path.join(tmp, "run"), [epoch(0, 0.01)])))


@pytest.mark.slow
def test_bad_markers_and_no_epochs_fail_with_one_line_and_a_python_object_leak_fails(pytester):
    pytester.makepyfile(test_markers=MARKERS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "error::pytest.PytestWarning",
                                           "-rA", timeout=300)
    out = result.stdout.str()
    result.assert_outcomes(failed=4, errors=4)
    for test, words in (("test_no_limits", "give max_slowdown"), ("test_misspelt", "unknown argument 'max_slow'"),
                        ("test_min_epochs_text", "min_epochs='x'"), ("test_nan", "max_slowdown=nan")):
        assert f"ERROR test_markers.py::{test} - Failed: " in out and words in out
    assert "FAILED test_markers.py::test_no_epochs - Failed: profile_epochs: nothing to" in out
    assert "profile_epochs: nothing to judge" in out
    assert "FAILED test_markers.py::test_python_objects_leak" in out and "profile_epochs: memory grows" in out
    assert "FAILED test_markers.py::test_one_epoch" in out and "FAILED test_markers.py::test_windows_only" in out
    # too few epochs is one line, not the report of one epoch (whose first line reads "(1 epoch, completed)")
    assert out.count("only 1 epoch was found (at least 3 are needed to judge: mark epochs with") >= 2
    assert "(1 epoch, completed)" not in out and "(1 epoch, completed)" in _report_of_one_epoch()
    assert "Traceback" not in out and "pytest_plugin.py" not in out and "PluggyTeardownRaisedWarning" not in out
    assert "During handling of the above exception" not in out


def test_a_test_that_fails_in_an_epoch_keeps_it_unfinished_in_its_run(pytester, tmp_path):
    """The fixture's Session is closed with the test's exception: the run is failed, not completed,
    and the epoch the test stopped in is kept flagged unfinished, marked or not."""
    pytester.makepyfile(test_fail="""
import pytest

def body(session):
    for e in range(3):
        with session.epoch():
            for _ in range(50):
                with session.step():
                    pass
            if e == 2:
                raise RuntimeError("boom in epoch 2")

@pytest.mark.profile_epochs(max_growth_bytes_per_epoch=10**12)
def test_marked(profile_session):
    body(profile_session)

def test_unmarked(profile_session):
    body(profile_session)
""")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--profile-runs", str(tmp_path / "runs"),
                                           timeout=120)
    assert "2 failed" in result.stdout.str()
    for name in ("test_marked", "test_unmarked"):
        run = read_run(tmp_path / "runs" / f"test_fail.py-{name}")
        assert run.status == "failed" and run.meta["error"] == "RuntimeError: boom in epoch 2"
        assert [r["epoch"] for r in run.epochs] == [0, 1] and run.unfinished_epoch["steps"] == 50


def test_profile_runs_a_second_session_replaces_the_tests_runs_and_refuses_a_file_or_foreign_files(pytester, tmp_path):
    # a rerun into the same --profile-runs failed every profiled test with the writer's "already holds a run"
    # through 90 lines of the plugin's frames, and a --profile-runs that is a file with a FileExistsError (a probe)
    pytester.makepyfile(test_keep="""
import pytest

@pytest.mark.profile_epochs(max_growth_bytes_per_epoch=10**12)
def test_marker(profile_session):
    for e in range(3):
        with profile_session.epoch():
            pass

@pytest.mark.profile_epochs(max_growth_bytes_per_epoch=10**12, min_epochs=1)
def test_found():   # the plugin's own Session: one time window
    pass
""")
    runs = tmp_path / "runs"
    for _ in range(2):
        # as one argument: a separate one is a path to pytest, which then takes a rootdir above both
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--profile-runs={runs}", timeout=120)
        result.assert_outcomes(passed=2)
    assert len(read_run(runs / "test_keep.py-test_marker").epochs) == 3
    (runs / "test_keep.py-test_found" / "notes.txt").write_text("mine")   # a file of the user's: kept, and said
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--profile-runs={runs}", timeout=120)
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert (f"--profile-runs {runs}: {runs / 'test_keep.py-test_found'} exists and is no run, which a rerun "
            f"replaces: move it or choose another directory") in out and "Traceback" not in out, out
    assert (runs / "test_keep.py-test_found" / "notes.txt").read_text() == "mine"
    (tmp_path / "afile").write_text("")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--profile-runs={tmp_path / 'afile'}",
                                           timeout=120)
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "Traceback" not in result.stderr.str()
    assert (f"--profile-runs {tmp_path / 'afile'} is a file: give a directory, which keeps each profiled test's run "
            f"in DIR/<test id>") in result.stderr.str()


def test_a_marked_test_that_opens_a_session_of_its_own_is_told_to_use_the_fixture(pytester, tmp_path):
    # "SessionActiveError: another profiler Session is active ...; finish it", which the test cannot (a probe)
    pytester.makepyfile(test_own="""
import pytest
from profiler import Session

@pytest.mark.profile_epochs(max_growth_bytes_per_epoch=10**12)
def test_marker_only(tmp_path):
    with Session(tmp_path / "mine"):
        pass

@pytest.mark.profile_epochs(max_growth_bytes_per_epoch=10**12)
def test_with_the_fixture(profile_session, tmp_path):
    with Session(tmp_path / "mine"):
        pass
""")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    for test in ("test_marker_only", "test_with_the_fixture"):   # the summary line repeats it where it is wide
        section = out.split(f"_ {test} _", 1)[1].split("\n")[1]
        assert section.startswith("profile_epochs: the test opened a profiler Session of its own while the marker's "
                                  "recorded it: mark its epochs in the marker's, the profile_session fixture"), out
    assert "Traceback" not in out and "SessionActiveError" not in out


def test_profile_runs_never_replace_a_run_of_the_same_session_nor_a_link(pytester, tmp_path):
    # a_b.py::test_t and a/b.py::test_t map to one name: the second replaced the first's run without a word; a
    # run directory that is a link was followed, then not removed, and the writer failed in 90 lines (a review)
    pytester.makepyfile(**{"a_b": TWIN, "a/b": TWIN})
    runs = tmp_path / "runs"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--profile-runs={runs}", "a_b.py", "a/b.py",
                                           timeout=120)
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert (f"--profile-runs {runs}: {runs / 'a_b.py-test_t'} holds the run of a_b.py::test_t from this session, "
            f"whose name this test's id maps to as well: rename one of the two") in out and "Traceback" not in out
    assert read_run(runs / "a_b.py-test_t").user_meta["test"] == "a_b.py::test_t"
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "meta.json").write_text("{}")
    (runs / "a_b.py-test_t").rename(tmp_path / "kept")
    (runs / "a_b.py-test_t").symlink_to(tmp_path / "elsewhere")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--profile-runs={runs}", "a_b.py", timeout=120)
    result.assert_outcomes(failed=1)
    assert "exists and is no run, which a rerun replaces" in result.stdout.str()
    assert (tmp_path / "elsewhere" / "meta.json").read_text() == "{}"


TWIN = """
import pytest

@pytest.mark.profile_epochs(max_growth_bytes_per_epoch=10**12, min_epochs=1)
def test_t():
    pass
"""
