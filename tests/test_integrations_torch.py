"""PyTorch scripts with no profiler code in them, run by `profiler run`: a step per optimizer
step, an epoch per training pass (validation passes are not epochs), DataLoader workers' memory,
and --gc-policy compared. In-process: torch.track() on a loop, with its hooks gone afterwards."""

import json
import re
import sys
import time

import pytest

from tests.scripts import meta, patterns, profiler, records, report, script

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow


def test_dataloader_loop_with_validation_and_the_classic_leak(tmp_path):
    out = tmp_path / "leak"
    profiler("run", "--out", out, script("torch_leak.py"), "--epochs", 10)
    rows = records(out)
    assert [r["epoch"] for r in rows] == list(range(10))          # validation passes are not epochs
    assert [r["steps"] for r in rows] == [20] * 10                  # 1280 samples / batch 64
    assert meta(out)["meta"]["epochs_from"] == "torch" and meta(out)["status"] == "completed"
    diagnosis = report(out)
    assert "allocation-growth" in patterns(diagnosis)
    assert diagnosis["allocation"]["malloc_growth_bytes_per_epoch"] > 2e6   # 8 validation graphs per epoch
    # the leak costs no time, so it leads unless a finding costs 5% of the run: on this shared VM the
    # epochs of a 10-epoch run can switch speed for good halfway (+33% seen), a compute-growth finding
    costly = [f for f in diagnosis["findings"] if f["time_fraction"] >= 0.05]
    assert [f["pattern"] for f in costly] in ([], ["compute-growth"])
    assert diagnosis["primary_cause"] == ("compute" if costly else "allocation")

    fixed = tmp_path / "fixed"
    profiler("run", "--out", fixed, script("torch_leak.py"), "--epochs", 10, "--no-leak")
    assert [r["steps"] for r in records(fixed)] == [20] * 10
    assert "allocation-growth" not in patterns(report(fixed))


@pytest.fixture(scope="module")
def workers_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("workers") / "run"
    profiler("run", "--out", out, script("workers_dicts.py"), 2, 100_000)
    return out


def test_dataloader_workers_copy_a_list_of_dicts(workers_run):
    rows = records(workers_run)
    assert [r["steps"] for r in rows] == [200, 200]                 # 100,000 records / batch 500
    for r in rows:
        assert r["workers"]["count"] == 2 and r["workers"]["new"] == 2   # not persistent: forked every pass
        # the records take ~50 MB in the parent; each worker copies most of them (measured 42 MB
        # of private memory per worker; a worker over 1,000 records has 8 MB)
        assert r["workers"]["uss_bytes"] / 2 > 25e6
        assert r["workers"]["pss_bytes"] >= r["workers"]["uss_bytes"]
        assert r["workers"]["uss_growth_bytes"] / 2 > 20e6            # grown while reading (measured 32-37 MB)
    assert report(workers_run)["workers"]["count"] == 2


def test_dataloader_workers_copy_on_read_finding(workers_run, tmp_path):
    diagnosis = report(workers_run)
    assert "worker-copy-on-read" in patterns(diagnosis), diagnosis["verdict"]
    finding = next(f for f in diagnosis["findings"] if f["pattern"] == "worker-copy-on-read")
    assert "as it read" in finding["evidence"] and finding["remedy"].startswith("Keep the dataset in numpy")
    small = tmp_path / "small"                            # 1,000 records: workers stay small and flat
    profiler("run", "--out", small, script("workers_dicts.py"), 2, 1_000)
    assert [r["workers"]["count"] for r in records(small)] == [2, 2]
    assert "worker-copy-on-read" not in patterns(report(small))


