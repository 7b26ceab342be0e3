"""The benchmark tooling: what `python -m benchmarks` writes into docs/benchmarks.md."""

from benchmarks.__main__ import _merge


def test_a_benchmark_run_of_some_sections_dates_the_sections_it_kept():
    old = ("# Benchmark results\n\n| date | 2026-01-01 10:00 UTC |\n\n## Kernels vs PyTorch (median of interleaved calls)\n\n"
           "| k | 1 |\n\n## Profiler overhead: the observer effect\n\nold overhead\n")
    parts = ["# Benchmark results\n\n| date | 2026-01-02 11:00 UTC |\n", "## Profiler overhead: the observer effect\n\nnew"]
    once = "".join(_merge(old, parts))
    assert "| date | 2026-01-02 11:00 UTC |" in once and "new" in once and "old overhead" not in once
    assert ("## Kernels vs PyTorch (median of interleaved calls)\n\n_Measured on 2026-01-01 10:00 UTC, before the "
            "header's run, which did not redo this section (--only)._\n\n| k | 1 |") in once
    # kept again by a later run: the section keeps the date of the run that measured it
    later = [parts[0].replace("01-02", "01-03"), parts[1]]
    assert "".join(_merge(once, later)).count("_Measured on 2026-01-01 10:00 UTC") == 1
