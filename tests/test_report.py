"""Renderers: report --json keeps the contract fields and is strict, the verdict and each finding's
words come from the text renderer, and the HTML page holds the findings table and the step figure."""

import io
import json
import os
import sys
from html import escape as html_escape

import numpy as np
import pytest

from profiler.analysis import analyze, series, step_series
from profiler.report import html, json_out, text
from profiler.rundir import read_run
from profiler.rundir.format import STEP_RECORD

from .fixtures import MIB, epoch, stepped_run, write_run


@pytest.fixture
def spiky(tmp_path):
    return stepped_run(tmp_path / "run", 20, 10, 0.005, lambda n: (2, 0.08) if n % 25 == 24 else None)


def test_report_json_has_the_contract_fields(spiky):
    d = analyze(spiky)
    out = json.loads(json_out.render(d))
    assert out["epochs"] == 20 and out["status"] == "completed" and out["primary_cause"] == "gc"
    assert set(out["epoch_time"]) >= {"early_median_s", "late_median_s", "ratio"}
    assert set(out["gc"]) >= {"share_early", "share_late", "explained_fraction", "share_total"}
    assert set(out["allocation"]) >= {"rss_growth_bytes_per_epoch", "traced_growth_bytes_per_epoch", "top_sites"}
    assert set(out["steps"]) >= {"count", "median_s", "p99_s", "spike_time_fraction", "gc_explained_fraction"}
    assert out["workers"] is None and out["ranks"] is None and out["stragglers"] is None
    first = out["findings"][0]
    assert set(first) >= {"cause", "pattern", "time_fraction", "evidence", "remedy"}
    assert first["pattern"] == "gc-spikes" and first["evidence"] == text.evidence(d.findings[0])
    assert first["remedy"] == text.remedy(d.findings[0]) and out["verdict"] == text.verdict(d)
    fractions = [f["time_fraction"] for f in out["findings"]]
    assert fractions == sorted(fractions, reverse=True)


def test_json_is_strict_even_for_degenerate_runs(tmp_path):
    d = analyze(write_run(tmp_path / "run", [epoch(i, 0.0) for i in range(5)]))
    json.loads(json_out.render(d), parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))


def test_verdict_leads_with_the_costliest_finding_and_its_fix(spiky):
    d = analyze(spiky)
    words = text.verdict(d)
    # spikes in some epochs (50 or 130 ms) leave the medians alike but the interval wide (-100% to +46%)
    assert words.startswith("Epoch time shows no sustained trend") and "Garbage collection:" in words
    assert words.index("Garbage collection") < words.index("Fix:")
    assert "finding 1: gc-spikes" in text.diagnosis(d)


def test_html_has_findings_table_and_step_figure(spiky):
    d = analyze(spiky)
    page = html.render(title="t", diagnoses=[(d, series(spiky), step_series(read_run(spiky)))],
                       sections=[("Ranks: none", "<h2>extra section</h2>")])
    assert "<th>finding</th>" in page and "gc-spikes" in page and "<h2>extra section</h2>" in page
    assert page.count("data:image/png;base64") == 3     # step time, epoch time, memory
    assert "Ranks: none" in page and "<h2>Verdicts</h2>" in page   # two results: their verdicts first
    alone = html.render(title="t", diagnoses=[(d, series(spiky), step_series(spiky))])   # a path, as series takes
    assert "<h2>Verdicts</h2>" not in alone and alone.count(html_escape(text.verdict(d))) == 1   # said once


def test_step_series_bins_keep_the_slowest_step(spiky):
    s = step_series(read_run(spiky), max_points=20)
    assert s.steps == 200 and s.downsampled and len(s.step) == 20
    assert s.max_s.max() == pytest.approx(0.085, rel=1e-5) and s.max_gc_s.max() == pytest.approx(0.08, rel=1e-5)
    assert s.median_s.max() == pytest.approx(0.005, rel=1e-5)


def test_epoch_series_downsamples_without_truncating(tmp_path):
    run = write_run(tmp_path / "run", [epoch(i, 0.01) for i in range(50)])
    s = series(run, max_points=10)
    assert s.downsampled and len(s.epoch) == 10 and s.epochs == 50
    assert s.epoch[-1] == pytest.approx(47)      # the last bin's mean epoch: the tail is kept


