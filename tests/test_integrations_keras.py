"""Keras 3 (torch backend): `profiler run` injects a callback into Model.fit of an unmodified
script; ProfilerCallback(session) for code that passes it itself."""

import os

import pytest

from tests.scripts import meta, profiler, records, report, script

os.environ.setdefault("KERAS_BACKEND", "torch")
keras = pytest.importorskip("keras")
pytestmark = pytest.mark.slow


def test_fit_of_an_unmodified_script(tmp_path):
    out = tmp_path / "fit"
    profiler("run", "--out", out, script("keras_fit.py"), 3, env={"KERAS_BACKEND": "torch"})
    rows = records(out)
    assert [r["epoch"] for r in rows] == [0, 1, 2]
    assert [r["steps"] for r in rows] == [8, 8, 8]        # 256 training samples (validation_split 0.2) / 32
    assert meta(out)["meta"]["epochs_from"] == "keras" and meta(out)["status"] == "completed"
    assert report(out)["findings"] == []                   # a small clean fit: nothing to fix


def test_profiler_callback_in_code_and_fit_unpatched_after_a_run(tmp_path):
    import numpy as np

    from profiler import Session
    from profiler.integrations.keras import ProfilerCallback

    fit_before = keras.Model.fit
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="softmax")])
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    x, y = np.zeros((40, 4), "float32"), np.zeros(40, "int32")
    with Session(tmp_path / "run") as session:
        model.fit(x, y, epochs=2, batch_size=10, verbose=0, callbacks=[ProfilerCallback(session)])
    assert [r["steps"] for r in records(tmp_path / "run")] == [4, 4]
    assert keras.Model.fit is fit_before


def test_a_fit_after_one_that_raised_drops_the_epoch_it_left_open(tmp_path):
    """Keras calls no callback when fit raises (a Ctrl-C, a callback's error), so the epoch the
    ProfilerCallback began stays open; the next fit with it drops that epoch unwritten and records
    its own (it raised 'epoch began inside epoch')."""
    import numpy as np

    from profiler import Session
    from profiler.integrations.keras import ProfilerCallback

    class Fails(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 1:
                raise RuntimeError("stop")

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="softmax")])
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    x, y = np.zeros((40, 4), "float32"), np.zeros(40, "int32")
    with Session(tmp_path / "run") as session:
        callback = ProfilerCallback(session)
        model.fit(x, y, epochs=1, batch_size=10, verbose=0, callbacks=[callback])
        with pytest.raises(RuntimeError, match="stop"):
            model.fit(x, y, epochs=2, batch_size=10, verbose=0, callbacks=[callback, Fails()])
        model.fit(x, y, epochs=2, batch_size=10, verbose=0, callbacks=[callback])
    assert [(r["epoch"], r["steps"]) for r in records(tmp_path / "run")] == [(0, 4), (1, 4), (2, 4)]


def _small_model():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="softmax")])
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    return model


