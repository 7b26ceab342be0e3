"""The sentences about a multi-rank run: the straggler finding's evidence and remedy, the per-rank
table, ranks that did not finish, and the comparison of two multi-rank runs (text.py calls these)."""

from ..analysis import findings
from ..analysis.ranks import FINISHED, SYNC_STEPS
from . import text

# what the clocks showed, and where that puts the collective
COLLECTIVE = {"in-step": ("steps end together", "the collective is inside the step"),
              "between-steps": ("steps begin together", "the collective is between steps"),
              "one-rank": ("one rank", "there is no other rank to wait for")}


def _collective(ra):
    if ra.collective == "between-epochs":
        return (f"steps drift apart (they wander {ra.drift_steps:.2f} median steps between ranks) but epochs begin "
                f"together: the ranks meet once an epoch (a barrier or an all-reduce between epochs), so epochs "
                f"are compared")
    if ra.collective == "none":
        return (f"steps drift apart (they wander {ra.drift_steps:.2f} median steps between ranks) and so do epochs: "
                f"the ranks do not wait for each other at a collective, so none holds the others back")
    if ra.collective in COLLECTIVE:
        shown, where = COLLECTIVE[ra.collective]
        if ra.drift_steps is not None and ra.drift_steps > SYNC_STEPS:   # too few steps to call it "none"
            return (f"steps neither clearly end nor begin together (they wander {ra.drift_steps:.2f} median steps "
                    f"between ranks, over too few steps to tell): read as if {where}")
        return f"{shown}: {where}"
    if ra.unit == "epoch":
        return "where the collective lies is unknown (a rank recorded no steps): epochs compared by wall time"
    return ("where the collective lies is unknown (a rank's meta.json has no clock_origin_unix): steps compared by "
            "wall time")


# the time a rank ran on past its last recorded step before it stopped that is worth a word: a hang
SILENT_STEPS, SILENT_S = 20, 1.0
STOPPED = {"running": "killed, crashed, or still running",
           "failed": "an error; when a rank dies, the others' next collective fails",
           "terminated": "SIGTERM (torchrun stops the other ranks when one fails, or the job was stopped)",
           "interrupted": "Ctrl-C"}


def _own_error(u):
    """The error an entry of RankAnalysis.unfinished recorded, unless its status says it already."""
    return u.get("error") if not (u["status"] == "terminated" and u.get("error") == "SIGTERM") else None


def stopped_first(u):
    """'rank 1 stopped first (ValueError: boom)', of an entry of RankAnalysis.unfinished."""
    return f"rank {u['rank']} stopped first ({_own_error(u) or STOPPED.get(u['status'], u['status'])})"


def _generations(by_gen):
    parts = [f"generation {g}: {text.pct(x)}" for g, x in enumerate(by_gen) if x >= 0.005]
    return f" ({', '.join(parts)})" if parts else ""


def straggler_evidence(s):
    often = f"nearly every {s.unit}" if s.mean_interval < 1.5 else f"about one in {s.mean_interval:.0f}"
    text_ = (f"Rank {s.rank} holds the other ranks back: in {text.counted(s.steps, s.unit)} ({text.pct(s.step_fraction)}, "
             f"{often}) it was {text.ms(s.stall_s / s.steps)} behind the median rank on average "
             f"(median {text.ms(s.median_stall_s)}), and every other rank waited for it: {text.ms(s.stall_s)}, "
             f"{text.pct(s.time_fraction)} of the job's time. Its own GC pauses explain "
             f"{text.pct(s.gc_explained_fraction)} of it{_generations(s.gc_explained_by_generation)}")
    text_ += text.forced_clause(s.forced, "its GC pause")
    if s.stall_growth >= 1.25:
        text_ += f"; its stalls grow as the run goes on (second half {s.stall_growth:.1f}x the first)"
    if s.rss_growth_bytes_per_epoch > 2 * max(s.others_rss_growth_bytes_per_epoch, 0) + (1 << 20):
        text_ += (f"; its memory grows {text.size(s.rss_growth_bytes_per_epoch)} per epoch against "
                  f"{text.size(s.others_rss_growth_bytes_per_epoch)} on the other ranks")
    return text_