def test_a_validation_loaders_workers_between_epochs_are_no_epochs(tmp_path):
    """Training without workers, validation after each epoch with two: their samples and batch
    landed in the next training epoch's record ("workers 2, 16.4 MiB" in the report; a probe)."""
    (tmp_path / "t.py").write_text(
        "import torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "model = torch.nn.Linear(4, 2)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "data = TensorDataset(torch.randn(256, 4), torch.randint(0, 2, (256,)))\n"
        "train = DataLoader(data, batch_size=16)\n"
        "val = DataLoader(data, batch_size=64, num_workers=2)\n"
        "if __name__ == '__main__':\n"
        "    for epoch in range(3):\n"
        "        for x, y in train:\n"
        "            opt.zero_grad(); torch.nn.functional.cross_entropy(model(x), y).backward(); opt.step()\n"
        "        with torch.no_grad():\n"
        "            for x, y in val:\n"
        "                model(x)\n")
    profiler("run", "--out", tmp_path / "run", tmp_path / "t.py")
    rows = records(tmp_path / "run")
    assert [r["steps"] for r in rows] == [16, 16, 16]
    assert all(r["workers"] is None or (r["workers"]["count"] == 0 and "batch_bytes" not in r["workers"])
               for r in rows), [r["workers"] for r in rows]
    workers = report(tmp_path / "run")["workers"]
    assert workers is None or workers["count"] == 0


def test_workers_full_collections_copy_the_parents_objects_unless_frozen(tmp_path):
    """A clean dataset: what the workers copy is what their own full collections walk. Frozen
    before the workers start, nothing is copied and there is no finding."""
    out = tmp_path / "default"
    profiler("run", "--quiet", "--out", out, script("workers_tensors.py"), 2)
    for r in records(out):   # each worker's collection in worker_init_fn (measured 69-70 MiB a worker)
        assert r["workers"]["full_collections"] >= 2 and r["workers"]["gc_copied_max_bytes"] > 32 << 20, r["workers"]
    diagnosis = report(out)   # and input-wait: its workers, started anew each pass, keep the steps waiting
    assert set(patterns(diagnosis)) <= {"worker-copy-on-read", "input-wait"}, diagnosis["verdict"]
    finding = next(f for f in diagnosis["findings"] if f["pattern"] == "worker-copy-on-read")
    assert finding["data"]["worker_gc_copied_bytes"] > 32 << 20 and finding["remedy"].startswith("Call gc.freeze()")
    assert finding["remedy"].endswith("profiler run --gc-policy freeze.")
    frozen = tmp_path / "frozen"
    profiler("run", "--quiet", "--out", frozen, script("workers_tensors.py"), 2, "--freeze")
    assert all(r["workers"]["gc_copied_max_bytes"] < 4 << 20 for r in records(frozen))   # measured 0.4 MiB
    assert "worker-copy-on-read" not in patterns(report(frozen))
    policy = tmp_path / "policy"   # the remedy's way to try it: frozen as the first pass begins, before its fork
    profiler("run", "--quiet", "--out", policy, "--gc-policy", "freeze", script("workers_tensors.py"), 2)
    assert all(r["workers"]["gc_copied_max_bytes"] < 4 << 20 for r in records(policy))   # measured 1.0 MiB
    assert "worker-copy-on-read" not in patterns(report(policy))


def test_spawned_workers_are_no_copy_on_read(tmp_path):
    """Workers started by spawn import torch anew (143-146 MiB of their own each here): nothing is copied."""
    out = tmp_path / "spawn"
    profiler("run", "--quiet", "--out", out, script("workers_tensors.py"), 2, "--spawn")
    for r in records(out):   # the 2 workers, and multiprocessing's resource tracker
        assert r["workers"]["count"] == 0 and r["workers"]["spawned"] >= 2, r["workers"]
    diagnosis = report(out)
    assert "worker-copy-on-read" not in patterns(diagnosis), diagnosis["verdict"]
    assert diagnosis["workers"]["count"] >= 2 and diagnosis["workers"]["private_bytes"] > 100 << 20


def test_gc_policy_freeze_against_default_on_a_gc_heavy_script(tmp_path):
    runs = {}
    for policy in ("default", "freeze"):
        runs[policy] = tmp_path / policy
        profiler("run", "--quiet", "--out", runs[policy], "--epoch-fn", "train_epoch", "--gc-policy", policy,
                 script("gc_heavy.py"), 10)
        assert meta(runs[policy])["options"]["gc_policy"] == policy
        assert len(records(runs[policy])) == 10
    tracked = {p: [r["gc"]["tracked"][2] for r in records(d) if r["gc"]["tracked"]] for p, d in runs.items()}
    # the 300,000 set-up dicts (600,000 tracked objects with their lists) sit in generation 2, walked by
    # every full collection; frozen, they are in the permanent generation and collections skip them
    assert tracked["default"][0] > 600_000 and max(tracked["freeze"]) < 1_000, tracked
    compared = json.loads(profiler("compare", runs["default"], runs["freeze"], "--json").stdout)
    assert (compared["a"]["label"], compared["b"]["label"]) == ("gc_heavy.py (gc default)", "gc_heavy.py (gc freeze)")
    assert "gc_heavy.py (gc freeze)" in compared["verdict"]   # epochs 4.6-5.9x faster when measured today