def test_epoch_series_keeps_the_malloc_reads_there_are(tmp_path):
    records = [epoch(i, 0.01, malloc=i * MIB if i % 5 == 0 else None) for i in range(50)]
    s = series(write_run(tmp_path / "run", records), max_points=4)
    assert s.malloc_epoch.tolist() == [2.5, 15.0, 27.5, 40.0]   # 4 bins of the 10 epochs that read it
    assert (s.malloc_bytes / MIB).tolist() == s.malloc_epoch.tolist()
    none = series(write_run(tmp_path / "none", [epoch(i, 0.01) for i in range(5)]))
    assert len(none.malloc_epoch) == len(none.malloc_bytes) == 0


def test_op_labels():
    assert text.op_label("conv", {}) == "conv"
    assert text.op_label("conv", {"layout": "NCHW"}) == "conv (layout=NCHW)"
    assert text.op_label("conv", {"0": "NCHW", "1": "x"}) == "conv[NCHW,x]"
    assert text.op_label("conv[fast]", {}) != text.op_label("conv", {"layout": "fast"})


def test_no_finding_verdict_says_why_from_the_tables_numbers(tmp_path):
    """Nothing reported: each sentence gives the number the table shows and why it is not a finding."""
    mib = 1 << 20
    leak3 = analyze(write_run(tmp_path / "leak3", [epoch(i, 0.04, rss=(100 + 19 * i) * mib) for i in range(3)]))
    words = text.verdict(leak3)
    assert "memory is flat" not in words and "no epoch spikes" in words
    assert "RSS grew 19.0 MiB per epoch over 3 epochs: too few epochs to call it a leak" in words
    table = text.diagnosis(leak3)
    assert "trend too few epochs to tell" in table and "± 0%" not in table
    # 4 epochs after the warm-up, 3 x 4.5 MiB: under the 16 MiB that counts as growing memory
    small = analyze(write_run(tmp_path / "small", [epoch(i, 0.04, rss=(100 + 4.5 * i) * mib) for i in range(5)]))
    assert "RSS grew 4.5 MiB per epoch (13.5 MiB over the run), under the 16.0 MiB" in text.verdict(small)
    flat = analyze(write_run(tmp_path / "flat", [epoch(i, 0.04) for i in range(12)]))
    assert "memory is flat (RSS +0 B per epoch). Nothing to fix here." in text.verdict(flat)
    assert "trend +0% ± 0%" in text.diagnosis(flat)
    one = analyze(write_run(tmp_path / "one", [epoch(0, 0.04)]))   # "flat" from one epoch was said of nothing
    assert "memory cannot show a trend in one epoch" in text.verdict(one) and "flat" not in text.verdict(one)


def test_no_finding_verdict_names_spikes_gc_does_not_explain(tmp_path):
    """Slow steps without a GC pause inside are not a finding, and the verdict says they are there."""
    path = stepped_run(tmp_path / "run", 12, 20, 0.005, lambda n: None)
    steps = np.fromfile(path / "steps.bin", STEP_RECORD)
    slow = steps[5:240:20]           # one step in 20 takes 10x as long, with no GC in it
    steps["end_ns"][5:240:20] = slow["start_ns"] + 10 * (slow["end_ns"] - slow["start_ns"])
    steps.tofile(path / "steps.bin")
    d = analyze(path)
    assert d.findings == [] and d.spikes.count > 0
    words = text.verdict(d)
    assert f"no {d.spikes.unit} spikes" not in words
    assert f"step spikes take {text.pct(d.spikes.time_fraction)} of the run, but GC pauses explain only 0.0%" in words


def test_report_into_a_closed_pipe_exits_quietly(tmp_path, monkeypatch):
    """`profiler report RUN | head`: the reader went away; no error line, exit 141 (128 + SIGPIPE),
    and stdout now leads to os.devnull, so the interpreter's flush at exit does not fail again."""
    from profiler import cli
    run = write_run(tmp_path / "run", [epoch(i, 0.01) for i in range(12)])
    read_end, write_end = os.pipe()
    os.close(read_end)
    out, err = os.fdopen(write_end, "w"), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    try:
        assert cli.main(["report", str(run)]) == 141
        out.write("after")
        out.flush()
    finally:
        monkeypatch.undo()
        out.close()
    assert err.getvalue() == ""


