"""profiler run SCRIPT.py / -m MODULE: the script sees what `python` would give it, its status and
exit code are its own, epochs come from --epoch-fn/--step-fn or windows; Marks, GcPolicy and the
function watch on their own (no Session needed)."""

import gc
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from profiler import Session
from profiler.errors import UsageError
from profiler.integrations.functions import Target, wrap_calls
from profiler.integrations.gc_policy import GcPolicy
from profiler.integrations.marks import Marks
from profiler.integrations.script import run_script
from profiler.rundir import read_run
from tests.scripts import meta, patterns, profiler, records, report, script

PLAIN = """
import json, sys
seen = {"argv": sys.argv, "path0": sys.path[0], "name": __name__, "main": sys.modules["__main__"].__dict__ is globals()}

class Trainer:
    def fit_epoch(self):
        for b in range(3):
            step(b)

def step(batch):
    return [batch] * 10

def train_epoch(n):
    for b in range(n):
        step(b)

epochs = int(sys.argv[1])
for epoch in range(epochs):
    train_epoch(4)
Trainer().fit_epoch()
with open(sys.argv[2], "w") as f:
    json.dump(seen, f)
if len(sys.argv) > 3:
    raise SystemExit(int(sys.argv[3])) if sys.argv[3].isdigit() else ValueError(sys.argv[3])
"""


