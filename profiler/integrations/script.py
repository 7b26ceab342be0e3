"""Run an unmodified script (or `-m module`) in this process, as __main__, under a Session.

The script sees what `python SCRIPT.py args` (or `python -m MODULE args`) would give it:
sys.argv, sys.path[0] (the script's directory, or the working directory for -m), a fresh
__main__ module. Epochs and steps are found without edits:

    torch      an optimizer step is a step; a DataLoader pass with a step is an epoch (torch.py)
    keras      a callback injected into every Model.fit (keras.py)
    lightning  a callback injected into every Trainer (lightning.py)
    epoch-fn   --epoch-fn/--step-fn: each call of the named function (functions.py)
    windows    none of these: fixed time windows (windows.py)

Hooks are installed when the script imports the framework (detect.py, imports.py), never
before, and every hook, patch, timer and GC setting is undone on every exit path. The run's meta
records "epochs_from" when it ends (the source of its epochs, or null if none was written) and
the options.
"""

import ast
import builtins
import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import tokenize
import types
from dataclasses import dataclass

from ..errors import UsageError
from ..rundir.format import EPOCHS_FROM, SOURCE_SHA256
from . import functions
from .detect import Detection
from .windows import check_seconds


@dataclass
class Main:
    """What the script runs as: its code, its __main__ module, sys.argv[0] and sys.path[0], and
    the SHA-256 of its file, as sha256sum gives it (compare tells two runs of one command by it)."""
    code: types.CodeType
    module: types.ModuleType
    argv0: str
    path0: str
    source_sha256: str

    @property
    def namespace(self):
        return self.module.__dict__


def load_main(target, *, module, watch):
    """Compile the script or module (with the --epoch-fn watch calls if `watch`); UsageError
    when there is nothing to run."""
    if module:
        path0 = os.getcwd()
        sys.path.insert(0, path0)
        try:
            spec = importlib.util.find_spec(target)
            if spec is not None and spec.submodule_search_locations is not None:
                target += ".__main__"
                spec = importlib.util.find_spec(target)
        except (ImportError, ValueError) as e:
            raise UsageError(f"-m {target}: {e}") from None
        finally:
            sys.path.remove(path0)
        if spec is None or spec.loader is None or spec.origin is None:
            raise UsageError(f"-m {target}: no module named {target!r} (is it installed, or in this directory?)")
        source = spec.loader.get_source(target) if hasattr(spec.loader, "get_source") else None
        if source is None:
            raise UsageError(f"-m {target}: no Python source to run (a compiled or built-in module)")
        filename = argv0 = spec.origin
        data = spec.loader.get_data(spec.origin) if hasattr(spec.loader, "get_data") else source.encode()
        namespace = {"__name__": "__main__", "__file__": spec.origin, "__spec__": spec, "__loader__": spec.loader,
                     "__package__": spec.parent, "__cached__": spec.cached}
    else:
        if not os.path.isfile(target):
            raise UsageError(f"{target}: no such file (give a Python script, -m MODULE, or a scenario name)")
        try:
            with tokenize.open(target) as f:
                source = f.read()
                f.buffer.seek(0)
                data = f.buffer.read()
        except (OSError, SyntaxError, UnicodeDecodeError) as e:
            raise UsageError(f"cannot read {target}: {e}") from None
        argv0 = target
        filename = os.path.join(os.getcwd(), target)   # as python sets __file__: joined, not normalised
        path0 = os.path.dirname(os.path.realpath(target))   # python resolves a symlinked script's directory
        namespace = {"__name__": "__main__", "__file__": filename, "__spec__": None, "__package__": None,
                     "__loader__": importlib.machinery.SourceFileLoader("__main__", filename), "__cached__": None}
    module = types.ModuleType("__main__")
    module.__dict__.update(namespace, __builtins__=builtins)   # __main__'s is the module, others' its dict
    digest = hashlib.sha256(data).hexdigest()
    if watch:
        try:
            tree = ast.parse(source, filename)
        except SyntaxError:
            tree = None   # compiled from source below, where Python raises the script's own error
        if tree is not None:
            return Main(functions.compile_with_watch(tree, filename), module, argv0, path0, digest)
    return Main(compile(source, filename, "exec", dont_inherit=True), module, argv0, path0, digest)


