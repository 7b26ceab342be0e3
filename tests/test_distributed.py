"""Data-parallel engine and torchrun launch: real gloo jobs on 127.0.0.1 (free ports, bounded time)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from profiler.cli import main
from profiler.rundir.format import STEP_RECORD
from profiler.errors import UsageError
from profiler.integrations.launch import free_port, launch, launcher_command, rank_argv, rank_env, rank_out_dir

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "scripts"
TIMEOUT = 120


def test_rank_out_dir_follows_torchrun_env():
    assert rank_out_dir("out", {}) == Path("out")
    assert rank_out_dir("out", {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"}) == Path("out/rank-3")
    assert rank_env({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"}) == {"rank": 3, "local_rank": 1,
                                                                             "world_size": 4, "job": None}
    torchrun = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "41000",
                "TORCHELASTIC_RUN_ID": "none"}
    assert rank_env(torchrun)["job"] == "none:41000"
    with pytest.raises(UsageError, match="RANK='x', not an integer"):
        rank_env({"RANK": "x", "WORLD_SIZE": "2"})
    with pytest.raises(UsageError, match="RANK=2 outside WORLD_SIZE=2"):
        rank_env({"RANK": "2", "WORLD_SIZE": "2"})


def test_rank_argv_drops_the_launch_option_and_fixes_the_output():
    assert rank_argv(["run", "--nproc-per-node", "2", "--epochs", "3", "mlp"], "job") == \
        ["run", "--out", "job", "--epochs", "3", "mlp"]
    assert rank_argv(["run", "--nproc-per-node=4", "train.py", "--lr", "1"], "job") == \
        ["run", "--out", "job", "train.py", "--lr", "1"]
    command = launcher_command(2, ["run", "mlp"], 29999)
    assert command[1:3] == ["-m", "profiler.integrations.launcher"]
    assert command[command.index("--master-addr") + 1] == "127.0.0.1"
    assert command[-4:] == ["-m", "profiler", "run", "mlp"]


def test_the_launcher_says_each_failed_rank_in_a_line_errors_before_signals():
    pytest.importorskip("torch")
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    from profiler.integrations.launcher import failure_lines, how_it_ended
    stopped, failed, killed = (ProcessFailure(local_rank=r, pid=100 + r, exitcode=c, error_file="<N/A>")
                               for r, c in ((0, -15), (1, 3), (2, -9)))
    assert failure_lines(ChildFailedError("profiler", {0: stopped, 1: failed, 4: killed})) == [
        "profiler: rank 1 (pid 101) exited with code 3", "profiler: rank 0 (pid 100) was killed by SIGTERM",
        "profiler: rank 4 (pid 102) was killed by SIGKILL"]
    assert failure_lines(ChildFailedError("profiler", {0: failed})) == ["profiler: rank 0 (pid 101) exited with code 3"]
    assert how_it_ended(-200) == "was killed by signal 200"


def test_launch_refuses_to_nest_or_to_mix_jobs(tmp_path, monkeypatch):
    (tmp_path / "old" / "rank-0").mkdir(parents=True)
    with pytest.raises(UsageError, match="is not empty; choose a new --out"):
        launch(2, ["run", "mlp"], tmp_path / "old")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(UsageError, match="under torchrun, leave it out"):
        launch(2, ["run", "mlp"], tmp_path / "new")
    with pytest.raises(UsageError, match="belongs to `profiler run`"):
        rank_argv(["report", "x"], "job")
    monkeypatch.delenv("RANK")
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(UsageError, match="cannot create --out .*file/job"):   # before torchrun starts
        launch(2, ["run", "mlp"], tmp_path / "file" / "job")


def test_straggler_rank_outside_the_job_is_a_usage_error(tmp_path, capsys, monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    assert main(["run", "--nproc-per-node", "2", "mlp", "--straggler-rank", "2", "--out", str(tmp_path / "a")]) == 2
    assert "--straggler-rank 2 is not a rank of --nproc-per-node 2" in capsys.readouterr().err
    assert main(["run", "mlp", "--straggler-rank", "0", "--out", str(tmp_path / "b")]) == 2
    assert "needs a data-parallel job" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_job_whose_out_is_a_file_is_a_usage_error(tmp_path, capsys, monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "file").write_text("not a directory")
    assert main(["run", "--nproc-per-node", "2", "mlp", "--out", str(tmp_path / "file")]) == 2
    assert f"--out {tmp_path / 'file'}: {tmp_path / 'file'} is a file, not a directory" in capsys.readouterr().err


def _engine_worker(out, steps, world_size):
    """Train mlp (no dropout: the same function on every rank) for `steps` steps; save the weights."""
    from profiler.workloads import scenarios
    from profiler.workloads.engine import distributed
    scenario = scenarios.build("mlp", samples=2000, batch_size=200, labels="learnable")
    model, data, optimizer = scenario.model, scenario.data, scenario.optimizer
    if world_size > 1:
        parallel = distributed.start(timeout_s=60)
        data, optimizer = parallel.shard(data), parallel.optimizer(optimizer)
        parallel.broadcast(model.flat_params)
    for i, (x, y) in zip(range(steps), data.epoch(0)):
        model.train_step(x, y)
        optimizer.step([model.flat_params], [model.flat_grads])
    np.save(out, model.flat_params)
    if world_size > 1:
        parallel.stop()


def _python(code, env, timeout=TIMEOUT):
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_data_parallel_training_matches_one_process_on_the_global_batch(tmp_path):
    pytest.importorskip("torch")
    port = str(free_port())
    procs = [_python(f"from tests.test_distributed import _engine_worker; "
                     f"_engine_worker({str(tmp_path / f'rank{r}.npy')!r}, 6, 2)",
                     {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "RANK": str(r), "LOCAL_RANK": str(r),
                      "WORLD_SIZE": "2", "NUMBA_NUM_THREADS": "1"}) for r in range(2)]
    _engine_worker(tmp_path / "single.npy", 6, 1)
    for p in procs:
        out, _ = p.communicate(timeout=TIMEOUT)
        assert p.returncode == 0, out
    single = np.load(tmp_path / "single.npy")
    ranks = [np.load(tmp_path / f"rank{r}.npy") for r in range(2)]
    np.testing.assert_array_equal(ranks[0], ranks[1])       # the ranks agree exactly
    np.testing.assert_allclose(ranks[0], single, rtol=1e-5, atol=1e-6)
    from profiler.workloads import scenarios
    initial = scenarios.build("mlp", samples=2000, batch_size=200, labels="learnable").model.flat_params
    assert np.abs(single - initial).max() > 1e-3            # six Adam steps moved the weights


# -- real jobs: torchrun, the engine data-parallel, one rank planted with GC stalls -------------------

ENV = {"NUMBA_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _job(out, *options, ranks=2):
    """`profiler run --nproc-per-node RANKS mlp ...` in a fresh process (it starts torchrun)."""
    argv = ["run", "--nproc-per-node", ranks, "mlp", "--epochs", 6, "--quiet", "--out", out, *options]
    proc = subprocess.run([sys.executable, "-m", "profiler", *map(str, argv)], cwd=ROOT, env={**os.environ, **ENV},
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _cli(capsys, *argv):
    """`profiler ARGV` in this process (the analysis commands: no need for a fresh interpreter)."""
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def _report(capsys, run_dir):
    return json.loads(_cli(capsys, "report", run_dir, "--json"))


@pytest.mark.slow
def test_two_rank_job_names_the_gc_straggler_and_compare_shows_what_a_gc_policy_changed(tmp_path, capsys):
    pytest.importorskip("torch")
    plain = _job(tmp_path / "default", "--straggler-rank", 1)
    frozen = _job(tmp_path / "freeze", "--straggler-rank", 1, "--gc-policy", "freeze")
    d = _report(capsys, plain)
    assert d["ranks"] == 2 and d["stragglers"]["rank"] == 1
    jobs = {run: {json.loads((run / f"rank-{r}" / "meta.json").read_text())["job"] for r in (0, 1)}
            for run in (plain, frozen)}
    assert all(len(j) == 1 and None not in j for j in jobs.values()) and jobs[plain] != jobs[frozen]
    # the planted loader also builds 1,000 records per step on that rank, its own time: its GC
    # explained 0.58-0.63 of its stalls on a quiet machine, 0.39 and 0.21 in loaded CI runs (the
    # other tests' processes stretch its compute), against under 0.01 for a straggler whose GC is
    # only generation-0 noise (test_ranks.py); the collections that explain them are full ones
    explained = d["stragglers"]["gc_explained_by_generation"]
    assert d["stragglers"]["gc_explained_fraction"] >= 0.1, d["stragglers"]
    assert explained[2] >= 0.9 * sum(explained), explained
    # ranked with rank 1's own findings (its steady GC share can cost as much); the straggler's
    # cause follows the share its GC explains (GC from half of it up)
    straggler = next(f for f in d["findings"] if f["pattern"] == "rank-straggler")
    assert straggler["cause"] == ("gc" if d["stragglers"]["gc_explained_fraction"] >= 0.5 else "compute")
    assert d["primary_cause"] in ("gc", straggler["cause"])
    assert [r["rank"] for r in d["rank_analysis"]["per_rank"]] == [0, 1]
    assert {r["status"] for r in d["rank_analysis"]["per_rank"]} == {"completed"}
    text = _cli(capsys, "report", plain)
    assert "Rank 1 holds the other ranks back" in text and "its own GC pauses explain" in text.replace("Its", "its")
    c = json.loads(_cli(capsys, "compare", plain, frozen, "--json"))
    assert c["a"]["gc_policy"] == "default" and c["b"]["gc_policy"] == "freeze"
    assert c["a"]["straggler"]["rank"] == 1
    assert c["step_ratio"] == pytest.approx(c["b"]["step_s"] / c["a"]["step_s"])
    words = _cli(capsys, "compare", plain, frozen)
    assert "freeze (gc-policy freeze) takes" in words and "lost waiting for stalled ranks went from" in words
    trace = tmp_path / "trace.json"
    _cli(capsys, "timeline", plain, "--out", trace)
    events = json.loads(trace.read_text())["traceEvents"]
    hosts = [r["host"] for r in d["rank_analysis"]["per_rank"]]
    names = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {f"rank {r} ({hosts[r]})" for r in (0, 1)}


@pytest.mark.slow
def test_ddp_script_on_four_ranks_over_two_nodes_names_the_gc_straggler(tmp_path, capsys):
    # a user's DDP script, unmodified, under torchrun's rendezvous as two "nodes" on 127.0.0.1;
    # each node writes its own directory, and copies of both under one directory are one job
    pytest.importorskip("torch")
    port = free_port()
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
         "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(port),
         "-m", "profiler", "run", "--out", str(tmp_path / f"node{node}"), str(SCRIPTS / "ddp_train.py"), "--epochs", "4"],
        cwd=ROOT, env={**os.environ, **ENV, "STRAGGLER_RANK": "2"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True) for node in range(2)]
    outs = []
    for node in nodes:
        out, _ = node.communicate(timeout=TIMEOUT)
        assert node.returncode == 0, out[-3000:]
        outs.append(out)
    assert sorted(p.name for p in (tmp_path / "node1").iterdir()) == ["rank-2", "rank-3"]
    # the next command names the job's directory, once: rank 0's, not every rank's own rank-N
    nexts = [[line for line in out.splitlines() if line.startswith("next:")] for out in outs]
    assert nexts == [[f"next: profiler report {tmp_path / 'node0'}"], []], nexts
    merged = tmp_path / "merged"
    for node in range(2):
        shutil.copytree(tmp_path / f"node{node}", merged / f"host-{node}")
    d = _report(capsys, merged)
    assert d["ranks"] == 4 and d["stragglers"]["rank"] == 2
    assert d["stragglers"]["gc_explained_fraction"] >= 0.5, d["stragglers"]
    assert d["primary_cause"] == "gc"
    ranks = d["rank_analysis"]["per_rank"]
    assert [(r["rank"], r["local_rank"], r["steps"]) for r in ranks] == [(0, 0, 128), (1, 1, 128), (2, 0, 128),
                                                                        (3, 1, 128)]
    assert "Rank 2 holds the other ranks back" in _cli(capsys, "report", merged)


@pytest.mark.slow
def test_a_rank_killed_mid_run_is_named_with_its_last_step_and_the_others_are_intact(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "job"
    job = subprocess.Popen([sys.executable, "-m", "profiler", "run", "--nproc-per-node", "2", "mlp", "--epochs", "500",
                            "--quiet", "--out", str(out)], cwd=ROOT, env={**os.environ, **ENV},
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        steps = out / "rank-1" / "steps.bin"
        deadline = time.monotonic() + TIMEOUT
        while not (steps.exists() and steps.stat().st_size >= 150 * STEP_RECORD.itemsize):   # after the first epochs
            assert job.poll() is None and time.monotonic() < deadline, "the job ended before rank 1 recorded steps"
            time.sleep(0.1)
        os.kill(json.loads((out / "rank-1" / "meta.json").read_text())["pid"], signal.SIGKILL)
        output, _ = job.communicate(timeout=TIMEOUT)
    finally:
        job.kill()
    # the launcher says the killed rank in a line, not its ChildFailedError traceback
    assert job.returncode == 1 and "Traceback" not in output and "ChildFailedError" not in output, output
    assert "profiler: rank 1 (pid " in output and "was killed by SIGKILL" in output
    assert "profiler: error: the job failed (the failed ranks and their errors are above)" in output
    d = _report(capsys, out)
    ra = d["rank_analysis"]
    dead = next(u for u in ra["unfinished"] if u["rank"] == 1)
    assert dead["rank"] == 1 and dead["status"] == "running" and dead["last_step"] >= 149
    assert ra["aligned"] == min(r["steps"] for r in ra["per_rank"])
    survivor = next(r for r in ra["per_rank"] if r["rank"] == 0)
    # intact: every step it finished is read. Its status depends on where torchrun's SIGTERM found it: between
    # steps it records "terminated"; blocked in gloo's all-reduce, waiting for the dead rank, it cannot run
    # Python until the launcher's SIGKILL, and stays "running"
    assert survivor["steps"] >= dead["steps"] - 1
    text = _cli(capsys, "report", out)
    # the header names the rank the diagnosis describes: a straggler when one stands out, else the first to stop
    assert text.startswith(f"run      {out}  (2 ranks; rank {ra['diagnosed']}: ") \
        and text.splitlines()[0].endswith("; the job is incomplete)")
    assert f"rank 1 did not finish (status running: killed, crashed, or still running); its last finished step is " \
           f"{dead['last_step']:,}" in text


@pytest.mark.slow
def test_a_ddp_rank_slow_at_its_own_work_is_named(tmp_path, capsys):
    # every rank's step waits for rank 1's gradients inside its backward: the steps end together, no rank stalls,
    # and the report had said "No finding" (a probe)
    pytest.importorskip("torch")
    out = tmp_path / "job"
    proc = subprocess.run([sys.executable, "-m", "profiler", "run", "--nproc-per-node", "2", "--quiet", "--out",
                           str(out), str(SCRIPTS / "ddp_train.py"), "--epochs", "3", "--samples", "2048"], cwd=ROOT,
                          env={**os.environ, **ENV, "SLOW_COMPUTE_RANK": "1"}, capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    d = _report(capsys, out)
    first = d["findings"][0]
    assert first["pattern"] == "rank-compute" and first["data"]["rank"] == 1, d["findings"]
    excess = first["data"]["own_s"] - first["data"]["others_own_s"]
    assert 0.0015 <= excess <= 0.004, first["data"]   # its 2 ms a step
    assert "Rank 1 spends" in _cli(capsys, "report", out)


@pytest.mark.slow
def test_a_stopped_job_says_where_its_ranks_runs_are(tmp_path):
    # a SIGTERM to `profiler run --nproc-per-node` (or a Ctrl-C) said only that the ranks were stopped (a probe)
    pytest.importorskip("torch")
    out = tmp_path / "job"
    job = subprocess.Popen([sys.executable, "-m", "profiler", "run", "--nproc-per-node", "2", "mlp", "--epochs", "500",
                            "--out", str(out)], cwd=ROOT, env={**os.environ, **ENV}, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        lines = out / "rank-1" / "epochs.jsonl"
        deadline = time.monotonic() + TIMEOUT
        while not (lines.exists() and lines.stat().st_size):
            assert job.poll() is None and time.monotonic() < deadline, "the job ended before rank 1 wrote an epoch"
            time.sleep(0.1)
        job.send_signal(signal.SIGTERM)
        output, _ = job.communicate(timeout=TIMEOUT)
    finally:
        job.kill()
    assert job.returncode == 128 + signal.SIGTERM and "Traceback" not in output, output
    assert f"profiler: wrote {out} (interrupted)\nnext: profiler report {out}\nprofiler: terminated" in output, output


@pytest.mark.slow
def test_a_ddp_rank_slow_to_load_its_batches_is_named(tmp_path, capsys):
    # every rank's step waits for rank 1's gradients at the all-reduce: the steps end together and no
    # rank stalls; before, the report named nobody and showed no lost time
    pytest.importorskip("torch")
    out = tmp_path / "job"
    proc = subprocess.run([sys.executable, "-m", "profiler", "run", "--nproc-per-node", "2", "--out",
                           str(out), str(SCRIPTS / "ddp_train.py"), "--epochs", "3", "--samples", "2048"], cwd=ROOT,
                          env={**os.environ, **ENV, "SLOW_LOAD_RANK": "1"}, capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the job's next command once, after the launcher's line (rank 0 had said it too: a probe)
    assert proc.stderr.count("next: profiler report") == 1 and proc.stderr.rstrip().endswith(
        f"profiler: wrote {out} (2 ranks)\nnext: profiler report {out}"), proc.stderr[-2000:]
    d = _report(capsys, out)
    first = d["findings"][0]
    assert first["pattern"] == "rank-input-wait" and first["data"]["rank"] == 1, d["findings"]
    waits = [r["data_wait_s"] for r in d["rank_analysis"]["per_rank"]]
    assert waits[1] >= 0.008 and waits[1] >= 5 * waits[0], waits   # 32 samples of 0.3 ms a step
    assert "Rank 1 waits" in _cli(capsys, "report", out)
