"""The public API: every name in profiler.__all__ resolves lazily to what docs/api.md says, and the
version is the installed package's."""

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

import profiler


def test_every_public_name_resolves():
    from profiler.analysis import Comparison, Diagnosis, Finding, Scaling, analyze, compare, scaling
    from profiler.capture.session import Session
    from profiler.errors import (FlamegraphError, ProfilerError, RunDirError, RunWriteError, SessionActiveError,
                                 UsageError, WorkloadError)
    from profiler.rundir import Run, read_run
    errors = {"ProfilerError": ProfilerError, "UsageError": UsageError, "RunDirError": RunDirError,
              "RunWriteError": RunWriteError, "SessionActiveError": SessionActiveError, "WorkloadError": WorkloadError,
              "FlamegraphError": FlamegraphError}
    expected = {"Session": Session, "analyze": analyze, "compare": compare, "scaling": scaling, "read_run": read_run,
                "Run": Run, "Diagnosis": Diagnosis, "Comparison": Comparison, "Scaling": Scaling, "Finding": Finding,
                **errors}
    assert set(profiler.__all__) == set(expected) | {"__version__"}
    for name, value in expected.items():
        assert getattr(profiler, name) is value, name
    assert all(issubclass(e, ProfilerError) for e in errors.values())
    # the errors table of docs/api.md names each of them, and says they import from profiler
    api = (Path(__file__).parent.parent / "docs" / "api.md").read_text()
    assert "each class below is importable from `profiler`" in api
    assert all(f"`{name}`" in api for name in errors if name != "ProfilerError") and "`profiler.ProfilerError`" in api


def test_version_is_the_installed_packages():
    assert profiler.__version__ == importlib.metadata.version("profiler")


def test_an_unknown_name_is_an_attribute_error():
    try:
        profiler.nothing_here
    except AttributeError as e:
        assert "nothing_here" in str(e)
    else:
        raise AssertionError("profiler.nothing_here resolved")


def _printed(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout.strip()


@pytest.mark.slow
def test_import_alone_loads_no_submodule():
    assert _printed("import sys, profiler; print(sorted(m for m in sys.modules if m.startswith('profiler.')))") == "[]"


@pytest.mark.slow
def test_the_cli_starts_without_numpy():
    # a Ctrl-C in the first second lands in the CLI's own code, not in numpy's import (which runs
    # before main() can say "profiler: interrupted"); the output checks imported rundir.format once
    assert _printed("import sys, profiler.cli; print([m for m in ('numpy', 'numba', 'matplotlib', 'profiler.rundir') "
                    "if m in sys.modules])") == "[]"
