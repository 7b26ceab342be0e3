"""Session options and epoch indices, checked before anything is written or installed.

Each bad value is a UsageError naming the option, the value given and what is accepted.
"""

import json
import math
import operator
import os

from ..errors import UsageError
from ..rundir.format import EPOCH_LIMIT, run_path
from ..rundir.writer import check_free

MAX_FRAMES = 65535   # tracemalloc.start() accepts 1..65535 frames


def _int(name, value, minimum, maximum=None):
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"Session option {name}={value!r}: expected an int >= {minimum}")
    if value < minimum or (maximum is not None and value > maximum):
        accepted = f"from {minimum} to {maximum}" if maximum is not None else f">= {minimum}"
        raise UsageError(f"Session option {name}={value!r}: expected an int {accepted}")
    return value


def _number(name, value, low, high, low_open):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > low if low_open else value >= low) and (high is None or value <= high)
    if not ok:
        bound = f"{'>' if low_open else '>='} {low}" + (f" and <= {high}" if high is not None else "")
        raise UsageError(f"Session option {name}={value!r}: expected a finite number {bound}")
    return float(value)


def run_dir(value):
    """The run directory as an absolute path: the Session writes there even if the program changes
    its working directory. A file in its place, or a run in it already, is refused now, as every
    option is (the Session's writer checks again when it creates the directory)."""
    path = os.path.abspath(run_path(value, "Session run_dir"))
    check_free(path)
    return path


def meta(value):
    """A copy of the user's meta dict, refused unless it is strict JSON (no NaN, no cycles)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UsageError(f"Session option meta={value!r}: expected a dict of JSON values "
                         f"(got {type(value).__name__})")
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError, RecursionError) as e:
        raise UsageError(f"Session option meta is not JSON-serialisable ({e}); pass a dict of strings, "
                         f"numbers, bools, None, lists and dicts, without NaN or cycles") from None


def check(*, tracemalloc, frames, every, window, cooldown, budget, gc_event_threshold_s):
    """The options as meta.json records them; UsageError on the first bad one."""
    if not (tracemalloc is False or tracemalloc is True or tracemalloc == "auto"):
        raise UsageError(f"Session option tracemalloc={tracemalloc!r}: expected False (light capture), "
                         f"True (deep capture) or 'auto'")
    return {"tracemalloc": tracemalloc,
            "frames": _int("frames", frames, 1, MAX_FRAMES),
            "every": _int("every", every, 1),
            "window": _int("window", window, 1),
            "cooldown": _int("cooldown", cooldown, 0),
            "budget": _number("budget", budget, 0, 1, low_open=True),
            "gc_event_threshold_s": _number("gc_event_threshold_s", gc_event_threshold_s, 0, None, low_open=False)}


def epoch_index(value, last):
    """The index for the next epoch: `value`, or last + 1 when value is None; UsageError unless it
    is a non-negative int greater than `last` (None before the first epoch)."""
    if value is None:
        index = 0 if last is None else last + 1
        if index >= EPOCH_LIMIT:
            raise UsageError(f"epoch index {index} after epoch {last}: indices end below 2**63")
        return index
    if isinstance(value, bool):
        raise UsageError(f"epoch index {value!r}: expected a non-negative int (or None for the next index)")
    try:
        index = operator.index(value)
    except TypeError:
        raise UsageError(f"epoch index {value!r}: expected a non-negative int (or None for the next index), "
                         f"got {type(value).__name__}") from None
    if not 0 <= index < EPOCH_LIMIT:
        raise UsageError(f"epoch index {index}: expected a non-negative int below 2**63")
    if last is not None and index <= last:
        raise UsageError(f"epoch index {index} after epoch {last}: indices must strictly increase "
                         f"(each epoch is recorded once); pass None for the next index ({last + 1})")
    return index
