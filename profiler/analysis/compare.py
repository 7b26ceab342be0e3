"""compare(run_a, run_b) -> Comparison: two runs op by op, with a what-if for every op both ran.

Typically the same model in NCHW and NHWC. Ops are matched by name and tags, leaving out the tags
that tell the runs apart (a tag with one value on every op of run A and another on every op of
run B, like the layout). The what-if is the arithmetic the Keras-MXNet reporter did by hand: if
op X in run A ran at its speed in run B, A's epoch would take (A's epoch - X in A + X in B). An op
that only one run has gets no what-if: its cost in the other run is unknown, not zero.

When every op both runs time (each at least RUN_WIDE_SHARE of its epoch, two ops or more) is at
least RUN_WIDE times slower in one run, the difference is run-wide: the thread count, the machine
or its load while that run ran (a slow phase of a shared VM slowed dense and relu alike in a
layout compare), or its GC pauses, which land inside the ops; not one op's. `slower_everywhere`
names that run.

Three things make a difference in epoch time no op's: noise, other work, and memory. The epoch
times' medians each have a 95% interval (from the order statistics of the run's epochs); where the
intervals overlap, the difference is within the runs' own epoch-to-epoch spread (`noise`
"overlap"). Where the slower run's epochs get slower through it and the faster's do not (the
report's trend), the difference came as that run went on ("slowed": a load that began on the
machine, or the run itself getting slower, which its report tells). A shared machine's load only
ever slows epochs, so where the slower run's fastest tenth of epochs is as fast as the faster
run's typical ones (at most its upper quartile), the difference lies in its slower epochs ("slow
epochs"). None of these where more GC pauses, NOISE_GC of an epoch or more, account for half of
the difference in mean epoch time (spikes included, which medians hide). The spread is of the epochs
the report's trend is fitted on (not deep capture's traced ones, nor a last epoch cut short); a run
whose epochs hold different numbers of steps is compared, ops and epoch time too, on its epochs of
one size (load.one_size), as its report's trend is. Epochs of two scenarios, of a scenario and a
program of its own, of scenarios of other samples an epoch, or (where samples are not recorded)
whose steps per epoch differ by more than a factor load.STEPS_APART hold different work
(`different_work`): an op's time per epoch then tells nothing of its speed, and no run-wide
slowdown is called. Two runs of one command, its options included (`same_command`), differ by the
machine unless their code or data changed in between; of a script or module, whether its source
changed is told by the hash each run recorded (`same_code`). An op's what-if is given only where it
means something (`what_ifs`): not for one run directory, noise, different work, nor one command on
the same code (a scenario's code is the profiler's). Each run's memory is what its report says of it
(diagnose.memory_of).
"""

import os
import re
from dataclasses import dataclass, field, replace

import numpy as np

from .. import rundir
from ..errors import RunDirError
from ..rundir.format import EPOCHS_FROM, SOURCE_SHA256
from ..rundir.ranks import is_multi_rank, rank_dirs
from . import findings, stats
from .diagnose import Allocation, memory_of
from .load import gapped, load, one_size, one_work, timed, weighed
from .ops import followed, op_index, op_series, op_time

RUN_WIDE = 1.15          # every shared op at least this much slower in one run: a run-wide difference
RUN_WIDE_SHARE = 0.02    # ops below this share of their epoch are left out of that test (noise)
NOISE_MIN_EPOCHS = 8     # epochs a median's interval needs (fewer: their whole range, which one odd epoch makes)
NOISE_GC = 0.02          # more GC pauses that tell a difference from noise: at least this share of an epoch