def test_gc_policy_manual_collects_every_n_steps(tmp_path):
    out = tmp_path / "manual"
    profiler("run", "--quiet", "--out", out, "--epoch-fn", "train_epoch", "--step-fn", "train_step",
             "--gc-policy", "manual:5", script("plain_steps.py"), 3, 10)
    rows = records(out)
    assert [r["steps"] for r in rows] == [10, 10, 10]
    # automatic collection is off from the first epoch: only the 6 forced full collections run
    assert sum(r["gc"]["collections"][2] for r in rows) == 6
    assert sum(r["gc"]["collections"][0] + r["gc"]["collections"][1] for r in rows) == 0
    # the policy's collections are the profiler's, not the program's: none is counted as the program's own
    assert sum(sum(r["gc"]["forced"]) for r in rows) == 0 and not any("forced_sites" in r["gc"] for r in rows)


def test_track_marks_a_loop_in_code_and_removes_its_hooks(tmp_path):
    from torch.utils.data import DataLoader, TensorDataset, dataloader

    from profiler import Session
    from profiler.integrations.torch import track

    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train = DataLoader(TensorDataset(torch.randn(40, 4), torch.randint(0, 2, (40,))), batch_size=10)
    iter_before, next_before = dataloader.DataLoader.__iter__, dataloader._BaseDataLoaderIter.__next__
    backward_before = torch.Tensor.backward
    with Session(tmp_path / "run") as session, track(session) as marks:
        next(iter(train))                                  # a peek at one batch: no epoch
        for epoch in range(3):
            for x, y in train:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
            with torch.no_grad():
                for x, y in train:                         # evaluation: no optimizer step, no epoch
                    model(x)
        it = iter(train)                                   # a pass still open as the block ends
        next(it)
    assert (marks.epochs, marks.steps) == (3, 12)
    from profiler.integrations import pending
    assert it is not None and not pending._armed           # nothing waits for its iterator
    assert [r["steps"] for r in records(tmp_path / "run")] == [4, 4, 4]
    assert dataloader.DataLoader.__iter__ is iter_before and dataloader._BaseDataLoaderIter.__next__ is next_before
    assert torch.Tensor.backward is backward_before
    assert [r["ops"]["Tensor.backward"]["calls"] for r in records(tmp_path / "run")] == [4, 4, 4]
    from torch.optim.optimizer import _global_optimizer_post_hooks
    assert not _global_optimizer_post_hooks


def test_each_backward_of_the_training_thread_is_timed_once_and_passes_through(tmp_path):
    import threading

    from profiler import Session
    from profiler.integrations.torch import track

    class Logged(torch.Tensor):   # a subclass with __torch_function__: torch calls backward again inside the call
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return super().__torch_function__(func, types, args, kwargs or {})

    w = torch.ones(3, requires_grad=True)
    backward_before = torch.autograd.backward
    with Session(tmp_path / "run") as session, track(session):
        with session.epoch():
            (w * 2).sum().backward()
            (w * 2).sum().as_subclass(Logged).backward()   # once, not twice (a review)
            torch.autograd.backward((w * 2).sum())         # as users call it too (a probe: untimed)
            other = threading.Thread(target=lambda: (w * 3).sum().backward())   # another thread's: not timed
            other.start()
            other.join()
            with pytest.raises(RuntimeError, match="does not require grad"):
                torch.ones(2).sum().backward()             # the program's error, as without the profiler
        assert torch.Tensor.backward.__doc__   # torch's own docstring
    op, = [op for op in records(tmp_path / "run")[0]["ops"].values() if op["name"] == "Tensor.backward"]
    assert op["calls"] == 4 and w.grad.tolist() == [9.0, 9.0, 9.0]
    assert torch.autograd.backward is backward_before


