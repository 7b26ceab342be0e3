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


def test_profiler_callback_in_code(tmp_path):
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
