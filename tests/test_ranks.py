"""Multi-rank directories: finding and checking rank-N/ run directories, and the merged analysis on
jobs with known answers (written by the tests: no training, no subprocess)."""

import dataclasses
import json
import re
import shutil

import numpy as np
import pytest

from profiler.analysis import analyze, compare
from profiler.analysis import ranks as rank_analysis
from profiler.analysis.ranks import analyze_ranks, rank_heatmap
from profiler.report import rank_text, text
from profiler.rundir import RunDirError
from profiler.rundir.ranks import is_multi_rank, rank_dirs

from .fixtures import epoch, write_run
from .rank_runs import ORIGIN_UNIX, cut_rank, synthetic_job, write_rank


def test_rank_dirs_sorted_with_host_and_local_rank(tmp_path):
    synthetic_job(tmp_path, 4, 20)
    found = rank_dirs(tmp_path)
    assert [r.rank for r in found] == [0, 1, 2, 3]
    assert {r.world_size for r in found} == {4}
    assert found[3].host == "node-0" and found[3].local_rank == 3
    assert is_multi_rank(tmp_path) and not is_multi_rank(found[0].path)


def test_directories_copied_from_two_hosts_merge(tmp_path):
    for rank in range(4):
        write_rank(tmp_path / f"host-{rank // 2}" / f"rank-{rank}", rank, 4, np.full(10, 0.01),
                   host=f"host-{rank // 2}", local_rank=rank % 2)
    found = rank_dirs(tmp_path)
    assert [(r.rank, r.host, r.local_rank) for r in found] == [(0, "host-0", 0), (1, "host-0", 1),
                                                               (2, "host-1", 0), (3, "host-1", 1)]
    assert analyze_ranks(tmp_path).ranks == 4


def test_mismatched_world_sizes_are_one_clear_error(tmp_path):
    write_rank(tmp_path / "rank-0", 0, 2, np.full(10, 0.01))
    write_rank(tmp_path / "rank-1", 1, 4, np.full(10, 0.01))
    with pytest.raises(RunDirError, match=r"mixes runs of different jobs \(world size 2 in .*rank-0; world size 4"):
        rank_dirs(tmp_path)


def test_ranks_of_two_jobs_are_one_clear_error(tmp_path):
    # rank-0 of one `profiler run --nproc-per-node 2` job beside rank-1 of another (a new user's copy)
    write_rank(tmp_path / "a" / "rank-0", 0, 2, np.full(10, 0.01), job="none:41000")
    write_rank(tmp_path / "a" / "rank-1", 1, 2, np.full(10, 0.01), job="none:42000")
    with pytest.raises(RunDirError, match=r"mixes runs of different jobs \(job none:41000 in .*rank-0; job "):
        rank_dirs(tmp_path / "a")
    # without job ids (or torchrun's default port for both): the starts, 35 s apart here, 10 minutes there
    write_rank(tmp_path / "b" / "rank-0", 0, 2, np.full(10, 0.01))
    write_rank(tmp_path / "b" / "rank-1", 1, 2, np.full(10, 0.01), origin_unix=ORIGIN_UNIX + 600)
    with pytest.raises(RunDirError, match=r"mixes runs of different jobs: .*rank-1 started 600 s after .*rank-0"):
        rank_dirs(tmp_path / "b")
    write_rank(tmp_path / "c" / "rank-0", 0, 2, np.full(10, 0.01), job="none:41000")
    write_rank(tmp_path / "c" / "rank-1", 1, 2, np.full(10, 0.01), origin_unix=ORIGIN_UNIX + 2)
    assert [r.rank for r in rank_dirs(tmp_path / "c")] == [0, 1]   # one rank without an id: no conflict


@pytest.mark.parametrize("ids, starts, worlds", [((None, None), (0, 0), (2, 2)), (("none:41000", "none:42000"), (0, 0), (2, 2)),
                                                 ((None, None), (0, 900), (2, 2)), ((None, None), (0, 0), (2, 3))])
def test_a_directory_of_jobs_names_them(tmp_path, ids, starts, worlds):
    # whole jobs side by side, however they differ (a reviewer found the other checks spoke first)
    for job, job_id, start, world in zip(("job-b", "job-a"), ids, starts, worlds):
        for r in range(world):
            write_rank(tmp_path / "runs" / job / f"rank-{r}", r, world, np.full(10, 0.01), job=job_id,
                       origin_unix=ORIGIN_UNIX + start)
    with pytest.raises(RunDirError, match=r"runs is not a multi-rank run but holds several \(job-a, job-b\): give one"):
        rank_dirs(tmp_path / "runs")
    # compared with a single run, it says the same (it said "is a multi-rank run and ... a single run": a probe)
    write_rank(tmp_path / "single", 0, 1, np.full(10, 0.01))
    with pytest.raises(RunDirError, match=r"runs is not a multi-rank run but holds several \(job-a, job-b\): give one"):
        compare(tmp_path / "single", tmp_path / "runs")


def test_a_directory_of_runs_and_a_job_names_them(tmp_path):
    """A job's directory beside single runs (runs/ after a few profiler runs) is no job of hosts: its
    rank-N directories one level down are not taken for the whole directory's (a probe found
    `profiler report runs` reporting the job and ignoring the runs beside it)."""
    for r in range(2):
        write_rank(tmp_path / "runs" / "job" / f"rank-{r}", r, 2, np.full(10, 0.01))
    write_rank(tmp_path / "runs" / "run-a", 0, 1, np.full(10, 0.01))
    with pytest.raises(RunDirError, match=r"runs is not a multi-rank run but holds several \(job, run-a\): give one"):
        rank_dirs(tmp_path / "runs")
    with pytest.raises(RunDirError, match=r"holds several \(job, run-a\)"):
        analyze(tmp_path / "runs")
    assert [r.rank for r in rank_dirs(tmp_path / "runs" / "job")] == [0, 1]


def test_duplicate_rank_names_both_directories(tmp_path):
    for host in ("a", "b"):   # neither a job of its own (world size 2): a copy made twice
        write_rank(tmp_path / host / "rank-0", 0, 2, np.full(10, 0.01))
    with pytest.raises(RunDirError, match=r"rank 0 appears twice, in .*a/rank-0 and in .*b/rank-0"):
        rank_dirs(tmp_path)


def test_two_directories_recording_one_rank_say_it_appears_twice_not_rename(tmp_path):
    """rank-1/ records rank 0 while rank-0/ exists: renaming it to rank-0 cannot work."""
    for name in ("rank-0", "rank-1"):
        write_rank(tmp_path / name, 0, 2, np.full(10, 0.01))
    with pytest.raises(RunDirError, match=r"rank 0 appears twice, in .*rank-0 and in .*rank-1 \(both meta.json") as info:
        rank_dirs(tmp_path)
    assert "rename" not in str(info.value)


@pytest.mark.parametrize("extra,words", [
    ("rank-0b", r"rank-0b holds rank 0's run beside the job's rank-<RANK> directories but is not named for it: "
                r"rename it to rank-0"),
    ("host-b/rank-0", r"holds rank-<RANK> runs at two levels \(.*host-b/rank-0 and beside it"),
], ids=["renamed-copy", "two-levels"])
def test_a_rank_beside_the_job_under_another_name_or_level_is_no_silent_omission(tmp_path, extra, words):
    for rank in range(2):
        write_rank(tmp_path / f"rank-{rank}", rank, 2, np.full(10, 0.01))
    write_rank(tmp_path / extra, 0, 2, np.full(10, 0.01))
    with pytest.raises(RunDirError, match=words):
        rank_dirs(tmp_path)


def test_what_else_sits_beside_a_jobs_ranks_is_left_alone(tmp_path):
    # tensorboard's per-rank folders, a single run copied for comparison, a report: the job as before (a review)
    for rank in range(2):
        write_rank(tmp_path / f"rank-{rank}", rank, 2, np.full(10, 0.01))
    (tmp_path / "tensorboard" / "rank-0").mkdir(parents=True)
    (tmp_path / "tensorboard" / "rank-0" / "events.out").write_text("")
    write_run(tmp_path / "baseline", [epoch(i, 0.01) for i in range(4)])   # no rank in its meta.json
    (tmp_path / "figures").mkdir()
    assert [r.rank for r in rank_dirs(tmp_path)] == [0, 1]