def test_report_with_html_reads_the_run_once(tmp_path, monkeypatch, capsys):
    """`profiler report RUN --html PAGE` diagnoses and draws from one read of the run (it read it
    three times: a 50,000-epoch run's report took 4.3 s, 3.3 s now)."""
    from profiler import cli, rundir
    run = write_run(tmp_path / "run", [epoch(i, 0.01) for i in range(12)])
    reads, read_run = [], rundir.read_run
    monkeypatch.setattr(rundir, "read_run", lambda path: reads.append(path) or read_run(path))
    assert cli.main(["report", str(run), "--html", str(tmp_path / "page.html")]) == 0
    assert len(reads) == 1 and (tmp_path / "page.html").stat().st_size > 0
    assert "cause" in capsys.readouterr().out


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full (every write fails: disk full)")
@pytest.mark.parametrize("command", [["report", "{run}"], ["report", "{run}", "--json"], ["compare", "{run}", "{run}"]],
                         ids=["report", "report-json", "compare"])
def test_output_to_a_full_disk_is_one_line(tmp_path, monkeypatch, command):
    """`profiler report RUN > file` on a full disk: one line naming standard output and the reason,
    exit 1, and stdout then leads to os.devnull (the interpreter's flush at exit finds nothing
    left to fail on)."""
    from profiler import cli
    run = str(write_run(tmp_path / "run", [epoch(i, 0.01) for i in range(12)]))
    out, err = open("/dev/full", "w"), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    try:
        assert cli.main([a.format(run=run) for a in command]) == 1
        out.write("after")
        out.flush()
    finally:
        monkeypatch.undo()
        out.close()
    assert err.getvalue() == "profiler: error: cannot write to standard output: No space left on device\n"


@pytest.mark.parametrize("command,target,words", [
    (["report", "{run}", "--html"], "{dir}", "--html {dir} is a directory: give a file name, e.g. --html {dir}/report.html"),
    (["compare", "{run}", "{run}", "--html"], "{dir}", "--html {dir} is a directory"),
    (["timeline", "{run}", "--out"], "{dir}", "--out {dir} is a directory: give a file name, e.g. --out {dir}/trace.json"),
    (["timeline", "{run}", "--out"], "{file}/x.json", "--out {file}/x.json: {file} is a file, not a directory"),
    (["report", "{run}", "--html"], "{file}/x.html", "{file} is a file, not a directory; choose another path"),
    # a new path ending in a slash wrote a file of that name (a probe)
    (["report", "{run}", "--html"], "{dir}/new/", "--html {dir}/new/ is a directory: give a file name, e.g. --html {dir}/new/report.html"),
    (["timeline", "{run}", "--out"], "{dir}/new/", "--out {dir}/new/ is a directory"),
], ids=["report-dir", "compare-dir", "timeline-dir", "timeline-under-file", "report-under-file", "report-slash",
        "timeline-slash"])
def test_output_path_in_the_way_is_one_clear_line(tmp_path, capsys, command, target, words):
    from profiler import cli
    names = {"run": str(write_run(tmp_path / "run", [epoch(i, 0.01) for i in range(3)])),
             "dir": str(tmp_path / "out"), "file": str(tmp_path / "afile")}
    (tmp_path / "out").mkdir()
    (tmp_path / "afile").write_text("x")
    assert cli.main([a.format(**names) for a in command + [target]]) == 2
    err = capsys.readouterr().err
    assert err.startswith("profiler: error: ") and err.count("\n") == 1 and words.format(**names) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "out", "run"] and not any((tmp_path / "out").iterdir())


def test_html_report_creates_its_directory(tmp_path, capsys):
    from profiler import cli
    run = write_run(tmp_path / "run", [epoch(i, 0.01) for i in range(3)])
    assert cli.main(["report", str(run), "--html", str(tmp_path / "new" / "r.html")]) == 0
    assert (tmp_path / "new" / "r.html").read_text().startswith("<!")


