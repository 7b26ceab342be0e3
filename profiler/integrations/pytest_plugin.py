"""pytest plugin (entry point `pytest11: profiler`): fail a test whose epochs slow down or whose
memory grows, with the profiler's finding in the failure message.

    @pytest.mark.profile_epochs(max_slowdown=0.2, max_growth_bytes_per_epoch=1_000_000)
    def test_training():
        train()          # epochs found as `profiler run` finds them: PyTorch, Keras, Lightning

    @pytest.mark.profile_epochs(max_growth_bytes_per_epoch=1_000_000)
    def test_loop(profile_session):
        for batch_set in data:
            with profile_session.epoch():
                step(batch_set)

max_slowdown: the largest sustained rise in epoch time allowed, as a fraction (0.2: 20% slower
at the end than at the start). max_growth_bytes_per_epoch: the largest memory growth per epoch,
judged as `profiler report` judges it: the fastest-growing of RSS, malloc's bytes in use and
traced bytes, per epoch after the warm-up; RSS counts only above the peak the process had
reached before the test (tests share one process, and pages an earlier test freed are faulted in
again when reused: the footprint grows back, nothing leaks), so its rate is fitted to the
epochs above that peak. min_epochs (default 3, at least 1): fewer epochs fail the test, since
nothing can be judged from them. tracemalloc (False, True or "auto", as for a Session): deep
capture, which names the lines that allocate what grows. Bad marker arguments and a test with
fewer epochs than min_epochs fail the test with one line. Run directories go to --profile-runs DIR
(DIR/<test id>, replacing that test's run of an earlier session); without it, to a temporary
directory that is removed unless a failure message names it.

Nothing heavy is imported when pytest starts: the profiler loads only for a marked test.
"""

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

MARKER = "profile_epochs"
_session_key = pytest.StashKey()
_peak_key = pytest.StashKey()
_named_key = pytest.StashKey()   # the config's: {run directory: the test whose run it holds} this session
_HINT = "mark epochs with profile_session.epoch(), or train with PyTorch, Keras or Lightning"


def pytest_addoption(parser):
    parser.getgroup("profiler").addoption(
        "--profile-runs", metavar="DIR", help="keep the run directories of @pytest.mark.profile_epochs tests in DIR")


def pytest_configure(config):
    root = config.getoption("profile_runs")
    if root and os.path.exists(root) and not os.path.isdir(root):
        raise pytest.UsageError(f"--profile-runs {root} is a file: give a directory, which keeps each profiled "
                                f"test's run in DIR/<test id>")
    config.addinivalue_line(
        "markers", f"{MARKER}(max_slowdown=None, max_growth_bytes_per_epoch=None, min_epochs=3, tracemalloc=False): "
                   "profile the test's epochs and fail it when they slow down or its memory grows past these limits")


class Limits:
    NAMES = ("max_slowdown", "max_growth_bytes_per_epoch", "min_epochs", "tracemalloc")

    def __init__(self, max_slowdown=None, max_growth_bytes_per_epoch=None, min_epochs=3, tracemalloc=False):
        for name, value in (("max_slowdown", max_slowdown), ("max_growth_bytes_per_epoch", max_growth_bytes_per_epoch)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not 0 <= value < float("inf")):
                raise pytest.UsageError(f"@pytest.mark.{MARKER}({name}={value!r}): expected a number >= 0")
        if max_slowdown is None and max_growth_bytes_per_epoch is None:
            raise pytest.UsageError(f"@pytest.mark.{MARKER}: give max_slowdown and/or max_growth_bytes_per_epoch")
        if isinstance(min_epochs, bool) or not isinstance(min_epochs, int) or min_epochs < 1:
            raise pytest.UsageError(f"@pytest.mark.{MARKER}(min_epochs={min_epochs!r}): expected a whole number >= 1")
        if not (tracemalloc is False or tracemalloc is True or tracemalloc == "auto"):
            raise pytest.UsageError(f"@pytest.mark.{MARKER}(tracemalloc={tracemalloc!r}): expected False, True or "
                                    f"'auto' (as for a Session)")
        self.max_slowdown, self.max_growth, self.min_epochs = max_slowdown, max_growth_bytes_per_epoch, min_epochs
        self.tracemalloc = tracemalloc

    @classmethod
    def from_marker(cls, marker):
        unknown = [name for name in marker.kwargs if name not in cls.NAMES]
        if unknown or len(marker.args) > len(cls.NAMES):
            what = f"unknown argument {unknown[0]!r}" if unknown else f"{len(marker.args)} positional arguments"
            raise pytest.UsageError(f"@pytest.mark.{MARKER}: {what} (it takes {', '.join(cls.NAMES)})")
        try:
            return cls(*marker.args, **marker.kwargs)
        except TypeError as e:   # a name given twice, positionally and by keyword
            raise pytest.UsageError(f"@pytest.mark.{MARKER}: {e}") from None

    def breaches(self, diagnosis, rss_rate=None):
        """What went past the limits, as lines; empty when the run is within them. rss_rate: RSS
        growth per epoch to judge (default the diagnosis's; see rss_growth_past)."""
        out = []
        et = diagnosis.epoch_time
        if self.max_slowdown is not None and et.slowdown and et.change.relative > self.max_slowdown:
            out.append(f"epochs slow down by {100 * et.change.relative:.0f}% "
                       f"(limit {100 * self.max_slowdown:.0f}%)")
        growth = growth_per_epoch(diagnosis, rss_rate)
        if self.max_growth is not None and growth > self.max_growth:
            out.append(f"memory grows {growth:,.0f} bytes per epoch (limit {self.max_growth:,})")
        return out