@pytest.fixture
def plain(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(PLAIN)
    return path


class FakeSession:
    """Records the Session calls Marks makes."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *a, **k: self.calls.append(name)


def test_script_runs_as_main_with_its_argv_and_path(plain, tmp_path):
    seen = tmp_path / "seen.json"
    result = run_script(str(plain), ["3", str(seen)], out=tmp_path / "run", epoch_fn="train_epoch", step_fn="step")
    got = json.loads(seen.read_text())
    assert got == {"argv": [str(plain), "3", str(seen)], "path0": str(tmp_path), "name": "__main__", "main": True}
    assert result.raised is None and (result.epochs, result.steps) == (3, 12)   # fit_epoch's steps: no epoch open
    assert [r["steps"] for r in records(tmp_path / "run")] == [4, 4, 4]
    m = meta(tmp_path / "run")
    assert m["status"] == "completed" and m["meta"]["epochs_from"] == "epoch-fn"
    assert m["options"]["epoch_fn"] == "train_epoch" and sys.modules["__main__"].__dict__ is not None
    assert sys.argv[0] != str(plain)
    # the source's hash, for compare to tell two runs of one command by their code
    assert m["meta"]["source_sha256"] == hashlib.sha256(plain.read_bytes()).hexdigest()


def test_class_method_and_module_qualname(plain, tmp_path):
    result = run_script(str(plain), ["2", str(tmp_path / "s.json")], out=tmp_path / "a", epoch_fn="Trainer.fit_epoch",
                        step_fn="step")
    assert (result.epochs, result.steps) == (1, 3)
    (tmp_path / "helpers.py").write_text("def epoch():\n    return sum(range(100))\n")
    (tmp_path / "uses.py").write_text("import helpers\nfor _ in range(5):\n    helpers.epoch()\n")
    result = run_script(str(tmp_path / "uses.py"), [], out=tmp_path / "b", epoch_fn="helpers:epoch")
    assert result.epochs == 5 and result.notes == []
    assert "helpers" in sys.modules and not hasattr(sys.modules["helpers"].epoch, "__profiler_wraps__")
    sys.modules.pop("helpers")


def test_exit_status_follows_the_script(plain, tmp_path):
    args = ["1", str(tmp_path / "s.json")]
    result = run_script(str(plain), [*args, "0"], out=tmp_path / "zero", epoch_fn="train_epoch")
    assert isinstance(result.raised, SystemExit) and meta(tmp_path / "zero")["status"] == "completed"
    result = run_script(str(plain), [*args, "3"], out=tmp_path / "three", epoch_fn="train_epoch")
    assert result.raised.code == 3 and meta(tmp_path / "three")["status"] == "failed"
    result = run_script(str(plain), [*args, "boom"], out=tmp_path / "boom", epoch_fn="train_epoch")
    assert isinstance(result.raised, ValueError) and meta(tmp_path / "boom")["error"] == "ValueError: boom"
    assert len(records(tmp_path / "boom")) == 1    # the epoch before the error is kept


def test_the_script_sees_the_globals_python_gives_it(tmp_path):
    # __builtins__ was the builtins dict, as in an imported module, where python gives __main__ the module
    (tmp_path / "t.py").write_text("x: int = 1\n"
                                   "print(type(__builtins__).__name__, sorted(k for k in globals() if k[:2] == '__'))\n")
    plain = subprocess.run([sys.executable, tmp_path / "t.py"], capture_output=True, text=True, timeout=60)
    proc = profiler("run", "--quiet", "--out", tmp_path / "run", tmp_path / "t.py")
    assert proc.stdout == plain.stdout and plain.stdout.startswith("module ")


def test_module_runs_as_python_dash_m(tmp_path, monkeypatch):
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(
        "import sys\ndef epoch():\n    pass\nfor _ in range(2):\n    epoch()\n"
        "open(sys.argv[1], 'w').write(sys.argv[0] + '|' + __name__ + '|' + str(__spec__.name))\n")
    monkeypatch.chdir(tmp_path)
    result = run_script("mypkg", [str(tmp_path / "seen")], out=tmp_path / "run", module=True, epoch_fn="epoch")
    assert result.raised is None and result.epochs == 2
    assert (tmp_path / "seen").read_text() == f"{package / '__main__.py'}|__main__|mypkg.__main__"
    assert meta(tmp_path / "run")["meta"]["source_sha256"] == hashlib.sha256((package / "__main__.py").read_bytes()).hexdigest()


def test_the_source_hash_is_the_files_own(tmp_path):
    # a file with a byte-order mark and CRLF line ends: its hash is sha256sum's, not the decoded text's (a review)
    path = tmp_path / "crlf.py"
    path.write_bytes(b"\xef\xbb\xbfx = 1\r\ny = 'caf\xc3\xa9'\r\n")
    run_script(str(path), [], out=tmp_path / "run")
    assert meta(tmp_path / "run")["meta"]["source_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(UsageError, match="no module named 'nosuchmodule'"):
        run_script("nosuchmodule", [], out=tmp_path / "x", module=True)


def test_bad_names_and_options_are_usage_errors(plain, tmp_path):
    for kwargs, words in (({"epoch_fn": "train-epoch"}, "--epoch-fn 'train-epoch'"),
                          ({"epoch_fn": ":x"}, "--epoch-fn ':x'"),
                          ({"step_fn": "a:b:c"}, "--step-fn 'a:b:c': expected NAME, Class.NAME or module:qualname"),
                          ({"step_fn": "pkg.:f"}, "--step-fn 'pkg.:f'"),
                          ({"gc_policy": "manual:0"}, "manual needs a positive"),
                          ({"gc_policy": "sometimes"}, "expected one of default")):
        with pytest.raises(UsageError, match=words):
            run_script(str(plain), [], out=tmp_path / "never", **kwargs)
    assert not (tmp_path / "never").exists()
    with pytest.raises(UsageError, match="--epoch-fn and --step-fn both name train: a call is an epoch or a step"):
        run_script(str(plain), [], out=tmp_path / "never", epoch_fn="train", step_fn="train")
    assert not (tmp_path / "never").exists()
    result = run_script(str(plain), ["1", str(tmp_path / "s.json")], out=tmp_path / "r", epoch_fn="no_such")
    assert result.epochs == 0 and result.misnamed == [
        "--epoch-fn no_such: no such function was defined at the script's top level while the code ran; nothing was marked by it"]
    result = run_script(str(plain), ["1", str(tmp_path / "s.json")], out=tmp_path / "r2", epoch_fn="Trainer.fit",
                        step_fn="epochs")
    assert result.raised is None and result.misnamed == [
        "--epoch-fn Trainer.fit: Trainer has no attribute 'fit'; nothing was marked by it",
        "--step-fn epochs: not a function (type int); nothing was marked by it"]


def test_a_python_without_the_captures_packages_is_one_line_before_the_script_runs(tmp_path, monkeypatch):
    """Run by a python that lacks psutil (flamegraph's `-- python` not the profiler's own), the script
    never ran and the advice was to mark epochs (a probe): now one line naming the package."""
    from profiler.errors import ProfilerError
    monkeypatch.setitem(sys.modules, "psutil", None)   # its import fails, as where it is not installed
    monkeypatch.delitem(sys.modules, "profiler.capture.workers", raising=False)
    (tmp_path / "t.py").write_text("open(__file__ + '.ran', 'w').close()\n")
    with pytest.raises(ProfilerError, match=r"^the profiler's capture needs the package 'psutil', which .* cannot "
                                            r"import: run the profiler with the python it is installed in"):
        run_script(str(tmp_path / "t.py"), [], out=tmp_path / "run")
    assert not (tmp_path / "t.py.ran").exists() and not (tmp_path / "run").exists()


def test_a_misnamed_function_is_the_commands_error_with_a_guess_at_the_name_meant(tmp_path):
    """A typo'd --epoch-fn marked nothing and exited 0 (a probe): once the script succeeds it is a
    usage error (exit 2, the run directory kept), naming the function meant where one is close;
    beside the script's own failure it stays a note, and the script's exit code is the command's."""
    (tmp_path / "t.py").write_text(
        "import sys\n"
        "class Trainer:\n"
        "    def train_epoch(self): pass\n"
        "def train_epoch(): pass\n"
        "for i in range(2):\n"
        "    train_epoch(); Trainer().train_epoch()\n"
        "if sys.argv[1:] == ['fail']: raise SystemExit(3)\n")
    for n, (fn, meant) in enumerate((("trian_epoch", " (did you mean --epoch-fn train_epoch?)"),
                                     ("Trainer.trian_epoch", " (did you mean --epoch-fn Trainer.train_epoch?)"),
                                     ("unrelated", ""))):
        proc = profiler("run", "--epoch-fn", fn, "--out", tmp_path / f"r{n}", tmp_path / "t.py", check=False)
        said = ("no such function was defined at the script's top level while the code ran" if "." not in fn
                else "Trainer has no attribute 'trian_epoch'")
        assert proc.returncode == 2 and proc.stderr.splitlines() == [
            f"profiler: wrote {tmp_path / f'r{n}'}: 0 epochs, 0 steps",
            f"profiler: error: --epoch-fn {fn}: {said}; nothing was marked by it{meant}"], proc.stderr
        assert (tmp_path / f"r{n}" / "meta.json").is_file()
    # --step-fn's guess is never --epoch-fn's own function (a probe was told "did you mean --step-fn train_epoch?")
    proc = profiler("run", "--epoch-fn", "train_epoch", "--step-fn", "train_step", "--out", tmp_path / "s", tmp_path / "t.py",
                    check=False)
    assert proc.returncode == 2 and proc.stderr.splitlines()[-1] == (
        "profiler: error: --step-fn train_step: no such function was defined at the script's top level while the code "
        "ran; nothing was marked by it"), proc.stderr
    # a module never imported (the script's own, which runs as __main__), an attribute that is None, a class
    # (wrapped as a function, its classmethods and isinstance() broke the script: a probe), and a guess that
    # cannot be read (the program's own __dir__ raises): each said as it is, and the script runs
    (tmp_path / "u.py").write_text(
        "class Weird:\n"
        "    def __dir__(self): raise RuntimeError('no dir')\n"
        "cfg = Weird()\n"
        "class Trainer:\n"
        "    hook = None\n"
        "    @classmethod\n"
        "    def make(cls): return cls()\n"
        "def train_epoch(): pass\n"
        "train_epoch()\n"
        "assert isinstance(Trainer.make(), Trainer)\n"
        "print('script done')\n")
    for n, (fn, said) in enumerate((
            ("u:train_epoch", "module u was never imported while the code ran; nothing was marked by it (did you "
                              "mean --epoch-fn train_epoch?)"),
            ("Trainer.hook", "not a function (type NoneType); nothing was marked by it"),
            ("Trainer", "a class, not a function: name the method that runs it (Trainer.METHOD); nothing was marked by it"),
            ("cfg.fit", "Weird has no attribute 'fit'; nothing was marked by it"))):
        proc = profiler("run", "--quiet", "--epoch-fn", fn, "--out", tmp_path / f"u{n}", tmp_path / "u.py", check=False)
        assert proc.returncode == 2 and proc.stdout == "script done\n", proc.stderr
        assert proc.stderr.splitlines() == [f"profiler: error: --epoch-fn {fn}: {said}"]
    proc = profiler("run", "--epoch-fn", "trian_epoch", "--out", tmp_path / "failed", tmp_path / "t.py", "fail",
                    check=False)
    assert proc.returncode == 3 and proc.stderr.splitlines()[0] == (
        "profiler: --epoch-fn trian_epoch: no such function was defined at the script's top level while the code ran; nothing was marked by "
        "it (did you mean --epoch-fn train_epoch?)")


def test_main_module_prefix_names_the_scripts_own_function_and_an_empty_name_is_refused(tmp_path):
    from profiler.rundir import read_run
    # and the next command's path is quoted for a shell (a path with a space could not be pasted: a probe)
    proc = profiler("run", "--epoch-fn", "train_epoch", "--out", tmp_path / "a b", script("plain_loop.py"), "3")
    assert proc.stderr.splitlines()[-1] == f"next: profiler report '{tmp_path / 'a b'}'"
    # --epoch-fn __main__:train_epoch said "module __main__ defines no 'train_epoch'" after the whole script
    # ran, and --epoch-fn "" fell back to time windows without a word (a probe)
    (tmp_path / "t.py").write_text("def train_epoch(): pass\nfor i in range(3):\n    train_epoch()\n")
    profiler("run", "--quiet", "--epoch-fn", "__main__:train_epoch", "--out", tmp_path / "main", tmp_path / "t.py")
    assert len(read_run(tmp_path / "main").epochs) == 3
    proc = profiler("run", "--epoch-fn", "train_epoch", "--step-fn", "__main__:train_epoch", "--out", tmp_path / "both",
                    tmp_path / "t.py", check=False)
    assert proc.returncode == 2 and "--epoch-fn and --step-fn both name train_epoch" in proc.stderr
    proc = profiler("run", "--epoch-fn=", "--out", tmp_path / "empty", tmp_path / "t.py", check=False)
    assert proc.returncode == 2 and proc.stderr == "profiler: error: --epoch-fn '': expected NAME, Class.NAME or module:qualname\n"


def test_a_function_from_another_module_is_named_where_it_lives(tmp_path, monkeypatch):
    """The script imports its epoch function from its own module, whose fit() calls it by that
    module's name: --epoch-fn train_epoch wrapped the script's name, saw no call and said only
    "never called"; tlib:nope said tlib "was never imported" (a user probe)."""
    (tmp_path / "tlib_probe.py").write_text(
        "def train_epoch(): pass\n"
        "def fit(n):\n"
        "    for _ in range(n): train_epoch()\n")
    (tmp_path / "t.py").write_text("from tlib_probe import train_epoch, fit\nfit(2)\n")
    monkeypatch.delitem(sys.modules, "tlib_probe", raising=False)
    result = run_script(str(tmp_path / "t.py"), [], out=tmp_path / "r0", epoch_fn="train_epoch")
    assert result.epochs == 0 and result.notes == [
        "--epoch-fn train_epoch: the function was never called, so no epoch was marked; it is "
        "tlib_probe:train_epoch, imported into the script, and calls of it that do not go through the script's "
        "name are not seen: name it --epoch-fn tlib_probe:train_epoch"]
    for n, (fn, said) in enumerate((
            ("tlib_probe:nope", "module tlib_probe defines no 'nope'; nothing was marked by it"),
            ("tlib_probe:train_epok", "module tlib_probe defines no 'train_epok'; nothing was marked by it (did you "
                                      "mean --epoch-fn tlib_probe:train_epoch?)")), 1):
        sys.modules.pop("tlib_probe", None)
        result = run_script(str(tmp_path / "t.py"), [], out=tmp_path / f"r{n}", epoch_fn=fn)
        assert result.epochs == 0 and result.misnamed == [f"--epoch-fn {fn}: {said}"]
    sys.modules.pop("tlib_probe", None)
    result = run_script(str(tmp_path / "t.py"), [], out=tmp_path / "r3", epoch_fn="tlib_probe:train_epoch")
    assert result.epochs == 2 and result.notes == [] and result.misnamed == []


def test_a_script_that_fails_before_its_first_window_is_not_told_to_mark_its_epochs(tmp_path):
    # an argparse error, sys.exit("fatal: ...") and the like were told to mark their epochs with --epoch-fn (a probe)
    (tmp_path / "t.py").write_text("import sys\nsys.exit(int(sys.argv[1]) if sys.argv[1].isdigit() else sys.argv[1])\n")
    for code in ("2", "fatal: bad config"):
        result = run_script(str(tmp_path / "t.py"), [code], out=tmp_path / f"r{len(code)}", window_s=60.0)
        assert result.notes == [f"no epoch was written: the code exited with {'code 2' if code == '2' else repr(code)} "
                                f"before its first time window ended (one cut short before its first step is not "
                                f"written)"], result.notes


def test_training_in_another_thread_is_said_not_to_be_recorded(tmp_path):
    # 0 epochs, and a note that blamed the time windows, for 3 epochs of 2 steps that ran in a thread
    (tmp_path / "t.py").write_text(
        "import threading\n"
        "def step(i): pass\n"
        "def train():\n"
        "    for e in range(3):\n"
        "        for i in range(2):\n"
        "            step(i)\n"
        "t = threading.Thread(target=train); t.start(); t.join()\n")
    result = run_script(str(tmp_path / "t.py"), [], out=tmp_path / "run", step_fn="step", window_s=60.0)
    assert result.raised is None and result.steps == 0
    assert result.notes == ["6 epochs or steps began in threads other than the one that runs the code, and were not "
                            "recorded: the profiler marks that thread (train there, or open a Session in the training "
                            "thread)"]
    # --epoch-fn called there: "the function was never called" came before that note (a probe), and after
    # --step-fn "no epoch was found: mark them with --epoch-fn NAME"
    result = run_script(str(tmp_path / "t.py"), [], out=tmp_path / "epochs", epoch_fn="step", window_s=60.0)
    assert result.epochs == 0 and [note[:12] for note in result.notes] == ["6 epochs or "], result.notes


def test_a_generator_or_coroutine_function_is_not_wrapped_and_the_note_says_why(tmp_path):
    # its call returns at once: each epoch was the call's ~10 us, not the iteration's or the await's work
    (tmp_path / "t.py").write_text(
        "import asyncio, time\n"
        "def batches():\n"
        "    for i in range(3):\n"
        "        time.sleep(0.01)\n"
        "        yield i\n"
        "async def aepoch():\n"
        "    time.sleep(0.01)\n"
        "for e in range(2):\n"
        "    for b in batches():\n"
        "        pass\n"
        "    asyncio.run(aepoch())\n")
    for name, kind in (("batches", "a generator function"), ("aepoch", "a coroutine function")):
        result = run_script(str(tmp_path / "t.py"), [], out=tmp_path / name, epoch_fn=name, window_s=60.0)
        assert result.raised is None and result.epochs_from != "epoch-fn"
        assert f"--epoch-fn {name}: {kind}, whose call returns before its work runs: name the function that runs it; " \
               f"nothing was marked by it" in result.misnamed


@pytest.mark.parametrize("source", ["epoch-fn", "windows"])
def test_an_epochs_first_optimizer_step_ends_its_first_step(tmp_path, source):
    # a function's epoch or a window opens no step: the first optimizer step ends one begun with the epoch
    from profiler import Session
    from profiler.rundir import read_run
    with Session(tmp_path / "run") as session:
        marks = Marks(session)
        for _ in range(3):
            assert marks.begin_epoch(source)
            for _ in range(4):
                time.sleep(0.002)
                marks.step_boundary("torch")
            assert marks.end_epoch(source)
    run = read_run(tmp_path / "run")
    steps = run.steps()
    assert [r["steps"] for r in run.epochs] == [4, 4, 4] and len(steps) == 12
    firsts = steps[::4]
    assert all(0 <= first["start_s"] - r["start_s"] < 0.001 for first, r in zip(firsts, run.epochs))
    assert all(first["wall_s"] >= 0.002 for first in firsts)


def test_a_collection_before_an_epochs_first_optimizer_step_is_in_its_first_step(tmp_path):
    import gc as gc_module

    from profiler import Session
    from profiler.rundir import read_run
    with Session(tmp_path / "run") as session:
        marks = Marks(session)
        assert marks.begin_epoch("epoch-fn")
        gc_module.collect()   # inside the first step's time, before its end is known
        marks.step_boundary("torch")
        with pytest.raises(UsageError, match="only the epoch's first step"):
            session.begin_first_step()
        assert marks.end_epoch("epoch-fn")
    run = read_run(tmp_path / "run")
    first, event = run.steps()[0], run.gc_events()[-1]
    assert first["gc2_s"] == pytest.approx(float(event["duration_s"]), rel=1e-3) and first["gc2_s"] > 0


def test_marks_drop_a_torch_pass_without_steps_and_yield_to_a_framework():
    session = FakeSession()
    marks = Marks(session)
    assert marks.begin_epoch("torch")                      # a validation pass
    assert not marks.end_epoch("torch")                    # no step: dropped
    assert marks.begin_epoch("torch") and marks.begin_step("torch")
    marks.step_boundary("torch")
    assert marks.end_epoch("torch") and (marks.epochs, marks.steps, marks.owner) == (1, 1, "torch")
    assert marks.begin_epoch("torch")
    assert marks.begin_epoch("lightning")                  # stronger: the torch pass is dropped
    assert not marks.begin_step("torch") and marks.begin_step("lightning") and marks.end_step("lightning")
    assert marks.end_epoch("lightning") and not marks.begin_epoch("torch")
    assert session.calls == ["begin_epoch", "abandon_epoch", "begin_epoch", "begin_step", "end_step", "begin_step",
                             "abandon_step", "end_epoch", "begin_epoch", "abandon_epoch", "begin_epoch",
                             "begin_step", "end_step", "end_epoch"]


def test_wrap_calls_marks_each_call_and_drops_one_that_raises():
    events = []

    def work(x):
        if x < 0:
            raise ValueError(x)
        return x * 2

    wrapped = wrap_calls(work, lambda: events.append("begin") or True, lambda: events.append("end"),
                         lambda: events.append("drop"))
    assert wrapped(2) == 4 and wrapped.__name__ == "work"
    with pytest.raises(ValueError):
        wrapped(-1)
    assert events == ["begin", "end", "begin", "drop"]
    with pytest.raises(UsageError, match="Class.NAME"):
        Target("a.b-c", "--step-fn", None)


def test_gc_policies_apply_at_training_start_and_restore():
    was_enabled = gc.isenabled()

    class Listeners:
        on_training_start, on_step_end, on_epoch_written = [], [], []

    policy = GcPolicy.parse("manual:3")
    policy.attach(Listeners)
    Listeners.on_training_start[0]()
    assert not gc.isenabled()
    full = []
    gc.callbacks.append(lambda phase, info: phase == "start" and full.append(info["generation"]))
    try:
        for steps in range(1, 10):
            Listeners.on_step_end[0](steps)
    finally:
        gc.callbacks.pop()
    assert full == [2, 2, 2]
    policy.restore()
    assert gc.isenabled() == was_enabled
    freeze = GcPolicy.parse("freeze")
    freeze.start()
    assert gc.get_freeze_count() > 0
    gc.disable()   # the script's own, during training: freeze does not turn the collector back on
    try:
        freeze.restore()
        assert gc.get_freeze_count() == 0 and not gc.isenabled()
    finally:
        if was_enabled:
            gc.enable()
    assert str(GcPolicy.parse("off")) == "off" and str(policy) == "manual:3"


@pytest.mark.slow
def test_windows_when_nothing_marks_epochs(tmp_path):
    script = tmp_path / "sleepy.py"
    script.write_text("import signal, time\nfor _ in range(12):\n    time.sleep(0.1)\n"
                      "print(signal.getsignal(signal.SIGALRM))\n")
    proc = profiler("run", "--window", "0.25", "--out", tmp_path / "run", script)
    rows = records(tmp_path / "run")
    # 1.2 s of sleeps or more in windows of 0.25 s; the last, partial window is dropped
    assert meta(tmp_path / "run")["meta"]["epochs_from"] == "windows" and len(rows) >= 3
    assert all(r["wall_s"] >= 0.24 for r in rows)
    assert "epochs from windows" in proc.stderr and proc.stdout == f"{int(signal.SIG_DFL)}\n"   # the script's own
    assert "fixed time windows" in report(tmp_path / "run")["verdict"]


@pytest.mark.slow
def test_windows_before_a_frameworks_first_epoch_are_counted_apart(tmp_path):
    # a Lightning DDP job's ranks took 5 s to start; the summary said "6 epochs from lightning" of 5 (a probe)
    script = tmp_path / "slow_start.py"
    script.write_text("import time, torch\nfrom torch.utils.data import DataLoader\n"
                      "end = time.time() + 1.6\nwhile time.time() < end: sum(range(1000))\n"   # set-up, after torch
                      "model = torch.nn.Linear(4, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                      "for epoch in range(2):\n    for x in DataLoader(torch.randn(8, 4), batch_size=4):\n"
                      "        opt.zero_grad(); model(x).sum().backward(); opt.step()\n")
    proc = profiler("run", "--window", "0.25", "--out", tmp_path / "run", script)
    windows = [r for r in records(tmp_path / "run") if not r["steps"]]
    assert windows and len(records(tmp_path / "run")) == len(windows) + 2
    assert (f"epochs from torch ({len(windows)} of them {'a time window' if len(windows) == 1 else 'time windows'} "
            f"before its first: set-up), 4 steps") in proc.stderr, proc.stderr
    assert report(tmp_path / "run")["epoch_time"]["warmup_epochs_skipped"] == len(windows)


@pytest.mark.slow
def test_cli_prints_the_scripts_own_traceback_and_exits_with_its_code(plain, tmp_path):
    proc = profiler("run", "--out", tmp_path / "boom", "--epoch-fn", "train_epoch", plain, 1, tmp_path / "s", "boom",
                    check=False)
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):" and f'File "{plain}", line 24, in <module>' in lines[1]
    assert "ValueError: boom" in proc.stderr and "profiler/" not in proc.stderr.split("ValueError")[0]
    assert profiler("run", "--out", tmp_path / "three", plain, 1, tmp_path / "s", 3, check=False).returncode == 3
    proc = profiler("run", "--epoch-fn", "train_epoch", "--quiet", "--out", tmp_path / "ok", plain, 2, tmp_path / "s")
    assert proc.returncode == 0 and len(records(tmp_path / "ok")) == 2
    proc = profiler("run", "--epochs", "2", plain, check=False)
    assert proc.returncode == 2 and "unrecognized arguments: --epochs" in proc.stderr
    (tmp_path / "syntax.py").write_text("x = (1,\n")
    proc = profiler("run", "--out", tmp_path / "syntax", tmp_path / "syntax.py", check=False)
    assert proc.returncode == 1 and proc.stderr.strip().endswith("SyntaxError: '(' was never closed")
    assert not (tmp_path / "syntax").exists()