def test_ranks_split_over_two_levels_say_so_not_that_one_is_missing(tmp_path):
    write_rank(tmp_path / "rank-0", 0, 2, np.full(10, 0.01))
    write_rank(tmp_path / "host-b" / "rank-1", 1, 2, np.full(10, 0.01))
    with pytest.raises(RunDirError, match=r"at two levels"):
        rank_dirs(tmp_path)


def test_clock_origin_that_is_no_unix_time_is_an_error(tmp_path):
    write_rank(tmp_path / "rank-0", 0, 1, np.full(10, 0.01))
    meta = tmp_path / "rank-0" / "meta.json"
    meta.write_text(meta.read_text().replace('"clock_origin_unix": 1800000000.0', '"clock_origin_unix": 1e308'))
    with pytest.raises(RunDirError, match=r"clock_origin_unix 1e\+308, not a Unix time"):
        rank_dirs(tmp_path)


@pytest.mark.parametrize("damage,words", [
    (lambda meta: (meta.unlink(), meta.mkdir()), "it is a directory, where the profiler writes a file"),
    (lambda meta: meta.write_text("[" * 100_000), "is not valid JSON (nested too deeply)"),
], ids=["directory", "nested"])
def test_a_ranks_meta_that_cannot_be_read_is_one_clear_error(tmp_path, damage, words):
    for rank in range(2):
        write_rank(tmp_path / f"rank-{rank}", rank, 2, np.full(10, 0.01))
    damage(tmp_path / "rank-1" / "meta.json")
    with pytest.raises(RunDirError, match=re.escape(words)):
        rank_dirs(tmp_path)


def test_world_size_one_says_one_rank_not_no_step_clocks(tmp_path):
    write_rank(tmp_path / "rank-0", 0, 1, np.full(40, 0.01), steps_per_epoch=4)
    a = analyze_ranks(tmp_path)
    assert a.unit == "step" and a.collective == "one-rank"
    words = text.diagnosis(analyze(tmp_path))
    assert "one rank: there is no other rank to wait for" in words and "collective lies is unknown" not in words


def test_missing_rank_says_which_and_what_to_do(tmp_path):
    for rank in (0, 1, 3):
        write_rank(tmp_path / f"rank-{rank}", rank, 4, np.full(10, 0.01))
    with pytest.raises(RunDirError, match=r"lacks rank\(s\) 2 of world size 4: copy every rank"):
        rank_dirs(tmp_path)
    for rank in (0, 1, 3):   # a world of 4 billion ranks is named, not listed into memory
        write_rank(tmp_path / "huge" / f"rank-{rank}", rank, 4_000_000_000, np.full(10, 0.01))
    with pytest.raises(RunDirError, match=r"lacks rank\(s\) 2, 4, 5, 6, 7, 8, 9, 10, 11, 12 and 3999999987 more of "
                                          r"world size 4000000000: copy every rank"):
        rank_dirs(tmp_path / "huge")


def test_directory_name_disagreeing_with_meta_is_an_error(tmp_path):
    write_rank(tmp_path / "rank-1", 0, 1, np.full(10, 0.01))
    with pytest.raises(RunDirError, match=r"named for rank 1 but its meta.json records rank 0"):
        rank_dirs(tmp_path)


def test_rank_without_torchrun_meta_is_an_error(tmp_path):
    write_rank(tmp_path / "rank-0", 0, 1, np.full(10, 0.01))
    meta = tmp_path / "rank-0" / "meta.json"
    meta.write_text(meta.read_text().replace('"world_size": 1', '"world_size": null'))
    with pytest.raises(RunDirError, match=r"world_size None, not a non-negative integer"):
        rank_dirs(tmp_path)


def test_not_a_multi_rank_directory(tmp_path):
    with pytest.raises(RunDirError, match="holds no rank-<RANK> directories"):
        rank_dirs(tmp_path)


@pytest.mark.parametrize("collective", ["in-step", "between-steps"])
def test_gc_straggler_inside_its_step_is_named_with_its_generation(tmp_path, collective):
    a = analyze_ranks(synthetic_job(tmp_path, 4, 400, straggler=2, every=10, pause_s=0.008, collective=collective))
    s = a.stragglers
    assert a.ranks == 4 and a.unit == "step" and a.collective == collective
    assert a.aligned == 400 and a.warmup == 40            # the first of 10 epochs is warm-up
    assert s.rank == 2 and s.steps == 36 and s.step_fraction == pytest.approx(0.1)
    assert s.gc_explained_fraction == pytest.approx(1.0, abs=0.01)
    assert s.gc_explained_by_generation[2] == pytest.approx(1.0, abs=0.01)
    assert s.median_stall_s == pytest.approx(0.008, abs=0.0004)
    # 36 stalls of 8 ms in 360 steps of ~10.25 ms (+0.3 ms noise at most, +0.6 loading between steps)
    assert 0.060 < s.time_fraction < 0.075
    assert a.lost_fraction == pytest.approx(s.time_fraction, rel=0.05)
    assert a.per_rank[2].straggled == 36 and sum(r.straggled for r in a.per_rank) == 36
    assert a.per_rank[2].gc_pause_s[2] == pytest.approx(0.320, rel=1e-4)
    assert a.unfinished == []


@pytest.mark.parametrize("ranks", [2, 4])
def test_gc_straggler_while_loading_is_named_not_the_ranks_that_waited(tmp_path, ranks):
    # rank 1 collects before its step begins; the others' steps wait for it at the collective
    a = analyze_ranks(synthetic_job(tmp_path, ranks, 300, straggler=1, every=6, pause_s=0.006, where="loader"))
    s = a.stragglers
    assert a.collective == "in-step"
    assert s.rank == 1 and s.steps == 45
    assert s.gc_explained_fraction == pytest.approx(1.0, abs=0.01)
    assert a.per_rank[0].straggled == 0


@pytest.mark.parametrize("collective", ["in-step", "between-steps"])
def test_compute_straggler_is_named_and_not_gc(tmp_path, collective):
    where = "loader" if collective == "in-step" else "step"    # its own time, wherever the collective lets it show
    a = analyze_ranks(synthetic_job(tmp_path, 2, 300, straggler=1, every=5, pause_s=0.005, where=where,
                                    cause="compute", collective=collective))
    s = a.stragglers
    assert s.rank == 1 and s.steps == 54
    assert s.median_stall_s == pytest.approx(0.005, abs=0.0004)
    assert s.gc_explained_fraction < 0.01     # only the generation-0 noise


def test_job_without_a_straggler_has_none(tmp_path):
    a = analyze_ranks(synthetic_job(tmp_path, 8, 500, noise_s=0.0008))
    assert a.stragglers is None
    assert a.straggled_steps == 0 and a.lost_s == 0.0
    assert 0.0112 < a.median_s < 0.0125     # 10 ms computing, 0.5 loading, the slowest of 8 ranks' noise (1.6)


def test_a_ranks_memory_growth_needs_three_epochs_after_its_warm_up(tmp_path):
    # rank 1 finished 2 epochs, too few to fit a growth: its RSS/epoch read "0 B" beside a rank that grew
    write_rank(tmp_path / "rank-0", 0, 2, np.full(200, 0.01), steps_per_epoch=20, rss_growth=4 << 20)
    write_rank(tmp_path / "rank-1", 1, 2, np.full(40, 0.01), steps_per_epoch=20, rss_growth=4 << 20, status="failed",
               error="RuntimeError: gloo connection closed")
    a = analyze_ranks(tmp_path)
    assert a.per_rank[0].rss_growth_bytes_per_epoch == pytest.approx(4 << 20)
    assert a.per_rank[1].rss_growth_bytes_per_epoch is None
    rows = {line.split()[0]: line[-33:-22].strip() for line in rank_text.summary(a)
            if line.split()[:1] in (["0"], ["1"])}
    assert rows == {"0": "4.0 MiB", "1": "-"}