def test_a_fit_inside_a_fit_leaves_the_outer_epochs_as_they_are(tmp_path):
    """A callback that fits a probe model at each epoch's end (2 epochs of 2 batches): its fit's
    on_train_begin dropped the outer epoch, and the run held the probe's epochs instead."""
    import numpy as np

    from profiler import Session
    from profiler.integrations.keras import inject

    x, y = np.zeros((40, 4), "float32"), np.zeros(40, "int32")

    class Probe(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            _small_model().fit(x[:20], y[:20], epochs=2, batch_size=10, verbose=0)

    with Session(tmp_path / "run") as session:
        undo = inject(session)
        try:
            _small_model().fit(x, y, epochs=3, batch_size=5, verbose=0, callbacks=[Probe()])
            _small_model().fit(x, y, epochs=1, batch_size=10, verbose=0)   # and the next fit is profiled
        finally:
            undo()
    assert [(r["epoch"], r["steps"]) for r in records(tmp_path / "run")] == [(0, 8), (1, 8), (2, 8), (3, 4)]


def test_a_callback_list_the_script_built_gets_the_steps_and_is_given_back_as_it_was(tmp_path):
    """fit uses a CallbackList it is given as it is: the injection called its append(), which it has
    not, and the script failed under the profiler alone (a probe); with only default batch hooks it
    calls them in a thread pool, where no step would be seen."""
    import threading

    import numpy as np

    from profiler import Session
    from profiler.integrations.keras import inject

    x, y = np.zeros((40, 4), "float32"), np.zeros(40, "int32")

    class Counting(keras.callbacks.Callback):
        epochs = 0

        def on_epoch_end(self, epoch, logs=None):
            Counting.epochs += 1
    model = _small_model()
    mine = keras.callbacks.CallbackList([Counting()], add_history=True, model=model)
    before, asynchronous = list(mine.callbacks), mine._async_train
    assert asynchronous   # its batch hooks called in a thread pool, but for the profiler's
    threads = set()
    with Session(tmp_path / "run") as session:
        end_step = session.end_step
        session.end_step = lambda: threads.add(threading.get_ident()) or end_step()
        undo = inject(session)
        try:
            model.fit(x, y, epochs=2, batch_size=10, verbose=0, callbacks=mine)
        finally:
            undo()
    assert [(r["epoch"], r["steps"]) for r in records(tmp_path / "run")] == [(0, 4), (1, 4)] and Counting.epochs == 2
    assert threads == {threading.get_ident()}
    assert mine.callbacks == before and mine._async_train == asynchronous
    # one callback of its own, not in a list (Keras flattens callbacks): "Value after * must be an iterable" (a review)
    with Session(tmp_path / "one") as session:
        undo = inject(session)
        try:
            model.fit(x, y, epochs=1, batch_size=10, verbose=0, callbacks=Counting())
            model.fit(x, y, epochs=1, batch_size=10, verbose=0, callbacks=[[Counting()], (Counting(),)])
        finally:
            undo()
    assert [r["steps"] for r in records(tmp_path / "one")] == [4, 4] and Counting.epochs == 5


def test_a_misspelt_fit_argument_raises_keras_own_error(tmp_path):
    import numpy as np

    from profiler import Session
    from profiler.integrations.keras import inject

    x, y = np.zeros((40, 4), "float32"), np.zeros(40, "int32")
    with pytest.raises(TypeError) as plain:
        _small_model().fit(x, y, epoch=3, verbose=0)
    with Session(tmp_path / "run") as session:
        undo = inject(session)
        try:
            with pytest.raises(TypeError) as profiled:
                _small_model().fit(x, y, epoch=3, verbose=0)
        finally:
            undo()
    assert str(profiled.value) == str(plain.value) and "fit()" in str(plain.value)


def test_fit_restored_after_a_script_run_in_process(tmp_path):
    from profiler.integrations.script import run_script

    fit_before = keras.Model.fit
    result = run_script(script("keras_fit.py"), ["2"], out=tmp_path / "run")
    assert result.raised is None and (result.epochs, result.steps, result.epochs_from) == (2, 16, "keras")
    assert keras.Model.fit is fit_before and "fit" not in keras.Model.__dict__


def test_a_torch_loop_after_a_fit_is_said_to_be_in_no_epoch(tmp_path):
    """Keras's epochs own the run, so a PyTorch loop of the script's own after the fit starts none:
    its 6 steps went unsaid (a probe)."""
    from profiler.integrations.script import run_script

    (tmp_path / "mixed.py").write_text(
        "import keras, numpy as np, torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])\n"
        "model.compile(optimizer='sgd', loss='mse')\n"
        "model.fit(np.zeros((20, 4), 'float32'), np.zeros((20, 2), 'float32'), epochs=2, batch_size=10, verbose=0)\n"
        "net = torch.nn.Linear(4, 2)\n"
        "opt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        "for epoch in range(2):\n"
        "    for x, y in DataLoader(TensorDataset(torch.zeros(12, 4), torch.zeros(12, 2)), batch_size=4):\n"
        "        opt.zero_grad(); torch.nn.functional.mse_loss(net(x), y).backward(); opt.step()\n")
    result = run_script(str(tmp_path / "mixed.py"), [], out=tmp_path / "run")
    assert (result.epochs, result.steps, result.epochs_from) == (2, 4, "keras")
    assert result.notes == ["6 optimizer steps ran outside Keras's epochs (a loop of the script's own, after or beside "
                            "its training) and are in no epoch: the run's epochs are Keras's; profile that loop in a "
                            "run of its own to see them"], result.notes


def test_steps_hold_the_batch_fetch(tmp_path):
    """A step runs from one train batch's end to the next's, so a data pipeline that takes 30 ms
    per batch is inside every step (it was outside them all: steps began at on_train_batch_begin)."""
    import time

    import numpy as np

    from profiler import Session
    from profiler.integrations.keras import ProfilerCallback
    from profiler.rundir import read_run

    class Slow(keras.utils.PyDataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            time.sleep(0.03)
            return np.zeros((10, 4), "float32"), np.zeros(10, "int32")

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="softmax")])
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    with Session(tmp_path / "run") as session:
        model.fit(Slow(), epochs=2, verbose=0, callbacks=[ProfilerCallback(session)])
    steps = read_run(tmp_path / "run").steps()
    assert len(steps) == 8 and steps["wall_s"].min() >= 0.03