@dataclass
class RunSide:
    run_dir: str
    label: str
    epoch_s: float          # median epoch time after the warm-up
    tags: dict              # the tags that tell this run apart from the other
    epochs: int             # epochs the median is over
    warmup_included: bool   # too few epochs to leave out the warm-up (load.load skipped none)
    gc: "GcSide"            # what the collector cost this run
    windows: bool = False   # its epochs are fixed time windows (profiler run found nothing marking epochs)
    scenario: str | None = None  # the built-in scenario it ran (mlp, mnist-cnn, ...), when it ran one
    problems: list = field(default_factory=list)   # why the run is incomplete (rundir.Run.problems)
    untimed_s: float = 0.0  # the median epoch's time that no op covers (nested ops make it a lower bound)
    cautions: list = field(default_factory=list)   # what its records leave out (rundir.Run.cautions)
    epoch_interval_s: tuple | None = None   # (low, high): the 95% interval of the median epoch (None: too few epochs)
    fastest_s: float | None = None          # the tenth percentile of its epochs (None: too few epochs)
    typical_s: float | None = None          # their upper quartile (None: too few epochs)
    slows: bool = False                     # its epochs get slower through the run (the report's trend of them)
    steps_per_epoch: float | None = None    # the median epoch's steps (None: the run recorded none)
    memory: Allocation | None = None        # what its memory did, as its report has it
    memory_growth: findings.Finding | None = None   # its report's allocation-growth finding
    samples: int | None = None              # a scenario's samples an epoch (meta's `samples`; None: not recorded)
    same_steps: tuple | None = None         # (steps, epochs, fewest, most) where its epochs' steps differ: it is
                                            # compared on its report's epochs of one size (load.one_size)


@dataclass
class GcSide:
    """Means, not medians: a GC policy moves the rare long pauses (spikes), which medians hide."""
    epoch_s: float               # mean epoch time, spikes included
    pause_s: float               # mean GC pause per epoch
    share_total: float           # all GC pause / all wall time
    full_collections: float      # mean generation-2 collections per epoch
    policy: str | None           # the --gc-policy the run used, when it recorded one
    forced: findings.Forced | None = None   # the collections the program asked for (gc.collect()), as a finding's
                                     # evidence has them; None: a run recorded before they were told apart
    between_s: float | None = None   # mean GC pause between two epochs, outside their time (None: not recorded)


@dataclass
class OpRow:
    op: str                 # the op's name
    tags: dict              # its tags, without the ones that tell the runs apart
    a_s: float | None       # median seconds per epoch in A (None: A did not run it)
    b_s: float | None
    ratio: float | None     # a_s / b_s, when both ran it and b_s > 0
    a_share: float | None   # of A's epoch
    b_share: float | None
    a_if_b_speed_s: float | None   # A's epoch if this op ran at B's speed
    b_if_a_speed_s: float | None
    only_in: str | None     # "a" or "b" when one run only has it


@dataclass
class Comparison:
    a: RunSide
    b: RunSide
    ratio: float            # A's epoch time / B's
    rows: list              # [OpRow], largest absolute difference first; one-run ops last
    slower_everywhere: str | None = None   # "a" or "b": every sizeable shared op is RUN_WIDE slower there
    least_ratio: float | None = None       # then the smallest of those ops' slowdowns (>= RUN_WIDE)
    same_run: bool = False                 # A and B are one run directory
    noise: str | None = None               # why the difference is no code's that every epoch runs: "overlap" (the
                                           # median epochs' intervals), "slowed" (the slower run's epochs get slower
                                           # through it), "slow epochs" (its fastest are the faster's typical ones)
    different_work: str | None = None      # "scenarios", "kinds" (a scenario and a program of its own), "samples"
                                           # (a scenario's, an epoch) or "steps" (per epoch, where samples are not
                                           # recorded)
    same_command: bool = False             # the runs' meta (script and arguments, or scenario and its settings)
                                           # and capture options are the same
    same_code: bool | None = None          # of two runs of one command that ran a script or module: whether its
                                           # source was the same (meta source_sha256), None where either has none
    what_ifs: bool = True                  # whether an op's what-if means anything: not for one run directory,
                                           # noise, different work, nor one command on the same code (a
                                           # scenario's is the profiler's)


def _label(loaded):
    meta = loaded.run.user_meta
    label = meta.get("label") or meta.get("layout")
    return str(label) if label else loaded.run.path.name


LABEL_SETTINGS = 60   # the longest settings a label of one of two like runs shows