def test_a_comparison_says_which_job_did_not_finish_and_kept_its_warm_up(tmp_path):
    # a job whose ranks both failed in its second epoch was compared as "+31.9%: slower", with no note
    synthetic_job(tmp_path / "a", 2, 200, epochs=10)
    for rank in (0, 1):
        write_rank(tmp_path / "b" / f"rank-{rank}", rank, 2, np.full(40, 0.012), steps_per_epoch=20, status="failed",
                   error="RuntimeError: gloo connection closed")
    c = rank_analysis.compare_ranks(tmp_path / "a", tmp_path / "b")
    assert c.a.cautions == []
    assert c.b.cautions == ["rank 0 did not finish (failed)", "rank 1 did not finish (failed)",
                            "too few epochs to leave the warm-up out: its steps are compared too"]
    words = rank_text.comparison_verdict(c)
    assert "rank 1 did not finish (failed)" in words and "warm-up out" in words and "same run" not in words
    same = rank_analysis.compare_ranks(tmp_path / "a", tmp_path / "a" / ".")
    assert same.same_run and rank_text.comparison_verdict(same).endswith("Note: A and B are the same run directory.")


def test_a_longer_gap_behind_a_step_that_ended_late_is_no_stall(tmp_path):
    """In-step, 5 epochs of 20 10-ms steps. At each epoch's end rank 0 spends 40 ms before its next
    step (its end-of-epoch work), while rank 1's last step ran on 25 ms past the collective and its
    own gap was 15 ms: both begin the next step together. Charged by its gap alone, rank 0 was named
    a straggler (a user probe's DDP job, at the first step after the warm-up)."""
    n = 100
    wall0, wall1 = np.full(n, 0.010), np.full(n, 0.010)
    gap0, gap1 = np.zeros(n), np.zeros(n)
    for i in range(20, n, 20):
        gap0[i], wall1[i - 1], gap1[i] = 0.040, 0.035, 0.015
    start0, start1 = np.cumsum(gap0 + wall0) - wall0, np.cumsum(gap1 + wall1) - wall1
    assert np.allclose(start0, start1)
    write_rank(tmp_path / "rank-0", 0, 2, wall0, start_s=start0, steps_per_epoch=20)
    write_rank(tmp_path / "rank-1", 1, 2, wall1, start_s=start1, steps_per_epoch=20)
    a = analyze_ranks(tmp_path)
    assert a.collective == "in-step" and a.stragglers is None and a.lost_s == 0.0


def test_a_few_steps_are_too_few_to_call_the_ranks_apart(tmp_path):
    # 20 steps, rank 1 20% slower: its offset wanders past half a step, but 20 steps cannot tell a
    # wander that keeps growing (a reviewer's 10-20-step cases went both ways)
    rng = np.random.default_rng(1)
    write_rank(tmp_path / "rank-0", 0, 2, 0.010 + 0.0003 * rng.random(20))
    write_rank(tmp_path / "rank-1", 1, 2, 0.012 + 0.0003 * rng.random(20))
    a = analyze_ranks(tmp_path)
    assert a.drift_steps > rank_analysis.SYNC_STEPS and a.collective != "none"


def test_ranks_that_drift_apart_over_too_few_steps_say_the_straggler_is_a_guess(tmp_path):
    # no collective, 20 steps: rank 1 loads for 3 ms before each 10-ms step against rank 0's 1 ms, so
    # read as in-step it "holds the others back" 2 ms a step; the report said "steps end together"
    for rank, gap in ((0, 0.001), (1, 0.003)):
        write_rank(tmp_path / f"rank-{rank}", rank, 2, np.full(20, 0.010), start_s=np.arange(20) * (0.010 + gap) + gap)
    d = analyze(tmp_path)
    assert d.rank_analysis.collective == "in-step" and d.stragglers.rank == 1
    assert ("the ranks' steps wander 0.91 median steps apart, as ranks that never wait for each other do, but 20 "
            "steps are too few to tell (it takes 30): the stalls are read as if the ranks meet at every step") in d.cautions
    summary = "\n".join(rank_text.summary(d.rank_analysis))
    assert "steps end together" not in summary
    assert ("steps neither clearly end nor begin together (they wander 0.91 median steps between ranks, over too few "
            "steps to tell): read as if the collective is inside the step") in summary


def test_ranks_that_never_wait_for_each_other_drift_apart_and_none_is_a_straggler(tmp_path):
    # no collective (a script that never calls init_process_group): rank 1 is 5% slower and pauses
    # 8 ms in a full collection every 10 steps, but nobody waits for it; it also runs on longer
    rng = np.random.default_rng(0)
    wall0 = 0.010 + 0.0003 * rng.random(300)
    wall1 = 0.0105 + 0.0003 * rng.random(400)
    gc1 = np.zeros((3, 400))
    gc1[2, 9::10] = 0.008
    wall1 += gc1[2]
    write_rank(tmp_path / "rank-0", 0, 2, wall0)
    write_rank(tmp_path / "rank-1", 1, 2, wall1, gc1)
    a = analyze_ranks(tmp_path)
    assert a.collective == "none" and a.drift_steps > rank_analysis.SYNC_STEPS
    assert a.stragglers is None and a.lost_s == 0.0 and a.straggled_steps == 0
    d = analyze(tmp_path)
    assert "rank-straggler" not in [f.pattern for f in d.findings]
    summary = "\n".join(rank_text.summary(a))
    assert "steps drift apart" in summary and "none holds the others back" in summary
    assert "the ranks that finished recorded 300 to 400 steps (rank 1: 400); only the first 300 are compared" in summary


@pytest.mark.parametrize("meet", [True, False])
def test_ranks_that_meet_once_an_epoch_are_compared_by_epoch(tmp_path, meet):
    # rank 1's steps take 13 ms against rank 0's 10: the steps drift apart within each epoch of 100;
    # with a barrier after each epoch both begin the next together and rank 0 waits 0.3 s an epoch
    # (23% of the job); ranks that never meet drift on, and nobody waits
    for rank, step_s in ((0, 0.010), (1, 0.013)):
        epoch_s = 1.3 if meet else 100 * step_s
        start = np.concatenate([e * epoch_s + np.arange(100) * step_s for e in range(10)])
        write_rank(tmp_path / f"rank-{rank}", rank, 2, np.full(1000, step_s), start_s=start, steps_per_epoch=100)
    a = analyze_ranks(tmp_path)
    assert a.drift_steps > rank_analysis.SYNC_STEPS
    if not meet:
        assert (a.collective, a.unit, a.stragglers, a.lost_s) == ("none", "step", None, 0.0)
        return
    assert (a.collective, a.unit) == ("between-epochs", "epoch") and a.stragglers.rank == 1
    assert a.lost_fraction == pytest.approx(0.3 / 1.3, rel=0.01)
    assert "but epochs begin together: the ranks meet once an epoch" in "\n".join(rank_text.summary(a))
    d = analyze(tmp_path)
    assert d.findings[0].pattern == "rank-straggler" and d.findings[0].time_fraction == pytest.approx(0.3 / 1.3, rel=0.01)
    heat = rank_analysis.rank_heatmap(tmp_path)
    assert heat.unit == "epoch" and heat.stall_s[1].max() == pytest.approx(0.3) and heat.stall_s[0].max() == 0.0