def test_a_pass_includes_starting_its_iterator_and_one_that_fails_to_start_is_no_epoch(tmp_path, monkeypatch):
    """Starting a pass's iterator starts its workers (a fork, or a spawn that waits for the worker
    to read the dataset): time of the epoch and of its first step."""
    import time

    from torch.utils.data import DataLoader, TensorDataset, dataloader

    from profiler import Session
    from profiler.integrations.torch import track

    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train = DataLoader(TensorDataset(torch.randn(40, 4), torch.randint(0, 2, (40,))), batch_size=10)
    get_iterator, fail = dataloader.DataLoader._get_iterator, []

    def slow_start(loader):
        if fail:
            raise RuntimeError("a worker failed to start")
        time.sleep(0.2)
        return get_iterator(loader)
    monkeypatch.setattr(dataloader.DataLoader, "_get_iterator", slow_start)
    with Session(tmp_path / "run") as session, track(session) as marks:
        for epoch in range(2):
            for x, y in train:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
        fail.append(True)
        with pytest.raises(RuntimeError):
            iter(train)
        assert marks.open is None
    rows = records(tmp_path / "run")
    assert [r["steps"] for r in rows] == [4, 4] and all(r["wall_s"] >= 0.2 for r in rows), rows


def test_track_writes_the_pass_an_exception_cut_short_as_unfinished(tmp_path):
    from torch.utils.data import DataLoader, TensorDataset

    from profiler import Session
    from profiler.integrations.torch import track

    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train = DataLoader(TensorDataset(torch.randn(40, 4), torch.randint(0, 2, (40,))), batch_size=10)
    with pytest.raises(RuntimeError, match="boom"):
        with Session(tmp_path / "run") as session, track(session):
            for epoch in range(3):
                for i, (x, y) in enumerate(train):
                    if epoch == 1 and i == 2:
                        raise RuntimeError("boom")
                    optimizer.zero_grad()
                    torch.nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()
    assert [(r["epoch"], r["steps"], r.get("unfinished")) for r in records(tmp_path / "run")] == [(0, 4, None),
                                                                                                 (1, 2, True)]


def test_each_batch_the_training_thread_waits_for_is_timed_as_an_op(tmp_path):
    import threading

    from torch.utils.data import DataLoader, Dataset

    from profiler import Session
    from profiler.integrations.torch import track

    class Slow(Dataset):
        def __len__(self):
            return 40

        def __getitem__(self, i):
            time.sleep(0.001)
            return torch.randn(4), torch.randint(0, 2, ())

    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train = DataLoader(Slow(), batch_size=10)
    val = DataLoader(Slow(), batch_size=20)
    with Session(tmp_path / "run") as session, track(session):
        for epoch in range(2):
            for i, (x, y) in enumerate(train):
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
                if i == 1:
                    list(val)   # a validation pass inside the training pass: its batches are no step's wait
            other = threading.Thread(target=lambda: list(DataLoader(Slow(), batch_size=10)))   # not the training's
            other.start()
            other.join()
    for r in records(tmp_path / "run"):
        waits = r["ops"]["DataLoader.__next__"]
        assert waits["calls"] == 4 and waits["total_s"] >= 40 * 0.001   # its batches, not the pass's end
        assert r["steps"] == 4


def test_the_batches_of_zipped_training_loaders_are_all_timed(tmp_path):
    from torch.utils.data import DataLoader, Dataset

    from profiler import Session
    from profiler.integrations.torch import track

    class Slow(Dataset):
        def __init__(self, seconds):
            self.seconds = seconds

        def __len__(self):
            return 40

        def __getitem__(self, i):
            time.sleep(self.seconds)
            return torch.randn(4), torch.randint(0, 2, ())

    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    fast, slow, val = (DataLoader(Slow(s), batch_size=10) for s in (0.0, 0.002, 0.002))
    with Session(tmp_path / "run") as session, track(session):
        for epoch in range(2):
            for i, ((x, y), (x2, y2)) in enumerate(zip(fast, slow)):   # the second loader's pass is nested
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(torch.cat([x, x2])), torch.cat([y, y2])).backward()
                optimizer.step()
                if i == 1:
                    list(val)   # validation inside the pass: no step while it is iterated
    for r in records(tmp_path / "run"):
        waits = r["ops"]["DataLoader.__next__"]
        assert r["steps"] == 4 and waits["calls"] == 8 and waits["total_s"] >= 40 * 0.002