def _labels(la, lb):
    """The two runs' labels; where they are alike (runs of one script or scenario), each with the
    settings that tell them apart (a script's arguments, a scenario's settings, the capture
    options), else A (...) and B (...)."""
    a, b = _label(la), _label(lb)
    if a != b:
        return a, b
    settings = [{**_settings(load.run), SOURCE_SHA256: _source(load.run)} for load in (la, lb)]
    differ = [k for k in sorted(settings[0].keys() | settings[1].keys()) if settings[0].get(k) != settings[1].get(k)]
    told = ["; ".join(_setting(k, s.get(k)) for k in differ) for s in settings]
    if differ and told[0] != told[1]:
        return tuple(f"{a} [{t[:LABEL_SETTINGS - 3] + '...' if len(t) > LABEL_SETTINGS else t}]" for t in told)
    return f"A ({a})", f"B ({b})"


def _setting(key, value):
    """A setting as a label shows it: a script's arguments as typed, else key=value."""
    if key == "args" and isinstance(value, list):
        return " ".join(map(str, value)) or "(no arguments)"
    if key == SOURCE_SHA256:
        return f"source {value[:8]}" if value else "source unrecorded"
    return f"{key}={value}"


def _gc_side(loaded):
    records = [loaded.records[i] for i in timed(loaded.records)]   # as report weighs them
    pauses = [sum(r["gc"]["pause_s"]) for r in records]
    wall = sum(r["wall_s"] for r in records)
    return GcSide(epoch_s=wall / len(records), pause_s=sum(pauses) / len(records),
                  share_total=sum(pauses) / wall if wall > 0 else 0.0,
                  full_collections=sum(r["gc"]["collections"][2] for r in records) / len(records),
                  policy=loaded.run.gc_policy,
                  forced=findings.forced(records) if all("forced" in r["gc"] for r in records) else None,
                  between_s=_between(loaded))


def _between(loaded):
    """The mean GC pause in a gap between two analysed epochs (None: not recorded)."""
    between = findings.between_epochs(gapped(loaded))
    return between.pause_s / between.intervals if between else None


def _windows(loaded):
    return loaded.run.user_meta.get(EPOCHS_FROM) == "windows"


def _scenario(loaded):
    scenario = loaded.run.user_meta.get("scenario")
    return str(scenario) if scenario else None


def _untimed(loaded, series):
    """The median over epochs of each epoch's time outside its ops (at least 0)."""
    wall = np.array([r["wall_s"] for r in loaded.records])
    timed = sum((seconds for seconds, _ in series.values()), np.zeros(len(wall)))
    return float(np.median(np.maximum(0.0, wall - timed)))


def _of_one_size(loaded):
    """(the loaded run with only its report's epochs of one size, same_steps) where its epochs hold
    different numbers of steps (load.one_size: two fit() calls of other batch sizes), else (loaded,
    None): its epoch time, ops and spread are then of one size of epoch, as its report's trend is."""
    kept, same_steps = one_size(loaded.records)
    if same_steps is None:
        return loaded, None
    return replace(loaded, records=[loaded.records[i] for i in kept]), same_steps


def _side(loaded, label, epoch_s, tags, series, memory, same_steps):
    # the spread and trend are of the epochs the report's trend is fitted on, in order: not deep capture's traced
    # ones nor a last one cut short (the records are of one size already: _of_one_size)
    kept = [loaded.records[i] for i in weighed(loaded.records)]
    index, walls = [r["epoch"] for r in kept], [r["wall_s"] for r in kept]
    spread = len(walls) >= NOISE_MIN_EPOCHS
    change = stats.change(index, walls)
    steps = [r.get("steps") or 0 for r in loaded.records]
    allocation, growth = memory
    return RunSide(str(loaded.run.path), label, epoch_s, tags, len(loaded.records), loaded.warmup == 0,
                   _gc_side(loaded), _windows(loaded), _scenario(loaded), list(loaded.run.problems),
                   _untimed(loaded, series), list(loaded.run.cautions), epoch_interval_s=_median_interval(walls),
                   fastest_s=float(np.quantile(walls, 0.1)) if spread else None,
                   typical_s=float(np.quantile(walls, 0.75)) if spread else None,
                   slows=bool(change.sustained and change.relative > 0),
                   steps_per_epoch=float(np.median(steps)) if all(steps) else None, memory=allocation,
                   memory_growth=growth, samples=_samples(loaded), same_steps=same_steps)


def _samples(loaded):
    samples = loaded.run.user_meta.get("samples")
    return samples if type(samples) is int else None


