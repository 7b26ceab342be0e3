"""Every sentence the profiler writes about a run: verdicts, each finding's evidence and remedy,
and the terminal reports. The JSON, HTML and figure renderers take their words from here."""

import math
import textwrap

from ..analysis import findings as fnd
from ..analysis import stats
from ..analysis.ranks import RankComparison
from ..analysis.scaling import DEPENDS
from ..rundir.format import EPOCHS_FROM
from ..rundir.reader import listed
from . import rank_text


def _wrap(text):
    """Lines of 100; never broken at a hyphen, so a finding's name (gc-growing-pauses), a flag or a
    path stays whole for grep."""
    return textwrap.fill(text, width=100, break_on_hyphens=False)


def ms(seconds):
    """A duration in the unit that shows its digits: a step of a few microseconds is no "0.00 ms"."""
    if 0 < abs(seconds) < 1e-4:
        return f"{seconds * 1e6:.1f} µs"
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"


def pct(x):
    return f"{round(100 * x, 1) + 0.0:.1f}%"   # + 0.0 turns -0.0 into 0.0: no "-0.0%"


def size(n):
    n = float(n)
    for unit, scale in (("PiB", 1 << 50), ("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def signed_size(n):
    """'+1.2 MiB', '-300 B', '+0 B': a change in bytes."""
    return f"{'+' if n >= 0 else ''}{size(n)}"


def count(n):
    n = float(n)
    if abs(n) >= 1e6:
        return f"{n / 1e6:.1f}M"
    return f"{n / 1e3:.0f}k" if abs(n) >= 1e4 else f"{n:.0f}"


def _printable(value):
    """str(value) with its control characters escaped (a newline, tab or NUL in an op's name broke the
    tables, and a NUL is invalid in HTML): "a\\nb"."""
    text = str(value)
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def op_label(name, tags):
    """`conv2d_backward (layout=NCHW)`; tags read from old keys (positional) as `name[v1,v2]`."""
    name = _printable(name)
    if not tags:
        return name
    if all(k.isdigit() for k in tags):
        return f"{name}[{','.join(_printable(tags[k]) for k in sorted(tags, key=int))}]"
    return f"{name} ({', '.join(f'{_printable(k)}={_printable(v)}' for k, v in tags.items())})"


def duration(seconds):
    """A span of time in the unit that reads best: 45 s, 12.5 min, 6.1 h."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def change(c):
    """A fitted relative change with its 95% interval: "+14% ± 3%", or "+60% (+9% to +838%)" when
    the interval is lopsided (a ± of its wider side would misstate the other)."""
    below, above = max(c.relative - c.relative_low, 0.0), max(c.relative_high - c.relative, 0.0)
    if max(below, above) <= 2 * min(below, above) or max(below, above) < 0.01:
        return f"{_signed_pct(c.relative)} ± {100 * max(below, above):.0f}%"
    return f"{_signed_pct(c.relative)} ({_signed_pct(c.relative_low)} to {_signed_pct(c.relative_high)})"


def _signed_pct(x):
    return f"{round(100 * x) + 0:+d}%"   # a change that rounds to none is "+0%", not "-0%"


# -- findings ------------------------------------------------------------------------------------

def _objects(o, site, full=True):
    """The objects the collector tracks; `full`: the run made full collections, which walk them all."""
    if o is None:
        return ""
    parts = []
    if o.tracked is not None:
        stale = o.tracked_epoch is not None and o.last_epoch is not None and o.tracked_epoch < o.last_epoch
        if stale:   # a count from before a heap that grows is short of what the late collections walk
            text = (f"{'full collections walked ' if full else ''}~{count(o.tracked)} tracked objects at epoch "
                    f"{o.tracked_epoch} (the last count; the run went on to epoch {o.last_epoch})")
        else:
            text = f"{'each full collection walks ' if full else ''}~{count(o.tracked)} tracked objects"
        if o.tracked_growth_per_epoch:
            text += f" ({o.tracked_growth_per_epoch:+,.0f} per epoch)"
        parts.append(text)
    if o.top_type is not None:
        text = f"{pct(o.top_type_share)} of them {o.top_type}" if o.top_type_share is not None else o.top_type
        if o.top_type_growth_per_epoch:
            text += f", {count(o.top_type_growth_per_epoch)} more per epoch"
        if o.top_type_site or site:
            text += f", from {o.top_type_site or site}"
        parts.append(text)
    return ("; " + ", ".join(parts)) if parts else ""


def forced_lines(f):
    """'train.py:42', 'train.py:42 (through trainer.py:9) and 2 other lines': the longest paused first."""
    others = max(len(f.sites) - 1, 1 if f.more_sites else 0)   # more_sites: the records name only some
    return (f.site + (f" (through {f.via})" if f.via else "")
            + (f" and {'at least ' if f.more_sites else ''}{others} other line{'' if others == 1 else 's'}"
               if others > 0 else ""))


def forced_clause(f, of="the pause", per="epoch"):
    """The program's own collections, when they take a part of the pause worth saying (`per`: what
    their count is of)."""
    if f is None or f.share < fnd.FORCED_SHOWN:
        return ""
    return (f"; {pct(f.share)} of {of} is the program's own gc.collect() calls "
            f"({_per_epoch(sum(f.collections_per_epoch), 'call', per)}"
            + (f", at {forced_lines(f)}" if f.site else "") + ")")


_FREEZE_CALLS = "call gc.freeze() once set-up is done so each call walks only what training keeps"


# deep capture, however the run was made: profiler run, a Session, the pytest marker
_DEEP = ("tracemalloc on (profiler run --tracemalloc auto; Session(..., tracemalloc=\"auto\"); "
         "@pytest.mark.profile_epochs(..., tracemalloc=\"auto\"))")
_DEEP_ON = ("tracemalloc on from the start (profiler run --tracemalloc on; Session(..., tracemalloc=True); "
            "@pytest.mark.profile_epochs(..., tracemalloc=True))")


def _forced_remedy(f, policy=None, spikes=False):
    """What to do about collections the program asks for itself (policy: the run's --gc-policy;
    spikes: the step spikes are theirs, though the policy's collections take most of the pause)."""
    text = (("The spikes are" if spikes else f"{pct(f.share)} of this pause is") + " the program's own gc.collect() calls"
            + (f" (at {forced_lines(f)})" if f.site else "")
            + (", as the policy collects only between steps, with automatic collection off" if spikes else ""))
    often = "once an epoch, or every few hundred steps" if sum(f.collections_per_epoch) > 1 else "every few epochs"
    if (policy or "").startswith("manual:"):
        return text + f": call it less often ({often}) or not at all, since --gc-policy {policy} collects already."
    if policy == "off":   # the collector is off: these are all the collections there are
        return (text + f", the only collections with --gc-policy off: call it less often ({often})"
                + (f", or {_FREEZE_CALLS}" if f.generation == 2 else "") + ".")
    if f.only:   # these are all the collections there are: the collector is off, or they keep its threshold unmet
        return (text + f", and CPython ran none of its own. Call it less often ({often})"
                + (", or call gc.freeze() once set-up is done so each collection walks only what training keeps"
                   if f.generation == 2 else "")
                + ". With the collector on, CPython then collects at its own threshold; with it off (gc.disable()), "
                "keep some calls: they are the only collections there are.")
    text += f": call it less often ({often}) or not at all, since CPython collects on its own"
    if f.generation == 2:   # a young collection walks only what is new: freezing the old spares it nothing
        text += f"; if it is there to free memory, {_FREEZE_CALLS}"
    return text + "."


def _gc_site(e):
    """The line that keeps the objects a collection walks: where the type that grew most was
    allocated (deep capture's object counts), else the Python line whose memory grew most."""
    return (e.objects.top_type_site if e.objects else None) or e.site


def _policy_remedy(e, how, instead, site=None):
    """What to do about --gc-policy manual:N's own collections (`how` it makes them; `instead`: the
    first thing to try), and about the program's own calls beside them."""
    theirs = e.forced if e.forced is not None and fnd.FORCED_SHOWN <= e.forced.share < fnd.FORCED_LEADS else None
    return (f"{'Most of these are' if theirs else 'These are'} --gc-policy {e.policy}'s own collections ({how}): "
            f"{instead}, or freeze what set-up made (--gc-policy freeze) so each collection walks only what training "
            f"keeps"
            + (f"; and drop the references that keep what {site} allocates alive" if site else "")
            + (f"; the rest, {pct(theirs.share)} of the pause, is the program's own gc.collect() calls"
               + (f" (at {forced_lines(theirs)})" if theirs.site else "")
               + ": remove them, since the policy collects already" if theirs else "") + ".")


def _gen(g):
    return "full (generation 2)" if g == 2 else f"generation {g}"


def _pace(rate, span_s):
    """'68.2 MiB a second', or over spans of ten minutes or more '1.2 GiB a minute'."""
    return f"{size(rate)} a second" if span_s < 600 else f"{size(rate * 60)} a minute"


def _through(trend):
    if not trend.epochs:   # the analysed epochs, shorter than a second, have no readings
        return "the epoch the run stopped in"
    return ("the epoch" if trend.epochs == 1 else f"the {trend.epochs} epochs") + (
        " and the one the run stopped in" if trend.stopped_in else "")


_ANON = "anonymous memory (RSS less its shared pages: a memory-mapped file's are no leak)"


def _levels(e):
    return (f"{size(e.start_bytes)} at first, {size(e.end_bytes)} at the end, over {duration(e.span_s)}, read "
            f"{e.samples:,} times")


def _memory_trend(e):
    return (f"{_ANON[0].upper() + _ANON[1:]} grows through {_through(e)}, {_pace(e.late_bytes_per_s, e.span_s)} in "
            f"the last third of its readings, and keeps growing to the end ({_levels(e)})")


def _memory(e):
    if isinstance(e, fnd.MemoryTrend):
        return _memory_trend(e)
    name = e.measure.upper() if e.measure == "rss" else e.measure
    grows = (f"grew {size(e.end_bytes - e.start_bytes)}" if e.levels_off
             else f"grows {size(e.growth_bytes_per_epoch)} per epoch")
    text = f"{name} memory {grows} ({size(e.start_bytes)} -> {size(e.end_bytes)})"
    others = [(name, rate) for name, rate in (("RSS", e.rss_growth_bytes_per_epoch),
                                              ("malloc", e.malloc_growth_bytes_per_epoch),
                                              ("traced", e.traced_growth_bytes_per_epoch))
              if rate is not None and name.lower() != e.measure]
    if others:
        text += "; " + ", ".join(f"{name} {signed_size(rate)} per epoch" for name, rate in others)
    text += ("; it levelled off by the last third of the run" if e.levels_off else "; it keeps growing to the end")
    if e.top_sites:
        text += ". The lines whose memory grew most: " + "; ".join(
            f"{s.site} (+{size(s.size_diff)}, {s.count_diff:+d} blocks)" for s in e.top_sites[:3])
    return text


def evidence(f):
    """The numbers behind one finding, as a sentence."""
    e = f.evidence
    if f.pattern == "rank-straggler":
        return rank_text.straggler_evidence(e)
    if f.pattern == "rank-stalls":
        return rank_text.stalls_evidence(e)
    if f.pattern == "rank-input-wait":
        return rank_text.input_evidence(e)
    if f.pattern == "rank-compute":
        return rank_text.compute_evidence(e)
    if f.pattern == "gc-steady":
        spread = ("" if f.time_fraction >= e.share_total - 0.001 else
                  f", {pct(f.time_fraction)} of it spread over the run outside spikes and pause growth")
        return (f"GC pauses take {pct(e.share_total)} of the run's time ({ms(e.share_total * e.wall_s)} of "
                f"{ms(e.wall_s)}){spread}, mostly in {_gen(e.generation)} collections "
                f"({'' if e.generation == 2 else _per_epoch(e.collections_per_epoch[e.generation], 'collection') + ', '}"
                f"{_per_epoch(e.collections_per_epoch[2], 'full collection')})" + forced_clause(e.forced)
                + _objects(e.objects, e.site, full=e.collections_per_epoch[2] > 0))
    if f.pattern == "gc-between-epochs":
        return (f"Between the epochs, outside every epoch's time, {counted(sum(e.collections), 'collection')} "
                f"({e.collections[2]:,} full) paused {ms(e.pause_s)}: {pct(e.share)} of the epochs' time and the "
                f"gaps' together (the epochs took {ms(e.epochs_s)}, the {counted(e.intervals, 'gap')} before them "
                f"{ms(e.between_s)}), mostly in {_gen(e.generation)} collections"
                + forced_clause(e.forced, "it", per="gap")
                + _objects(e.objects, None, full=e.collections[2] > 0))
    if f.pattern == "gc-spikes":
        s = e.spikes
        return (f"{s.count:,} of {s.total:,} {s.unit}s ({pct(s.count / s.total)}) are spikes, "
                f"{s.count_by_generation[s.generation]:,} of them with a {_gen(s.generation)} collection inside "
                f"(median {s.unit} {ms(s.median_s)}, p99 {ms(s.p99_s)}, slowest {ms(s.max_s)}); their time above the "
                f"median is {pct(s.time_fraction)} of the run, and the GC pauses inside them explain "
                f"{pct(s.gc_explained_fraction)} of it" + forced_clause(e.forced) + _objects(e.objects, e.site))
    if f.pattern == "gc-growing-pauses":
        source = "every full collection in gc_events.bin" if e.source == "gc_events" else "each epoch's mean full collection"
        text = (f"Full collections take longer with uptime: {ms(e.first_s)} at first, {ms(e.last_s)} after "
                f"{duration(e.uptime_s)} ({change(e.change)}, {e.collections} collections, from {source}); the "
                f"growth adds {ms(e.excess_s)}, {pct(f.time_fraction)} of the run outside the spikes")
        if e.hours_to_one_second is not None:
            text += f". At this rate a full collection takes 1 s after {duration(3600 * e.hours_to_one_second)} of uptime"
        return text + forced_clause(e.forced) + _objects(e.objects, e.site)
    if f.pattern == "allocation-growth":
        return _memory(e)
    if f.pattern == "compute-growth":
        text = (f"{e.unit.capitalize()} time grows {change(e.change)} over the run ({ms(e.change.early)} -> "
                f"{ms(e.change.late)} median{'' if e.unit == 'epoch' else ' step'}), and GC explains "
                f"{pct(e.gc_explained_fraction)} of it")
        delta = e.change.late - e.change.early
        for o in e.ops:
            text += (f"; {op_label(o.name, o.tags)} went from {ms(o.early_s)} to {ms(o.late_s)} per epoch"
                     + (f", {pct(min(o.growth_s / delta, 1.0))} of the increase" if delta > 0 else ""))
        if not e.ops and e.unit == "step":
            text += ("; op times are recorded per epoch, and the epochs are too few to say which op grew"
                     if e.ops_recorded else "; no op timers were recorded, so it cannot say which part")
        elif not e.ops:
            text += ("; no op's time grew with it" if e.ops_recorded
                     else "; no op timers were recorded, so it cannot say which part")
        return text
    if f.pattern == "worker-copy-on-read":
        text = (f"{counted(e.count, 'worker')} held {size(e.uss_bytes)} of private memory at the last epoch's peak "
                f"(USS; PSS {size(e.pss_bytes)}){'' if e.count == 1 else f', {size(e.uss_bytes / e.count)} each'} "
                f"against the parent's {size(e.parent_rss_bytes)} RSS")
        if e.trend:
            text += f", growing {size(e.uss_growth_bytes_per_epoch)} per epoch"
        if e.grew:
            text += (f"; one worker's private memory grew {size(e.worker_growth_bytes)} after it started"
                     + (", as it read" if e.read else ""))
            if e.batches_bytes > fnd.WORKER_GROWTH_BYTES:
                text += f", more than the {size(e.batches_bytes)} its batches in flight can hold"
        if e.collector:
            text += (f"; a worker's own first full collection copied {size(e.worker_gc_copied_bytes)} of the parent's "
                     f"pages (the collector writes to every object it walks)")
        return text
    if f.pattern == "input-wait":
        processes = f"{e.workers} {'worker' if not e.spawned else 'child'} process{'' if e.workers == 1 else 'es'}"
        loads = ("" if e.workers is None else ", with no worker process: the training process loads every batch itself"
                 if e.workers == 0 else f", with {processes} loading them" if not e.spawned else
                 f", with {processes} ({e.spawned} of them spawned: DataLoader workers started by the spawn method, "
                 f"and multiprocessing's resource tracker beside them)")
        return (f"The steps wait for the DataLoader's next batch {pct(e.share)} of the epochs' time "
                f"({ms(e.share * e.wall_s)} of {ms(e.wall_s)}, {ms(e.wait_s)} a batch over {e.batches:,} batches){loads}")
    raise ValueError(f"unknown finding pattern {f.pattern!r}")


def remedy(f):
    """What to do about one finding."""
    e = f.evidence
    if f.pattern == "rank-straggler":
        return rank_text.straggler_remedy(e)
    if f.pattern == "rank-stalls":
        return rank_text.stalls_remedy(e)
    if f.pattern == "rank-input-wait":
        return rank_text.input_remedy(e)
    if f.pattern == "rank-compute":
        return rank_text.compute_remedy(e)
    if f.pattern == "gc-between-epochs":
        if fnd.forced_leads(e):
            return _forced_remedy(e.forced, e.policy)
        if (e.policy or "").startswith("manual:"):   # in a run with no steps it collects after each epoch
            return _policy_remedy(e, "a full gc.collect() after each epoch, in a run with no steps",
                                  "leave collecting to CPython (--gc-policy default)")
        return ("What runs between the epochs (an evaluation, a checkpoint, logging) allocates enough to start these: "
                + ("call gc.freeze() once set-up is done so full collections walk only what training keeps, "
                   "and make fewer container objects there" if e.generation == 2 else
                   "make fewer container objects there (lists, dicts, class instances)")
                + "; `profiler flamegraph` of the run shows what it is.")
    if f.pattern in ("gc-steady", "gc-spikes") and fnd.forced_leads(e):   # under half the pause: manual:N's spikes
        return _forced_remedy(e.forced, e.policy, spikes=e.forced.share < fnd.FORCED_LEADS)
    if f.pattern in ("gc-steady", "gc-spikes") and (e.policy or "").startswith("manual:"):
        return _policy_remedy(e, f"a full gc.collect() every {e.policy.split(':', 1)[1]} steps, automatic collection "
                                 f"off", "collect less often (a larger N)", e.site)
    if f.pattern == "gc-steady" and e.generation < 2:
        # young collections walk what was allocated since the last one: freezing the old objects spares them nothing
        young = ("the youngest generation's collections, which run every gc.get_threshold()[0] container "
                 "allocations" if e.generation == 0 else "generation 1's collections, which run every "
                 "gc.get_threshold()[1] young ones")
        text = (f"Most of the pause is {young} and walk the objects made since: make fewer container objects "
                f"(lists, dicts, class instances) per step, e.g. one numpy array rather than a list of objects, and "
                f"break the reference cycles you make; or raise the thresholds (gc.set_threshold(50_000, 20)) so "
                f"they run less often")
        return text + (f"; {e.site} allocates the most." if e.site else ".")
    if f.pattern == "gc-steady":
        text = ("Call gc.freeze() once set-up is done (model built, data loaded): the objects that live for the whole "
                "run leave the collected generations and no collection walks them again; or raise the thresholds "
                "(gc.set_threshold) so full collections run less often")
        return text + (f"; or drop the references that keep what {e.site} allocates alive." if e.site else ".")
    if f.pattern == "gc-spikes":
        site = _gc_site(e)
        keep = (f"keep fewer objects alive at {site}" if site else
                f"keep fewer small objects alive (a Dataset's cache of decoded samples is a common case): run with "
                f"{_DEEP} to name the line that keeps them")
        if e.growing:   # a fixed N walks a growing heap more often than CPython's schedule, which waits for it to grow
            return (f"The heap these collections walk keeps growing ({e.growing}): {keep}. Until it stops "
                    f"growing, leave the collector's own schedule: a gc.collect() every N steps would walk the growing "
                    f"heap more often than CPython, whose full collections wait for it to grow by a quarter.")
        every = e.spikes.unit if e.every < 1.5 else f"{round(e.every):,} {e.spikes.unit}s"
        return (f"After set-up call gc.freeze() and gc.disable(), then gc.collect() every {every} at the same point "
                f"on every rank, so a pause lands where you chose it (and never makes one rank a straggler); and "
                f"{keep}" + (" (e.g. numpy arrays instead of lists)." if site else "."))
    if f.pattern == "gc-growing-pauses":
        site = _gc_site(e)
        if site:
            text = (f"Tracked objects pile up: drop the reference that keeps what {site} allocates alive (or bound "
                    f"the container it goes into); gc.freeze() after set-up takes what set-up made out of every "
                    f"collection.")
        else:
            text = (f"Tracked objects pile up: run with {_DEEP} to name the line that keeps them, then drop that "
                    f"reference or bound its container; gc.freeze() after set-up takes what set-up made out of every "
                    f"collection.")
        if fnd.forced_leads(e):
            text += " And " + _forced_remedy(e.forced, e.policy)
        return text
    if f.pattern == "allocation-growth" and isinstance(e, fnd.MemoryTrend):
        return (f"Look for what each step keeps: a loss kept with its graph (keep loss.item()), outputs or tensors "
                f"appended to a list. To name the line, mark shorter epochs (session.epoch() around every few hundred "
                f"steps, or --epoch-fn on a function called per chunk of them) and run with {_DEEP_ON}. If it keeps "
                f"nothing, the allocator holds what it cannot give back: batches of varying sizes fragment glibc's "
                f"heap (bucket their shapes, or set MALLOC_MMAP_THRESHOLD_=1048576 so large buffers are returned "
                f"when freed).")
    if f.pattern == "allocation-growth":
        site = e.top_sites[0].site if e.top_sites else None   # the line that grew most, numpy's buffers too
        if e.levels_off:
            return ("It levelled off: a cache or pool filled up. Bound it if that size is more than you expect"
                    + (f" ({site})." if site else "."))
        if site and e.measure != "traced" and e.sites_share is not None and e.sites_share < fnd.SITES_EXPLAIN:
            return (f"tracemalloc saw {e.sites_share:.1%} of it grow ({site} at most): the rest is memory it does "
                    f"not trace, tensor storage or native buffers. Look for tensors kept from step to step (a loss "
                    f"kept with its graph: keep loss.item()).")
        if site:
            return f"Drop the reference that keeps what {site} allocates alive, or bound the container it goes into."
        if e.deep == "auto" and not e.traced_epochs:   # auto capture watches 8 epochs of growth before it traces
            return (f"Deep capture (auto) traced no epoch: it waits for several epochs of growth first, and the run "
                    f"ended before. Run with {_DEEP_ON}, or for more epochs, to name the lines that allocate it.")
        if e.measure == "traced":   # tracemalloc saw it grow, but no snapshot diff named a line
            return (f"Deep capture's snapshots named no line of it (they come every `every` epochs, and on a large "
                    f"heap a slow one makes the next ones wait, to keep within its time budget): run with {_DEEP_ON}, "
                    f"a snapshot every epoch (every=1) and fewer epochs or a smaller data set, to name the lines.")
        if e.deep is True and e.traced_epochs and e.snapshots == 0:   # a costly snapshot before them held the next
            return (f"tracemalloc traced {counted(e.traced_epochs, 'epoch')} but took no snapshot in them: one before "
                    f"them took so long, over everything traced since tracing began (an import of torch is millions "
                    f"of blocks), that its time budget held the next ones past the run's end. Run with "
                    f"--tracemalloc auto (Session(..., tracemalloc=\"auto\")): it starts tracing once memory grows, "
                    f"so its snapshots walk only what came after, and names the lines.")
        if e.deep and e.traced_epochs:
            return (f"tracemalloc traced {counted(e.traced_epochs, 'epoch')} and named no line that grew: the growth "
                    f"is memory it does not trace, tensor storage or native buffers. Look for tensors kept from step "
                    f"to step (a loss kept with its graph: keep loss.item()).")
        return f"Run with {_DEEP} to name the lines that allocate it."
    if f.pattern == "compute-growth":
        if e.ops:
            return (f"Look at what {op_label(e.ops[0].name, e.ops[0].tags)} works on that grows with the epoch: "
                    f"its inputs' size, a list it scans, a cache it searches.")
        shorter = ("mark shorter epochs (session.epoch() around every few hundred steps, or --epoch-fn on a function "
                   "called per chunk of them) and " if e.unit == "step" else "")
        return (f"Name the part whose time grows: {shorter}wrap parts of the step in session.op() (with a Session); "
                f"for a script run as it is, `profiler flamegraph --out f.svg -- python SCRIPT` (py-spy) shows where "
                f"its time goes.")
    if f.pattern == "worker-copy-on-read":
        freeze = ("Call gc.freeze() just before the DataLoader starts its workers (once, with persistent_workers=True): "
                  "a worker's full collection then skips the parent's objects and leaves their pages shared. To try it "
                  "without editing the script: profiler run --gc-policy freeze.")
        dataset = ("Keep the dataset in numpy arrays or bytes instead of Python lists and dicts: reading a Python object "
                   "writes its reference count, so each worker copies every page it reads (gc.freeze() does not stop "
                   "that).")
        return " ".join(([dataset] if e.read else []) + ([freeze] if e.collector else []))
    if f.pattern == "input-wait":
        cheaper = ("or make the Dataset's __getitem__ cheaper (decode or augment once and cache, read from faster "
                   "storage); `profiler flamegraph` shows where the loading time goes.")
        if e.workers:
            again = ("" if e.persistent else " (and persistent_workers=True, so they are not started again each epoch)"
                     if not e.spawned else " (and persistent_workers=True unless they are: a spawned worker imports "
                     "torch anew as it starts)")
            return f"The workers do not keep up: raise num_workers or prefetch_factor{again}, {cheaper}"
        if e.workers is None:   # not sampled (integrations.torch.track records no workers)
            return (f"Without DataLoader workers, load batches in worker processes while the step trains "
                    f"(num_workers=N, persistent_workers=True); with them, raise num_workers or prefetch_factor; "
                    f"{cheaper}")
        if e.wait_s < fnd.CHEAP_BATCH_S:
            return (f"Each batch takes {ms(e.wait_s)} to gather in the training process, about what a worker process "
                    f"costs to hand one over: gather it cheaper, indexing tensors held in memory with the whole batch's "
                    f"indices (a BatchSampler as the DataLoader's sampler, batch_size=None) instead of one __getitem__ "
                    f"a sample, or use larger batches.")
        return (f"Load batches in worker processes while the step trains: DataLoader(..., num_workers=N, "
                f"persistent_workers=True) with N up to the cores the training leaves free (pin_memory=True for a "
                f"GPU), {cheaper}")
    raise ValueError(f"unknown finding pattern {f.pattern!r}")


CAUSES = {"gc": "Garbage collection", "allocation": "Memory", "compute": "Compute"}
BETWEEN_SHOWN = 0.25   # the time between epochs worth a note in the verdict
WHAT_IF_MIN = 0.995   # a what-if is worth a sentence when it saves at least 0.5% of the slower epoch


# -- diagnosis -----------------------------------------------------------------------------------

def _headline(d):
    et = d.epoch_time
    times = f"median epoch time {ms(et.early_median_s)} early, {ms(et.late_median_s)} late"
    analysed = _analysed(d)
    if analysed < stats.MIN_POINTS:
        after = (" after the warm-up" if et.warmup_epochs_skipped > et.setup_epochs else
                 " after the set-up, its warm-up included" if et.setup_epochs else "")
        few = f"{analysed} epoch{'' if analysed == 1 else 's'}{after}"
        t = et.step_trend
        if t is not None and t.change.sustained:   # one long epoch: its steps tell the trend
            how = "slower" if t.change.relative > 0 else "faster"
            return (f"{few}: too few to fit an epoch-time trend, but the steps get {how}: median step "
                    f"{ms(t.change.early)} early, {ms(t.change.late)} late; the trend is {change(t.change)} over "
                    f"{t.steps:,} steps.")
        steps = (f" Its {t.steps:,} steps show no sustained trend (median step {ms(t.change.early)} early, "
                 f"{ms(t.change.late)} late)." if t is not None else "")
        return f"{few}: too few to tell whether epoch time changes ({times}).{steps}"
    if et.slowdown and et.change.relative_low <= 0:
        return (f"Epochs may be getting slower: {times}; the trend adds {change(et.change)} over the run "
                f"(its 95% interval includes no change).")
    if et.slowdown:
        return f"Epochs get slower: {times}; the trend adds {change(et.change)} over the run."
    if et.faster:
        return f"Epochs get faster: {times}; the trend is {change(et.change)} over the run."
    fit = f"fitted change {change(et.change)}" if et.change.fitted else "no trend could be fitted"
    if et.swings:
        return (f"Epoch time swings too much to tell a trend: {times} (late / early {et.ratio:.2f}, but no "
                f"sustained trend; {fit}).")
    if not et.steady:
        return f"Epoch time shows no sustained trend: {times} ({fit})."
    return f"Epoch time holds steady: {times} (no sustained trend; {fit})."


def _gc_explained(d):
    """GC's share of the change the report judges: the epochs', or the steps' where they tell it."""
    t = d.epoch_time.step_trend
    return t.gc_explained if t is not None and not d.epoch_time.change.fitted else d.gc.explained_fraction


def _analysed(d):
    """The epochs the epoch-time trend is fitted over: those after the warm-up (and set-up), but a
    last one cut short; where their steps differ, those of the longest run of one size."""
    if d.epoch_time.same_steps is not None:   # only those of about one number of steps
        return d.epoch_time.same_steps[1]
    return d.epochs - d.epoch_time.warmup_epochs_skipped - (d.epoch_time.cut_short is not None)


def _trend(d):
    """The epoch-time trend for the report's table: the fitted change, or why there is none."""
    if d.epoch_time.change.fitted:
        return change(d.epoch_time.change)
    t = d.epoch_time.step_trend
    if t is not None and t.change.fitted:
        return f"too few epochs; steps {change(t.change)}"
    return "too few epochs to tell" if _analysed(d) < stats.MIN_POINTS else "none fitted"


def _per_epoch(n, what, per="epoch"):
    """'2 full collections per epoch', '1 full collection per epoch', '0.4 ...', '0.04 ...', '1.4 ...'."""
    shown = f"{n:.0f}" if n == round(n) else f"{n:.2g}" if n < 1 else f"{n:.1f}"
    return f"{shown} {what}{'' if shown == '1' else 's'} per {per}"


def counted(n, unit):
    """'1 step', '1,234 steps'."""
    return f"{n:,} {unit}{'' if n == 1 else 's'}"


def below(x, threshold):
    """pct(x), with more digits when it would read as the threshold it is under (1.98% under 2.0%),
    cut rather than rounded so it never reads as the threshold (0.019996: 1.99%, not 2.00%)."""
    return pct(x) if pct(x) != pct(threshold) else f"{math.floor(10000 * x + 1e-9) / 100:.2f}%"


def _share(x, threshold, of):
    """'1.98% of the run (under the 2.0% that makes a finding)', or '7.0% of the run'."""
    if x < threshold:
        return f"{below(x, threshold)} {of} (under the {pct(threshold)} that makes a finding)"
    return f"{pct(x)} {of}"


def _spikes_not_found(s):
    if s.count == 0:
        return f"no {s.unit} spikes"
    if s.time_fraction < fnd.SPIKE_FRACTION:
        return f"{s.unit} spikes take {_share(s.time_fraction, fnd.SPIKE_FRACTION, 'of the run')}"
    return (f"{s.unit} spikes take {pct(s.time_fraction)} of the run, but GC pauses explain only "
            f"{pct(s.gc_explained_fraction)} of their time (the workload or the machine slows them, not GC)")


FLAT_BYTES = 1 << 20   # RSS growth over the run that reads as flat memory


def _rss_rate(a):
    """'+1.2 MiB', or '-' for one epoch after the warm-up, which has no growth to fit."""
    rate = a.rss_growth_bytes_per_epoch
    return "-" if rate is None else signed_size(rate)


_TREND_TOLD = {
    "early": "memory held after it rose early in {}",
    "cycles": "memory grew and was freed again through {}",
    "step": "memory rose in a step, not steadily, through {}",
    "levels": "memory does not keep growing through {}",
    "flat": "memory does not grow through {}",
}


def _memory_not_found(a):
    rate, trend = a.rss_growth_bytes_per_epoch, a.rss_trend
    if trend is not None:
        told = _TREND_TOLD[trend.shape].format(_through(trend)) + f" ({_ANON}: {_levels(trend)}"
        if trend.shape == "cycles":
            told += f"; {size(trend.gained_bytes)} gained, {size(trend.freed_bytes)} freed"
        elif trend.shape == "levels":
            told += "; it stopped by the last third"
        elif trend.shape == "flat":
            told += f"; under the {size(trend.limit_bytes)} that counts as growing"
        return told + ")"
    if rate is None:
        return (f"memory cannot show a trend in one epoch (RSS is read about once a second inside epochs with "
                f"steps, and a trend needs {fnd.RSS_TREND_SAMPLES} readings)")
    per_epoch = f"{signed_size(rate)} per epoch"
    if (rate <= 0 or rate * max(a.span_epochs, 1) < FLAT_BYTES) and a.rss_rise_bytes < FLAT_BYTES:
        if a.rss_end_bytes - a.rss_start_bytes >= FLAT_BYTES:   # a rise in the first epochs, then a level
            return (f"memory held after it rose early in the run (RSS {size(a.rss_start_bytes)} -> "
                    f"{size(a.rss_end_bytes)}, {per_epoch})")
        return f"memory is flat (RSS {per_epoch})"
    if rate * max(a.span_epochs, 1) < FLAT_BYTES:   # a rise that stopped: a slope over every epoch misses it
        return (f"RSS's level rose {size(a.rss_rise_bytes)} from the first third of the run to the last, under the "
                f"{size(a.rss_limit_bytes)} that counts as growing memory")
    text = f"RSS grew {size(rate)} per epoch"
    if a.epochs < fnd.MEMORY_MIN_EPOCHS:
        return text + f" over {a.epochs} epoch{'' if a.epochs == 1 else 's'}: too few epochs to call it a leak"
    return (text + f" ({size(rate * a.span_epochs)} over the run), under the {size(a.rss_limit_bytes)} that counts "
            f"as growing memory")


def _no_finding(d):
    """Why nothing was reported, from the numbers the tables show."""
    gc = "GC takes " + _share(d.gc.share_total, fnd.MEANINGFUL, "of the run's time")
    few = _analysed(d) < stats.MIN_POINTS
    return (f"No finding: {gc}; {_spikes_not_found(d.spikes)}; {_memory_not_found(d.allocation)}. "
            + ("Run more epochs to tell more." if few else "Nothing to fix here."))


def _cost(finding):
    """A finding's time, or that it has none of its own yet (memory growth; pause growth that lies
    inside the spikes already counted)."""
    if finding.time_fraction < 0.0005:
        return "no time of its own yet"
    return f"{pct(finding.time_fraction)} of the run"


TRACED_SHOWN = 1.1   # traced epochs this much slower than the others are worth a note


def verdict(d):
    """The diagnosis in a few sentences: the trend, the costliest finding with its remedy, the others."""
    text = _headline(d) + " "
    if d.findings:
        first = d.findings[0]
        text += f"{CAUSES[first.cause]}: {evidence(first)}. Fix: {remedy(first)}"
        if len(d.findings) > 1:
            text += " Also: " + "; ".join(f"{f.pattern} ({_cost(f)})" for f in d.findings[1:]) + "."
    else:
        text += _no_finding(d)
    if d.epoch_time.between_share is not None and d.epoch_time.between_share >= BETWEEN_SHOWN:
        text += (f" Note: {pct(d.epoch_time.between_share)} of the time passed between the epochs, outside them (an "
                 f"evaluation, a checkpoint, logging, or waiting for other ranks), which epoch times leave out.")
    problems, ra = list(d.problems), d.rank_analysis
    head = ra.unfinished[0] if ra is not None and ra.unfinished else None
    if head is not None and head["first"] and head["rank"] != ra.diagnosed:   # its error is the job's
        problems = [rank_text.stopped_first(head), *(f"rank {ra.diagnosed}: {p}" for p in problems)]
    if problems:
        text += " Note: the run is incomplete (" + "; ".join(problems) + ")."
    if d.cautions:
        text += " Note: " + "; ".join(d.cautions) + "."
    if d.rank_of is not None:
        r = d.rank_of
        text += (f" Note: this is rank {r.rank} of a job of {r.world_size} ranks, read alone: its steps show what it "
                 f"waited for, not which rank it waited for; profiler report on the job's directory"
                 f"{f' ({r.job_dir})' if r.job_dir else ''} reads the ranks together.")
    et = d.epoch_time
    if et.same_steps is not None:
        held, kept = _sizes(et.same_steps)
        text += (f" Note: the epochs hold {held}, and an epoch of more steps is no slower one: the epoch-time trend "
                 f"is of {kept}.")
    if et.cut_short is not None:
        index, steps, others = et.cut_short
        text += (f" Note: the last epoch ({index}) was cut short, {counted(steps, 'step')} against a median of "
                 f"{others:,.0f} in the others (a break out of the loop, an early stop, max_steps), and is left out of "
                 f"the epoch-time trend.")
    if et.traced_slowdown is not None and et.traced_slowdown >= TRACED_SHOWN:
        text += (f" Note: the {counted(et.traced_epochs, 'epoch')} deep capture traced took {et.traced_slowdown:.1f}x "
                 f"the others' median time (tracemalloc's cost), and {'is' if et.traced_epochs == 1 else 'are'} left "
                 f"out of the epoch-time trend{'' if d.steps is None else ' and the steps'}.")
    if (d.meta or {}).get(EPOCHS_FROM) == "windows":   # profiler run found nothing that marks epochs
        text += (" Note: these epochs are fixed time windows, so epoch time cannot change; mark real epochs "
                 "with profiler run --epoch-fn NAME (each call of NAME is an epoch) or session.epoch().")
    return text


def epochs_told(d):
    """'6 epochs', or of a run read as the epoch it stopped in, '1 unfinished epoch' (after its set-up's)."""
    if not d.unfinished:
        return counted(d.epochs, "epoch")
    return f"{counted(d.epochs - 1, 'epoch')} of set-up and 1 unfinished" if d.epochs > 1 else "1 unfinished epoch"


def _run_state(d):
    """'6 epochs, completed', '...; the run is incomplete', or of a job, the diagnosed rank's own run
    and whether the job is whole (the rank may have completed while another failed)."""
    ra = d.rank_analysis
    state = f"{epochs_told(d)}, {d.status}"
    if not d.complete:
        state += f"; the {'run' if ra is None else 'job'} is incomplete"
    return state if ra is None else f"{ra.ranks} ranks; rank {ra.diagnosed}: {state}"


def diagnosis(d):
    et, g, a = d.epoch_time, d.gc, d.allocation
    lines = [f"run      {d.run_dir}  ({_run_state(d)})", f"cause    {d.primary_cause}", "", _wrap(verdict(d)), ""]
    if d.rank_analysis is not None:
        lines += rank_text.summary(d.rank_analysis) + [""]
    for i, f in enumerate(d.findings, 1):
        lines += [f"finding {i}: {f.pattern} ({f.cause}, {_cost(f)})",
                  textwrap.indent(_wrap(evidence(f) + "."), "  "), textwrap.indent(_wrap("Fix: " + remedy(f)), "  "), ""]
    lines += [f"epoch time   early {ms(et.early_median_s):>10s}   late {ms(et.late_median_s):>10s}"
              f"   ratio {et.ratio:.2f}   trend {_trend(d)}"
              + (f"   between epochs {pct(et.between_share)} of the time" if et.between_share is not None else ""),
              f"GC share     overall {pct(g.share_total)}   median epoch early {pct(g.share_early)}"
              f"   late {pct(g.share_late)}"
              f"   explains {100 * _gc_explained(d):.0f}% of the change"
              + (f"   gc.collect() calls {pct(g.forced_share)} of the GC" if g.forced_share else "")
              + (f"   between epochs {pct(g.share_between)}" if g.share_between is not None else ""),
              f"memory       RSS {_rss_rate(a)}/epoch"
              + (f"   anonymous {size(a.rss_trend.start_bytes)} -> {size(a.rss_trend.end_bytes)} through "
                 f"{_through(a.rss_trend)} ({a.rss_trend.shape})" if a.rss_trend is not None else "")
              + (f"   malloc {size(a.malloc_growth_bytes_per_epoch)}/epoch"
                 if a.malloc_growth_bytes_per_epoch is not None else "")
              + (f"   traced {size(a.traced_growth_bytes_per_epoch)}/epoch"
                 if a.traced_growth_bytes_per_epoch is not None else "")]
    if d.steps:
        s = d.steps
        lines.append(f"steps        {s.count:,}   median {ms(s.median_s)}   p99 {ms(s.p99_s)}   spikes "
                     f"{pct(s.spike_time_fraction)} of the run, GC explains {pct(s.gc_explained_fraction)} of it")
    if d.workers and d.workers.count:
        spawned = f" ({d.workers.spawned} spawned)" if d.workers.spawned else ""
        lines.append(f"workers      {d.workers.count}{spawned}, {size(d.workers.private_bytes)} private")
    if a.top_sites:
        lines += ["", "growing lines (traced):"]
        lines += [f"  {size(s.size_diff):>10s}  {s.count_diff:+8d} blocks  {s.kind:6s}  {s.site}" for s in a.top_sites[:5]]
    if d.ops:
        lines += ["", "ops (per epoch, early -> late):"]
        lines += [f"  {op_label(o.name, o.tags):40s} {ms(o.early_s):>10s} -> {ms(o.late_s):>10s}"
                  for o in sorted(d.ops, key=lambda o: -o.late_s)[:8]]
    return "\n".join(lines)


def relative(value, base):
    """value against base as "+12.5%" ("-" when base is 0)."""
    return f"{100 * (value / base - 1):+.1f}%" if base > 0 else "-"


# -- compare and scaling -------------------------------------------------------------------------

def _gc_matters(a, b):
    """GC is worth a line of a comparison when it takes 1% of either run."""
    return max(a.gc.share_total, b.gc.share_total) >= 0.01


def _gc_comparison(a, b):
    """What the collector cost each run, on average (spikes included), and how much of the
    difference in mean epoch time it accounts for."""
    if not _gc_matters(a, b):
        return ""
    slow, fast = (a, b) if a.gc.epoch_s >= b.gc.epoch_s else (b, a)
    text = (f" On average, spikes included, an epoch takes {ms(slow.gc.epoch_s)} in {slow.label} and "
            f"{ms(fast.gc.epoch_s)} in {fast.label}; GC takes {ms(slow.gc.pause_s)} of it ({pct(slow.gc.share_total)} "
            f"of the run) and {ms(fast.gc.pause_s)} ({pct(fast.gc.share_total)})")
    delta, gc_delta = slow.gc.epoch_s - fast.gc.epoch_s, slow.gc.pause_s - fast.gc.pause_s
    if delta > 0 and gc_delta > 0:
        text += f": the collector accounts for {pct(min(gc_delta / delta, 1.0))} of the difference"
    for side in (slow, fast):
        text += forced_clause(side.gc.forced, of=f"the GC in {side.label}")
    return text + "."


def _between_comparison(a, b):
    """GC between the epochs, outside the epoch times compared, when it is 1 ms apart or more."""
    if a.gc.between_s is None or b.gc.between_s is None or abs(a.gc.between_s - b.gc.between_s) < 1e-3:
        return ""
    return (f" Between two epochs, outside their time, GC paused {ms(a.gc.between_s)} in {a.label} and "
            f"{ms(b.gc.between_s)} in {b.label}.")


ONLY_NAMED = 8   # the ops that only one run has, named in a comparison's verdict
NAME_WIDTH = 80  # the widest op label in a comparison's table


def _cut(label, width):
    return label if len(label) <= width else label[:width - 3] + "..."


# the share of two runs' epoch-time difference that lies outside their timed ops from which the
# verdict says so
UNTIMED_SHARE = 0.5


def comparison_verdict(c):
    """The verdict of a Comparison, or of a RankComparison (two multi-rank runs: rank_text's)."""
    if isinstance(c, RankComparison):
        return rank_text.comparison_verdict(c)
    a, b = c.a, c.b
    slow, fast = (a, b) if a.epoch_s >= b.epoch_s else (b, a)
    slow_is_a = slow is a
    text = (f"{slow.label} takes {ms(slow.epoch_s)} per epoch, {fast.label} {ms(fast.epoch_s)}"
            + (f" ({slow.epoch_s / fast.epoch_s:.2f}x)." if fast.epoch_s > 0 else "."))
    text += _noise(c, slow, fast) + _different_work(c)
    if c.same_command and not c.noise:
        text += _same_command(c)
    both = [r for r in c.rows if r.only_in is None]
    what_if = (lambda r: r.a_if_b_speed_s) if slow_is_a else (lambda r: r.b_if_a_speed_s)
    told = not c.what_ifs
    best = [] if told else [r for r in sorted(both, key=what_if) if what_if(r) < WHAT_IF_MIN * slow.epoch_s][:2]
    for r in best:
        s_slow, s_fast = (r.a_s, r.b_s) if slow_is_a else (r.b_s, r.a_s)
        label = op_label(r.op, r.tags)
        text += (f" If {label} in {slow.label} ran at its {fast.label} speed ({ms(s_slow)} -> {ms(s_fast)} per "
                 f"epoch), the {slow.label} epoch would take {ms(what_if(r))} instead of {ms(slow.epoch_s)} "
                 f"({relative(what_if(r), slow.epoch_s)}).")
    text += _gc_comparison(a, b) + _between_comparison(a, b) + _memory_comparison(a, b)
    outside, difference = slow.untimed_s - fast.untimed_s, slow.epoch_s - fast.epoch_s
    # the collector's added pauses, where they must lie outside the ops (more than the ops' own difference
    # holds), are no code of the program's
    more_gc = max(0.0, slow.gc.pause_s - fast.gc.pause_s) if _gc_matters(a, b) else 0.0
    collector = max(0.0, more_gc - max(0.0, difference - outside))
    if c.rows and not told and outside - collector >= UNTIMED_SHARE * difference > 0:
        # more than the whole difference when the timed ops are faster in the slower run
        part = (f"{ms(outside)} of the {ms(difference)} difference is" if outside <= difference else
                f"More than the whole {ms(difference)} difference ({ms(outside)}) is")
        rest = (f", {ms(collector)} of it the collector's added pauses; the rest is" if collector >= 1e-5 else
                ":")
        text += (f" {part} outside the timed ops ({ms(slow.untimed_s)} per epoch in {slow.label} against "
                 f"{ms(fast.untimed_s)}){rest} code no session.op() covers, which no what-if can name; time more "
                 f"of the epoch to see where it goes.")
    if c.slower_everywhere and (a if c.slower_everywhere == "a" else b) is slow:   # else: the ops are not where it differs
        slow, fast = (a, b) if c.slower_everywhere == "a" else (b, a)
        cause = "the thread count, the machine or its load during that run"
        if _gc_matters(a, b) and slow.gc.pause_s > fast.gc.pause_s:   # pauses land inside whatever op runs
            cause = f"its GC pauses, which land inside the ops, or {cause}"
        text += (f" Caution: every op both runs time is at least {c.least_ratio:.2f}x slower in {slow.label}: the "
                 f"difference is run-wide ({cause}), not one op's; run both again back to back on a quiet "
                 f"machine before reading one op's ratio.")
    if c.same_run:
        text += " Note: A and B are the same run directory."
    for side in (a, b):
        if side.problems:
            text += f" Note: {side.label} is incomplete ({'; '.join(side.problems)})."
        text += cautions_note(side)
    windowed = [side.label for side in (a, b) if side.windows]
    if windowed:
        text += (f" Note: the epochs of {' and '.join(windowed)} are fixed time windows, so epoch time cannot differ "
                 f"there; mark real epochs with profiler run --epoch-fn NAME, or compare the steps' times in "
                 f"each run's profiler report.")
    if not c.rows:
        text += (" Neither run recorded op timers (session.op()), so it cannot say which part of the epoch "
                 "differs.")
    elif both and not best and not told:
        text += " No op that both runs time is faster in the faster run."
    one_side = [r for r in c.rows if r.only_in is not None]
    for side, run in (("a", a), ("b", b)):
        names = [op_label(r.op, r.tags) for r in one_side if r.only_in == side]
        if names:   # named up to ONLY_NAMED: a run of 500 ops of its own made a verdict of 8,000 characters
            text += f" Only {run.label} runs {listed(names, ONLY_NAMED)} (no what-if: the other run has no time for it)."
    for run in (a, b):
        if run.same_steps is not None:
            held, kept = _sizes(run.same_steps)
            text += f" Note: {run.label}'s epochs hold {held}: it is compared on {kept}, as its report's trend is."
    short = [run for run in (a, b) if run.warmup_included]
    if short:
        # epochs after a set-up of epochs without steps, which are not compared at all
        has = " and ".join(f"{run.label} has " + ("only one epoch to compare (its warm-up)" if run.epochs == 1 else
                                                  f"{run.epochs} epochs to compare") for run in short)
        text += (f" Note: {has}: too few to leave the warm-up out (compilation and the first touch of memory and "
                 f"caches slow the first epoch), so the epoch time{'s include' if len(short) > 1 else ' includes'} "
                 f"it; compare runs of {stats.WARMUP_MIN_EPOCHS} or more epochs.")
    return text


def _sizes(same_steps):
    """(what the epochs hold, the epochs of one size kept) of an EpochTime's or RunSide's same_steps."""
    steps, epochs, fewest, most = same_steps
    return (f"{fewest:,} to {most:,} steps (fit calls of other batch sizes, data that grew)",
            f"the {counted(epochs, 'epoch')} in a row of about {counted(steps, 'step')}")


def _same_command(c):
    """What two runs of one command (Comparison.same_command) tell of their difference."""
    if c.a.scenario:
        return (" Both runs ran the same scenario with the same settings and options, the same code: the difference "
                "is the machine's or its load's, so no op's what-if is given.")
    if c.same_code:
        return (" Both runs ran the same command, options included, and the same source: unless the data it reads "
                "or the code it imports changed, the difference is the machine's or its load's, so no op's "
                "what-if is given.")
    if c.same_code is False:
        return (" Both runs ran the same command, options included, but its source changed between them: the "
                "difference may be the change's or the machine's.")
    return (" Both runs ran the same command, options included: unless its code or data changed between them, "
            "the difference is the machine's or its load's.")


def _interval(interval):
    return f"{ms(interval[0])}-{ms(interval[1])}"


def _noise(c, slow, fast):
    """Why the difference is noise (Comparison.noise), or ''."""
    if c.noise == "overlap":
        return (f" That is within the runs' own spread: the median epoch's 95% interval is "
                f"{_interval(slow.epoch_interval_s)} in {slow.label} and {_interval(fast.epoch_interval_s)} in "
                f"{fast.label}, and they overlap, so no op's what-if is given; run both again, back to back and "
                f"longer, before reading a difference.")
    if c.noise == "slowed":
        return (f" But {slow.label}'s epochs get slower through its run, and {fast.label}'s do not: the difference "
                f"came as {slow.label} went on (a load that began on the machine, or the run itself getting slower, "
                f"which profiler report on it tells), not in code every epoch runs alike, so no op's what-if is "
                f"given.")
    if c.noise == "slow epochs":
        return (f" But the fastest tenth of {slow.label}'s epochs take up to {ms(slow.fastest_s)}, as {fast.label}'s "
                f"typical epochs do (up to {ms(fast.typical_s)} for three in four): the difference lies in "
                f"{slow.label}'s slower epochs, as a loaded machine makes them, or work only some epochs do, or is a "
                f"change too small for these epochs' spread to tell, so no op's what-if is given; run both again, "
                f"longer and back to back on a quiet machine, before reading a difference.")
    return ""


def _different_work(c):
    """The caution of two runs whose epochs hold different work (Comparison.different_work), or ''."""
    a, b = c.a, c.b
    if c.different_work is None:
        return ""
    if c.different_work == "scenarios":
        return (f" Caution: {a.label} ran {a.scenario} and {b.label} {b.scenario}: different scenarios, whose ops of "
                f"one name work on different shapes, so no op's what-if is given; compare two runs of one scenario.")
    if c.different_work == "kinds":
        ran, other = (a, b) if a.scenario else (b, a)
        return (f" Caution: {ran.label} ran the built-in scenario {ran.scenario} and {other.label} a program of its "
                f"own: different work, so no op's what-if is given.")
    if c.different_work == "samples":
        samples = " and ".join(f"{side.label} {side.samples:,}" for side in (a, b))
        return (f" Caution: the epochs hold different work ({samples} samples an epoch), so no op's what-if is "
                f"given; compare runs of the same --samples.")
    steps = " and ".join(f"{side.label} {side.steps_per_epoch:,.0f}" for side in (a, b))
    per_step = [side.epoch_s / side.steps_per_epoch for side in (a, b)]
    return (f" Caution: the epochs hold different work ({steps} steps an epoch), so no op's what-if is given; a "
            f"step takes {ms(per_step[0])} in {a.label} and {ms(per_step[1])} in {b.label}"
            + (f" ({per_step[0] / per_step[1]:.2f}x)." if per_step[1] > 0 else "."))


def _memory_comparison(a, b):
    """What each run's memory did, as its report says it, when either grows."""
    if not (a.memory_growth or b.memory_growth):
        return ""
    told = [f"in {side.label}, " + (_memory(side.memory_growth.evidence) if side.memory_growth else
                                   _memory_not_found(side.memory)) for side in (a, b)]
    return f" Memory: {told[0]}; {told[1]}."


def cautions_note(side):
    """' Note: in LABEL, ...' for a compared run's (or job's) cautions, or ''."""
    return f" Note: in {side.label}, {'; '.join(side.cautions)}." if side.cautions else ""


def run_rows(c):
    """The rows of the runs as a whole, above the ops: (name, A, B, note) as text: the epoch time (its
    note the ratio), and where the collector matters its cost and the gc.collect() calls; the
    --gc-policy if either run had one."""
    a, b = c.a, c.b
    rows = [("epoch (ms)", f"{a.epoch_s * 1e3:.2f}", f"{b.epoch_s * 1e3:.2f}", f"{c.ratio:5.2f}")]
    if _gc_matters(a, b):
        rows += [("mean epoch, spikes included (ms)", f"{a.gc.epoch_s * 1e3:.2f}", f"{b.gc.epoch_s * 1e3:.2f}", ""),
                 ("mean GC per epoch (ms)", f"{a.gc.pause_s * 1e3:.2f}", f"{b.gc.pause_s * 1e3:.2f}",
                  f"{pct(a.gc.share_total):>7s} {pct(b.gc.share_total):>8s} of run time"),
                 ("mean full collections per epoch", f"{a.gc.full_collections:.1f}", f"{b.gc.full_collections:.1f}", "")]
        asked = [None if side.gc.forced is None else sum(side.gc.forced.collections_per_epoch) for side in (a, b)]
        if any(asked):
            rows.append(("mean gc.collect() calls per epoch", *("-" if n is None else f"{n:.1f}" for n in asked), ""))
    if any(side.gc.between_s for side in (a, b)):   # outside the epochs' time: not in the rows above
        rows.append(("mean GC between two epochs (ms)",
                     *("-" if side.gc.between_s is None else f"{side.gc.between_s * 1e3:.2f}" for side in (a, b)), ""))
    if a.gc.policy or b.gc.policy:
        rows.append(("--gc-policy", a.gc.policy or "default", b.gc.policy or "default", ""))
    rss = [(side.memory.rss_start_bytes, side.memory.rss_end_bytes) for side in (a, b)]
    if all(None not in ends for ends in rss):
        growing = [side.label for side in (a, b) if side.memory_growth]
        rows.append(("RSS, first -> last epoch (MiB)", *(f"{s / 2**20:.0f} -> {e / 2**20:.0f}" for s, e in rss),
                     f"memory grows in {' and '.join(growing)}" if growing else ""))
    return rows


def comparison(c):
    if isinstance(c, RankComparison):
        return rank_text.comparison(c)
    a, b = c.a.label, c.b.label
    width = max(len(a), len(b), 10)
    # the first column fits the longest op, up to NAME_WIDTH: a longer label is cut (the verdict names it whole)
    labels = [_cut(op_label(r.op, r.tags), NAME_WIDTH) for r in c.rows]
    names = max([34] + [len(label) for label in labels])
    lines = [_wrap(comparison_verdict(c)), "",
             f"{'op':{names}s} {a:>{width}s} {b:>{width}s}   ratio   share A  share B   A's epoch at B's speed"]
    lines += [f"{name:{names}s} {x:>{width}s} {y:>{width}s}" + (f"   {note}" if note else "")
              for name, x, y, note in run_rows(c)]
    for r, label in zip(c.rows, labels):
        if r.only_in is not None:
            value = (r.a_s if r.only_in == "a" else r.b_s) * 1e3
            cells = (f"{value:{width}.2f} {'-':>{width}s}" if r.only_in == "a" else f"{'-':>{width}s} {value:{width}.2f}")
            lines.append(f"{label:{names}s} {cells}   only in {a if r.only_in == 'a' else b}")
            continue
        ratio = f"{r.ratio:5.2f}" if r.ratio is not None else "    -"
        shares = "   ".join(f"{100 * x:6.1f}%" if x is not None else f"{'-':>7s}" for x in (r.a_share, r.b_share))
        what_if = (f"{r.a_if_b_speed_s * 1e3:9.2f} ms ({relative(r.a_if_b_speed_s, c.a.epoch_s)})"
                   if c.what_ifs else f"{'-':>9s}")
        lines.append(f"{label:{names}s} {r.a_s * 1e3:{width}.2f} {r.b_s * 1e3:{width}.2f}   {ratio}   {shares}   {what_if}")
    return "\n".join(lines)


def scaling_verdict(s):
    base, top = s.rows[0], s.rows[-1]
    at = (f"{ms(base.median_epoch_s)} at max_epochs={base.max_epochs:,} vs {ms(top.median_epoch_s)} at "
          f"{top.max_epochs:,} ({s.ratio:.2f}x)")
    shares = f"GC share {pct(base.gc_share)} vs {pct(top.gc_share)}"
    if s.depends:
        return (f"Epoch time depends on max_epochs: {at}, though every run stopped after the same epochs. {shares}, "
                f"and GC explains {100 * s.gc_explained:.0f}% of the difference: something sized by max_epochs (e.g. "
                f"a preallocated history) is kept alive and walked by every full collection.")
    if s.ratio >= 1 + DEPENDS:
        return (f"Epoch time differs ({at}), but GC pauses explain only {100 * s.gc_explained:.0f}% of it ({shares}): "
                f"not a max_epochs effect through GC. Noise between processes on a shared machine reaches this size; "
                f"repeat the measurement, or compare the runs' ops.")
    return f"Epoch time does not depend on max_epochs: {at}; {shares}."


def scaling(s):
    lines = ([s.label] if s.label else []) + [_wrap(scaling_verdict(s)), "",
                                              f"{'max_epochs':>12s} {'epochs run':>10s} {'median ms':>10s} {'GC share':>9s}"]
    lines += [f"{r.max_epochs:12,d} {r.epochs:10d} {r.median_epoch_s * 1e3:10.2f} {100 * r.gc_share:8.1f}%"
              for r in s.rows]
    return "\n".join(lines)