def test_terminated_run_is_read_and_rendered_everywhere(tmp_path):
    """status "terminated" (SIGTERM) is incomplete with its reason in every renderer; a status this
    profiler never writes is a problem of its own."""
    from profiler.analysis import compare
    from profiler.report import trace
    run = stepped_run(tmp_path / "run", 6, 5, 0.005, lambda n: None)
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps(dict(meta, status="terminated", error="SIGTERM")))
    d = analyze(run)
    assert d.status == "terminated" and not d.complete and d.problems == ["the run was terminated: SIGTERM"]
    assert "(6 epochs, terminated; the run is incomplete)" in text.diagnosis(d)
    assert "the run is incomplete (the run was terminated: SIGTERM)" in json.loads(json_out.render(d))["verdict"]
    assert "status terminated (incomplete)" in html.render(title="t", diagnoses=[(d, series(run), None)])
    assert trace.write_run(run, tmp_path / "t.json")[0] > 30
    assert compare(run, run).ratio == 1.0
    (run / "meta.json").write_text(json.dumps(dict(meta, status="paused")))
    assert read_run(run).problems == ["meta.json has status 'paused', not one this profiler writes (running, "
                                      "completed, halted, failed, interrupted, terminated)"]


def test_sizes_up_to_the_readers_bound_read_in_their_unit():
    assert text.size(1 << 50) == "1.0 PiB" and text.size(3 << 40) == "3.0 TiB" and text.size(-(5 << 30)) == "-5.0 GiB"


def test_wording_of_small_numbers():
    assert text.counted(1, "step") == "1 step" and text.counted(1234, "step") == "1,234 steps"
    assert text._per_epoch(0.4, "full collection") == "0.4 full collections per epoch"
    assert text._per_epoch(1, "full collection") == "1 full collection per epoch"
    assert text._per_epoch(3, "full collection") == "3 full collections per epoch"
    assert text._per_epoch(0.04, "full collection") == "0.04 full collections per epoch"
    assert text._per_epoch(1.4, "full collection") == "1.4 full collections per epoch"
    assert text.below(0.0198, 0.02) == "1.98%" and text.below(0.011, 0.02) == "1.1%"
    assert text.below(0.019996, 0.02) == "1.99%" and text.below(0.0199, 0.02) == "1.99%"


def test_folded_stacks_broken_by_py_spy_are_joined_and_a_torn_end_is_one_error(tmp_path):
    from profiler.errors import FlamegraphError
    from profiler.report.flamegraph import read_folded
    whole = "<module> (train.py:9);step (/venv/lib/python3.11/site-packages/m.py:4)"
    folded = tmp_path / "x.folded"
    folded.write_text(f"{whole} 3\r\n 2\n{whole[:40]}\n{whole[40:]} 4\n\nmain (a.py:1) 1\n")   # py-spy issue #772
    assert read_folded(folded) == {tuple(whole.split(";")): 7, ("(no Python frames)",): 2, ("main (a.py:1)",): 1}
    folded.write_text(f"{whole} 3\n{whole[:40]}\n")
    with pytest.raises(FlamegraphError, match=r"x\.folded line 2 is not 'frame;frame;\.\.\. count'"):
        read_folded(folded)


def test_flamegraph_files_that_cannot_be_read_or_written_are_one_error_naming_them(tmp_path):
    # a directory given to --diff was an IsADirectoryError, a full disk an OSError not naming the file
    from profiler.errors import FlamegraphError, RunWriteError
    from profiler.report.flamegraph import read_folded, write_svg
    with pytest.raises(FlamegraphError, match=f"cannot read {tmp_path}: Is a directory"):
        read_folded(tmp_path)
    with pytest.raises(RunWriteError, match="cannot write the flamegraph to /dev/full: No space left on device"):
        write_svg({("main (a.py:1)",): 1}, "/dev/full", title="t")