@pytest.mark.slow
def test_ctrl_c_is_interrupted_130(tmp_path):
    script = tmp_path / "forever.py"
    script.write_text("import time\ndef epoch():\n    time.sleep(0.05)\nwhile True:\n    epoch()\n")
    proc = subprocess.Popen([sys.executable, "-m", "profiler", "run", "--out", tmp_path / "run", "--epoch-fn", "epoch",
                             script], stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not (tmp_path / "run" / "epochs.jsonl").exists():
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err
    assert meta(tmp_path / "run")["status"] == "interrupted" and len(records(tmp_path / "run")) >= 1
    lines = err.strip().splitlines()   # where the finished epochs are, then the interrupt
    assert lines[-3].startswith(f"profiler: wrote {tmp_path / 'run'}: ") and lines[-2:] == [
        f"next: profiler report {tmp_path / 'run'}", "profiler: interrupted"], err
    # before them, the script's own traceback, as python prints it
    assert lines[0] == "Traceback (most recent call last):" and f'File "{script}", line 5' in err
    assert lines[-4] == "KeyboardInterrupt" and "profiler/" not in err.replace("profiler report", "")


@pytest.mark.slow
def test_worker_probe_sums_children_and_their_growth():
    """Two forked children that touch 40 MB each after they were first seen, and a subprocess
    (exec'd: its memory is its own, counted apart)."""
    import psutil

    from profiler.capture import workers
    from profiler.capture.workers import WorkerProbe

    probe = WorkerProbe(interval=0.05, budget=1.0)   # each sample waits only its own cost
    assert probe.take() == {"count": 0, "uss_bytes": 0, "pss_bytes": 0, "uss_growth_bytes": 0,
                            "uss_growth_max_bytes": 0, "new": 0, "carried_uss_bytes": 0, "full_collections": 0,
                            "gc_copied_bytes": 0, "gc_copied_max_bytes": 0, "spawned": 0, "spawned_uss_bytes": 0}
    probe.start()
    ready, go = os.pipe(), os.pipe()
    forked, spawned = [], subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        for _ in range(2):
            pid = os.fork()
            if pid == 0:
                try:
                    time.sleep(0.5)   # first seen small
                    kept = bytearray(40_000_000)
                    kept[::4096] = b"x" * len(kept[::4096])
                finally:
                    os.write(ready[1], b"x")
                    os.read(go[0], 1)
                    os._exit(0)
            forked.append(pid)
        for _ in forked:
            os.read(ready[0], 1)
        probe.sample_now()   # the ready children, whatever the thread's samples' budget left
        reading = probe.take()
    finally:
        probe.stop()
        os.write(go[1], b"x" * len(forked))
        for pid in forked:
            os.waitpid(pid, 0)
        spawned.kill()
        spawned.wait()
        for fd in ready + go:
            os.close(fd)
    assert reading["count"] == 2 and reading["pss_bytes"] >= reading["uss_bytes"] > 80e6
    assert reading["uss_growth_bytes"] > 70e6          # 40 MB touched by each after it was first seen
    assert reading["new"] == 2 and reading["carried_uss_bytes"] == 0 and reading["uss_growth_max_bytes"] > 35e6
    assert reading["spawned"] >= 1 and reading["spawned_uss_bytes"] > 1e6
    # the exited children are read no more (other children of pytest's may be)
    assert not set(forked) & set(workers.read(psutil.Process()))


@pytest.mark.slow
def test_plain_loop_marked_with_epoch_fn_finds_its_growing_log(tmp_path):
    runs = {}
    for name, extra in (("leak", []), ("fixed", ["--no-leak"])):
        runs[name] = tmp_path / name
        profiler("run", "--quiet", "--epoch-fn", "train_epoch", "--out", runs[name],
                 script("plain_loop.py"), 20, *extra)
        assert len(records(runs[name])) == 20 and meta(runs[name])["meta"]["epochs_from"] == "epoch-fn"
    leak, fixed = report(runs["leak"]), report(runs["fixed"])
    assert "allocation-growth" in patterns(leak)
    assert leak["allocation"]["rss_growth_bytes_per_epoch"] > 1e6        # 5,000 log entries per epoch
    assert "allocation-growth" not in patterns(fixed)


@pytest.mark.slow
def test_nproc_per_node_runs_the_script_on_each_rank(plain, tmp_path):
    profiler("run", "--nproc-per-node", 2, "--epoch-fn", "train_epoch", "--out", tmp_path / "job", plain, 3,
             tmp_path / "seen.json", timeout=300)
    for rank in (0, 1):
        run = tmp_path / "job" / f"rank-{rank}"
        assert (meta(run)["rank"], meta(run)["world_size"]) == (rank, 2) and len(records(run)) == 3


@pytest.mark.slow
def test_windows_leave_the_scripts_alarm_alone_and_survive_deep_capture(tmp_path):
    # the script's SIGALRM handler is never called by the windows, alarm() does not turn them off,
    # and --tracemalloc on closes each window once (no boundary inside another)
    proc = profiler("run", "--window", "0.2", "--tracemalloc", "on", "--out", tmp_path / "run",
                    script("own_alarm.py"), timeout=120)
    assert "handler calls 0" in proc.stdout
    rows = records(tmp_path / "run")
    assert meta(tmp_path / "run")["meta"]["epochs_from"] == "windows" and len(rows) >= 2   # snapshots take seconds
    assert [r["epoch"] for r in rows] == list(range(len(rows))) and all(r["heap"] for r in rows)
    assert "RecursionError" not in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_a_window_shorter_than_the_minimum_or_longer_than_the_maximum_is_refused(tmp_path):
    for window in ("0.001", "1e10"):
        proc = profiler("run", "--window", window, "--out", tmp_path / "run", script("own_alarm.py"), check=False,
                        timeout=60)
        assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
            f"profiler: error: --window {float(window)}: give a window of 0.1 s to 10,000,000 s (a boundary closes "
            f"an epoch and samples memory)"]   # 1e10 was a traceback in the windows thread, and exit 0
        assert not (tmp_path / "run").exists()
    with pytest.raises(UsageError, match="of 0.1 s to"):
        run_script(script("own_alarm.py"), out=tmp_path / "run", window_s=1e-9)