def growth_per_epoch(diagnosis, rss_rate=None):
    """The fastest of RSS, malloc and traced growth (pymalloc's arenas are in RSS, not malloc);
    rss_rate, when given, in place of the diagnosis's RSS rate."""
    a = diagnosis.allocation
    rss = a.rss_growth_bytes_per_epoch if rss_rate is None else rss_rate
    rates = (rss, a.malloc_growth_bytes_per_epoch, a.traced_growth_bytes_per_epoch)
    return max((rate for rate in rates if rate is not None), default=0.0)


def rss_growth_past(run_dir, peak):
    """RSS growth per epoch over the analysed epochs whose RSS is above `peak` (0.0 when fewer
    than two are): growth back to where the process already was counts for nothing."""
    from profiler.analysis.findings import growth_rate
    from profiler.analysis.load import load
    above = [r for r in load(run_dir).records if r["rss_bytes"] > peak]
    return growth_rate([r["epoch"] for r in above], [r["rss_bytes"] for r in above]) or 0.0


def peak_rss():
    """The process's peak RSS so far in bytes (VmHWM), or None off Linux. getrusage's ru_maxrss
    is no substitute: a child started by fork and exec reports its parent's peak until it passes it."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _limits(item):
    marker = item.get_closest_marker(MARKER)
    return Limits.from_marker(marker) if marker is not None else None


def pytest_runtest_setup(item):
    """Bad marker arguments fail the test with one line, before it runs."""
    try:
        _limits(item)
    except pytest.UsageError as e:
        message = str(e)
    else:
        return
    pytest.fail(message, pytrace=False)   # outside the except: not chained to the UsageError


def _run_dir(item):
    """The test's run directory: under --profile-runs, DIR/<test id>, replacing that test's run of an
    earlier session (nothing else); else one in a temporary directory."""
    root = item.config.getoption("profile_runs")
    if root:
        from profiler.rundir.format import replaceable
        path = Path(root) / item.nodeid.replace("/", "_").replace("::", "-")
        named = item.config.stash.setdefault(_named_key, {})
        if named.get(path, item.nodeid) != item.nodeid:   # a_b.py::t and a/b.py::t: one name
            pytest.fail(f"--profile-runs {root}: {path} holds the run of {named[path]} from this session, whose "
                        f"name this test's id maps to as well: rename one of the two", pytrace=False)
        if not replaceable(path):
            pytest.fail(f"--profile-runs {root}: {path} exists and is no run, which a rerun replaces: move it or "
                        f"choose another directory", pytrace=False)
        named[path] = item.nodeid
        shutil.rmtree(path, ignore_errors=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path
    return Path(tempfile.mkdtemp(prefix="profile-epochs-")) / "run"


def _remove_temporary(config, run_dir):
    """Remove a run directory _run_dir made in a temporary directory (not one under --profile-runs)."""
    if not config.getoption("profile_runs"):
        shutil.rmtree(os.path.dirname(run_dir), ignore_errors=True)


class _Open:
    """The fixture's Session, closed once: by the check right after the test's call, or at teardown;
    with the call's exception, if it raised (the Session records the run failed, and the epoch the
    test stopped in, flagged unfinished)."""

    def __init__(self, session):
        self.session, self.open, self.excinfo = session, True, None

    def close(self):
        if self.open:
            self.open = False
            self.session.__exit__(*(self.excinfo or (None, None, None)))


@pytest.fixture
def profile_session(request):
    """An open profiler Session for the test to mark its own epochs (and steps) in."""
    from profiler.capture import Session
    request.node.stash[_peak_key] = peak_rss()
    limits = _limits(request.node)
    session = Session(_run_dir(request.node), meta={"test": request.node.nodeid},
                      tracemalloc=limits.tracemalloc if limits else False)
    holder = request.node.stash[_session_key] = _Open(session.__enter__())
    try:
        yield session
    finally:
        holder.close()
        if limits is None:   # nothing judges it: nobody is told of it
            _remove_temporary(request.config, session.run_dir)


@pytest.hookimpl(hookwrapper=True)   # old-style: works with every pytest the plugin may meet
def pytest_runtest_call(item):
    limits = _limits(item)
    holder = item.stash.get(_session_key, None)
    if limits is None:
        outcome = yield
        if holder is not None:   # closed at teardown
            holder.excinfo = outcome.excinfo
        return
    if holder is not None:             # the test marks its epochs in profile_session
        outcome = yield
        holder.excinfo = outcome.excinfo
        holder.close()
        session = holder.session
    else:
        from profiler.capture import Session
        from profiler.integrations.detect import Detection
        item.stash[_peak_key] = peak_rss()
        session = Session(_run_dir(item), meta={"test": item.nodeid}, tracemalloc=limits.tracemalloc)
        with contextlib.ExitStack() as stack:
            stack.enter_context(session)
            stack.enter_context(Detection(session))
            outcome = yield
            stack.__exit__(*(outcome.excinfo or (None, None, None)))
    _own_session(outcome)
    # a test that failed on its own is not judged
    message = None if outcome.excinfo else _breaches(limits, session.run_dir, item.stash.get(_peak_key, None))
    if not (message and str(session.run_dir) in message):
        _remove_temporary(item.config, session.run_dir)
    if message:
        outcome.force_exception(pytest.fail.Exception(message, pytrace=False))


def _own_session(outcome):
    """A test that opened a Session of its own while the marker's recorded it fails with one line
    that says what to do (the Session's own error told it to finish the other, which it cannot)."""
    from profiler.errors import SessionActiveError
    if outcome.excinfo and isinstance(outcome.excinfo[1], SessionActiveError):
        outcome.force_exception(pytest.fail.Exception(
            "profile_epochs: the test opened a profiler Session of its own while the marker's recorded it: mark its "
            "epochs in the marker's, the profile_session fixture (def test_x(profile_session): ... "
            "profile_session.epoch()), or drop the marker", pytrace=False))


def _breaches(limits, run_dir, rss_peak_before):
    """The failure message, or None when the run is within the limits."""
    from profiler import ProfilerError, analyze
    from profiler.report import text
    try:
        diagnosis = analyze(run_dir)
    except ProfilerError as e:   # no epoch written: nothing to judge
        return f"profile_epochs: nothing to judge: {e} ({_HINT})"
    if diagnosis.epochs < limits.min_epochs:
        found = f"{diagnosis.epochs} epoch was" if diagnosis.epochs == 1 else f"{diagnosis.epochs} epochs were"
        return (f"profile_epochs: only {found} found (at least {limits.min_epochs} are needed to judge: "
                f"{_HINT})")
    rss_rate = None if rss_peak_before is None else rss_growth_past(run_dir, rss_peak_before)
    breaches = limits.breaches(diagnosis, rss_rate)
    if not breaches:
        return None
    return (f"profile_epochs: {'; '.join(breaches)}\n{text.diagnosis(diagnosis)}\n"
            f"(run directory: {run_dir}; profiler report {run_dir} --html report.html for figures)")