def test_ranks_that_did_not_finish_are_told_in_the_order_they_stopped(tmp_path):
    # rank 1 raised; rank 0's next collective failed a second later; rank 2 finished
    write_rank(tmp_path / "rank-0", 0, 3, np.full(10, 0.01), status="failed", finished_unix=ORIGIN_UNIX + 5.0,
               error="RuntimeError: Connection reset by peer")
    write_rank(tmp_path / "rank-1", 1, 3, np.full(10, 0.01), status="failed", finished_unix=ORIGIN_UNIX + 4.0,
               error="ValueError: boom")
    write_rank(tmp_path / "rank-2", 2, 3, np.full(10, 0.01), finished_unix=ORIGIN_UNIX + 6.0)
    a = analyze_ranks(tmp_path)
    assert [u["rank"] for u in a.unfinished] == [1, 0]
    lines = rank_text.unfinished(a)
    assert lines[0].startswith("rank 1 did not finish (status failed: an error; when a rank dies, the others' next "
                               "collective fails) (ValueError: boom)") and lines[0].endswith("it stopped first: look at "
                                                                                                "its error first")
    assert "first" not in lines[1] and "(RuntimeError: Connection reset by peer)" in lines[1]
    # when a rank that finished is diagnosed, the verdict's note still leads with the first to stop
    d = analyze(tmp_path)
    assert d.rank_analysis.diagnosed == 2 and d.problems == []
    assert "Note: the run is incomplete (rank 1 stopped first (ValueError: boom))." in text.verdict(d)
    # a killed rank (no status of its own) that stopped first is said to be killed, not "running"
    killed = tmp_path / "killed"
    write_rank(killed / "rank-0", 0, 3, np.full(10, 0.01), finished_unix=ORIGIN_UNIX + 6.0)
    write_rank(killed / "rank-1", 1, 3, np.full(10, 0.01), status="running")
    write_rank(killed / "rank-2", 2, 3, np.full(10, 0.01), status="terminated", error="SIGTERM",
               finished_unix=ORIGIN_UNIX + 5.0)
    assert "(rank 1 stopped first (killed, crashed, or still running))" in text.verdict(analyze(killed))
    # the diagnosed rank, when none finished, is the first to stop (its error leads the verdict)
    write_rank(tmp_path / "n" / "rank-0", 0, 2, np.full(10, 0.01), status="failed", finished_unix=ORIGIN_UNIX + 5.0,
               error="RuntimeError: Connection reset by peer")
    write_rank(tmp_path / "n" / "rank-1", 1, 2, np.full(10, 0.01), status="failed", finished_unix=ORIGIN_UNIX + 4.0,
               error="ValueError: boom")
    assert "ValueError: boom" in text.verdict(analyze(tmp_path / "n"))
    # a rank killed (no status of its own, its last step's end the only time known) may have hung in the
    # collective another broke, or died first and broken it: the one with an error comes first, marked
    # first only if its error came before the killed rank's last step ended
    write_rank(tmp_path / "k" / "rank-0", 0, 2, np.full(10, 0.01), status="failed", finished_unix=ORIGIN_UNIX + 5.0,
               error="ValueError: boom")
    write_rank(tmp_path / "k" / "rank-1", 1, 2, np.full(10, 0.01), status="running")
    killed = analyze_ranks(tmp_path / "k")
    assert [(u["rank"], u["first"], u["killed_before"]) for u in killed.unfinished] == [(0, False, [1]), (1, False, [])]
    assert rank_text.unfinished(killed)[0].endswith("its error came first, but rank 1 was killed, recording nothing, "
                                                     "after a last step that ended before it, and may have died first: "
                                                     "look at both")
    write_rank(tmp_path / "e" / "rank-0", 0, 2, np.full(10, 0.01), status="failed", finished_unix=ORIGIN_UNIX + 0.05,
               error="ValueError: boom")
    write_rank(tmp_path / "e" / "rank-1", 1, 2, np.full(10, 0.01), status="running")   # steps on to 0.1 s
    early = analyze_ranks(tmp_path / "e")
    assert early.unfinished[0]["first"] and "stopped first" in rank_text.unfinished(early)[0]
    # the common kill: rank 1 killed (the OOM killer), the launcher stops rank 0 with SIGTERM after
    write_rank(tmp_path / "o" / "rank-0", 0, 2, np.full(10, 0.01), status="terminated", finished_unix=ORIGIN_UNIX + 0.2,
               error="SIGTERM")
    write_rank(tmp_path / "o" / "rank-1", 1, 2, np.full(10, 0.01), status="running")
    oom = analyze_ranks(tmp_path / "o")
    assert [(u["rank"], u["first"]) for u in oom.unfinished] == [(1, True), (0, False)]
    lines = rank_text.unfinished(oom)
    assert "stopped first" in lines[0] and "(SIGTERM)" not in lines[1] and "status terminated: SIGTERM" in lines[1]
    write_rank(tmp_path / "j" / "rank-0", 0, 2, np.full(10, 0.01), status="running")
    write_rank(tmp_path / "j" / "rank-1", 1, 2, np.full(10, 0.01), status="running")
    assert not any("first" in line for line in rank_text.unfinished(analyze_ranks(tmp_path / "j")))
    # no rank finished and the first to stop has no epoch: the report goes on with one that has
    write_rank(tmp_path / "f" / "rank-0", 0, 2, np.full(10, 0.01), steps_per_epoch=1, status="terminated",
               finished_unix=ORIGIN_UNIX + 6.0, error="SIGTERM")
    write_rank(tmp_path / "f" / "rank-1", 1, 2, [], status="failed", finished_unix=ORIGIN_UNIX + 0.001,
               error="ValueError: boom")
    d = analyze(tmp_path / "f")
    assert d.rank_analysis.diagnosed == 0 and d.epochs == 10


def test_a_rank_whose_memory_grows_is_said_though_another_rank_is_diagnosed(tmp_path):
    for r in range(3):
        write_rank(tmp_path / f"rank-{r}", r, 3, np.full(100, 0.01), steps_per_epoch=10,
                   rss_growth=(8 << 20) if r == 2 else 1000)
    a = analyze_ranks(tmp_path)
    lines = rank_text.summary(a)
    assert [line for line in lines if "RSS grows" in line] == [
        "!            rank 2's RSS grows 8.0 MiB per epoch against 1000 B on the median rank: `profiler report` on "
        "its directory for the growth"]
    assert lines[lines.index(next(line for line in lines if line.lstrip().startswith("rank host"))) + 3].endswith(
        "8.0 MiB          -          -")


@pytest.mark.parametrize("collective, where, pause_s", [("in-step", "step", 0.008), ("between-steps", "step", 0.008),
                                                       ("between-steps", "loader", 0.02), ("between-steps", "loader", 0.05)])
def test_ranks_that_meet_every_step_stay_within_a_step(tmp_path, collective, where, pause_s):
    # a straggler's stalls of 2-5 steps before its step, one step in 10, move its offsets on those
    # steps only: the ranks still meet (a reviewer's case, which a 95th percentile called drift)
    a = analyze_ranks(synthetic_job(tmp_path, 4, 400, straggler=2, collective=collective, where=where, pause_s=pause_s))
    assert a.collective == collective and a.drift_steps < rank_analysis.SYNC_STEPS
    assert a.stragglers is not None and a.stragglers.rank == 2


def test_stalls_spread_over_every_rank_name_no_straggler(tmp_path):
    a = analyze_ranks(synthetic_job(tmp_path, 4, 400, spread=0.05, pause_s=0.004, where="loader"))
    assert a.straggled_steps > 40 and a.lost_fraction > 0.02
    assert a.stragglers is None


