"""The example in the README, run as a user would: an unmodified PyTorch script whose data loader
keeps small objects alive gets a GC finding, and freezing after set-up shrinks the GC time."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "loader_cache.py"


def profiler(*args):
    proc = subprocess.run([sys.executable, "-m", "profiler", *map(str, args)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_loader_cache_example_gets_a_gc_finding_and_freeze_shrinks_gc(tmp_path):
    profiler("run", "--out", tmp_path / "default", EXAMPLE, "--epochs", 20)
    profiler("run", "--out", tmp_path / "freeze", "--gc-policy", "freeze", EXAMPLE, "--epochs", 20)
    report = json.loads(profiler("report", tmp_path / "default", "--json"))
    assert report["epochs"] == 20 and report["steps"]["count"] > 300
    # the cache makes single steps stall and, as it grows, each full collection longer; which of the
    # two costs more, and whether they stand out at all, depends on how busy the machine is: a
    # neighbour that slows every step dilutes the pauses (in one CI rehearsal the late epochs took
    # 5.6x the early ones and the same pauses read as gc-steady, 43% of the run). So the test asks
    # that GC is found and leads; the spike arithmetic is checked on known-answer runs
    # (tests/test_diagnose.py)
    patterns = {f["pattern"] for f in report["findings"]}
    assert report["primary_cause"] == "gc" and patterns & {"gc-spikes", "gc-growing-pauses", "gc-steady"}, \
        report["verdict"]
    compared = json.loads(profiler("compare", tmp_path / "default", tmp_path / "freeze", "--json"))
    assert compared["a"]["gc"]["policy"] == "default" and compared["b"]["gc"]["policy"] == "freeze"
    assert compared["b"]["gc"]["pause_s"] < compared["a"]["gc"]["pause_s"]