def run_main(main, args):
    """Run the code as __main__ with sys.argv and sys.path[0] as Python would set them; both, and
    sys.modules["__main__"], restored afterwards."""
    saved_argv, saved_path, saved_main = sys.argv, sys.path[:], sys.modules.get("__main__")
    sys.argv = [main.argv0, *args]
    if not sys.flags.safe_path:    # -P / PYTHONSAFEPATH: Python puts no script directory first
        if sys.path:
            sys.path[0] = main.path0   # the launcher's own entry (its bin directory or the cwd)
        else:
            sys.path.insert(0, main.path0)
    sys.modules["__main__"] = main.module
    streams = _stream_files()
    try:
        exec(main.code, main.namespace)
    finally:
        _replace_closed_streams(streams)
        sys.argv = saved_argv
        sys.path[:] = saved_path
        if saved_main is not None:
            sys.modules["__main__"] = saved_main


def _stream_files():
    """{name: (fd, st_dev, st_ino, encoding, errors)} of sys.stdout and sys.stderr, each that is an
    open file (not None, not closed, not a stream without a descriptor)."""
    found = {}
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        try:
            fd = stream.fileno()
            st = os.fstat(fd)
        except (AttributeError, OSError, ValueError):
            continue
        found[name] = (fd, st.st_dev, st.st_ino, getattr(stream, "encoding", None), getattr(stream, "errors", None))
    return found


def _replace_closed_streams(before):
    """After the script: a sys.stdout or sys.stderr (open before it ran) that it closed or set to
    None is replaced, so that the profiler's own writes and flushes after the script (its summary
    on stderr, the CLI's flush of stdout) do not fail where `python SCRIPT.py` would exit quietly
    (Python flushes neither at exit). stderr is written to its descriptor again when that is still
    the same file (the summary is seen); stdout, which the script was done with, goes to os.devnull,
    as does stderr when its descriptor was closed or is another file now."""
    for name, (fd, dev, ino, encoding, errors) in before.items():
        stream = getattr(sys, name)
        if stream is not None and not getattr(stream, "closed", False):
            continue   # usable: the script's own, or ours
        try:
            st = os.fstat(fd)
            same = (st.st_dev, st.st_ino) == (dev, ino)
        except OSError:
            same = False
        try:
            if name == "stderr" and same:
                stream = open(fd, "w", buffering=1, encoding=encoding, errors=errors, closefd=False)
            else:
                stream = open(os.devnull, "w", encoding=encoding, errors=errors)
        except (OSError, LookupError):
            continue
        setattr(sys, name, stream)


@dataclass
class Result:
    """What run_script did: counts written, where epochs came from, and what the script raised."""
    run_dir: str
    epochs: int
    steps: int
    epochs_from: str | None
    windows: int         # of the epochs, time windows (set-up, when a framework marked the others)
    raised: BaseException | None
    code: types.CodeType
    notes: list          # lines for the user: what was not found or not applied
    forked: bool         # returned in a child the script forked: the run is its parent's, not to report
    misnamed: list       # lines for the --epoch-fn/--step-fn names that name no function the script defined
    unfinished: tuple | None   # (index, steps) of the epoch the script stopped in, written flagged unfinished


def run_script(target, args=(), *, out, module=False, tracemalloc=False, epoch_fn=None, step_fn=None,
               gc_policy="default", window_s=1.0):
    """Run `target` (a script path, or a module name with module=True) with `args` under a Session
    writing `out`. Returns a Result; the script's exception (SystemExit and KeyboardInterrupt
    included) is in Result.raised, after the run directory has recorded it."""
    from ..capture import Session
    check_seconds(window_s)
    out = os.path.abspath(out)   # the script may chdir
    label = f"{target if module else os.path.basename(target)} (gc {gc_policy})"   # compare's column names
    session = Session(out, tracemalloc=tracemalloc, meta={"module" if module else "script": target, "args": list(args),
                                                          "label": label})
    detection = Detection(session, epoch_fn=epoch_fn, step_fn=step_fn, gc_policy=gc_policy, window_s=window_s)
    session.options.update(gc_policy=str(detection.policy), epoch_fn=epoch_fn, step_fn=step_fn, window_s=window_s)
    main = load_main(target, module=module, watch=detection.watches_main)
    session.user_meta[SOURCE_SHA256] = main.source_sha256
    detection.bind_main(main.namespace)
    raised, pid = None, os.getpid()
    try:
        with session:
            try:
                with detection:
                    run_main(main, args)
            except BaseException as e:
                raised = e
                raise
    except BaseException:
        if raised is None:   # the profiler's own failure (the run directory), not the script's
            raise
    marks = detection.marks
    return Result(session.run_dir, marks.epochs, marks.steps, session.user_meta.get(EPOCHS_FROM), marks.windows,
                  raised, main.code,
                  detection.notes(), os.getpid() != pid, detection.misnamed(), session.unfinished)
