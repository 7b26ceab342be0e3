"""`make bench`: every benchmark in one process, side by side, written to docs/benchmarks.md.

    python -m benchmarks [--quick] [--only kernels,engine,drift,overhead,startup,detection,ranks]
    python -m benchmarks --emulate avx2 --only kernels,engine --out docs/benchmarks-avx2-emulated.md

--emulate avx2 runs on an AVX-512 host as an AVX2 machine would, both sides held to 256-bit
instructions: numba builds for a Haswell (our 6 x 16 blocks), PyTorch's ATen, oneDNN and MKL and
numpy's OpenBLAS are told the same through their own variables (EMULATE below). It measures the
AVX2 code path against an AVX2 PyTorch on this core, not an AVX2 machine's caches and clocks.
"""

import argparse
import importlib
import os
import re
import sys
from pathlib import Path

from kernels._isa import HASWELL_FEATURES

EMULATE = {"avx2": {"NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": HASWELL_FEATURES,
                    "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                    "OPENBLAS_CORETYPE": "Haswell"}}
SECTIONS = {   # module of this package: its title in the results
    "kernels": "Kernels vs PyTorch (median of interleaved calls)",
    "engine": "Training steps vs PyTorch eager",
    "drift": "The Axon report on our engine: drift and max_epochs",
    "overhead": "Profiler overhead: the observer effect",
    "startup": "Compile and start-up",
    "detection": "Analysis: false alarms, detection and speed on simulated runs",
    "ranks": "Multi-rank runs: merged analysis against the number of ranks",
}


def _arguments():
    parser = argparse.ArgumentParser(prog="python -m benchmarks", allow_abbrev=False)
    parser.add_argument("--only", default=",".join(SECTIONS))
    parser.add_argument("--quick", action="store_true", help="fewer rounds and epochs (a smoke run)")
    parser.add_argument("--out", default="docs/benchmarks.md")
    parser.add_argument("--emulate", choices=sorted(EMULATE), help="run as that ISA would (see above)")
    args = parser.parse_args()
    chosen = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(chosen) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown section(s) {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    return args, chosen


# glibc's malloc with fixed thresholds: by default an output above its moving mmap threshold is a
# fresh mapping, page-faulted on every call (PyTorch's mnist conv1 forward: 9-10 ms a call against
# 1.7-2.0), and whether a candidate's outputs are depends on what ran before it in the process
HEAP = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}
# huge pages for PyTorch's large tensors, as numpy takes them for its large arrays by default: with
# transparent huge pages on `madvise`, an 18.9 MB numpy array had 16 MiB of them and a tensor none
# (PyTorch's allocator asks only with this set), so the two libraries' buffers differed in page size
TORCH_HUGE_PAGES = {"THP_MEM_ALLOC_ENABLE": "1"}


def _environment(emulate):
    """The variables this run needs: HEAP, TORCH_HUGE_PAGES, and an emulated ISA's or none of the
    OpenBLAS overrides some of these machines set for old OpenBLAS builds (they slow a current
    numpy; tests never drop them)."""
    env = dict(os.environ) | HEAP | TORCH_HUGE_PAGES
    if emulate:
        return env | EMULATE[emulate]
    for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        env.pop(name, None)
    return env


def _assignments(variables):
    """"NAME=value, ..." of environment variables, for the header."""
    return ", ".join(f"{k}={v}" for k, v in variables.items())


def _thp_mode():
    """The kernel's transparent huge page mode (always, madvise or never), or "unknown"."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return next(word.strip("[]") for word in f.read().split() if word.startswith("["))
    except (OSError, StopIteration):
        return "unknown"


def _vcpu_scheduling():
    """This VM's guest-kernel settings on where threads run, "" where it has none: the vCPU packing
    and halt polling that leave a woken worker queued behind its caller (benchmarks/timing.py)."""
    found = []
    try:
        found.append("kernel.sched_vcpu_pack=" + Path("/proc/sys/kernel/sched_vcpu_pack").read_text().strip())
    except OSError:
        pass
    try:
        found += [word for word in Path("/proc/cmdline").read_text().split() if word.startswith("haltpoll.")]
    except OSError:
        pass
    return ", ".join(found)


def _merge(old, parts):
    """Keep the sections of an earlier full run that this (--only) run did not redo, in the
    usual order, each marked with the date of the run that measured it; the header (machine,
    date) is this run's."""
    def sections(text):
        blocks = text.split("\n## ")
        return blocks[0], {block.splitlines()[0]: "## " + block.rstrip() + "\n" for block in blocks[1:]}
    header, new = sections("\n".join(parts))
    old_header, kept = sections(old)
    date = re.search(r"^\| date \| (.*?) \|", old_header, re.M)
    merged = {title: _kept(block, date.group(1) if date else "an earlier date") for title, block in kept.items()} | new
    return [header.rstrip("\n") + "\n"] + [merged[title] for title in SECTIONS.values() if title in merged]


KEPT = "_Measured on {date}, before the header's run, which did not redo this section (--only)._"


def _kept(block, date):
    """A section kept from an earlier run, marked with its date (a section kept again keeps its mark)."""
    title, _, rest = block.partition("\n")
    if rest.lstrip("\n").startswith("_Measured on "):
        return block
    return f"{title}\n\n{KEPT.format(date=date)}\n{rest}"


def main(args, chosen):
    from .timing import machine   # after the re-exec: it loads the libraries the environment sets up
    info = machine()
    parts = ["# Benchmark results", "", "Written by `make bench` (`python -m benchmarks`). Ratios come from one "
             "process, candidates called in turn, round after round (benchmarks/timing.py); absolute times drift on "
             "this shared machine.", "",
             "| | |", "|---|---|"] + [f"| {k} | {v} | " for k, v in info.items()] + [""]
    parts[-1:-1] = [f"| glibc malloc | {_assignments(HEAP)} (outputs reuse the heap) |",
                    f"| huge pages | transparent huge pages {_thp_mode()}; numpy's large arrays ask for them, "
                    f"PyTorch's with {_assignments(TORCH_HUGE_PAGES)} |",
                    "| kernel rows' buffers | ours and PyTorch read the same arrays (allocated by PyTorch, on a 64-byte "
                    "line; conv weights, laid out differently, and the bias vector are each library's own) and write "
                    "the same `out=`; each allocates the results it returns |"]
    if scheduling := _vcpu_scheduling():
        parts[-1:-1] = [f"| vCPU scheduling | {scheduling} |"]
    if args.emulate:
        shown = {k: v for k, v in EMULATE[args.emulate].items() if k != "NUMBA_CPU_FEATURES"}
        parts[-1:-1] = [f"| emulating {args.emulate} | {_assignments(shown)} |"]
    for name in chosen:
        title, module = SECTIONS[name], importlib.import_module(f"benchmarks.{name}")
        print(f"== {title}", flush=True)
        if args.quick:
            result = {"kernels": lambda: module.run(threads=(2,), rounds=5),
                      "engine": lambda: module.run(threads=(2,), rounds=3),
                      "drift": lambda: module.run(long_epochs=600, halt=40, big=20_000),
                      "overhead": lambda: module.run(rounds=1),
                      "startup": module.run,
                      "detection": lambda: module.run(runs=200, steps=200_000),
                      "ranks": lambda: module.run(ranks=(8, 64), steps=2_000)}[name]()
        else:
            result = module.run()
        table = module.markdown(result)
        print(table, flush=True)
        parts += [f"## {title}", "", table, ""]
    out = Path(args.out)
    if out.exists() and set(chosen) != set(SECTIONS):
        parts = _merge(out.read_text(encoding="utf-8"), parts)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(parts) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":   # importing this module (a helper script) runs nothing
    ARGS, CHOSEN = _arguments()
    if _environment(ARGS.emulate) != dict(os.environ):   # libraries read these once, when loaded: start afresh
        os.execve(sys.executable, [sys.executable, "-m", "benchmarks", *sys.argv[1:]], _environment(ARGS.emulate))
    main(ARGS, CHOSEN)