def _own_calls(s):
    """Whether the straggler's stalls are the program's own gc.collect() calls: most of its GC pause,
    and at least half as many as its stalls, of the generation that explains them most (a call an
    epoch that every rank makes does not make its stalls inside the steps)."""
    g = max(range(3), key=lambda i: s.gc_explained_by_generation[i])
    return (s.forced is not None and s.forced.share >= findings.FORCED_LEADS
            and 2 * s.forced.collections[g] >= s.steps)


def straggler_remedy(s):
    every = max(10, int(round(s.mean_interval, -1)) or 50)
    if s.gc_explained_fraction < 0.5:
        return (f"Most of rank {s.rank}'s stall is its own work, not GC: look at what only it does (its data shard, "
                f"its loader, logging or checkpointing on that rank); `profiler report` on its own directory "
                f"shows its ops.")
    if _own_calls(s):   # a --gc-policy would leave them running
        return (f"Rank {s.rank}'s stalls are the program's own gc.collect() calls"
                + (f" (at {text.forced_lines(s.forced)})" if s.forced.site else "")
                + ", and every other rank waits for each: remove them, or make every rank call it at the same step "
                "(then each pause costs the job once, not once per rank that calls it apart).")
    holds = s.stall_growth >= 1.25 or s.rss_growth_bytes_per_epoch > 2 * max(s.others_rss_growth_bytes_per_epoch, 0) \
        + (1 << 20)
    if holds:
        return (f"Rank {s.rank} keeps objects the others do not, and each full collection walks them all: drop the "
                f"references it accumulates (a cache, a history, a list of records). `--gc-policy freeze` takes what "
                f"set-up created out of every collection (it helps when that is most of what is walked). "
                f"`--gc-policy manual:N` on every rank moves the pauses to the same step; that helps when every rank "
                f"pays similar pauses at different steps, not when one rank holds the objects: the job still waits "
                f"for its longer collection, now every N steps. Compare the runs with `profiler compare`.")
    return (f"Collect at the same step on every rank: `--gc-policy manual:{every}` (automatic GC off, gc.collect() "
            f"every {every} steps, so a pause never makes one rank a straggler), and freeze after set-up "
            f"(`--gc-policy freeze`) so those collections walk only what training creates. Compare the runs with "
            f"`profiler compare`.")


def input_evidence(s):
    return (f"Rank {s.rank} waits {text.ms(s.wait_s)} a step for its DataLoader's next batch, against "
            f"{text.ms(s.others_wait_s)} on the other ranks (their median): every rank's step waits for its gradients "
            f"at the all-reduce, so each waits its {text.ms(s.wait_s - s.others_wait_s)} more a step on average, "
            f"{text.pct(s.time_fraction)} of the job's time (its mean step {text.ms(s.step_s)}), which no rank's "
            f"stall shows")


def compute_evidence(s):
    return (f"Rank {s.rank} spends {text.ms(s.own_s)} a step on its own work (the step less its backward, "
            f"its waits for data and its GC pauses), against {text.ms(s.others_own_s)} on the other ranks (their "
            f"median), and they wait for its gradients inside their backward ({text.ms(s.others_backward_s)} a "
            f"step against its {text.ms(s.backward_s)}): {text.ms(s.own_s - s.others_own_s)} a step on average, "
            f"{text.pct(s.time_fraction)} of the job's time (its mean step {text.ms(s.step_s)}), which no rank's "
            f"stall shows")