def test_the_waits_of_a_freed_iterator_whose_id_is_taken_again_still_feed_the_next_step():
    import weakref

    from profiler.capture.ops import OpTimers
    from profiler.integrations.torch import TorchHooks

    class Iterator:
        pass

    hooks = TorchHooks(None)
    hooks._waits, hooks._grad_enabled = OpTimers().op("wait"), lambda: True
    own, freed, validation = Iterator(), Iterator(), Iterator()
    hooks._pass = weakref.ref(own)
    hooks._waited(freed, 5)
    hooks._nested[id(validation)] = hooks._nested.pop(id(freed))   # as if `validation` took the freed one's id
    del freed
    hooks._waited(validation, 7)
    hooks._exhausted(validation)   # run to its end: no step's
    hooks._fed_a_step()
    assert (hooks._waits.total_ns, hooks._waits.timed) == (5, 1) and not hooks._nested


def test_a_batch_drawn_from_a_fresh_iterator_each_step_is_timed_and_validation_is_not(tmp_path):
    from torch.utils.data import DataLoader, TensorDataset

    from profiler import Session
    from profiler.integrations.torch import track

    def loader(n, batch):
        return DataLoader(TensorDataset(torch.randn(n, 4), torch.randint(0, 2, (n,))), batch_size=batch)

    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train, extra, val = loader(40, 10), loader(40, 10), loader(40, 10)
    with Session(tmp_path / "run") as session, track(session):
        for epoch in range(2):
            for x, y in train:
                it = iter(extra)   # a fresh iterator each step, freed: a later one may take its id
                x2, y2 = next(it)
                del it
                with torch.no_grad():
                    for xv, _ in val:   # validation run to its end
                        model(xv)
                    for i, (xv, _) in enumerate(val):   # and one that breaks out
                        if i == 1:
                            break
                for xv, _ in val:   # and one with autograd on, run to its end
                    pass
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(torch.cat([x, x2])), torch.cat([y, y2])).backward()
                optimizer.step()
    assert [(r["steps"], r["ops"]["DataLoader.__next__"]["calls"]) for r in records(tmp_path / "run")] == [(4, 8),
                                                                                                         (4, 8)]


def test_a_pass_cut_short_by_an_exception_the_loop_handles_is_dropped(tmp_path):
    import logging

    from torch.utils.data import DataLoader, TensorDataset

    from profiler import Session
    from profiler.integrations.torch import track

    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train = DataLoader(TensorDataset(torch.randn(40, 4), torch.randint(0, 2, (40,))), batch_size=10)
    with Session(tmp_path / "run") as session, track(session):
        for epoch in range(3):
            try:
                for i, (x, y) in enumerate(train):
                    if epoch == 1 and i == 2:
                        raise RuntimeError("a bad batch")
                    optimizer.zero_grad()
                    torch.nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()
            except RuntimeError:
                logging.getLogger("train").debug("skipped the rest of the epoch")
    assert [(r["epoch"], r["steps"], r.get("unfinished")) for r in records(tmp_path / "run")] == [(0, 4, None),
                                                                                                 (1, 4, None)]
    assert (tmp_path / "run" / "steps.bin").stat().st_size == 8 * 48


def test_flamegraph_from_the_first_epoch_leaves_imports_out(tmp_path):
    from profiler.report.flamegraph import read_folded
    source = script("mnist_cnn.py")
    loop = next(n for n, line in enumerate(open(source), 1) if line.startswith("for epoch"))

    def set_up_import_share(folded):
        """Samples importing from the script's lines above its loop. torch imports lazily inside
        the loop too (DataLoader's first batch imports torch.profiler._cupti_monitor) and at exit
        (dynamo's atexit imports tabulate): those are the loop's and the exit's, and stay."""
        stacks = read_folded(folded)
        lines = {s: [int(n) for f in s for n in re.findall(r"mnist_cnn\.py:(\d+)\)", f)] for s in stacks}
        set_up = sum(n for s, n in stacks.items()
                     if any("importlib._bootstrap" in f for f in s) and lines[s] and lines[s][0] < loop)
        return set_up / sum(stacks.values()), stacks

    command = ["--", sys.executable, source, 2, 256]
    profiler("flamegraph", "--out", tmp_path / "all.svg", *command)
    profiler("flamegraph", "--from-first-epoch", "--out", tmp_path / "first.svg", *command)
    share_all, _ = set_up_import_share(tmp_path / "all.folded")
    share_first, stacks = set_up_import_share(tmp_path / "first.folded")
    assert share_all > 0.1 and share_first == 0.0, (share_all, share_first)   # measured 36-57% -> 0%
    assert any("mnist_cnn.py" in frame for stack in stacks for frame in stack)