def _median_interval(values, z=1.96):
    """(low, high): the distribution-free 95% interval of the median of `values` (the order
    statistics n/2 -+ z*sqrt(n)/2 apart), or None under NOISE_MIN_EPOCHS values."""
    n = len(values)
    if n < NOISE_MIN_EPOCHS:
        return None
    ordered, half = np.sort(values), z * np.sqrt(n) / 2
    low, high = max(0, int(np.floor(n / 2 - half))), min(n - 1, int(np.ceil(n / 2 + half)) - 1)
    return float(ordered[low]), float(ordered[high])


def _settings(run):
    """What ran and how: the run's meta (a script, as one path whether typed ./train.py or
    train.py, and its arguments; a scenario and its settings) and its capture options, as --name;
    not its label, source hash nor where its epochs came from (what the run found, not what ran: a
    run killed before it ended recorded none)."""
    return {**{k: os.path.normpath(v) if k == "script" and isinstance(v, str) and v else v
               for k, v in run.user_meta.items() if k not in ("label", SOURCE_SHA256, EPOCHS_FROM)},
            **{f"--{k.replace('_', '-')}": v for k, v in (run.meta.get("options") or {}).items()}}


def _source(run):
    """The SHA-256 of the run's script or module file (meta.source_sha256, lower-case hex), or None
    where it recorded none, or anything but such a hash."""
    value = run.user_meta.get(SOURCE_SHA256)
    return value.lower() if isinstance(value, str) and re.fullmatch("[0-9a-fA-F]{64}", value) else None


def _same_command(a, b):
    """Whether two runs ran one command: a script, module or scenario, with the same settings."""
    settings = _settings(a)
    return any(k in settings for k in ("script", "module", "scenario")) and settings == _settings(b)


def _same_code(a, b):
    """Whether two runs' scripts had the same source: None unless both recorded its hash."""
    sa, sb = _source(a), _source(b)
    return None if sa is None or sb is None else sa == sb


def _gc_explains(a, b):
    """Whether more GC pauses, NOISE_GC of an epoch or more, account for half or more of the
    difference in mean epoch time."""
    slow, fast = (a, b) if a.gc.epoch_s >= b.gc.epoch_s else (b, a)
    difference, collector = slow.gc.epoch_s - fast.gc.epoch_s, slow.gc.pause_s - fast.gc.pause_s
    return difference > 0 and collector >= max(0.5 * difference, NOISE_GC * fast.gc.epoch_s)


def _noise(a, b):
    """Comparison.noise of two runs' sides."""
    if a.epoch_interval_s is None or b.epoch_interval_s is None or _gc_explains(a, b):
        return None
    (lo_a, hi_a), (lo_b, hi_b) = a.epoch_interval_s, b.epoch_interval_s
    if lo_a <= hi_b and lo_b <= hi_a:
        return "overlap"
    slow, fast = (a, b) if a.epoch_s >= b.epoch_s else (b, a)
    if slow.slows and not fast.slows:
        return "slowed"
    return "slow epochs" if slow.fastest_s <= fast.typical_s else None


def _different_work(a, b):
    """Why two runs' epochs hold different work, or None."""
    if a.scenario and b.scenario and a.scenario != b.scenario:   # ops of one name, different shapes
        return "scenarios"
    if (a.scenario is None) != (b.scenario is None):
        return "kinds"
    samples = [side.samples for side in (a, b)]
    if None not in samples:   # the scenarios' samples an epoch: batches of another size are the same work
        return "samples" if samples[0] != samples[1] else None
    if a.steps_per_epoch and b.steps_per_epoch and not one_work(a.steps_per_epoch, b.steps_per_epoch):
        return "steps"
    return None


def _tag_values(series):
    values = {}
    for op in series:
        for k, v in op.tags:
            values.setdefault(k, set()).add(v)
    return values


def _median_ops(series, drop):
    out = {}
    for op, (seconds, _) in series.items():
        key = op.without(drop)
        out[key] = out.get(key, 0.0) + seconds
    return {k: float(np.median(v)) for k, v in out.items()}


