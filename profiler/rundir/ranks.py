"""A multi-rank run: one directory holding a run directory per rank (docs/multi-rank.md).

    OUT/rank-0/  OUT/rank-1/ ...                 what `torchrun ... -m profiler run --out OUT` writes
    OUT/node-a/rank-0/  OUT/node-b/rank-1/ ...   directories copied from several hosts, one level down

rank_dirs(path) finds them and checks that they form one job: one job id where the ranks record
one (torchrun's run id and master port), starts within MAX_START_SPREAD_S of each other, each
rank once, every rank of the world size present, one world size, and each directory's name
agreeing with the rank its meta.json records. Anything else is a RunDirError that says which
directories disagree.
"""

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import RunDirError
from .format import META, RANK_PREFIX, run_path
from .reader import listed, read_json

_NAME = re.compile(re.escape(RANK_PREFIX) + r"(\d+)$")
MAX_UNIX = 1e11   # clock_origin_unix above this (the year 5138) is not a time.time() reading
# ranks of one job start their sessions together (torchrun starts them at once, after the rendezvous):
# within 0.03 s here; two jobs started by hand one after the other, 35 s apart
MAX_START_SPREAD_S = 300


@dataclass(frozen=True)
class RankDir:
    rank: int
    local_rank: int | None
    world_size: int
    host: str | None
    clock_origin_unix: float | None   # time.time() at the rank's clock origin: aligns ranks and hosts
    path: Path
    job: str | None = None            # what the job's ranks share ("RUN_ID:MASTER_PORT")


def _candidates(path):
    """rank-N directories directly under `path`, or one level down (one directory per host)."""
    found = [p for p in path.iterdir() if p.is_dir() and _NAME.match(p.name)]
    if found:
        return found
    return [q for p in path.iterdir() if p.is_dir() for q in p.iterdir() if q.is_dir() and _NAME.match(q.name)]


def is_multi_rank(path):
    """True when `path` is a directory of rank-N run directories rather than one run directory."""
    path = run_path(path, "run directory")
    return path.is_dir() and not (path / META).exists() and bool(_candidates(path))


def _int_field(meta, key, file):
    value = meta.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise RunDirError(f"{file} has {key} {value!r}, not a non-negative integer: this rank's run was not "
                          f"recorded under torchrun (or by this profiler)")
    return value


def _read_rank(path):
    file = path / META
    if not file.exists():
        raise RunDirError(f"{path} has no {META}: the rank's process did not start its profiling session")
    meta = read_json(file)
    if not isinstance(meta, dict):
        raise RunDirError(f"{file} is not a JSON object: not written by this profiler")
    rank, world = _int_field(meta, "rank", file), _int_field(meta, "world_size", file)
    local, origin = meta.get("local_rank"), meta.get("clock_origin_unix")
    if origin is not None and not (type(origin) in (int, float) and 0 <= origin <= MAX_UNIX):
        raise RunDirError(f"{file} has clock_origin_unix {origin!r}, not a Unix time: not written by this profiler")
    job = meta.get("job")
    return RankDir(rank, local if isinstance(local, int) else None, world, meta.get("host"),
                   None if origin is None else float(origin), path, job if isinstance(job, str) else None)


def _mixed(path, ranks, what, key):
    """RunDirError when the ranks' `key` values (None: not recorded) are not one."""
    groups = {}
    for r in ranks:
        if key(r) is not None:
            groups.setdefault(key(r), []).append(r)
    if len(groups) > 1:
        parts = "; ".join(f"{what} {k} in {listed((r.path for r in rs), 3)}" for k, rs in sorted(groups.items()))
        raise RunDirError(f"{path} mixes runs of different jobs ({parts}); keep one job's {RANK_PREFIX}* "
                          f"directories per directory")


def _complete(path):
    """Whether `path` holds rank-0 and every other rank of rank-0's world size: a job of its own."""
    try:
        world = _read_rank(path / f"{RANK_PREFIX}0").world_size
    except RunDirError:
        return False
    return all((path / f"{RANK_PREFIX}{r}" / META).exists() for r in range(world))


