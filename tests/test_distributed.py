"""Data-parallel engine and torchrun launch: real gloo jobs on 127.0.0.1 (free ports, bounded time)."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from profiler.integrations.launch import free_port, launcher_command, rank_argv, rank_env, rank_out_dir
from profiler.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 120


def test_rank_out_dir_follows_torchrun_env():
    assert rank_out_dir("out", {}) == Path("out")
    assert rank_out_dir("out", {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"}) == Path("out/rank-3")
    assert rank_env({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"}) == {"rank": 3, "local_rank": 1,
                                                                             "world_size": 4}
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
    assert command[1:3] == ["-m", "torch.distributed.run"]
    assert command[command.index("--master-addr") + 1] == "127.0.0.1"
    assert command[-4:] == ["-m", "profiler", "run", "mlp"]


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
