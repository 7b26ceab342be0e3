"""Multi-rank directories: finding and checking rank-N/ run directories, and the merged analysis on
jobs with known answers (written by the tests: no training, no subprocess)."""

import numpy as np
import pytest

from profiler.analysis import ranks as rank_analysis
from profiler.analysis.ranks import analyze_ranks, rank_heatmap
from profiler.rundir import RunDirError
from profiler.rundir.ranks import is_multi_rank, rank_dirs

from .rank_runs import synthetic_job, write_rank


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


def test_duplicate_rank_names_both_directories(tmp_path):
    for host in ("a", "b"):
        write_rank(tmp_path / host / "rank-0", 0, 1, np.full(10, 0.01))
    with pytest.raises(RunDirError, match=r"rank 0 appears twice, in .*a/rank-0 and in .*b/rank-0"):
        rank_dirs(tmp_path)


def test_missing_rank_says_which_and_what_to_do(tmp_path):
    for rank in (0, 1, 3):
        write_rank(tmp_path / f"rank-{rank}", rank, 4, np.full(10, 0.01))
    with pytest.raises(RunDirError, match=r"lacks rank\(s\) 2 of world size 4: copy every rank"):
        rank_dirs(tmp_path)


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


def test_gc_straggler_inside_the_step_is_named_with_its_generation(tmp_path):
    # every rank's step is as long (they wait at the collective); only rank 2's own GC tells it apart
    a = analyze_ranks(synthetic_job(tmp_path, 4, 400, straggler=2, every=10, pause_s=0.008))
    s = a.stragglers
    assert a.ranks == 4 and a.unit == "step" and a.aligned == 400
    assert s.rank == 2 and s.steps == 40 and s.step_fraction == pytest.approx(0.1)
    assert s.gc_explained_fraction == pytest.approx(1.0, abs=0.01)
    assert s.gc_explained_by_generation[2] == pytest.approx(1.0, abs=0.01)
    # 40 stalls of 8 ms in a job of 400 x ~10.15 ms + 40 x 8 ms
    assert s.time_fraction == pytest.approx(0.320 / (400 * 0.01015 + 0.320), rel=0.05)
    assert a.lost_fraction == pytest.approx(s.time_fraction, rel=0.05)
    assert a.per_rank[2].straggled == 40 and sum(r.straggled for r in a.per_rank) == 40
    assert a.per_rank[2].gc_pause_s[2] == pytest.approx(0.320, rel=1e-4)
    assert a.unfinished == []


def test_compute_straggler_before_the_collective_is_not_gc(tmp_path):
    # only rank 1's own step is longer (its step ends before the wait), and no GC pause explains it
    a = analyze_ranks(synthetic_job(tmp_path, 2, 300, straggler=1, every=5, pause_s=0.005, where="own-step",
                                    cause="compute"))
    s = a.stragglers
    assert s.rank == 1 and s.steps == 60
    assert s.median_stall_s == pytest.approx(0.005, abs=0.0004)
    assert s.gc_explained_fraction < 0.01     # only the generation-0 noise


@pytest.mark.parametrize("ranks", [2, 4])
def test_gc_straggler_between_steps_is_named_not_the_ranks_that_waited(tmp_path, ranks):
    # rank 1 collects before its step begins; the others' steps wait for it at the collective
    a = analyze_ranks(synthetic_job(tmp_path, ranks, 300, straggler=1, every=6, pause_s=0.006, where="between-steps"))
    s = a.stragglers
    assert s.rank == 1 and s.steps == 50
    assert s.gc_explained_fraction == pytest.approx(1.0, abs=0.01)
    assert a.per_rank[0].straggled == 0


def test_compute_straggler_between_steps_blames_no_one_with_two_ranks(tmp_path):
    # with nothing of its own to show, a rank that starts late looks like the rank that waited:
    # the stall is reported as lost time, with the waiting rank named (a documented limit)
    a = analyze_ranks(synthetic_job(tmp_path, 2, 300, straggler=1, every=6, pause_s=0.006, where="between-steps",
                                    cause="compute"))
    assert a.lost_fraction > 0.05
    assert a.stragglers.rank == 0 and a.stragglers.gc_explained_fraction < 0.01


def test_job_without_a_straggler_has_none(tmp_path):
    a = analyze_ranks(synthetic_job(tmp_path, 8, 500, noise_s=0.0008))
    assert a.stragglers is None
    assert a.straggled_steps == 0 and a.lost_s == 0.0
    assert a.median_s == pytest.approx(0.0108, abs=0.0003)


def test_stalls_spread_over_every_rank_name_no_straggler(tmp_path):
    rng = np.random.default_rng(3)
    for rank in range(4):
        wall = 0.01 + 0.004 * (rng.random(400) < 0.05)   # each rank stalls now and then, none most
        write_rank(tmp_path / f"rank-{rank}", rank, 4, wall)
    a = analyze_ranks(tmp_path)
    assert a.straggled_steps > 40 and a.lost_fraction > 0.02
    assert a.stragglers is None


def test_killed_rank_is_named_with_its_last_step_and_the_others_are_intact(tmp_path):
    for rank in (0, 2):
        write_rank(tmp_path / f"rank-{rank}", rank, 3, np.full(200, 0.01), steps_per_epoch=20)
    write_rank(tmp_path / "rank-1", 1, 3, np.full(73, 0.01), status="running", steps_per_epoch=20)
    a = analyze_ranks(tmp_path)
    assert a.unfinished == [{"rank": 1, "status": "running", "last_step": 72, "steps": 73, "epochs": 4}]
    assert a.aligned == 73
    assert [r.steps for r in a.per_rank] == [200, 73, 200]


def test_ranks_without_steps_align_epochs(tmp_path):
    synthetic_job(tmp_path, 2, 200, straggler=0, every=10)
    for rank in range(2):
        (tmp_path / f"rank-{rank}" / "steps.bin").unlink()
    a = analyze_ranks(tmp_path)
    assert a.unit == "epoch" and a.aligned == 10
    assert a.per_rank[0].gc_pause_s[2] == pytest.approx(0.16, rel=1e-6)


def test_blocks_give_the_same_answer_as_one_block(tmp_path, monkeypatch):
    synthetic_job(tmp_path, 5, 700, straggler=3, every=7)
    whole = analyze_ranks(tmp_path)
    monkeypatch.setattr(rank_analysis, "BLOCK_VALUES", 5 * 64)    # 11 blocks of 64 steps
    reads = []
    original = rank_analysis._Source.read
    monkeypatch.setattr(rank_analysis._Source, "read",
                        lambda self, a, b: reads.append(b - a) or original(self, a, b))
    blocked = analyze_ranks(tmp_path)
    assert max(reads) == 64 and len(reads) == 5 * 11
    assert blocked == whole


def test_heatmap_marks_the_stragglers_bins_and_its_gc(tmp_path):
    synthetic_job(tmp_path, 3, 100, straggler=2, every=10)
    h = rank_heatmap(tmp_path, bins=10)
    assert h.stall_s.shape == (3, 10) and list(h.edges) == list(range(0, 101, 10))
    assert np.all(h.stall_s[2] == pytest.approx(0.008, abs=0.0004))
    assert np.all(h.stall_s[:2] < 0.0004)
    assert h.gc2[2].all() and not h.gc2[:2].any()
