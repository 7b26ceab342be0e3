"""Lightning: `profiler run` injects a callback into every Trainer of an unmodified script: train
epochs and train batches; the sanity check and the validation batches are not steps."""

import pytest

from tests.scripts import meta, profiler, records, report, script

pl = pytest.importorskip("pytorch_lightning")
pytestmark = pytest.mark.slow


def test_fit_with_validation_of_an_unmodified_script(tmp_path):
    out = tmp_path / "fit"
    profiler("run", "--out", out, script("lightning_fit.py"), 3)
    rows = records(out)
    assert [r["epoch"] for r in rows] == [0, 1, 2]
    assert [r["steps"] for r in rows] == [8, 8, 8]        # 256 samples / 32; validation adds none
    assert meta(out)["meta"]["epochs_from"] == "lightning" and meta(out)["status"] == "completed"
    assert report(out)["findings"] == []                   # a small clean fit: nothing to fix


def test_sigterm_stops_the_trainer_at_its_epochs_end_as_without_the_profiler(tmp_path):
    """Lightning's SIGTERM handler calls the one it replaced: the Session's ended the process at once
    (exit -15), where under python the Trainer stops after its batch and exits 0."""
    import signal
    import subprocess
    import sys
    import time
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "profiler", "run", "--out", str(out), script("lightning_fit.py"),
                             "100000"], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len((out / "epochs.jsonl").read_text().splitlines()
                                              if (out / "epochs.jsonl").exists() else []) < 3:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "Received SIGTERM" in stderr, stderr
    assert meta(out)["status"] == "completed" and 3 <= len(records(out)) < 100000


def test_a_strategy_that_spawns_its_ranks_runs_as_without_the_profiler_and_says_so(tmp_path):
    """ddp_spawn pickles the Trainer with its callbacks for the processes it spawns: the injected
    callback could not be pickled, and the script failed under the profiler alone. Each spawned
    rank binds 127.0.0.1 on a free port Lightning picks."""
    proc = profiler("run", "--out", tmp_path / "spawn", script("lightning_fit.py"), 1, "ddp_spawn",
                    env={"MASTER_ADDR": "127.0.0.1"}, timeout=240)
    assert "Lightning trained in processes it spawned" in proc.stderr and "Can't pickle" not in proc.stderr
    assert meta(tmp_path / "spawn")["status"] == "completed"


def test_ddp_started_by_lightning_itself_says_only_rank_0_was_recorded(tmp_path):
    """strategy="ddp" runs the script anew for rank 1, unprofiled: a probe's report of such a job blamed
    the machine for step spikes that were rank 0 waiting for rank 1, and never said there were two ranks."""
    proc = profiler("run", "--out", tmp_path / "ddp", script("lightning_fit.py"), 2, "ddp",
                    env={"MASTER_ADDR": "127.0.0.1"}, timeout=240)
    assert "Lightning trained on 2 ranks, starting the others itself: only this process, rank 0, was recorded" \
        in proc.stderr and "--nproc-per-node 2" in proc.stderr
    assert [r["steps"] for r in records(tmp_path / "ddp")][-2:] == [4, 4]   # rank 0's half of each epoch
    assert meta(tmp_path / "ddp")["status"] == "completed"


def test_a_pickled_callback_does_nothing_where_it_lands():
    import pickle

    from profiler.integrations.lightning import callback_class
    from profiler.integrations.marks import Marks, Source

    marks = Marks(session=None)
    copy = pickle.loads(pickle.dumps(callback_class(pl)(Source(marks, "lightning"))))
    assert type(copy) is pl.Callback and marks.spawned == {"lightning"}


def test_profiler_callback_in_code(tmp_path):
    import signal

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from profiler import Session
    from profiler.integrations.lightning import ProfilerCallback
    from tests.scripts.lightning_fit import Classifier

    data = DataLoader(TensorDataset(torch.randn(40, 16), torch.randint(0, 2, (40,))), batch_size=10)
    init_before = pl.Trainer.__init__
    with Session(tmp_path / "run") as session:
        trainer = pl.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, accelerator="cpu", callbacks=[ProfilerCallback(session)])
        trainer.fit(Classifier(), data)
        # the Trainer's teardown puts back the handler it replaced: the Session's, out of the Trainer's own list
        assert getattr(signal.getsignal(signal.SIGTERM), "__self__", None) is session
    assert [r["steps"] for r in records(tmp_path / "run")] == [4, 4]
    assert pl.Trainer.__init__ is init_before


def test_trainer_restored_after_a_script_run_in_process(tmp_path):
    from profiler.integrations.script import run_script

    init_before = pl.Trainer.__init__
    result = run_script(script("lightning_fit.py"), ["2"], out=tmp_path / "run")
    assert result.raised is None and (result.epochs, result.steps, result.epochs_from) == (2, 16, "lightning")
    assert pl.Trainer.__init__ is init_before


def test_steps_hold_the_batch_fetch(tmp_path):
    """A step runs from one train batch's end to the next's, so a DataLoader that takes 30 ms per
    batch is inside every step (it was outside them all: steps began at on_train_batch_start)."""
    import time

    import torch
    from torch.utils.data import DataLoader, Dataset

    from profiler import Session
    from profiler.integrations.lightning import ProfilerCallback
    from profiler.rundir import read_run
    from tests.scripts.lightning_fit import Classifier

    class Slow(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            time.sleep(0.03)
            return torch.zeros(10, 16), torch.zeros(10, dtype=torch.long)

    data = DataLoader(Slow(), batch_size=None)
    with Session(tmp_path / "run") as session:
        trainer = pl.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, accelerator="cpu", callbacks=[ProfilerCallback(session)])
        trainer.fit(Classifier(), data)
    steps = read_run(tmp_path / "run").steps()
    assert len(steps) == 8 and steps["wall_s"].min() >= 0.03


def test_a_validation_inside_the_epoch_is_in_no_step(tmp_path):
    """val_check_interval=0.25 validates after every 2 of the 8 batches: each validation (40 ms here) was
    folded into the next train step, and the report blamed the machine for the spikes (a probe)."""
    import time

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from profiler import Session
    from profiler.integrations.lightning import ProfilerCallback
    from profiler.rundir import read_run
    from tests.scripts.lightning_fit import Classifier

    class SlowValidation(Classifier):
        def validation_step(self, batch, batch_idx):
            time.sleep(0.02)
            return super().validation_step(batch, batch_idx)

    data = DataLoader(TensorDataset(torch.randn(256, 16), torch.randint(0, 2, (256,))), batch_size=32)
    val = DataLoader(TensorDataset(torch.randn(64, 16), torch.randint(0, 2, (64,))), batch_size=32)   # 40 ms
    with Session(tmp_path / "run") as session:
        trainer = pl.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, accelerator="cpu", val_check_interval=0.25,
                             callbacks=[ProfilerCallback(session)])
        trainer.fit(SlowValidation(), data, val)
    run = read_run(tmp_path / "run")
    assert [r["steps"] for r in run.epochs] == [8, 8]
    assert run.steps()["wall_s"].max() < 0.03 and all(r["wall_s"] >= 4 * 0.04 for r in run.epochs)