def test_flamegraph_from_the_first_epoch_of_a_script_with_none(tmp_path):
    from profiler.report.flamegraph import read_folded
    (tmp_path / "idle.py").write_text("print('no training here')\n")
    proc = profiler("flamegraph", "--from-first-epoch", "--out", tmp_path / "f.svg", "--", sys.executable,
                    tmp_path / "idle.py", check=False)
    assert proc.returncode == 1 and "before its first epoch began" in proc.stderr
    proc = profiler("flamegraph", "--from-first-epoch", "--", "ls", check=False)
    assert proc.returncode == 2 and "records a Python script" in proc.stderr
    # a plain loop's epochs are marked by --epoch-fn, passed to profiler run (it never attached: a probe)
    (tmp_path / "loop.py").write_text("def train_epoch():\n    return sum(i * i for i in range(300_000))\n"
                                      "for _ in range(4):\n    train_epoch()\n")
    proc = profiler("flamegraph", "--from-first-epoch", "--out", tmp_path / "plain.svg", "--", sys.executable,
                    tmp_path / "loop.py", check=False)
    assert proc.returncode == 1 and "a plain loop's are marked by --epoch-fn NAME" in proc.stderr
    profiler("flamegraph", "--from-first-epoch", "--epoch-fn", "train_epoch", "--out", tmp_path / "plain.svg", "--",
             sys.executable, tmp_path / "loop.py")
    assert any("train_epoch" in frame for stack in read_folded(tmp_path / "plain.folded") for frame in stack)
    proc = profiler("flamegraph", "--epoch-fn", "train_epoch", "--", sys.executable, tmp_path / "loop.py", check=False)
    assert proc.returncode == 2 and "--epoch-fn marks the epochs --from-first-epoch waits for" in proc.stderr
    other = tmp_path / "bin" / "python"   # a `python` on PATH that has no profiler
    other.parent.mkdir()
    other.write_text("#!/bin/sh\nexit 1\n")
    other.chmod(0o755)
    proc = profiler("flamegraph", "--from-first-epoch", "--", other, tmp_path / "idle.py", check=False)
    assert proc.returncode == 2 and f"{other} ({other}) cannot import profiler" in proc.stderr
    assert f"-- {sys.executable} {tmp_path / 'idle.py'}" in proc.stderr


def test_hooks_gone_after_a_script_that_fails_inside_a_pass(tmp_path):
    from torch.optim.optimizer import _global_optimizer_post_hooks
    from torch.utils.data import dataloader

    from profiler.integrations.script import run_script

    (tmp_path / "fails.py").write_text(
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        "model = torch.nn.Linear(4, 2)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "data = DataLoader(TensorDataset(torch.randn(40, 4), torch.randint(0, 2, (40,))), batch_size=10)\n"
        "for epoch in range(3):\n    for i, (x, y) in enumerate(data):\n"
        "        if epoch == 1 and i == 2:\n            raise RuntimeError('diverged')\n"
        "        optimizer.zero_grad()\n        torch.nn.functional.cross_entropy(model(x), y).backward()\n"
        "        optimizer.step()\n")
    iter_before, next_before = dataloader.DataLoader.__iter__, dataloader._BaseDataLoaderIter.__next__
    result = run_script(str(tmp_path / "fails.py"), [], out=tmp_path / "run")
    assert isinstance(result.raised, RuntimeError) and (result.epochs, result.steps) == (1, 4)
    assert meta(tmp_path / "run")["status"] == "failed" and meta(tmp_path / "run")["meta"]["epochs_from"] == "torch"
    assert dataloader.DataLoader.__iter__ is iter_before and dataloader._BaseDataLoaderIter.__next__ is next_before
    assert not _global_optimizer_post_hooks