def test_a_rank_that_ran_on_long_past_its_last_step_says_so(tmp_path):
    # a hang: rank 1 stopped recording at step 69 and was terminated 20 s later; the report said nothing of it
    for rank in (0, 1):
        write_rank(tmp_path / f"rank-{rank}", rank, 2, np.full(70, 0.01), steps_per_epoch=35, status="terminated",
                   error="SIGTERM", finished_unix=ORIGIN_UNIX + 0.7 + 20.0)
    line = rank_text.unfinished(analyze_ranks(tmp_path))[0]
    assert ("its last finished step is 69, and it ran on 20 s past its last recorded step's end before it stopped, "
            "recording nothing (a hang, or work outside its steps)") in line
    # the steps of the epoch it stopped in count as recorded: no hang when they run up to the stop
    for rank in (0, 1):
        d = write_rank(tmp_path / "u" / f"rank-{rank}", rank, 2, np.full(270, 0.01), steps_per_epoch=135,
                       status="terminated", error="SIGTERM", finished_unix=ORIGIN_UNIX + 2.7 + 0.05) or \
            tmp_path / "u" / f"rank-{rank}"
        lines = (d / "epochs.jsonl").read_text().splitlines()
        (d / "epochs.jsonl").write_text("\n".join([*lines[:-1], lines[-1][:-1] + ', "unfinished": true}']) + "\n")
    line = rank_text.unfinished(analyze_ranks(tmp_path / "u"))[0]
    assert "ran on" not in line and "its last finished step is 134 (1 epoch)" in line
    for rank in (0, 1):
        write_rank(tmp_path / "b" / f"rank-{rank}", rank, 2, np.full(70, 0.01), steps_per_epoch=35,
                   status="terminated", error="SIGTERM", finished_unix=ORIGIN_UNIX + 0.75)
    assert "ran on" not in " ".join(rank_text.unfinished(analyze_ranks(tmp_path / "b")))


def test_killed_rank_is_named_with_its_last_step_and_the_others_are_intact(tmp_path):
    for rank in (0, 2):
        write_rank(tmp_path / f"rank-{rank}", rank, 3, np.full(200, 0.01), steps_per_epoch=20)
    write_rank(tmp_path / "rank-1", 1, 3, np.full(73, 0.01), status="running", steps_per_epoch=20)
    a = analyze_ranks(tmp_path)
    assert a.unfinished == [{"rank": 1, "status": "running", "last_step": 72, "steps": 73, "epochs": 4, "error": None,
                            "first": False, "killed_before": [], "silent_s": None, "median_s": 0.01}]
    assert a.aligned == 73
    assert [r.steps for r in a.per_rank] == [200, 73, 200]


def test_ranks_without_steps_align_epochs(tmp_path):
    synthetic_job(tmp_path, 2, 200, straggler=0, every=10, pause_s=0.02)
    for rank in range(2):
        (tmp_path / f"rank-{rank}" / "steps.bin").unlink()
    a = analyze_ranks(tmp_path)
    assert a.unit == "epoch" and a.collective == "unknown" and a.aligned == 10 and a.warmup == 1
    assert "unknown (a rank recorded no steps): epochs compared by wall time" in text.diagnosis(analyze(tmp_path))
    assert a.per_rank[0].gc_pause_s[2] == pytest.approx(0.4, rel=1e-6)
    assert a.stragglers.rank == 0 and a.stragglers.steps == 9       # every epoch holds two of its pauses


def test_blocks_give_the_same_answer_as_one_block(tmp_path, monkeypatch):
    synthetic_job(tmp_path, 5, 700, straggler=3, every=7)
    whole = analyze_ranks(tmp_path)
    monkeypatch.setattr(rank_analysis, "BLOCK_VALUES", 5 * 64)    # 11 blocks of 64 steps
    reads = []
    original = rank_analysis._Source.read
    monkeypatch.setattr(rank_analysis._Source, "read",
                        lambda self, a, b: reads.append(b - a) or original(self, a, b))
    blocked = analyze_ranks(tmp_path)
    assert max(reads) == 64 and len(reads) == 5 * (1 + 10)    # the probe block, then 630 steps in 10
    # the drift is the probe's (its median step: of the probe block's steps)
    assert blocked.drift_steps == pytest.approx(whole.drift_steps, rel=0.01)
    assert dataclasses.replace(blocked, drift_steps=whole.drift_steps) == whole


def test_heatmap_marks_the_stragglers_bins_and_its_gc(tmp_path):
    synthetic_job(tmp_path, 3, 110, straggler=2, every=10, epochs=11)
    h = rank_heatmap(tmp_path, bins=10)
    assert h.stall_s.shape == (3, 10) and list(h.edges) == list(range(10, 111, 10))
    assert np.all(h.stall_s[2] == pytest.approx(0.008, abs=0.0004))
    assert np.all(h.stall_s[:2] < 0.0004)
    assert h.gc2[2].all() and not h.gc2[:2].any()


@pytest.mark.slow   # renders figures (about 3 s)
def test_report_compare_and_timeline_commands_take_a_multi_rank_directory(tmp_path, capsys):
    from profiler.cli import main
    a = synthetic_job(tmp_path / "a", 3, 200, straggler=1, every=10, pause_s=0.008)
    b = synthetic_job(tmp_path / "b", 3, 200)
    assert main(["report", str(a), "--html", str(tmp_path / "r.html")]) == 0
    out = capsys.readouterr().out
    assert "Rank 1 holds the other ranks back" in out and "ranks        3, 180 steps analysed of the 200 aligned (the first 20, the warm-up, left out)" in out
    html = (tmp_path / "r.html").read_text()
    assert "<h2>Ranks</h2>" in html and html.count("data:image/png") >= 2     # the heatmap, then rank 1's run
    assert "<th>RSS/epoch</th>" in html                                        # as the text's per-rank table
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "Rank 1 no longer straggles" in out
    assert main(["compare", str(a), str(b), "--json"]) == 0
    assert "Rank 1 no longer straggles" in json.loads(capsys.readouterr().out)["verdict"]
    assert main(["compare", str(a), str(a / "rank-0")]) == 2
    assert "is a multi-rank run and" in capsys.readouterr().err
    from profiler import compare   # the Python API's renderers take the RankComparison too
    assert "Rank 1 no longer straggles" in text.comparison_verdict(compare(a, b))
    assert text.comparison(compare(a, b)).startswith(text.comparison_verdict(compare(a, b))[:40])
    assert main(["timeline", str(a), "--out", str(tmp_path / "t.json")]) == 0
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {0: "rank 0 (node-0)", 1: "rank 1 (node-0)", 2: "rank 2 (node-0)"}
    steps = [e for e in events if e.get("cat") == "step" and e["pid"] == 2]
    assert len(steps) == 200


def test_rank_killed_before_its_first_epoch_is_reported_and_the_others_aligned(tmp_path):
    synthetic_job(tmp_path, 3, 200, straggler=2, every=10)
    shutil.rmtree(tmp_path / "rank-1")
    write_rank(tmp_path / "rank-1", 1, 3, np.zeros(0), status="running")
    (tmp_path / "rank-1" / "epochs.jsonl").write_text("")
    a = analyze_ranks(tmp_path)
    assert a.aligned == 200 and a.stragglers.rank == 2
    assert a.unfinished == [{"rank": 1, "status": "running", "last_step": None, "steps": 0, "epochs": 0, "error": None,
                            "first": False, "killed_before": [], "silent_s": None, "median_s": 0.0}]
    assert rank_heatmap(tmp_path, bins=9).ranks == [0, 2]


@pytest.mark.parametrize("cut", [
    dict(),                                      # epochs.jsonl lost its lines after epoch 3, steps.bin kept them all
    dict(torn=True),                             # and epoch 4's line is torn mid-write
    dict(steps=90, status="running")])           # SIGKILL in epoch 4, after a buffer of its steps was written