def compute_remedy(s):
    return (f"Give rank {s.rank} the work the others have: a shard of the same size and cost (sequences of "
            f"similar length: a sampler that balances them), the same batch size and model, its own core and no "
            f"work only it does in the step (logging, metrics, checkpoints on rank {s.rank}); if its machine or "
            f"core is slower or shared, what else runs there. Its own run (rank-{s.rank}/) shows its ops per epoch.")


def input_remedy(s):
    return (f"Feed rank {s.rank} as fast as the others: more DataLoader workers on it (num_workers, "
            f"persistent_workers=True), or its data on storage as fast as theirs; if its node is shared or slower, "
            f"what else runs there. Its own run (rank-{s.rank}/) shows its DataLoader.__next__ time per epoch.")


def stalls_evidence(e):
    """No rank stands out, but the ranks held each other back in turn (e: analysis.ranks.RankStalls)."""
    by_gen = e.gc_explained_by_generation
    return (f"No rank stands out, but {e.ranks_stalling} of the {e.ranks} ranks held the others back in turn: in "
            f"{text.counted(e.steps, e.unit)} one of them was behind the median rank by over 10% of a {e.unit}, and the job "
            f"waited {text.ms(e.lost_s)}, {text.pct(e.lost_fraction)} of its time. The stalling ranks' own GC pauses "
            f"explain {text.pct(sum(by_gen))} of it{_generations(by_gen)}")


def stalls_remedy(e):
    if e.forced and sum(e.gc_explained_by_generation) >= 0.5:   # a --gc-policy would leave these calls running
        lines = "; ".join(f"rank {rank}" + (f" at {site}" if site else "") for rank, site in sorted(e.forced.items()))
        return (f"The pauses are the program's own gc.collect() calls ({lines}), made at different steps on different "
                f"ranks, and the job pays each: make every rank call it at the same step, or call it less often "
                f"(a --gc-policy does not move them). Compare the runs with `profiler compare`.")
    if sum(e.gc_explained_by_generation) < 0.5:
        return ("Most of it is the ranks' own work, not GC: uneven batches (sizes, sequence lengths), data loading, or "
                "a noisy machine; look at the ranks' own reports for their ops.")
    return ("Every rank pays its pauses at different steps, and the job pays them all, one after another: collect at "
            "the same step on every rank (`--gc-policy manual:N`: automatic GC off, gc.collect() every N steps), so "
            "the pauses overlap and the job pays one per N steps; freeze after set-up (`--gc-policy freeze`) so "
            "those collections walk only what training creates. Compare the runs with `profiler compare`.")


def unfinished(ra):
    """A line per rank that did not finish, in the analysis's order: its status, its error, the last
    step it finished, and whether it stopped first."""
    lines = []
    for u in ra.unfinished:
        why = STOPPED.get(u["status"], u["status"])
        last = (f"its last finished {ra.unit} is {u['last_step']:,}" if u["last_step"] is not None
                else f"it finished no {ra.unit}")
        first = ""
        if u.get("killed_before"):
            killed = " and ".join(str(r) for r in u["killed_before"])
            first = (f"; its error came first, but rank {killed} was killed, recording nothing, after a last "
                     f"{ra.unit} that ended before it, and may have died first: look at both")
        elif u.get("first"):
            first = "; it stopped first: look at its error first"
        error = f" ({_own_error(u)})" if _own_error(u) else ""
        silent = u.get("silent_s")
        if silent is not None and silent >= max(SILENT_STEPS * u.get("median_s", 0.0), SILENT_S):
            last += (f", and it ran on {text.duration(silent)} past its last recorded {ra.unit}'s end before it "
                     f"stopped, recording nothing (a hang, or work outside its {ra.unit}s)")
        epochs = text.counted(u["epochs"], "epoch") if u["epochs"] else "no epoch finished"
        lines.append(f"rank {u['rank']} did not finish (status {u['status']}: {why}){error}; {last} "
                     f"({epochs}); the job is compared up to {ra.aligned:,} {ra.unit}s{first}")
    return lines