def test_a_file_system_that_refuses_every_write_is_said_as_the_write_that_failed(tmp_path, monkeypatch):
    # on a read-only mount the clean-up's unlink of the missing PATH.part raised EROFS too, and that OSError,
    # not the write's "cannot write the flamegraph to ...", reached the user (a probe)
    import errno
    import pathlib
    from profiler.capture import pyspy
    from profiler.errors import RunWriteError

    def refused(path, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
    for name in ("write_bytes", "unlink"):
        monkeypatch.setattr(pathlib.Path, name, refused)
    with pytest.raises(RunWriteError, match=f"cannot write the recording to {tmp_path / 'f.folded'}: Read-only file system"):
        pyspy.record([sys.executable, "-c", "pass"], tmp_path / "f.folded")


def test_an_output_file_that_is_a_record_of_the_run_read_is_refused_and_the_run_kept(tmp_path, capsys):
    # `report RUN --html RUN/meta.json` replaced the run's meta.json with the page, and the run was lost
    from profiler import cli
    from tests.fixtures import epoch, write_run
    from tests.rank_runs import synthetic_job
    run = write_run(tmp_path / "run", [epoch(i, 0.01) for i in range(6)])
    other = write_run(tmp_path / "other", [epoch(i, 0.01) for i in range(6)])
    link = tmp_path / "report.html"
    link.symlink_to(other / "epochs.jsonl")
    job = synthetic_job(tmp_path / "job", 2, 40)
    kept = {p: p.read_bytes() for p in [*run.iterdir(), *other.iterdir(), *(job / "rank-1").iterdir()]}
    def refused(flag, path, run, example, reads=True):
        why = " that this command reads" if reads else ", which writing it would destroy"
        return f"{flag} {path} is a record of the run {run}{why}: give another file, e.g. {flag} {run / example}"
    for args, said in [
            (["report", run, "--html", run / "meta.json"], refused("--html", run / "meta.json", run, "report.html")),
            (["timeline", run, "--out", run / "epochs.jsonl"], refused("--out", run / "epochs.jsonl", run, "trace.json")),
            (["compare", job, job, "--html", job / "rank-1" / "steps.bin"],
             refused("--html", job / "rank-1" / "steps.bin", job, "compare.html")),
            (["report", job, "--html", job / "node-0" / "rank-1" / "meta.json"],   # a job with a directory per host
             refused("--html", job / "node-0" / "rank-1" / "meta.json", job, "report.html")),
            # another run's records: the command does not read that run, and would destroy it
            (["report", run, "--html", other / "epochs.jsonl"],
             refused("--html", other / "epochs.jsonl", other, "report.html", reads=False)),
            (["timeline", run, "--out", other / "steps.bin"],
             refused("--out", other / "steps.bin", other, "trace.json", reads=False)),
            # through a link: the run it points into is named, not the link's own directory
            (["report", run, "--html", link], refused("--html", link, other.resolve(), "report.html", reads=False))]:
        assert cli.main(list(map(str, args))) == 2
        assert capsys.readouterr().err.splitlines() == [f"profiler: error: {said}"]
    assert {p: p.read_bytes() for p in kept} == kept
    assert cli.main(["report", str(run), "--html", str(run / "report.html")]) == 0   # beside the records: fine
    assert (run / "report.html").read_text().startswith("<!doctype html>")


def test_compare_html_has_the_runs_rows_the_text_has(tmp_path):
    # the epoch time, the collector's cost and the program's own gc.collect() calls, as in the text table
    from profiler.analysis import compare
    ops = {("conv", (("layout", "NHWC"),)): 0.004}
    a = write_run(tmp_path / "a", [epoch(i, 0.020, ops=ops, pause=(0.0, 0.0, 0.008), collections=(0, 0, 4),
                                         forced=(0, 0, 4), forced_pause=(0.0, 0.0, 0.008)) for i in range(8)],
                  meta={"label": "collects"})
    b = write_run(tmp_path / "b", [epoch(i, 0.012, ops=ops, pause=(0.0, 0.0, 0.0), collections=(0, 0, 0),
                                         forced=(0, 0, 0), forced_pause=(0.0, 0.0, 0.0)) for i in range(8)],
                  meta={"label": "plain"})
    c = compare(a, b)
    rows = text.run_rows(c)
    assert [r[0] for r in rows] == ["epoch (ms)", "mean epoch, spikes included (ms)", "mean GC per epoch (ms)",
                                    "mean full collections per epoch", "mean gc.collect() calls per epoch",
                                    "RSS, first -> last epoch (MiB)"]
    assert rows[4][1:3] == ("4.0", "0.0")
    table = text.comparison(c).splitlines()
    first = table.index(next(line for line in table if line.startswith("epoch (ms)")))
    assert table[first:first + 6] == [
        "epoch (ms)                              20.00      12.00    1.67",
        "mean epoch, spikes included (ms)        20.00      12.00",
        "mean GC per epoch (ms)                   8.00       0.00     40.0%     0.0% of run time",
        "mean full collections per epoch           4.0        0.0",
        "mean gc.collect() calls per epoch         4.0        0.0",
        "RSS, first -> last epoch (MiB)     200 -> 200 200 -> 200"]
    page = html.render(comparisons=[c])
    for name, x, y, _ in rows:
        assert f"<td>{html_escape(name)}</td><td>{html_escape(x)}</td><td>{html_escape(y)}</td>" in page


def test_a_one_epoch_run_shows_no_made_up_memory_growth(tmp_path):
    # "RSS +0 B/epoch" stood beside "memory cannot show a trend in one epoch" (a user probe)
    one = analyze(write_run(tmp_path / "one", [epoch(0, 0.02)]))
    words = text.diagnosis(one)
    assert "memory       RSS -/epoch" in words and "cannot show a trend in one epoch" in words
    assert json.loads(json_out.render(one))["allocation"]["rss_growth_bytes_per_epoch"] is None   # not 0.0
    words = text.diagnosis(analyze(write_run(tmp_path / "two", [epoch(0, 0.02), epoch(1, 0.02, rss=201 << 20)])))
    assert "memory       RSS +1.0 MiB/epoch" in words


def test_a_one_epoch_runs_figures_draw_it(tmp_path):
    """A stackplot, or a line without markers, of one point draws nothing (a probe: the HTML's figures of
    a 1-epoch run were empty). One epoch is a stack of bars, and the RSS line has a marker."""
    from profiler.report import figures
    s = series(write_run(tmp_path / "one", [epoch(0, 0.02, pause=(0.001, 0.0, 0.004))]))
    ax = figures.epoch_time(s).axes[0]
    heights = [p.get_height() for p in ax.patches]
    assert len(heights) == 4 and sum(heights) == pytest.approx(20.0) and heights[3] == pytest.approx(4.0)
    rss = figures.memory(s).axes[0].lines[0]
    assert rss.get_marker() == "o" and len(rss.get_xdata()) == 1
    many = series(write_run(tmp_path / "many", [epoch(i, 0.02) for i in range(60)]))
    assert len(figures.epoch_time(many).axes[0].patches) == 0   # a stackplot: its areas are collections
    assert figures.memory(many).axes[0].lines[0].get_marker() in ("", "None", None)


def test_control_characters_in_op_names_are_escaped_in_text_and_html(tmp_path):
    """An op named "new\\nline" or "nul\\x00b" broke the report's table, and a NUL is invalid in HTML (a probe)."""
    from profiler.analysis import compare
    ops = {("new\nline", (("k", "a\tb"),)): 0.004, ("nul\x00b", ()): 0.002, ("steady", ()): 0.001}
    run = write_run(tmp_path / "run", [epoch(i, 0.01 + 0.001 * i, ops=ops) for i in range(12)])
    other = write_run(tmp_path / "other", [epoch(i, 0.01, ops=ops) for i in range(12)])
    d = analyze(run)
    pages = [text.diagnosis(d), html.render(title="t", diagnoses=[(d, series(run))]),
             text.comparison(compare(run, other))]
    for page in pages:
        assert "\x00" not in page and "\t" not in page and "new\nline" not in page
    assert "new\\nline (k=a\\tb)" in pages[2] and "nul\\x00b" in pages[2]


def test_wrapped_text_keeps_hyphenated_names_whole():
    # "allocation-\ngrowth" in the report: grep for the JSON verdict's finding name missed it (a probe)
    assert text._wrap("x" * 90 + " gc-growing-pauses and more").splitlines() == ["x" * 90, "gc-growing-pauses and more"]


def test_durations_keep_their_digits():
    # steps of a few microseconds read "median 0.00 ms, p99 0.00 ms" in a 10-million-step run
    assert [text.ms(s) for s in (0.0, 4.2e-6, 9.99e-5, 1e-4, 0.01234, 2.5)] == [
        "0.00 ms", "4.2 µs", "99.9 µs", "0.10 ms", "12.34 ms", "2.50 s"]