def _nothing_beside(path):
    """RunDirError when a directory beside a job's top-level rank-N directories holds rank-N runs of
    its own (ranks at two levels) or is a rank's run under another name (a copy): either would be
    left out of the job without a word. Anything else beside them (a report, tensorboard's rank-N
    folders of event files, a single run copied for comparison) is left alone."""
    def subdirs(directory):
        try:
            return [p for p in directory.iterdir() if p.is_dir()]
        except OSError:   # unreadable: nothing of the job's can be in it
            return []
    others = [p for p in subdirs(path) if not _NAME.match(p.name)]
    nested = [q for p in others for q in subdirs(p) if _NAME.match(q.name) and (q / META).is_file()]
    if nested:
        raise RunDirError(f"{path} holds {RANK_PREFIX}<RANK> runs at two levels ({nested[0]} and beside it "
                          f"{path / (RANK_PREFIX + '...')}): keep one job's ranks directly under one directory, or "
                          f"in one directory per host, and another job's in a directory of its own")
    for p in others:
        try:
            meta = read_json(p / META) if (p / META).is_file() else None
        except RunDirError:
            continue
        rank = meta.get("rank") if isinstance(meta, dict) else None
        if isinstance(rank, int) and not isinstance(rank, bool):
            raise RunDirError(f"{p} holds rank {rank}'s run beside the job's {RANK_PREFIX}<RANK> directories but "
                              f"is not named for it: rename it to {RANK_PREFIX}{rank}, or move it out of {path}")


def rank_dirs(path):
    """The rank directories of a multi-rank run, sorted by rank; RunDirError when they do not form one job."""
    path = Path(path)
    if not path.is_dir():
        raise RunDirError(f"{path} does not exist or is not a directory")
    candidates = _candidates(path)
    if not candidates:
        raise RunDirError(f"{path} holds no {RANK_PREFIX}<RANK> directories: not a multi-rank run")
    parents = sorted({p.parent for p in candidates})
    if parents == [path]:
        _nothing_beside(path)
    whole = [p for p in parents if p != path and _complete(p)]
    # one level down, a run directory beside the rank directories' parents makes `path` a directory of
    # runs (runs/job/rank-*, runs/run-a), as two whole jobs do (runs/job-a/rank-*, runs/job-b/rank-*),
    # not one job's hosts
    runs = [p for p in path.iterdir() if (p / META).is_file()] if parents != [path] else []
    if len(whole) > 1 or runs:
        held = sorted(p.name for p in (whole or parents) + runs)
        raise RunDirError(f"{path} is not a multi-rank run but holds several ({listed(held, 5)}): give one of them")
    ranks = sorted((_read_rank(p) for p in candidates), key=lambda r: (r.rank, str(r.path)))
    _mixed(path, ranks, "world size", lambda r: r.world_size)
    _mixed(path, ranks, "job", lambda r: r.job)
    origins = [r for r in ranks if r.clock_origin_unix is not None]
    if origins:
        first = min(origins, key=lambda r: r.clock_origin_unix)
        last = max(origins, key=lambda r: r.clock_origin_unix)
        if last.clock_origin_unix - first.clock_origin_unix > MAX_START_SPREAD_S:
            raise RunDirError(f"{path} mixes runs of different jobs: {last.path} started "
                              f"{last.clock_origin_unix - first.clock_origin_unix:,.0f} s after {first.path} (the "
                              f"ranks of one job start together, to the hosts' clock sync); keep one job's "
                              f"{RANK_PREFIX}* directories per directory")
    for a, b in zip(ranks, ranks[1:]):
        if a.rank == b.rank:
            raise RunDirError(f"rank {a.rank} appears twice, in {a.path} and in {b.path} (both {META} files record "
                              f"rank {a.rank}): these come from different jobs (or one was copied twice); keep one "
                              f"of them")
    for r in ranks:   # after the duplicates: renaming a copy of another rank's directory would not help
        named = int(_NAME.match(r.path.name).group(1))
        if named != r.rank:
            raise RunDirError(f"{r.path} is named for rank {named} but its {META} records rank {r.rank}; "
                              f"rename the directory to {RANK_PREFIX}{r.rank}")
    world = ranks[0].world_size
    beyond = [r for r in ranks if r.rank >= world]
    if beyond:
        raise RunDirError(f"{beyond[0].path} records rank {beyond[0].rank} but world size {world}: not a rank of "
                          f"this job")
    present = {r.rank for r in ranks}
    missing = world - len(present)   # every rank present is below world (checked above)
    if missing:   # the first ten named without listing a world of 10^9
        first = itertools.islice((r for r in range(world) if r not in present), 10)
        shown = ", ".join(map(str, first)) + (f" and {missing - 10} more" if missing > 10 else "")
        raise RunDirError(f"{path} lacks rank(s) {shown} of world size {world}: copy every rank's "
                          f"{RANK_PREFIX}<RANK> directory (from every host) under {path}")
    return ranks
