"""The cost of watching, as counts (issue 15): `import profiler` plus an open Session add at most
2,000 GC-tracked objects and import nothing heavy. Timings are in benchmarks/overhead.py."""

import json
import subprocess
import sys

import pytest

PROBE = """
import gc, json, sys, tempfile
import numpy, psutil
scratch = tempfile.mkdtemp()
gc.collect(); before = len(gc.get_objects())
import profiler
from profiler import Session
session = Session(scratch + "/run")
session.__enter__()
with session.epoch():
    with session.step():
        with session.op("forward", layout="NHWC"):
            pass
gc.collect(); after = len(gc.get_objects())
session.__exit__(None, None, None)
print(json.dumps({"added": after - before, "modules": sorted(sys.modules)}))
"""


@pytest.mark.slow
def test_import_and_an_open_session_add_few_objects_and_nothing_heavy():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    result = json.loads(out.stdout)
    assert 0 < result["added"] <= 2000, result["added"]
    heavy = {"numba", "scipy", "matplotlib", "torch", "llvmlite", "importlib.metadata", "ctypes.util",
             "tracemalloc", "profiler.analysis", "profiler.workloads", "kernels"}
    assert heavy.isdisjoint(result["modules"]), heavy & set(result["modules"])


@pytest.mark.slow
def test_deep_capture_imports_tracemalloc_only_when_asked():
    probe = ("import sys, tempfile; from profiler import Session\n"
             "with Session(tempfile.mkdtemp() + '/run', tracemalloc=True):\n"
             "    print('tracemalloc' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "True"