def _run_wide(rows):
    """("a" or "b", the least slowdown) when every shared op of a sizeable share is RUN_WIDE or
    more slower in that run, else (None, None)."""
    ratios = [r.ratio for r in rows if r.ratio and min(r.a_share or 0.0, r.b_share or 0.0) >= RUN_WIDE_SHARE]
    if len(ratios) < 2:
        return None, None
    if min(ratios) >= RUN_WIDE:
        return "a", min(ratios)
    if max(ratios) <= 1 / RUN_WIDE:
        return "b", 1 / max(ratios)
    return None, None


def compare(run_a, run_b):
    """Two runs (run directories, or Runs read already) op by op, or two multi-rank runs job by job
    (analysis/ranks.py: RankComparison)."""
    multi = [not isinstance(r, rundir.Run) and is_multi_rank(r) for r in (run_a, run_b)]
    if all(multi):
        from .ranks import compare_ranks
        return compare_ranks(run_a, run_b)
    if any(multi):
        job, single = (run_a, run_b) if multi[0] else (run_b, run_a)
        rank_dirs(job)   # a directory of several jobs or runs says so, and names them
        raise RunDirError(f"{job} is a multi-rank run and {getattr(single, 'path', single)} a single run: compare two "
                          f"of a kind (or one rank's directory, rank-<RANK>/, with the single run)")
    la, lb = load(run_a, "compare"), load(run_b, "compare")
    memory = [memory_of(loaded) for loaded in (la, lb)]   # as each run's report has it, over all its epochs
    (la, steps_a), (lb, steps_b) = _of_one_size(la), _of_one_size(lb)
    (ia, na), (ib, nb) = (op_index(la.records), len(la.records)), (op_index(lb.records), len(lb.records))
    ops = followed(op_time(ia, na), op_time(ib, nb))
    sa, sb = op_series(ia, na, ops), op_series(ib, nb, ops)
    va, vb = _tag_values(sa), _tag_values(sb)
    drop = {k for k in va.keys() & vb.keys() if len(va[k]) == 1 and len(vb[k]) == 1 and va[k] != vb[k]}
    ops_a, ops_b = _median_ops(sa, drop), _median_ops(sb, drop)
    epoch_a = float(np.median([r["wall_s"] for r in la.records]))
    epoch_b = float(np.median([r["wall_s"] for r in lb.records]))
    label_a, label_b = _labels(la, lb)
    rows = []
    for op in sorted(ops_a.keys() | ops_b.keys()):
        a_s, b_s = ops_a.get(op), ops_b.get(op)
        both = a_s is not None and b_s is not None
        rows.append(OpRow(
            op=op.name, tags=op.tag_dict(), a_s=a_s, b_s=b_s,
            ratio=a_s / b_s if both and b_s > 0 else None,
            a_share=a_s / epoch_a if a_s is not None and epoch_a > 0 else None,
            b_share=b_s / epoch_b if b_s is not None and epoch_b > 0 else None,
            a_if_b_speed_s=epoch_a - a_s + b_s if both else None,
            b_if_a_speed_s=epoch_b - b_s + a_s if both else None,
            only_in=None if both else ("a" if a_s is not None else "b")))
    rows.sort(key=lambda r: (r.only_in is not None, -abs((r.a_s or 0.0) - (r.b_s or 0.0))))
    side_a = _side(la, label_a, epoch_a, {k: next(iter(va[k])) for k in sorted(drop)}, sa, memory[0], steps_a)
    side_b = _side(lb, label_b, epoch_b, {k: next(iter(vb[k])) for k in sorted(drop)}, sb, memory[1], steps_b)
    same = la.run.path.resolve() == lb.run.path.resolve()
    different = _different_work(side_a, side_b)
    slower, least = (None, None) if different else _run_wide(rows)   # ops of different work differ anyway
    noise = None if same or different else _noise(side_a, side_b)
    command = not same and _same_command(la.run, lb.run)
    code = _same_code(la.run, lb.run) if command else None
    return Comparison(
        a=side_a, b=side_b, ratio=epoch_a / epoch_b if epoch_b > 0 else 1.0, rows=rows, slower_everywhere=slower,
        least_ratio=least, same_run=same, noise=noise, different_work=different, same_command=command, same_code=code,
        what_ifs=not (same or noise or different or (command and (side_a.scenario or code))))