def test_rank_holding_steps_of_epochs_without_a_line_is_compared_up_to_its_last_epoch(tmp_path, cut):
    # rank 1 stopped after 4 of 10 epochs (20 steps each); its steps.bin holds steps of epochs that
    # epochs.jsonl has no line for, which the reader leaves out: the job is compared over the 80
    # steps every rank finished, rank 2 still the straggler, rank 1 the rank that stopped early
    synthetic_job(tmp_path, 3, 200, straggler=2, every=10)
    cut_rank(tmp_path / "rank-1", 4, **cut)
    a = analyze_ranks(tmp_path)
    assert a.aligned == 80 and a.unit == "step"
    assert [(r.steps, r.epochs, r.last_step, r.complete) for r in a.per_rank] == [
        (200, 10, 199, True), (80, 4, 79, False), (200, 10, 199, True)]
    stalls = [i for i in range(a.warmup, 80) if i % 10 == 9]
    assert a.stragglers.rank == 2 and a.stragglers.steps == len(stalls) > 0
    assert a.stragglers.stall_s == pytest.approx(0.008 * len(stalls), rel=0.1)
    assert [u["rank"] for u in a.unfinished] == ([1] if cut.get("status") else [])
    heat = rank_heatmap(tmp_path, bins=8)
    assert heat.edges[-1] == 80 and heat.stall_s.shape[0] == 3
    d = analyze(tmp_path)
    assert d.rank_analysis.diagnosed == 2 and not d.complete    # rank 2 completed; the job did not
    assert "the job is incomplete" in text.diagnosis(d).splitlines()[0]


@pytest.mark.parametrize("cause", ["gc", "compute"])
def test_gc_pauses_spread_over_every_rank_are_a_finding_of_their_own(tmp_path, cause):
    # every rank collects now and then, each at its own steps: no straggler, but the job pays them all
    synthetic_job(tmp_path, 4, 400, spread=0.05, pause_s=0.006, where="loader", cause=cause)
    d = analyze(tmp_path)
    assert d.ranks == 4 and d.stragglers is None
    stalls = next(f for f in d.findings if f.pattern == "rank-stalls")
    assert stalls.cause == cause and stalls.time_fraction == pytest.approx(d.rank_analysis.lost_fraction)
    assert stalls.evidence.ranks_stalling == 4
    explained = sum(stalls.evidence.gc_explained_by_generation)
    assert explained > 0.95 if cause == "gc" else explained < 0.05
    words = text.remedy(stalls)
    assert ("--gc-policy manual:N" in words) == (cause == "gc")


@pytest.mark.parametrize("name, record, offset, value, shown", [
    ("steps.bin", 48, 16, np.int64(0), "wall_s -"),                # record 3 ends at the clock's origin
    ("gc_events.bin", 17, 8, np.float32(np.nan), "duration_s nan")])
def test_a_damaged_rank_file_is_an_error_not_wrong_numbers(tmp_path, name, record, offset, value, shown):
    root = synthetic_job(tmp_path, 4, 200, straggler=2, where="load")   # rank 2 has GC events between steps
    path = root / "rank-2" / name
    data = bytearray(path.read_bytes())
    assert len(data) >= 4 * record
    at = 3 * record + offset   # a field of record 3
    data[at:at + value.nbytes] = value.tobytes()
    path.write_bytes(bytes(data))
    with pytest.raises(RunDirError, match=rf"rank-2/{name} record 3 has {shown}"):
        analyze_ranks(root)


def test_what_another_ranks_records_leave_out_is_noted_for_the_job(tmp_path):
    # collections hidden from one rank's callback: the job is whole, and its report says what that rank left out
    synthetic_job(tmp_path, 4, 200)
    base = analyze(tmp_path).rank_analysis.diagnosed
    other = next(r for r in rank_dirs(tmp_path) if r.rank != base)
    lines = (other.path / "epochs.jsonl").read_text().splitlines()
    record = json.loads(lines[-1])
    record["gc"]["missed"] = [0, 0, 3]
    (other.path / "epochs.jsonl").write_text("\n".join(lines[:-1] + [json.dumps(record)]) + "\n")
    d = analyze(tmp_path)
    assert d.complete and len(d.cautions) == 1 and d.cautions[0].startswith(f"rank {other.rank}: 3 collections in epoch")
    assert f"Note: rank {other.rank}: 3 collections in epoch" in text.verdict(d)
    # ...and of the diagnosed rank itself, named as such (one collection: "was")
    lines = (rank_dirs(tmp_path)[base].path / "epochs.jsonl").read_text().splitlines()
    record = json.loads(lines[-1])
    record["gc"]["missed"] = [0, 0, 1]
    (rank_dirs(tmp_path)[base].path / "epochs.jsonl").write_text("\n".join(lines[:-1] + [json.dumps(record)]) + "\n")
    d = analyze(tmp_path)
    assert sorted(c.split(":")[0] for c in d.cautions) == sorted([f"rank {base}", f"rank {other.rank}"])
    assert any(c.startswith(f"rank {base}: 1 collection in epoch") and " was not timed" in c for c in d.cautions)
    # compared as a job with another: the note names the side and the ranks
    clean = synthetic_job(tmp_path.parent / f"{tmp_path.name}-clean", 4, 200)
    words = text.comparison_verdict(rank_analysis.compare_ranks(clean, tmp_path))
    assert f"Note: in {tmp_path.name}, rank {base}: 1 collection in epoch" in words and words.count("Note:") == 1


def own_calls(rank_dir, site="/home/u/train.py:40"):
    """Mark a rank's full collections as the program's own gc.collect() calls at `site`."""
    path = rank_dir / "epochs.jsonl"
    lines = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        g = record["gc"]
        g.update(forced=[0, 0, g["collections"][2]], forced_pause_s=[0.0, 0.0, g["pause_s"][2]])
        if g["collections"][2]:
            g["forced_sites"] = [{"site": site, "collections": g["collections"][2], "pause_s": g["pause_s"][2]}]
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")


def test_stalls_spread_that_are_the_programs_own_calls_are_told_to_move_them_not_a_policy(tmp_path):
    # both ranks collect by hand, at different steps: "--gc-policy manual:N" would only add collections (a probe)
    synthetic_job(tmp_path, 2, 400, spread=0.05, pause_s=0.008)
    for rank in range(2):
        own_calls(tmp_path / f"rank-{rank}")
    f = analyze(tmp_path).findings[0]
    assert f.pattern == "rank-stalls" and f.evidence.forced == {0: "/home/u/train.py:40", 1: "/home/u/train.py:40"}
    remedy = text.remedy(f)
    assert remedy.startswith("The pauses are the program's own gc.collect() calls (rank 0 at /home/u/train.py:40; "
                             "rank 1 at /home/u/train.py:40)") and "--gc-policy manual" not in remedy


def test_a_straggler_whose_pauses_are_its_own_gc_collect_calls_is_told_to_remove_them(tmp_path):
    # rank 2's full collections are gc.collect() calls at one line: no --gc-policy stops those
    synthetic_job(tmp_path, 4, 400, straggler=2, every=10, pause_s=0.008)
    own_calls(rank_dirs(tmp_path)[2].path)
    d = analyze(tmp_path)
    f = next(f for f in d.findings if f.pattern == "rank-straggler")
    assert f.evidence.rank == 2 and f.evidence.forced.site == "/home/u/train.py:40"
    assert "of its GC pause is the program's own gc.collect() calls (4 calls per epoch, at /home/u/train.py:40)" \
        in text.evidence(f)
    remedy = text.remedy(f)
    assert remedy.startswith("Rank 2's stalls are the program's own gc.collect() calls (at /home/u/train.py:40)")
    assert "--gc-policy" not in remedy
    # a rank whose records predate the forced fields has none
    assert rank_analysis.analyze_ranks(tmp_path).per_rank[0].forced is None
    # one call an epoch, beside the 4 stalls an epoch of automatic collections: those calls are not its stalls
    path, lines = rank_dirs(tmp_path)[2].path / "epochs.jsonl", []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        g = record["gc"]
        calls = min(1, g["collections"][2])
        g.update(forced=[0, 0, calls], forced_pause_s=[0.0, 0.0, g["pause_s"][2] if calls else 0.0])
        g["forced_sites"] = [{"site": "/home/u/train.py:40", "collections": calls, "pause_s": g["pause_s"][2]}] \
            if calls else []
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")
    f = next(f for f in analyze(tmp_path).findings if f.pattern == "rank-straggler")
    assert f.evidence.forced.collections[2] < f.evidence.steps / 2 and "--gc-policy manual" in text.remedy(f)


