"""The profiler command, end to end in subprocesses: run, report, compare, scaling, flamegraph,
demo; usage errors exit 2 with exactly one line."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from .fixtures import epoch, write_run

pytestmark = pytest.mark.slow   # every test here starts the command in a subprocess


def profiler(*args, check=True, env=None):
    proc = subprocess.run([sys.executable, "-m", "profiler", *map(str, args)], capture_output=True, text=True,
                          env=None if env is None else {**os.environ, **env}, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}: {proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("cli")
    runs = {}
    for layout in ("NCHW", "NHWC"):
        runs[layout] = base / layout
        profiler("run", "mnist-cnn", "--layout", layout, "--epochs", 2, "--samples", 96, "--out", runs[layout],
                 "--quiet")
    return runs


def test_run_report_json_and_html(two_runs, tmp_path):
    out = json.loads(profiler("report", two_runs["NCHW"], "--json").stdout)
    assert out["epochs"] == 2 and out["status"] == "completed" and out["primary_cause"] in ("none", "gc", "allocation", "compute")
    assert {"early_median_s", "late_median_s", "ratio"} <= set(out["epoch_time"])
    html = tmp_path / "r.html"
    text = profiler("report", two_runs["NCHW"], "--html", html).stdout
    assert "cause" in text and "epoch time" in text
    page = html.read_text()
    assert page.count("data:image/png;base64") >= 2 and out["verdict"][:40] in page.replace("&#x27;", "'")


def test_scenario_runs_record_the_kernels_isa_and_block(two_runs):
    import kernels
    meta = json.loads((two_runs["NHWC"] / "meta.json").read_text())["meta"]
    assert meta["kernels"] == kernels.isa_info() and meta["kernels"]["block"].count("x") == 1


def test_compare_names_ops_by_layout(two_runs):
    out = json.loads(profiler("compare", two_runs["NCHW"], two_runs["NHWC"], "--json").stdout)
    assert out["a"]["label"] == "mnist-cnn NCHW" and out["b"]["label"] == "mnist-cnn NHWC"
    ops = {r["op"] for r in out["rows"]}
    assert {"conv2d_forward", "conv2d_backward", "broadcast_add_forward", "broadcast_add_backward"} <= ops
    text = profiler("compare", two_runs["NCHW"], two_runs["NHWC"]).stdout
    # which layout is slower, and by how much an op, is this machine's noise on two 2-epoch runs: the
    # text names the slower run and every op; test_compare checks the what-if's words on known answers
    slow = "mnist-cnn NCHW" if out["a"]["epoch_s"] >= out["b"]["epoch_s"] else "mnist-cnn NHWC"
    assert text.startswith(f"{slow} takes ") and all(op in text for op in ops)


def test_scaling_shows_the_dependence_only_with_preallocated_history(tmp_path):
    common = ["--max-epochs", "20,200000", "--halt-after", "12", "--samples", "1000", "--gc-collect", "epoch", "--json"]
    pre = json.loads(profiler("scaling", "mlp", "--history", "preallocated", "--out", tmp_path / "pre", *common).stdout)
    app = json.loads(profiler("scaling", "mlp", "--history", "append", "--out", tmp_path / "app", *common).stdout)
    assert pre["depends"] and pre["ratio"] > 2, pre["verdict"]
    assert not app["depends"], app["verdict"]
    assert pre["rows"][1]["gc_share"] > pre["rows"][0]["gc_share"]
    assert (tmp_path / "pre" / "scaling.png").exists()


def test_flamegraph_of_a_scenario_shows_kernel_entry_points(tmp_path):
    svg = tmp_path / "cnn.svg"
    profiler("flamegraph", "mnist-cnn", "--epochs", 2, "--samples", 128, "--out", svg)
    folded = svg.with_suffix(".folded")
    assert svg.read_text().startswith("<svg") and folded.exists()
    assert "conv2d_backward" in folded.read_text() and "conv2d_backward" in svg.read_text()


def test_flamegraph_of_any_command_and_diff(tmp_path):
    script = "import time\nend=time.time()+{t}\nwhile time.time()<end: sum(range(1000))\n"
    for name, t in (("a", 0.6), ("b", 0.6)):
        profiler("flamegraph", "--out", tmp_path / f"{name}.svg", "--", sys.executable, "-c", script.format(t=t))
    profiler("flamegraph", "--diff", tmp_path / "a.svg", tmp_path / "b.folded", "--out", tmp_path / "d.svg")
    diff = (tmp_path / "d.svg").read_text()
    assert "red grew, blue shrank" in diff and "points vs baseline" in diff


def test_demo_quick_writes_the_report_and_reruns_in_place(tmp_path):
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "notes.txt").write_text("mine")
    for _ in range(2):   # `make demo` twice: the second run replaces the first one's runs
        out = profiler("demo", "--quick", "--out", tmp_path / "demo").stdout
        assert "report:" in out and (tmp_path / "demo" / "report.html").exists()
    assert "Axon report" in out and "NCHW vs NHWC" in out
    assert (tmp_path / "demo" / "figures" / "scaling-preallocated.png").exists()
    assert (tmp_path / "demo" / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("inside", ["notes.txt", "meta.json notes.txt", "rank-0/meta.json rank-0/notes.txt"])
def test_demo_refuses_to_replace_a_directory_that_is_none_of_its_runs(tmp_path, inside):
    # the demo removed DIR/keras-mxnet-mnist-cnn-NCHW and its kin before writing them, whatever they held;
    # a run's records beside a file of the user's are not the demo's to remove either
    mine = tmp_path / "demo" / "keras-mxnet-mnist-cnn-NCHW"
    for name in inside.split():
        (mine / name).parent.mkdir(parents=True, exist_ok=True)
        (mine / name).write_text("{}")
    kept = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    proc = profiler("demo", "--quick", "--out", tmp_path / "demo", check=False)
    assert proc.returncode == 2 and proc.stderr.splitlines() == [
        f"profiler: error: --out {tmp_path / 'demo'}: {mine} exists and is no run of the demo's, which a rerun "
        f"replaces: move it or choose another --out"]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == kept


def test_demo_refuses_a_run_directory_for_its_runs(tmp_path):
    # it wrote its runs, figures and report.html inside a run directory given as --out (a probe)
    run = write_run(tmp_path / "run", [epoch(0, 0.01)])
    proc = profiler("demo", "--quick", "--out", run, check=False)
    assert proc.returncode == 2 and proc.stderr == (f"profiler: error: --out {run} already holds a run (meta.json "
                                                    f"exists); choose a new directory\n")
    assert sorted(p.name for p in run.iterdir()) == ["epochs.jsonl", "meta.json"]


@pytest.mark.parametrize("args,words", [
    (["launch"], ["invalid choice", "launch"]),
    (["--bogus"], ["unrecognized option --bogus", "COMMAND first"]),
    (["run", "resnet"], ["invalid choice", "resnet"]),
    (["run", "mlp", "--layout", "NCWH"], ["--layout", "NCWH"]),
    (["run", "mlp", "--epochs", "0"], ["--epochs", "positive"]),
    (["run", "mlp", "--epochs", "5", "--halt-after", "9"], ["--halt-after 9", "--epochs 5"]),
    (["run", "mnist-cnn", "--labels", "random"], ["--labels", "mlp"]),
    (["run", "--window", "1", "mlp"], ["--window applies to scripts, not to the built-in scenario mlp"]),
    (["report"], ["run_dir"]),
    (["report", "/nonexistent/run"], ["/nonexistent/run", "does not exist"]),
    (["run", "mlp", "--seed", "-1"], ["--seed", "non-negative", "-1"]),
    (["run", "mlp", "--epochs", "1000000000", "--history", "preallocated"], ["--history preallocated", "GB",
                                                                               "fewer --epochs"]),
    (["flamegraph", "--", "/no/such/binary"], ["/no/such/binary", "no such program"]),
    (["scaling", "mlp", "--max-epochs", "100"], ["--max-epochs", "at least two"]),
    (["scaling", "mlp", "--max-epochs", "1e3,x"], ["--max-epochs", "comma-separated"]),
    (["flamegraph"], ["SCENARIO", "COMMAND"]),
    (["flamegraph", "--diff", "a.folded", "b.folded"], ["a.folded", "does not exist"]),
    (["report", "x", "--", "ls"], ["`profiler report` takes no -- COMMAND"]),
    (["scaling", "mlp", "--max-epochs", "10,20", "--out", __file__], ["--out", "is a file, not a directory"]),
    (["report", "x", "--html", ""], ["--html ''", "give a file name, e.g. --html report.html"]),
    (["timeline", "x", "--out", ""], ["--out ''", "give a file name, e.g. --out trace.json"]),
    (["timeline", "x", "--out", "-"], ["--out -: writing to standard output is not supported"]),
    (["timeline", "x", "--steps", "100"], ["--steps", "expected a range of step indices A:B", "'100'"]),
    (["timeline", "x", "--steps", "200:100"], ["--steps", "with B above A", "'200:100'"]),
    (["compare", "x", "y", "--html", "-"], ["--html -: writing to standard output is not supported"]),
    (["run", "--", "python", "train.py"], ["'python' is neither", "profiler run train.py"]),
    (["run", "--epochs", "3", "train.py"], ["unrecognized arguments: --epochs", "go before the script"]),
    (["run", "--out", "", "train.py"], ["--out ''", "give a run directory"]),
    (["run", "mlp", "--out", ""], ["--out ''", "give a run directory"]),
    (["flamegraph", "--from-first-epoch", "--", "python", "nosuch.py"], ["'nosuch.py' is not a script file"]),
    (["demo", "--quick", "--out", __file__ + "/demo"], ["--out", "is a file, not a directory"]),
    (["scaling", "mlp", "--history", "preallocated", "--max-epochs", "10,99999999999999"],
     ["--history preallocated", "GB", "fewer --epochs"]),
    (["scaling", "mlp", "--max-epochs", "2,3", "--gc-policy", "sometimes"], ["--gc-policy 'sometimes'", "expected one of"]),
    (["flamegraph", "mlp", "--gc-policy", "manual:0"], ["--gc-policy 'manual:0'", "manual needs a positive"]),
], ids=lambda v: None)
def test_usage_errors_exit_2_with_one_line(args, words):
    proc = profiler(*args, check=False, env={"RUST_BACKTRACE": "1"})
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("profiler: error:"), proc.stderr
    for word in words:
        assert word in lines[0]


@pytest.mark.slow
def test_a_script_refused_under_a_first_epoch_flamegraph_is_a_usage_error(tmp_path):
    # `profiler run -m nosuchmod` exits 2; under flamegraph --from-first-epoch it exited 1
    proc = profiler("flamegraph", "--from-first-epoch", "--out", tmp_path / "f.svg", "--", sys.executable, "-m",
                    "nosuchmod", check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and "no module named 'nosuchmod'" in lines[0], proc.stderr
    assert lines[-1].endswith("stopped on the usage error above before its first epoch began; nothing was recorded")
    assert not any(tmp_path.iterdir())


def test_a_diff_of_files_that_hold_no_stacks_is_a_usage_error(tmp_path):
    (tmp_path / "empty.folded").write_text("")
    (tmp_path / "bad.folded").write_text("main;work lots\n")
    proc = profiler("flamegraph", "--diff", tmp_path / "empty.folded", tmp_path / "bad.folded", "--out",
                    tmp_path / "d.svg", check=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"profiler: error: {tmp_path / 'empty.folded'} holds no samples (did the command run long enough to be "
        f"sampled?)"], proc.stderr


def test_help_has_examples():
    out = profiler("--help").stdout
    assert "examples:" in out and "profiler scaling" in out


def test_flamegraph_of_a_failing_command_keeps_the_graph_and_its_exit_code(tmp_path):
    svg = tmp_path / "f.svg"
    script = "import sys, time\nend=time.time()+0.4\nwhile time.time()<end: sum(range(1000))\nsys.exit(3)\n"
    proc = profiler("flamegraph", "--out", svg, "--", sys.executable, "-c", script, check=False)
    assert proc.returncode == 1 and "exited with code 3" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and svg.read_text().startswith("<svg")


def test_a_failed_recording_leaves_the_earlier_one_and_a_bad_out_is_said_before_recording(tmp_path):
    svg = tmp_path / "f.svg"
    script = "import time\nend=time.time()+0.6\nwhile time.time()<end: sum(range(1000))\n"
    profiler("flamegraph", "--out", svg, "--", sys.executable, "-c", script)
    folded, picture = (tmp_path / "f.folded").read_bytes(), svg.read_bytes()
    proc = profiler("flamegraph", "--out", svg, "--", "false", check=False)   # over before py-spy could sample it
    assert proc.returncode == 1 and "before py-spy took a sample" in proc.stderr, proc.stderr
    assert (tmp_path / "f.folded").read_bytes() == folded and svg.read_bytes() == picture
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.folded", "f.svg"]
    (tmp_path / "adir").mkdir()
    proc = profiler("flamegraph", "--out", tmp_path / "adir", "--", sys.executable, "-c", script, check=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"profiler: error: --out {tmp_path / 'adir'} is a directory: give a file name, e.g. --out "
        f"{tmp_path / 'adir' / 'flamegraph.svg'}"], proc.stderr
    proc = profiler("flamegraph", "--out", "/proc/f.svg", "--", sys.executable, "-c", script, check=False)
    assert proc.returncode == 1 and "cannot write the recording to /proc/f.folded" in proc.stderr, proc.stderr


def test_a_command_too_short_to_sample_is_named_as_such(tmp_path):
    proc = profiler("flamegraph", "--out", tmp_path / "t.svg", "--", "true", check=False, env={"RUST_BACKTRACE": "1"})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and "before py-spy took a sample" in lines[0], proc.stderr


def test_ctrl_c_in_the_first_second_is_one_line(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "profiler", "run", "mlp", "--epochs", "3", "--out", tmp_path / "r"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err.strip().splitlines() == ["profiler: interrupted"], err


def test_ctrl_c_after_the_first_epochs_says_where_they_are(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "profiler", "run", "mlp", "--epochs", "100000", "--out", tmp_path / "r"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not ((tmp_path / "r" / "epochs.jsonl").exists()
                                          and (tmp_path / "r" / "epochs.jsonl").stat().st_size):
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err.strip().splitlines()[-3:] == [
        f"profiler: wrote {tmp_path / 'r'} (interrupted)", f"next: profiler report {tmp_path / 'r'}",
        "profiler: interrupted"], err


def test_ctrl_c_inside_code_run_by_exec_still_exits_130(tmp_path):
    # as when Ctrl-C lands in a namedtuple or dataclass definition while numpy or numba import:
    # CPython 3.11 takes an interrupt raised in exec() of a string for an unhandled one
    (tmp_path / "interrupted.py").write_text(
        "import sys\nfrom profiler import cli\nfrom profiler.commands.report import ReportCommand\n"
        "ReportCommand.run = staticmethod(lambda args: exec('raise KeyboardInterrupt'))\n"
        "sys.exit(cli.main(['report', 'x']))\n")
    proc = subprocess.run([sys.executable, "-m", "interrupted"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 130 and proc.stderr.strip() == "profiler: interrupted", proc.stderr


def test_a_ctrl_c_that_the_recorded_code_caught_keeps_its_exit_code(tmp_path):
    (tmp_path / "caught.py").write_text(
        "import sys\nfrom profiler import cli\nfrom profiler.commands.report import ReportCommand\n"
        "def run(args):\n    try:\n        exec('raise KeyboardInterrupt')\n    except KeyboardInterrupt:\n"
        "        print('stopped early')\n"
        "ReportCommand.run = staticmethod(run)\nsys.exit(cli.main(['report', 'x']))\n")
    proc = subprocess.run([sys.executable, "-m", "caught"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "stopped early\n", proc.stderr


def test_no_progress_bar_when_stderr_is_not_a_terminal(tmp_path):
    proc = profiler("run", "mlp", "--epochs", 2, "--samples", 500, "--out", tmp_path / "r")
    assert proc.stderr == "" and "wrote" in proc.stdout


def test_gc_policies_run_on_scenarios_and_compare_shows_them(tmp_path):
    for policy in ("default", "manual:5"):
        profiler("run", "mlp", "--epochs", 5, "--samples", 2500, "--gc-policy", policy, "--out", tmp_path / policy,
                 "--quiet")
        assert json.loads((tmp_path / policy / "meta.json").read_text())["options"]["gc_policy"] == policy
    out = json.loads(profiler("compare", tmp_path / "default", tmp_path / "manual:5", "--json").stdout)
    assert (out["a"]["gc"]["policy"], out["b"]["gc"]["policy"]) == ("default", "manual:5")
    # 10 steps per epoch: manual:5 collects twice an epoch; automatic GC makes no full collection here
    assert out["b"]["gc"]["full_collections"] == 2 and out["a"]["gc"]["full_collections"] < 1


def test_scenario_argv_repeats_the_options_with_or_without_an_out_directory():
    import argparse

    from profiler.commands.options import add_scenario_options, scenario_argv
    parser = argparse.ArgumentParser()
    add_scenario_options(parser)
    args = parser.parse_args(["--seed", "3", "--samples", "64", "--gc-collect", "epoch", "--gc-policy", "freeze"])
    with_out = scenario_argv(args, "mnist-cnn", "runs/x", args.epochs)
    without = scenario_argv(args, "mnist-cnn", None, args.epochs)
    assert with_out[:4] == ["run", "mnist-cnn", "--out", "runs/x"] and "--out" not in without
    assert with_out[4:] == without[2:] and without[-2:] == ["--samples", "64"]
    assert without[without.index("--seed") + 1] == "3" and without[without.index("--gc-collect") + 1] == "epoch"
    assert without[without.index("--gc-policy") + 1] == "freeze"   # scaling's and flamegraph's runs keep the policy
    assert parser.parse_args([a for a in without[2:] if a != "--quiet"]) == args   # it repeats them exactly


def _closing(redirect, *args):
    """`python -m profiler ARGS` with a standard stream closed as a shell's `2>&-` or `>&-` does."""
    return subprocess.run(["sh", "-c", f'"$@" {redirect}', "sh", sys.executable, "-m", "profiler", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def test_a_closed_stderr_trains_without_a_bar_and_the_run_completes(tmp_path):
    proc = _closing("2>&-", "run", "mlp", "--epochs", 2, "--samples", 500, "--out", tmp_path / "r")
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    assert proc.returncode == 0 and (meta["status"], meta["error"], meta["epochs"]) == ("completed", None, 2), proc
    assert len((tmp_path / "r" / "epochs.jsonl").read_text().splitlines()) == 2
    assert proc.stdout.startswith(f"wrote {tmp_path / 'r'}: 2 epochs")
    proc = _closing("2>&-", "report", tmp_path / "none")   # print() to a None stderr wrote to stdout
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout


def test_a_closed_stdout_is_a_failed_write_and_the_run_is_complete(tmp_path):
    said = ["profiler: error: cannot write to standard output: it is closed"]
    proc = _closing(">&-", "run", "mlp", "--epochs", 2, "--samples", 500, "--out", tmp_path / "r")
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    assert proc.returncode == 1 and proc.stderr.splitlines() == said, proc.stderr
    assert (meta["status"], meta["epochs"]) == ("completed", 2)
    assert len((tmp_path / "r" / "epochs.jsonl").read_text().splitlines()) == 2
    proc = _closing(">&-", "report", tmp_path / "r")
    assert proc.returncode == 1 and proc.stderr.splitlines() == said, proc.stderr


@pytest.mark.parametrize("to_the_group", [False, True], ids=["kill", "killpg"])
def test_ctrl_c_during_scaling_leaves_the_running_child_interrupted(tmp_path, to_the_group):
    # the child must record `interrupted` with its finished epochs, not be killed as `running`;
    # as `kill -INT` (the parent alone) and as a terminal's Ctrl-C (the whole process group)
    out = tmp_path / "scal"
    proc = subprocess.Popen([sys.executable, "-m", "profiler", "scaling", "mlp", "--max-epochs", "100000,200000",
                             "--samples", "500", "--out", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    lines = out / "max-100000" / "epochs.jsonl"
    try:
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None and not (lines.exists() and lines.stat().st_size):
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        if to_the_group:   # the child stopped meanwhile, as one that takes the Ctrl-C late (in a long kernel)
            child = json.loads((out / "max-100000" / "meta.json").read_text())["pid"]
            os.kill(child, signal.SIGSTOP)
            os.killpg(proc.pid, signal.SIGINT)
            time.sleep(0.3)
            try:
                os.kill(child, signal.SIGCONT)
            except ProcessLookupError:   # killed already
                pass
        else:
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)   # whatever is left of the group, the child included
        except ProcessLookupError:
            pass
        proc.wait(timeout=60)
    assert proc.returncode == 130 and err.strip().splitlines()[-1] == "profiler: interrupted", err
    meta = json.loads((out / "max-100000" / "meta.json").read_text())
    assert (meta["status"], meta["error"]) == ("interrupted", "KeyboardInterrupt")
    assert meta["epochs"] == _finished(lines) >= 1
    assert not (out / "max-200000").exists()


def _finished(lines):
    """The finished epochs' lines in the epochs.jsonl `lines`, after which at most one more: the epoch the signal
    stopped, flagged unfinished, when it had a step."""
    written = [json.loads(line) for line in lines.read_text().splitlines()]
    finished = [r for r in written if not r.get("unfinished")]
    assert len(written) - len(finished) <= 1 and written[:len(finished)] == finished, written
    return len(finished)


def _terminated(cmd, started, timeout=120):
    """Start `profiler CMD` in a session of its own, wait for started(its psutil.Process) to hold, SIGTERM it alone;
    (its exit code, its stderr, the processes it had started, still alive after it ended)."""
    import psutil
    proc = subprocess.Popen([sys.executable, "-m", "profiler", *map(str, cmd)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.time() + timeout
        while time.time() < deadline and proc.poll() is None and not started(psutil.Process(proc.pid)):
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        _, alive = psutil.wait_procs(children, timeout=10)
        return proc.returncode, err, alive
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)   # whatever is left of the group
        except ProcessLookupError:
            pass
        proc.wait(timeout=60)


def test_sigterm_during_scaling_stops_the_running_child_as_terminated(tmp_path):
    out = tmp_path / "scal"
    lines = out / "max-100000" / "epochs.jsonl"
    code, err, alive = _terminated(["scaling", "mlp", "--max-epochs", "100000,200000", "--samples", 500, "--out", out],
                                   lambda proc: lines.exists() and lines.stat().st_size > 0)
    assert code == 143 and err.strip().splitlines()[-1] == "profiler: terminated" and not alive, err
    meta = json.loads((out / "max-100000" / "meta.json").read_text())
    assert meta["status"] == "terminated" and meta["epochs"] == _finished(lines) >= 1
    assert not (out / "max-200000").exists()


def test_sigterm_during_a_flamegraph_stops_the_command_and_py_spy_and_leaves_no_files(tmp_path):
    script = "import time\nend = time.time() + 60\nwhile time.time() < end: sum(range(1000))\n"
    svg = tmp_path / "a.svg"

    def recording(proc):   # the command's own py-spy, not another's on the machine
        return any("py-spy" in " ".join(p.cmdline()) for p in proc.children(recursive=True))
    code, err, alive = _terminated(["flamegraph", "--out", svg, "--", sys.executable, "-c", script], recording)
    assert code == 143 and err.strip().splitlines()[-1] == "profiler: terminated" and not alive, err
    assert sorted(p.name for p in tmp_path.iterdir()) == []   # no .part, no folded, no svg


def test_a_child_that_ignores_the_ctrl_c_gets_one_sigint_and_is_killed_after_the_bound(tmp_path, monkeypatch):
    from profiler.workloads import processes
    monkeypatch.setattr(processes, "INTERRUPT_GRACE_S", 0.2)
    monkeypatch.setattr(processes, "INTERRUPT_BOUND_S", 0.5)
    seen = tmp_path / "sigints"
    proc = subprocess.Popen([sys.executable, "-c", "import pathlib, signal, sys, time\n"
                             "seen = pathlib.Path(sys.argv[1])\n"
                             "signal.signal(signal.SIGINT, lambda *a: seen.write_text(seen.read_text() + 'int\\n'))\n"
                             "seen.write_text('')\ntime.sleep(60)\n", seen])
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not seen.exists():
            time.sleep(0.02)
        started = time.time()
        processes.stop_interrupted(proc)
        took = time.time() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL and 0.7 <= took < 5 and seen.read_text() == "int\n"
