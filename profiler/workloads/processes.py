"""Run `profiler run` argument lists in fresh processes (GC state must not carry over between runs)."""

import subprocess
import sys

from ..errors import WorkloadError


def run_many(jobs, desc):
    from tqdm import tqdm
    for argv in tqdm(jobs, desc=desc, unit="run", leave=False, disable=not sys.stderr.isatty()):
        proc = subprocess.run([sys.executable, "-m", "profiler", *argv], stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            lines = proc.stderr.strip().splitlines()
            raise WorkloadError(f"`profiler {' '.join(argv)}` failed: {lines[-1] if lines else proc.returncode}")