def test_a_loop_that_breaks_out_ends_its_epoch_there(tmp_path):
    """A pass left by a break ended only when the next began, so what followed the break (an
    evaluation, the script's final test) was in its epoch: the last one read 12x the others and
    the report called it a slowdown (a user probe). An iterator the collector frees (one in a
    reference cycle, with a finalizer the collector runs) ends its epoch at the next pass, not
    inside the collection, whose pause would then be in neither epoch's record."""
    import gc
    import time

    from torch.utils.data import DataLoader, TensorDataset

    from profiler import Session
    from profiler.integrations.torch import track

    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train = DataLoader(TensorDataset(torch.randn(80, 4), torch.randint(0, 2, (80,))), batch_size=8)

    def step(x, y):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    def evaluate():
        time.sleep(0.5)

    class Finalized:
        def __del__(self):
            evaluate.finalized = True

    with Session(tmp_path / "run") as session, track(session) as marks:
        for epoch in range(3):
            for i, (x, y) in enumerate(train):
                step(x, y)
                if i == 1:
                    break
            evaluate()
        it = iter(train)
        cycle = [it, Finalized(), None]
        cycle[2] = cycle
        for _ in range(3):
            step(*next(it))
        del it, cycle
        gc.collect()                                       # frees the iterator inside a collection
        for x, y in train:
            step(x, y)
    rows = records(tmp_path / "run")
    assert marks.epochs == 5 and [r["steps"] for r in rows] == [2, 2, 2, 3, 10] and evaluate.finalized
    assert rows[3]["gc"]["collections"][2] >= 1   # gc.collect()'s pause is in the epoch it freed
    assert max(r["wall_s"] for r in rows[:3]) < 0.5, [r["wall_s"] for r in rows]


def test_a_new_iter_over_the_same_loader_is_a_new_epoch(tmp_path):
    from torch.utils.data import DataLoader, TensorDataset

    from profiler import Session
    from profiler.integrations.torch import track

    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train = DataLoader(TensorDataset(torch.randn(80, 4), torch.randint(0, 2, (80,))), batch_size=8)
    val = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=8)
    with Session(tmp_path / "run") as session, track(session) as marks:
        for epoch in range(3):
            it = iter(train)                               # the previous pass's iterator is still alive
            for _ in range(5):
                x, y = next(it)
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
                with torch.no_grad():
                    for xv, _yv in val:                    # another loader inside the pass: nested
                        model(xv)
    assert marks.epochs == 3
    assert [r["steps"] for r in records(tmp_path / "run")] == [5, 5, 5]


def test_torch_without_an_optimizer_falls_back_to_time_windows(tmp_path):
    proc = profiler("run", "--window", "0.2", "--out", tmp_path / "run", script("torch_inference.py"), "2.5",
                    timeout=180)
    assert "epochs from windows" in proc.stderr
    assert meta(tmp_path / "run")["meta"]["epochs_from"] == "windows" and len(records(tmp_path / "run")) >= 2


def test_the_first_batch_of_each_pass_with_workers_is_weighed_and_its_workers_sampled():
    import numpy as np
    from torch.utils.data import DataLoader, TensorDataset

    from profiler.integrations.torch import TorchHooks, batch_bytes
    weighed, asked = [], []

    class Probe:   # what TorchHooks tells a WorkerProbe
        def note_batch(self, nbytes, prefetch):
            weighed.append((nbytes, prefetch))

        def sample_soon(self):
            asked.append("started")

        def sample_now(self):
            asked.append("stopping")
    hooks = TorchHooks(None, epochs=False, workers=Probe())
    hooks.install()
    try:
        loader = DataLoader(TensorDataset(torch.zeros(12, 3, 8, 8), torch.zeros(12, dtype=torch.int64)), batch_size=4,
                            num_workers=1, prefetch_factor=3)
        for _ in range(2):
            assert sum(1 for _ in loader) == 3
        assert sum(1 for _ in DataLoader(TensorDataset(torch.zeros(8, 2)), batch_size=4)) == 2   # no workers
    finally:
        hooks.uninstall()
    assert weighed == [(4 * 3 * 8 * 8 * 4 + 4 * 8, 3)] * 2
    assert asked == ["started", "stopping"] * 2   # each pass with workers: the thread's sample, then the peak
    assert batch_bytes({"image": [np.zeros(10, np.float32)], "name": "a", "n": 3}) == 40