@pytest.mark.slow
def test_relative_out_survives_a_chdir_and_file_is_absolute_as_python_sets_it(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "work.py").write_text(open(script("chdir_work.py")).read())
    python = subprocess.run([sys.executable, "./work.py", "elsewhere"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=60)
    proc = subprocess.run([sys.executable, "-m", "profiler", "run", "--window", "0.1", "--out", "run", "./work.py",
                           "elsewhere"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == python.stdout == f"file {tmp_path}/./work.py\nargv0 ./work.py\n"
    assert meta(tmp_path / "run")["status"] == "completed" and records(tmp_path / "run")
    assert not (tmp_path / "elsewhere" / "run").exists()


def test_epoch_fn_in_a_script_with_a_docstring_and_future_imports(tmp_path):
    result = run_script(script("future_annotations.py"), ["4"], out=tmp_path / "run", epoch_fn="train_epoch")
    assert result.raised is None and result.epochs == 4
    assert [r["epoch"] for r in records(tmp_path / "run")] == [0, 1, 2, 3]


@pytest.mark.slow
def test_a_forked_child_exits_with_its_code_and_leaves_the_run_to_its_parent(tmp_path):
    proc = profiler("run", "--window", "0.1", "--out", tmp_path / "run", script("fork_child.py"), timeout=120)
    assert proc.stdout == "child exit 7\n"
    assert proc.stderr.count("profiler: wrote") == 1 and "no epoch was found" not in proc.stderr
    m = meta(tmp_path / "run")
    assert m["status"] == "completed" and m["epochs"] == len(records(tmp_path / "run")) >= 1


@pytest.mark.slow
def test_an_epoch_fn_called_in_a_forked_child_runs_there_as_under_python(tmp_path):
    # the wrapper stayed in the child, whose call raised the profiler's UsageError (the Session's
    # hooks are the parent's): a forked worker exited 1, not 7, and a fork Pool failed the script
    (tmp_path / "t.py").write_text(
        "import os, multiprocessing as mp\n"
        "def work(i): return i * i\n"
        "if __name__ == '__main__':\n"
        "    work(0)\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        work(1); os._exit(7)\n"
        "    print('child exit', os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n"
        "    with mp.get_context('fork').Pool(2) as p: print(p.map(work, range(4)))\n"
        "    work(2)\n")
    proc = profiler("run", "--epoch-fn", "work", "--out", tmp_path / "run", tmp_path / "t.py", timeout=120)
    assert proc.stdout == "child exit 7\n[0, 1, 4, 9]\n"
    assert meta(tmp_path / "run")["status"] == "completed" and len(records(tmp_path / "run")) == 2


@pytest.mark.slow
def test_an_out_that_cannot_hold_the_run_is_one_line_and_nothing_runs(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    profiler("run", "--quiet", "--window", "0.1", "--out", tmp_path / "run", script("chdir_work.py"), tmp_path,
             timeout=120)
    for out in (tmp_path / "file", tmp_path / "run"):
        proc = profiler("run", "--out", out, script("chdir_work.py"), tmp_path, check=False, timeout=60)
        assert proc.returncode in (1, 2) and proc.stdout == ""
        [line] = proc.stderr.splitlines()
        assert line.startswith("profiler: error: ") and str(out) in line


@pytest.mark.parametrize("args, note", [
    (["fail"], "no epoch was written: the code failed (KeyError) before its first --epoch-fn epoch ended"),
    (["exit", "3"], "no epoch was written: the code exited with code 3 before its first --epoch-fn epoch ended"),
    (["exit", "bad batch"], "no epoch was written: the code exited with 'bad batch' before its first --epoch-fn "
                            "epoch ended"),
    (["none"], "--epoch-fn train_epoch: the function was never called, so no epoch was marked"),
    (["interrupt"], "no epoch was written: the code was interrupted before any epoch began"),   # not "mark them"
])
def test_notes_say_why_no_epoch_was_written(tmp_path, args, note):
    result = run_script(script("epoch_stops.py"), args, out=tmp_path / "run", epoch_fn="train_epoch")
    assert result.epochs == 0 and [n for n in result.notes if "epoch" in n] == [note + (
        " (one cut short before its first step is not written)" if note.endswith("ended") else "")]


def test_the_epoch_a_script_stops_in_is_written_unfinished_with_its_steps(tmp_path):
    result = run_script(script("epoch_stops.py"), ["fail"], out=tmp_path / "run", epoch_fn="train_epoch",
                        step_fn="step")
    assert result.epochs == 0 and result.unfinished == (0, 5)
    assert [n for n in result.notes if "epoch" in n] == [
        "no epoch finished: the code failed (KeyError) before its first --epoch-fn epoch ended; that epoch is "
        "written as it stood then, flagged unfinished"]
    run = read_run(tmp_path / "run")
    assert run.epochs == [run.unfinished_epoch] and len(run.steps()) == 5
    proc = profiler("run", "--epoch-fn", "train_epoch", "--step-fn", "step", "--out", tmp_path / "cli",
                    script("epoch_stops.py"), "fail", check=False, timeout=120)
    assert proc.returncode == 1 and proc.stderr.splitlines()[-2:] == [
        f"profiler: wrote {tmp_path / 'cli'}: epoch 0 unfinished from epoch-fn (5 steps)",
        f"next: profiler report {tmp_path / 'cli'}"], proc.stderr


def test_steps_and_passes_no_epoch_holds_are_counted_in_the_notes(tmp_path):
    """itertools.cycle over a DataLoader makes one pass, then replays its batches: the steps after
    it were dropped without a word. A DataLoader loop with no optimizer (inference, an update by
    hand) wrote nothing, and the note said the code ended before its first torch epoch ended."""
    head = ("import itertools, torch\n"
            "from torch.utils.data import DataLoader, TensorDataset\n"
            "model = torch.nn.Linear(4, 2)\n"
            "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))), batch_size=4)\n")
    (tmp_path / "cycle.py").write_text(
        head + "for _, (x, y) in zip(range(40), itertools.cycle(loader)):\n"
               "    opt.zero_grad(); torch.nn.functional.cross_entropy(model(x), y).backward(); opt.step()\n")
    (tmp_path / "infer.py").write_text(
        head + "with torch.no_grad():\n"
               "    for _ in range(3):\n"
               "        for x, y in loader:\n"
               "            model(x)\n")
    result = run_script(str(tmp_path / "cycle.py"), [], out=tmp_path / "cycle")
    assert (result.epochs, result.steps, result.epochs_from) == (1, 16, "torch") and result.notes == [
        "24 optimizer steps ran outside any DataLoader pass once torch's passes marked the epochs, and are in no "
        "epoch (batches that come from no new pass: itertools.cycle(loader), batches kept from an earlier pass): "
        "mark epochs with --epoch-fn NAME or the Session API (docs/guide.md) to count them"]
    result = run_script(str(tmp_path / "infer.py"), [], out=tmp_path / "infer")
    assert result.epochs == 0 and result.notes == [
        "no epoch was written: 3 DataLoader passes ran with no optimizer step (inference, or weights updated by "
        "hand), and only a pass with one is an epoch: mark epochs with --epoch-fn NAME (each call of the script's "
        "function NAME) or --step-fn NAME"]


def test_a_run_that_wrote_no_epoch_does_not_point_at_report(tmp_path):
    proc = profiler("run", "--epoch-fn", "train_epoch", "--out", tmp_path / "run", script("epoch_stops.py"), "none")
    assert proc.stderr.splitlines() == [
        "profiler: --epoch-fn train_epoch: the function was never called, so no epoch was marked",
        f"profiler: wrote {tmp_path / 'run'}: 0 epochs, 0 steps"]


def test_ctrl_c_while_the_engine_imports_is_raised_after_the_import():
    # numba's C extensions turned a Ctrl-C inside their import into "ImportError: numba._devicearray
    # failed to import" (a CI rehearsal's test_ctrl_c_in_the_first_second_is_one_line)
    from profiler.interrupts import interrupts_held
    finished = False
    with pytest.raises(KeyboardInterrupt):
        with interrupts_held():
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(100_000):   # bytecode boundaries, where Python runs its signal handlers
                pass
            finished = True
    assert finished and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with interrupts_held():   # no Ctrl-C: nothing raised
        pass


def test_ctrl_c_while_a_kernel_compiles_is_raised_after_the_compile():
    # llvmlite printed and dropped a Ctrl-C that landed in its callbacks from C during a compile,
    # and the run went on (CI, stop 47); the hold raises it once numba's compiler lock is released
    import numba
    from numba.core import event
    from profiler.interrupts import interrupts_held_in_compiles

    class CtrlC(event.Listener):
        def on_start(self, ev):
            os.kill(os.getpid(), signal.SIGINT)

        def on_end(self, ev):
            pass

    twice = numba.njit(lambda v: 2 * v)   # not cached: compiles on its first call
    with pytest.raises(KeyboardInterrupt):
        with interrupts_held_in_compiles(), event.install_listener("numba:compiler_lock", CtrlC()):
            twice(1.5)
    assert len(twice.overloads) == 1, "the interrupt cut the compile short"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with interrupts_held_in_compiles():   # compiles with no Ctrl-C raise nothing
        assert numba.njit(lambda v: v + 1)(1) == 2
    seen = []   # a SIGINT handler of the program's own stays, and takes the Ctrl-C
    program = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        with interrupts_held_in_compiles(), event.install_listener("numba:compiler_lock", CtrlC()):
            assert numba.njit(lambda v: v - 1)(1) == 0
            for _ in range(100_000):   # bytecode boundaries, where Python runs its signal handlers
                pass
        assert seen and signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, program)

    class Fails(event.Listener):   # raises at a compile's start, after ours: that compile never ends
        def on_start(self, ev):
            raise RuntimeError("listener")

        def on_end(self, ev):
            pass

    with pytest.raises(RuntimeError, match="listener"):
        with interrupts_held_in_compiles(), event.install_listener("numba:compiler_lock", Fails()):
            numba.njit(lambda v: v * 3)(1)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_default_run_directories_of_runs_started_in_one_second_are_apart(tmp_path, monkeypatch):
    from profiler.commands import options
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(options.time, "strftime", lambda fmt: "20261202-015216")
    first = options.default_dir("train")   # each is created when it is chosen: runs started together
    assert first == "runs/train-20261202-015216" and os.path.isdir(first)
    assert options.default_dir("train") == first + "-2" and options.default_dir("train") == first + "-3"
    (tmp_path / first / "epochs.jsonl").write_text("")
    options.remove_unused()   # the command's end: the empty ones go, the run stays
    assert sorted(os.listdir("runs")) == ["train-20261202-015216"]
    os.remove(first + "/epochs.jsonl")
    os.rmdir(first)
    os.rmdir("runs")
    options.default_dir("train")
    (tmp_path / "elsewhere" / "runs").mkdir(parents=True)
    os.chdir(tmp_path / "elsewhere")   # a script that changed directory: not its runs/ that goes
    options.remove_unused()   # runs/ too, when the call created it
    assert not (tmp_path / "runs").exists() and (tmp_path / "elsewhere" / "runs").is_dir()


def test_manual_gc_without_steps_collects_after_each_epoch(tmp_path, capsys):
    was_enabled = gc.isenabled()
    result = run_script(script("epoch_stops.py"), [], out=tmp_path / "run", epoch_fn="train_epoch",
                        gc_policy="manual:5")
    full = json.loads(capsys.readouterr().out)
    assert result.epochs == 3 and full[2] - full[0] >= 2   # one full collection after each epoch
    assert result.notes == ["--gc-policy manual:5: no step was found, so gc.collect() ran after each epoch instead"]
    assert gc.isenabled() == was_enabled


@pytest.mark.slow
def test_windows_only_run_notes_agree_with_what_was_written(tmp_path):
    proc = profiler("run", "--window", "0.1", "--gc-policy", "freeze", "--out", tmp_path / "run",
                    script("chdir_work.py"), tmp_path, timeout=120)
    assert "profiler: --gc-policy freeze: only time windows were found, so it was never applied" in proc.stderr
    assert "no epoch was found" not in proc.stderr and "epochs from windows" in proc.stderr
    assert f"next: profiler report {tmp_path / 'run'}" in proc.stderr


@pytest.mark.slow
def test_a_script_with_its_own_session_under_profiler_run_is_one_line(tmp_path):
    proc = profiler("run", "--out", tmp_path / "runner", script("own_session.py"), tmp_path / "own2", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith("profiler: error: ") and "opens its own profiler Session" in line
    assert meta(tmp_path / "runner")["status"] == "failed"
    python = subprocess.run([sys.executable, script("own_session.py"), tmp_path / "own3"], capture_output=True,
                            text=True, timeout=60, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert python.returncode == 0 and len(records(tmp_path / "own3")) == 3


@pytest.mark.slow
def test_under_torchrun_out_is_required(tmp_path):
    env = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"}
    proc = subprocess.run([sys.executable, "-m", "profiler", "run", script("chdir_work.py"), tmp_path], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env, "PYTHONPATH": os.getcwd()})
    assert proc.returncode == 2 and proc.stdout == "" and not (tmp_path / "runs").exists()
    assert proc.stderr.splitlines() == ["profiler: error: under torchrun, give --out DIR: every rank writes "
                                        "DIR/rank-<RANK>/ (a default name holds the time, which differs between ranks)"]
    profiler("run", "--window", "0.1", "--out", tmp_path / "job", script("chdir_work.py"), tmp_path, env=env,
             timeout=120)
    assert meta(tmp_path / "job" / "rank-1")["rank"] == 1


def test_a_write_that_fails_stops_the_marking_and_the_code_goes_on(tmp_path, capsys, monkeypatch):
    # a full disk under a script: its training must not die of the profiler's error
    from profiler.errors import RunWriteError
    from profiler.rundir import read_run
    with Session(tmp_path / "run") as session:
        marks = Marks(session)
        assert marks.begin_epoch("epoch-fn") and marks.end_epoch("epoch-fn")

        def full(*args):
            raise RunWriteError("cannot write epochs.jsonl: No space left on device")
        monkeypatch.setattr(session._writer, "write_epoch_line", full)
        assert marks.begin_epoch("epoch-fn") and marks.begin_step("step-fn") and marks.end_step("step-fn")
        assert not marks.end_epoch("epoch-fn")                                 # said, not raised
        assert not marks.begin_epoch("epoch-fn") and not marks.begin_step("step-fn")   # stopped
        monkeypatch.undo()
    assert capsys.readouterr().err.strip().splitlines() == [
        "profiler: cannot write epochs.jsonl: No space left on device; recording stops here and the code goes on "
        "(what was written is kept)"]
    run = read_run(tmp_path / "run")
    assert [r["epoch"] for r in run.epochs] == [0] and len(run.steps()) == 0 and run.status == "completed"


@pytest.mark.slow
@pytest.mark.parametrize("closes", ["sys.stdout.close()", "sys.stdout = None", "sys.stdout.close(); os.close(1)",
                                    "sys.stderr.close()", "sys.stdout.close(); sys.stderr.close()"])
def test_a_script_that_closes_its_standard_streams_exits_as_python_does(tmp_path, closes):
    # the stream is the script's to close: the profiler's summary and flush after it are not its error
    path = tmp_path / "closes.py"
    path.write_text(f"import os, sys\nprint('before')\n{closes}\n")
    python = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=60)
    proc = profiler("run", "--window", "0.1", "--out", tmp_path / "run", path, check=False, timeout=120)
    assert python.returncode == proc.returncode == 0, proc.stderr
    assert proc.stdout == python.stdout == "before\n" and "Error" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines() == [f"profiler: wrote {tmp_path / 'run'}: 1 epoch from windows, 0 steps",
                                        f"next: profiler report {tmp_path / 'run'}"]
    assert meta(tmp_path / "run")["status"] == "completed"


def test_run_options_after_the_script_are_named_when_its_parser_refuses_them(tmp_path):
    # `profiler run train.py --epochs 1 --tracemalloc auto`: argparse's error, then "no epoch was written", and
    # nothing said --tracemalloc goes before the script (a probe)
    from profiler.commands.run import _misplaced_note
    note, = _misplaced_note(SystemExit(2), "train.py", ["--epochs", "1", "--tracemalloc", "auto", "--quiet",
                                                        "--out=runs/x"])
    assert note == ("--tracemalloc, --quiet and --out came after the script, so the script got them: profiler run's "
                    "options go before the script: profiler run --tracemalloc auto --quiet --out=runs/x train.py "
                    "--epochs 1")
    assert _misplaced_note(SystemExit(2), "t.py", ["--window", "0.5"])[0].startswith("--window came after the script, "
                                                                                    "so the script got it")
    assert _misplaced_note(SystemExit(0), "t.py", ["--tracemalloc", "auto"]) == []   # the script took them
    assert _misplaced_note(SystemExit(2), "t.py", ["--epochs", "x"]) == []           # its own arguments' error
    assert _misplaced_note(None, "t.py", ["--out", "x"]) == []

    # a module keeps its -m; what follows the script's `--` is the script's; an option the script defines itself
    # (its own --out, refused for another argument) is its own (a review)
    assert _misplaced_note(SystemExit(2), "pkg.train", ["--tracemalloc", "auto"], module=True)[0].endswith(
        "profiler run --tracemalloc auto -m pkg.train")
    assert _misplaced_note(SystemExit(2), "t.py", ["--lr", "x", "--", "--out", "y"]) == []
    own = tmp_path / "own.py"
    own.write_text('import argparse\np = argparse.ArgumentParser()\np.add_argument("--out")\np.add_argument("--lr", '
                   'type=float)\np.parse_args()\n')
    assert _misplaced_note(SystemExit(2), str(own), ["--out", "results", "--lr", "abc"]) == []


DEEP_SETUP = """
import sys
setup = [[i] for i in range(300_000)]   # an import's worth of objects, kept: every snapshot walks them

kept = []
def train_epoch():
    kept.extend(bytearray(4096) for _ in range(64))   # the leak: 256 KiB an epoch

for _ in range(int(sys.argv[1])):
    train_epoch()
"""


@pytest.mark.slow
def test_deep_capture_from_the_start_traces_anew_when_training_starts(tmp_path):
    # --tracemalloc on traced a torch script's imports: each snapshot walked them (22 s), the time budget held
    # the next ones past the end, and no line of the leak was named (a probe). A process of its own: a snapshot
    # also counts the process's objects, and pytest's heap would make each one cost more than its budget
    path = tmp_path / "train.py"
    path.write_text(DEEP_SETUP)
    profiler("run", "--quiet", "--tracemalloc", "on", "--epoch-fn", "train_epoch", "--out", tmp_path / "run", path, 6,
             timeout=120)
    rows = records(tmp_path / "run")
    trained = [r for r in rows if r["heap"] is not None and r["heap"]["snapshot"]]
    # traced: the leak (256 KiB an epoch) and the profiler's own records, not the set-up's 300,000 lists (32 MB),
    # nor the lists of them deep capture's count by type made (kept until a full collection, they read 5-22 MB)
    assert len(trained) == 6 and all(r["heap"]["traced_bytes"] < 4 << 20 for r in trained), rows
    leak = [g for g in trained[-1]["heap"]["top_growth"] if g["site"].endswith("train.py:7")]
    assert leak and leak[0]["size_diff"] >= 64 * 4096


def test_a_loop_shorter_than_a_window_is_told_to_mark_its_epochs(tmp_path):
    # a Keras train_on_batch loop of 0.6 s after torch's import (windows wait 3 windows for torch to mark epochs):
    # "no epoch was written: the code ended before its first time window ended", no word of --epoch-fn (a probe)
    path = tmp_path / "short.py"
    path.write_text("import torch\n\ndef train_epoch():\n    sum(range(1000))\n\nfor _ in range(5):\n    train_epoch()\n")
    result = run_script(str(path), [], out=tmp_path / "run")
    note, = [n for n in result.notes if "epoch" in n]
    assert note.startswith("no epoch was written: the code ended before its first time window ended") and \
        note.endswith("mark its epochs with --epoch-fn NAME (each call of the script's function NAME is an epoch)")