def test_a_rank_that_finished_one_epoch_of_a_long_job_leaves_too_few_steps_for_a_straggler(tmp_path):
    """Aligned steps are those every rank finished: one rank's single epoch left one step after the
    warm-up, and its stall there read "rank 2 holds the others back in 100.0% of the steps" (a probe).
    No straggler is called on fewer than MIN_ALIGNED steps, and a caution names the short rank."""
    job = synthetic_job(tmp_path / "job", 4, 200, straggler=2)
    cut_rank(job / "rank-3", 1, steps=20, status="failed")
    merged = analyze_ranks(job)
    assert merged.aligned - merged.warmup < rank_analysis.MIN_ALIGNED and merged.stragglers is None
    d = analyze(job)
    assert not [f for f in d.findings if f.pattern in ("rank-straggler", "rank-stalls")]
    caution = ("only 1 step after the warm-up is aligned across the ranks (rank 3 finished 20, the others up to 200): "
               "too few to tell a straggler")
    assert caution in d.cautions and caution in text.verdict(d)
    side = rank_analysis.compare_ranks(job, job).a
    assert side.straggler is None and caution in side.cautions
    # a short job that every rank finished says so, not "the others up to" the same count (a probe)
    short = synthetic_job(tmp_path / "short", 2, 6, epochs=3)
    assert any("aligned across the ranks (every rank finished 6): too few" in c for c in analyze(short).cautions)
    # the whole job: the straggler as before, and no caution
    whole = synthetic_job(tmp_path / "whole", 4, 200, straggler=2)
    assert analyze_ranks(whole).stragglers.rank == 2 and analyze(whole).cautions == []


def test_a_comparison_of_two_jobs_with_stragglers_says_whose_share_is_whose(tmp_path):
    synthetic_job(tmp_path / "a", 2, 200, straggler=1, pause_s=0.012)
    synthetic_job(tmp_path / "b", 2, 200, straggler=0, pause_s=0.006)
    words = rank_text.comparison_verdict(rank_analysis.compare_ranks(tmp_path / "a", tmp_path / "b"))
    assert re.search(r"Rank 0's stalls cost \d+\.\d% of the job in b, against rank 1's \d+\.\d% in a\.", words), words
    synthetic_job(tmp_path / "c", 2, 200, straggler=1, pause_s=0.006)
    words = rank_text.comparison_verdict(rank_analysis.compare_ranks(tmp_path / "a", tmp_path / "c"))
    assert re.search(r"Rank 1's stalls cost \d+\.\d% of the job in c, against its \d+\.\d% in a\.", words), words


def test_two_slow_steps_that_no_gc_explains_name_no_straggler_but_two_full_collections_do(tmp_path):
    # a worker's slow first batch, twice in 200 steps, is noise; two collections that stall the job are not
    synthetic_job(tmp_path / "noise", 2, 200, straggler=1, every=100, cause="compute", where="load", pause_s=0.05)
    d = analyze(tmp_path / "noise")
    assert d.stragglers is None and d.findings == [] and d.rank_analysis.per_rank[1].straggled == 2
    synthetic_job(tmp_path / "gc", 2, 200, straggler=1, every=100, cause="gc", pause_s=0.05)
    d = analyze(tmp_path / "gc")
    assert d.stragglers.rank == 1 and d.stragglers.steps == 2


@pytest.mark.parametrize("seed", [0, 1])
def test_two_ranks_that_stall_in_turn_as_often_are_no_straggler(tmp_path, seed):
    # of two ranks one always holds half the lost time or more: it must lead the other clearly
    synthetic_job(tmp_path / "job", 2, 200, spread=0.05, pause_s=0.008, seed=seed)
    d = analyze(tmp_path / "job")
    assert d.stragglers is None and d.findings[0].pattern == "rank-stalls"
    assert all(s.straggled >= 5 for s in d.rank_analysis.per_rank)


def late_starts(path, late):
    """A 2-rank job of 200 steps meeting in each step, whose rank r starts step i late[(r, i)] seconds late."""
    rng = np.random.default_rng(0)
    start, wall, ready = np.empty((2, 200)), np.empty((2, 200)), np.zeros(2)
    for i in range(200):
        begin = ready + 0.0005 + 0.00003 * rng.random(2) + [late.get((r, i), 0.0) for r in range(2)]
        end = (begin + 0.010 + 0.0003 * rng.random(2)).max() + 0.0001
        start[:, i], wall[:, i], ready = begin, end - begin, np.full(2, end)
    for r in range(2):
        write_rank(path / f"rank-{r}", r, 2, wall[r], start_s=start[r], steps_per_epoch=20)
    return path


def test_two_stalls_of_one_rank_and_a_small_one_of_another_are_no_stalls_spread(tmp_path):
    # rank 1 started two steps 50 ms late, rank 0 one 3 ms late: "no rank stands out, but 2 of the 2 ranks held
    # the others back in turn", though rank 1 caused 97% of the lost time (a review)
    d = analyze(late_starts(tmp_path, {(1, 50): 0.05, (1, 150): 0.05, (0, 100): 0.003}))
    assert [s.straggled for s in d.rank_analysis.per_rank] == [1, 2] and d.rank_analysis.lost_fraction > 0.02
    assert d.findings == []


def test_two_events_and_stalls_just_above_the_floor_are_no_straggler(tmp_path):
    # two 150-ms late starts of rank 1 and two of 2 ms (noise above the 10%-of-a-step floor) made "4 steps ...
    # median 75.54 ms": no stall came near it (a probe)
    d = analyze(late_starts(tmp_path, {(1, 50): 0.15, (1, 150): 0.15, (1, 80): 0.002, (1, 120): 0.002}))
    assert d.rank_analysis.per_rank[1].straggled == 4 and d.stragglers is None and d.findings == []
    # the same two events, and then every tenth step late as well: a straggler
    late = {(1, i): 0.01 for i in range(0, 200, 10)} | {(1, 55): 0.15, (1, 155): 0.15}
    assert analyze(late_starts(tmp_path / "pattern", late)).stragglers.rank == 1


def _data_job(root, waits, step_s=0.03, n=200):
    """A data-parallel job whose steps end together (the all-reduce) and whose ranks wait `waits`
    (seconds a step, by rank) for their DataLoader batches: a slow loader shows in every rank's step."""
    for rank, wait in enumerate(waits):
        write_rank(root / f"rank-{rank}", rank, len(waits), np.full(n, step_s), steps_per_epoch=20, data_s=wait)
    return root


def test_a_rank_slow_to_load_its_batches_is_named_though_no_rank_stalls(tmp_path):
    a = analyze_ranks(_data_job(tmp_path / "slow", [0.0005, 0.0005, 0.012, 0.0005]))
    assert a.stragglers is None and a.lost_s == 0.0   # the steps end together: nobody's stall
    s = a.input_straggler
    assert (s.rank, s.wait_s, s.others_wait_s) == (2, pytest.approx(0.012), pytest.approx(0.0005))
    assert s.time_fraction == pytest.approx(0.0115 / 0.03)
    assert [r.data_wait_s for r in a.per_rank] == pytest.approx([0.0005, 0.0005, 0.012, 0.0005])
    d = analyze(tmp_path / "slow")
    assert d.primary_cause == "compute" and d.findings[0].pattern == "rank-input-wait"
    assert d.rank_analysis.diagnosed == 2 and "input-wait" not in [f.pattern for f in d.findings]   # its own, once
    words = text.diagnosis(d)
    assert "Rank 2 waits 12.00 ms a step for its DataLoader's next batch, against 0.50 ms on the other ranks" in words
    assert "38.3% of the job's time (its mean step 30.00 ms)" in words
    table = rank_text.summary(a)
    header = next(i for i, line in enumerate(table) if line.lstrip().startswith("rank host"))
    assert table[header].endswith("data wait   own work") and [line.split()[-3] for line in table[header + 1:header + 5]] == [
        "0.50", "0.50", "12.00", "0.50"]   # ms a step