def uneven(ra):
    """A line when ranks that finished recorded different numbers of steps (epochs): only the first
    `aligned` are compared."""
    counts = {r.rank: r.steps if ra.unit == "step" else r.epochs for r in ra.per_rank if r.status in FINISHED}
    if len(set(counts.values())) < 2:
        return []
    most = max(counts, key=counts.get)
    return [f"the ranks that finished recorded {min(counts.values()):,} to {max(counts.values()):,} {ra.unit}s "
            f"(rank {most}: {counts[most]:,}); only the first {ra.aligned:,} are compared"]


def growing(ra):
    """A line per rank whose memory grows while the others' does not (a leak on one rank shows in its
    own report, which this one is not unless it is the diagnosed rank): by its RSS per epoch, or,
    through fewer epochs, by its anonymous memory's trend through them."""
    told = [r for r in ra.per_rank if r.rss_growth_bytes_per_epoch is not None]   # enough epochs to fit one
    rates = sorted(r.rss_growth_bytes_per_epoch for r in told)
    typical = rates[(len(rates) - 1) // 2] if rates else 0.0
    lines = [f"rank {r.rank}'s RSS grows {text.size(r.rss_growth_bytes_per_epoch)} per epoch against "
             f"{text.size(typical)} on the median rank: `profiler report` on its directory for the growth"
             for r in told if r.rank != ra.diagnosed
             and r.rss_growth_bytes_per_epoch > 2 * max(typical, 0) + text.FLAT_BYTES]
    trends = [r for r in ra.per_rank if r.memory_trend is not None]
    paces = sorted(r.memory_trend.late_bytes_per_s for r in trends)
    pace = paces[(len(paces) - 1) // 2] if paces else 0.0
    return lines + [f"rank {r.rank}'s anonymous memory grows {text.size(r.memory_trend.late_bytes_per_s)} a second "
                    f"against {text.size(pace)} on the median rank: `profiler report` on its directory for the growth"
                    for r in trends if r.rank != ra.diagnosed and r.memory_trend.shape == "grows"
                    and r.memory_trend.late_bytes_per_s > 2 * max(pace, 0)]


def _host(host):
    """A host in 12 characters: its end, where node names differ (gpu-cluster-node-07 -> ...r-node-07)."""
    host = host or "-"
    return host if len(host) <= 12 else "..." + host[-9:]


def wait(seconds):
    """A rank's time per step (its wait for its DataLoader, its own work), "-" when not timed."""
    return "-" if seconds is None else text.ms(seconds)


def rate(bytes_per_epoch):
    """A rank's RSS growth per epoch, "-" when it had too few epochs to fit one."""
    return "-" if bytes_per_epoch is None else text.size(bytes_per_epoch)


def summary(ra):
    """The merged ranks: what was aligned, the time lost waiting, and a row per rank."""
    told = (f"{text.counted(ra.aligned - ra.warmup, ra.unit)} analysed of the {ra.aligned:,} aligned (the first "
            f"{ra.warmup:,}, the warm-up, left out)" if ra.warmup else
            f"{text.counted(ra.aligned, ra.unit)} aligned, all analysed (too few epochs to leave a warm-up out)")
    lines = [f"ranks        {ra.ranks}, {told}; "
             f"{_collective(ra)}",
             f"lost         {text.ms(ra.lost_s)} waiting for stalled ranks, {text.pct(ra.lost_fraction)} of the job's "
             f"{text.ms(ra.job_time_s)}, in {text.counted(ra.straggled_steps, ra.unit)} "
             f"(median {ra.unit} {text.ms(ra.median_s)})"]
    lines += [f"!            {line}" for line in unfinished(ra) + uneven(ra) + growing(ra)]
    lines += ["", f"{'rank':>5s} {'host':12s} {'status':11s} {ra.unit + 's':>8s} {'median':>10s} {'GC share':>9s} "
                  f"{'stalled':>8s} {'cost':>10s} {'RSS/epoch':>11s} {'data wait':>10s} {'own work':>10s}"]
    for r in ra.per_rank[:64]:
        count = r.steps if ra.unit == "step" else r.epochs
        lines.append(f"{r.rank:5d} {_host(r.host):12s} {r.status:11s} {count:8,d} {text.ms(r.median_s):>10s} "
                     f"{text.pct(r.gc_share):>9s} {r.straggled:8,d} {text.ms(r.stall_s):>10s} "
                     f"{rate(r.rss_growth_bytes_per_epoch):>11s} {wait(r.data_wait_s):>10s} {wait(r.own_s):>10s}")
    if len(ra.per_rank) > 64:
        worst = sorted(ra.per_rank, key=lambda r: -r.stall_s)[:5]
        lines.append(f"... {len(ra.per_rank) - 64} more ranks; the costliest: "
                     + ", ".join(f"rank {r.rank} ({text.ms(r.stall_s)})" for r in worst))
    if ra.diagnosed is not None:
        lines += ["", f"What follows is rank {ra.diagnosed}'s own run"
                      + (" (the straggler):" if ra.stragglers else ":")]
    return lines


def _side(j):
    text_ = (f"{j.label}: {text.ms(j.step_s)} per step, {text.ms(j.lost_s_per_step)} of it lost waiting "
             f"({text.pct(j.lost_fraction)}), GC {text.pct(j.gc_share)} of the ranks' time")
    s, i, c = j.straggler, j.input_straggler, j.compute_straggler
    if s is not None:
        text_ += (f"; rank {s.rank} straggles in {text.pct(s.step_fraction)} of the steps, costing "
                  f"{text.pct(s.time_fraction)} of the job, {text.pct(s.gc_explained_fraction)} of it its own GC")
    if i is not None:
        text_ += (f"; rank {i.rank} waits {text.ms(i.wait_s)} a step for its DataLoader against "
                  f"{text.ms(i.others_wait_s)} on the others, {text.pct(i.time_fraction)} of the job's time")
    if c is not None:
        text_ += (f"; rank {c.rank} spends {text.ms(c.own_s)} a step on its own work against "
                  f"{text.ms(c.others_own_s)} on the others, {text.pct(c.time_fraction)} of the job's time")
    return text_ if s is not None or i is not None or c is not None else text_ + "; no rank stands out"


def comparison_verdict(c):
    how = "faster" if c.step_ratio < 1 else "slower" if c.step_ratio > 1 else "the same"
    text_ = (f"{c.b.label} takes {text.ms(c.b.step_s)} per step against {text.ms(c.a.step_s)} for {c.a.label} "
             f"({100 * (c.step_ratio - 1):+.1f}%: {how}); "
             f"the time lost waiting for stalled ranks went from {text.ms(c.a.lost_s_per_step)} to "
             f"{text.ms(c.b.lost_s_per_step)} per step.")
    sa, sb = c.a.straggler, c.b.straggler
    if sa is not None and sb is None:
        text_ += f" Rank {sa.rank} no longer straggles."
    elif sa is not None and sb is not None:
        before = f"rank {sa.rank}'s" if sa.rank != sb.rank else "its"
        text_ += (f" Rank {sb.rank}'s stalls cost {text.pct(sb.time_fraction)} of the job in {c.b.label}, against "
                  f"{before} {text.pct(sa.time_fraction)} in {c.a.label}.")
    elif sb is not None:
        text_ += f" Rank {sb.rank} straggles in {c.b.label} only."
    return (text_ + text.cautions_note(c.a) + text.cautions_note(c.b)
            + (" Note: A and B are the same run directory." if c.same_run else ""))


def comparison(c):
    return "\n".join([text._wrap(comparison_verdict(c)), "", "  " + _side(c.a), "  " + _side(c.b)])