def test_windows_that_begin_at_the_first_optimizer_step_are_whole_from_the_first(tmp_path):
    # no DataLoader: the windows begin at the first optimizer step, during the grace period's wait;
    # the clock thread slept on to the old deadline, and the first window was 0.2-1.8 s of 0.5 or 1
    (tmp_path / "steps.py").write_text(
        "import time, torch\nmodel = torch.nn.Linear(8, 2)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "end = time.time() + 2.6\nwhile time.time() < end:\n"
        "    opt.zero_grad(); model(torch.randn(16, 8)).sum().backward(); opt.step(); time.sleep(0.001)\n")
    profiler("run", "--window", "0.5", "--out", tmp_path / "run", tmp_path / "steps.py", timeout=180)
    walls = [r["wall_s"] for r in records(tmp_path / "run")]
    assert len(walls) >= 4 and all(0.49 <= w <= 0.6 for w in walls), walls


TENSOR_TRAINING = (
    "import sys, time, torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
    "net = torch.nn.Linear(8, 1); opt = torch.optim.SGD(net.parameters(), lr=0.01)\n"
    "val = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=16)\n"
    "def evaluate():\n"
    "    with torch.no_grad():\n"
    "        for (v,) in val:\n"
    "            net(v)\n"
    "steps, every = int(sys.argv[1]), int(sys.argv[2])\n"
    "for i in range(1, steps + 1):\n"
    "    opt.zero_grad(); net(torch.randn(16, 8)).pow(2).mean().backward(); opt.step(); time.sleep(0.005)\n"
    "    if i % every == 0:\n"
    "        evaluate()\n"
    "evaluate()\n")


def test_evaluation_passes_amid_training_with_no_dataloader_are_inside_its_windows(tmp_path):
    # training from tensors, a no_grad DataLoader evaluation every 50 steps (0.3 s, under a window): each pass
    # dropped the window in progress, and 4 s of training wrote 0 epochs and 0 steps, "14 DataLoader passes ran
    # with no optimizer step" (a review); the final evaluation is no window's end either (a second review)
    from profiler.integrations.script import run_script
    (tmp_path / "evals.py").write_text(TENSOR_TRAINING)
    result = run_script(str(tmp_path / "evals.py"), ["200", "50"], out=tmp_path / "run", window_s=60.0)
    assert (result.epochs, result.steps, result.epochs_from) == (1, 199, "windows"), result
    result = run_script(str(tmp_path / "evals.py"), ["240", "50"], out=tmp_path / "windows", window_s=0.2)
    walls = [r["wall_s"] for r in records(tmp_path / "windows")]
    assert result.epochs >= 3 and min(walls) >= 0.19, walls   # the last, partial window is not written
    # warm-up steps before DataLoader training: the passes are the epochs, with no window of the warm-up's
    (tmp_path / "warm.py").write_text(
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        "net = torch.nn.Linear(8, 1); opt = torch.optim.SGD(net.parameters(), lr=0.01)\n"
        "for i in range(5):\n"
        "    opt.zero_grad(); net(torch.randn(16, 8)).sum().backward(); opt.step()\n"
        "for epoch in range(2):\n"
        "    for (x,) in DataLoader(TensorDataset(torch.randn(80, 8)), batch_size=4):\n"
        "        opt.zero_grad(); net(x).sum().backward(); opt.step()\n")
    result = run_script(str(tmp_path / "warm.py"), [], out=tmp_path / "warm")
    assert (result.epochs, result.steps, result.epochs_from, result.windows) == (2, 40, "torch", 0), result


def test_with_no_pass_marking_epochs_a_loader_drawn_without_autograd_is_no_steps_wait():
    # Lightning marks the epochs and validates under inference_mode, mid-epoch too: its validation loader's 40
    # batches (and its worker's start-up) counted as the steps' wait (a probe: 360 batches for 320 steps)
    from profiler.capture.ops import OpTimers
    from profiler.integrations.torch import TorchHooks

    class Iterator:
        pass

    grad = {"on": True}
    hooks = TorchHooks(None)
    hooks._waits, hooks._grad_enabled = OpTimers().op("wait"), lambda: grad["on"]
    train, val = Iterator(), Iterator()
    hooks._waited(train, 5)
    grad["on"] = False
    hooks._waited(val, 7)
    grad["on"] = True
    hooks._waited(train, 3)
    assert (hooks._waits.total_ns, hooks._waits.timed) == (8, 2)