def test_a_rank_whose_memory_grows_through_its_one_epoch_is_said(tmp_path):
    from profiler.rundir.format import RSS, RSS_SAMPLE
    for r in range(3):
        path = write_rank(tmp_path / f"rank-{r}", r, 3, np.full(3000, 0.01))   # one epoch of 30 s
        grows = (2 << 20) if r == 1 else 0   # rank 1's anonymous memory: 2 MiB a second
        (path / RSS).write_bytes(b"".join(RSS_SAMPLE.pack(int(t * 1e9), 0, 300 * (1 << 20) + int(grows * t), 0)
                                          for t in np.arange(1.0, 30.0)))
    a = analyze_ranks(tmp_path)
    assert [r.memory_trend.late_bytes_per_s for r in a.per_rank] == pytest.approx([0, 2 << 20, 0])
    assert [r.memory_trend.shape for r in a.per_rank] == ["flat", "grows", "flat"]
    said = ("rank 1's anonymous memory grows 2.0 MiB a second against 0 B on the median rank: `profiler report` on "
            "its directory for the growth")
    assert [line for line in rank_text.summary(a) if "memory grows" in line] == [f"!            {said}"]
    import html as escaping

    from profiler.report import html
    assert escaping.escape(said) in html.ranks_section(a, rank_heatmap(tmp_path))


@pytest.mark.parametrize("waits", [[0.012, 0.012, 0.012, 0.012],    # every rank as slow: each its own input-wait
                                   [0.002, 0.0035],                 # one leads, but under 2x
                                   [0.0005, 0.001]])                # 2x, but 1.7% of the step
def test_ranks_that_load_alike_or_close_have_no_input_straggler(tmp_path, waits):
    a = analyze_ranks(_data_job(tmp_path, waits))
    assert a.input_straggler is None
    d = analyze(tmp_path)
    assert "rank-input-wait" not in [f.pattern for f in d.findings]
    assert ("input-wait" in [f.pattern for f in d.findings]) == (min(waits) / 0.03 >= 0.2)   # the rank diagnosed


def test_the_per_rank_table_keeps_its_columns_for_every_status_and_tells_long_hosts_apart(tmp_path):
    for r, status in enumerate(("completed", "interrupted", "terminated")):
        write_rank(tmp_path / f"rank-{r}", r, 3, np.full(40, 0.01), steps_per_epoch=10, status=status,
                   host=f"gpu-cluster-node-0{r}", local_rank=0)
    lines = rank_text.summary(analyze_ranks(tmp_path))
    header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("rank host"))
    table = lines[header:header + 4]
    assert len({len(line) for line in table}) == 1
    assert [line.split()[1:3] for line in table[1:]] == [["...r-node-00", "completed"], ["...r-node-01", "interrupted"],
                                                         ["...r-node-02", "terminated"]]



def test_a_gc_stragglers_pauses_are_its_finding_and_a_rank_read_alone_says_it_is_one(tmp_path):
    job = synthetic_job(tmp_path / "job", 2, 200, straggler=1, every=10, pause_s=0.008)
    # rank 1 read alone: its own spikes, and a note that it is one rank of a job (a probe: nothing said so)
    alone = analyze(job / "rank-1")
    assert "gc-spikes" in [f.pattern for f in alone.findings] and (alone.rank_of.rank, alone.rank_of.world_size, alone.rank_of.job_dir) == (1, 2, str(job))
    assert (f"Note: this is rank 1 of a job of 2 ranks, read alone: its steps show what it waited for, not which rank "
            f"it waited for; profiler report on the job's directory ({job}) reads the ranks together.") \
        in text.verdict(alone)
    # the job: the straggler's own gc-spikes are the pauses the other rank waited for, told by the straggler
    # finding; its remedy had read "gc.collect() every N steps on every rank", the straggler's "not when one rank
    # holds the objects" (a probe)
    d = analyze(job)
    patterns = [f.pattern for f in d.findings]
    assert patterns[0] == "rank-straggler" and "gc-spikes" not in patterns and d.rank_of is None
    assert "read alone" not in text.verdict(d)


def _compute_job(root, own, step_s=0.03, backward=0.008, n=200):
    """A data-parallel job whose steps end together at the all-reduce inside Tensor.backward(): rank r
    works own[r] seconds a step before it, and every rank's backward waits for the slowest rank's work."""
    slowest = max(own)
    for rank, work in enumerate(own):
        write_rank(root / f"rank-{rank}", rank, len(own), np.full(n, step_s), steps_per_epoch=20, data_s=0.0005,
                   backward_s=backward + slowest - work)
    return root


def test_a_rank_slow_at_its_own_work_is_named_though_no_rank_stalls(tmp_path):
    # rank 1 sleeps 3 ms in its step: every rank's step is as long, no rank stalls, and the report had said
    # "No finding" (a probe); the others wait for its gradients inside their backward
    a = analyze_ranks(_compute_job(tmp_path / "slow", [0.004, 0.016, 0.004]))
    assert a.stragglers is None and a.lost_s == 0.0 and a.input_straggler is None
    s = a.compute_straggler
    assert (s.rank, s.own_s, s.others_own_s) == (1, pytest.approx(0.030 - 0.0005 - 0.008), pytest.approx(0.0095))
    assert (s.backward_s, s.others_backward_s) == (pytest.approx(0.008), pytest.approx(0.020))
    assert s.time_fraction == pytest.approx(0.012 / 0.03)
    d = analyze(tmp_path / "slow")
    assert d.primary_cause == "compute" and d.findings[0].pattern == "rank-compute" and d.rank_analysis.diagnosed == 1
    words = " ".join(text.diagnosis(d).split())
    assert ("Rank 1 spends 21.50 ms a step on its own work (the step less its backward, its waits for data and its "
            "GC pauses), against 9.50 ms on the other ranks (their median), and they wait for its gradients inside "
            "their backward (20.00 ms a step against its 8.00 ms): 12.00 ms a step on average, 40.0% of the job's time "
            "(its mean step 30.00 ms)") in words
    assert "Give rank 1 the work the others have" in words


@pytest.mark.parametrize("own", [[0.004, 0.004, 0.004],   # alike
                                 [0.004, 0.005]])         # 1 ms more: 3.3% of the step
def test_ranks_that_work_alike_or_close_have_no_compute_straggler(tmp_path, own):
    assert analyze_ranks(_compute_job(tmp_path, own)).compute_straggler is None
    assert "rank-compute" not in [f.pattern for f in analyze(tmp_path).findings]


def test_a_rank_whose_step_is_longer_with_no_one_waiting_in_backward_is_no_compute_straggler(tmp_path):
    # rank 1 works 12 ms more but the others' backward is as short as its own: nothing waits for it there
    for rank in range(2):
        write_rank(tmp_path / f"rank-{rank}", rank, 2, np.full(200, 0.03 if rank else 0.018), steps_per_epoch=20,
                   data_s=0.0005, backward_s=0.008)
    assert analyze_ranks(tmp_path).compute_straggler is None


def test_a_ranks_time_outside_its_steps_or_its_waits_for_data_are_not_its_own_work(tmp_path):
    # rank 1 loads slowly (the others wait for it inside their backward) and its epochs end 200 ms after their last
    # step (workers shut down): counted from its epochs, that read as 10 ms a step of its own work (a review)
    for rank in range(2):
        slow = rank == 1
        path = write_rank(tmp_path / f"rank-{rank}", rank, 2, np.full(200, 0.03), steps_per_epoch=20,
                          data_s=0.0105 if slow else 0.0005, backward_s=0.0095 if slow else 0.0195)
        if slow:
            lines = [json.loads(line) for line in (path / "epochs.jsonl").read_text().splitlines()]
            (path / "epochs.jsonl").write_text("".join(json.dumps({**r, "wall_s": r["wall_s"] + 0.2}) + "\n"
                                                       for r in lines))
    a = analyze_ranks(tmp_path)
    assert a.input_straggler.rank == 1 and a.compute_straggler is None
    assert [r.own_s for r in a.per_rank] == pytest.approx([0.010, 0.010])
