"""Training scripts written the way their users write them, with no profiler code in them, and
the helpers that run them under `profiler run` for the tests."""

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def script(name):
    return str(HERE / name)


def profiler(*args, check=True, env=None, timeout=300):
    """`python -m profiler ARGS` in a subprocess (bounded in time); CompletedProcess."""
    proc = subprocess.run([sys.executable, "-m", "profiler", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def records(run_dir):
    return [json.loads(line) for line in (Path(run_dir) / "epochs.jsonl").read_text().splitlines()]


def meta(run_dir):
    return json.loads((Path(run_dir) / "meta.json").read_text())


def report(run_dir):
    """`profiler report --json` of the run, as a dict."""
    return json.loads(profiler("report", run_dir, "--json").stdout)


def patterns(diagnosis):
    return [f["pattern"] for f in diagnosis["findings"]]
