"""matplotlib figures (Agg): each takes analysis results and returns a Figure, readable at a glance:
a title that says what it shows, units on the axes, a legend."""

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from . import text  # noqa: E402

MIB = 1 << 20
GC_COLORS = ("#fdd49e", "#fc8d59", "#d7301f")


def _short(site, width=60):
    path, _, line = site.rpartition(":")
    parts = path.split(os.sep)
    text = os.sep.join(parts[-2:]) + ":" + line
    return text if len(text) <= width else "..." + text[-width + 3:]


def epoch_time(s, title="Epoch time, with GC pauses by generation"):
    """s: analysis.EpochSeries."""
    fig, ax = plt.subplots(figsize=(9, 4))
    gc_ms = s.gc_s * 1e3
    parts = [(s.wall_s * 1e3 - gc_ms.sum(axis=1)).clip(min=0), gc_ms[:, 0], gc_ms[:, 1], gc_ms[:, 2]]
    labels, colors = ["outside GC", "GC gen 0", "GC gen 1", "GC gen 2 (full)"], ["#9ecae1"] + list(GC_COLORS)
    if len(s.epoch) > 1:
        ax.stackplot(s.epoch, *parts, labels=labels, colors=colors)
    else:   # one epoch: stacked bars (a stackplot of one point draws nothing)
        bottom = np.zeros(len(s.epoch))
        for part, label, color in zip(parts, labels, colors):
            ax.bar(s.epoch, part, bottom=bottom, width=0.6, label=label, color=color)
            bottom = bottom + part
    ax.set(title=title + (" (bin means)" if s.downsampled else ""), xlabel="epoch", ylabel="ms per epoch")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def step_time(s, median_s=None, threshold_s=None):
    """s: analysis.StepSeries. Step time (each bin's median and slowest step when downsampled);
    steps above the spike threshold whose GC pause covers at least half their time above the
    median are marked as GC-pause steps."""
    fig, ax = plt.subplots(figsize=(9, 4))
    median_s = float(np.median(s.median_s)) if median_s is None else median_s
    threshold_s = 1.5 * median_s if threshold_s is None else threshold_s
    if s.downsampled:
        ax.plot(s.step, s.max_s * 1e3, lw=0.8, color="#9ecae1", label="slowest step in bin")
        ax.plot(s.step, s.median_s * 1e3, lw=1.2, color="#3182bd", label="median step in bin")
    else:
        ax.plot(s.step, s.max_s * 1e3, lw=0.8, color="#3182bd", label="step")
    gc_steps = (s.max_s > threshold_s) & (s.max_gc_s > 0) & (s.max_gc_s >= 0.5 * (s.max_s - median_s))
    ax.plot(s.step[gc_steps], s.max_s[gc_steps] * 1e3, "o", ms=4, color=GC_COLORS[2],
            label="spike with a GC pause (>= half its excess)")
    ax.axhline(threshold_s * 1e3, ls="--", lw=0.8, color="#636363", label="spike threshold")
    ax.set(title=f"Step time ({s.steps:,} steps)", xlabel="step", ylabel="ms per step")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def memory(s):
    """s: analysis.EpochSeries."""
    fig, ax = plt.subplots(figsize=(9, 3.5))
    # markers where there are few points: one point of a line alone draws nothing
    ax.plot(s.epoch, s.rss_bytes / MIB, "o-" if len(s.epoch) < 50 else "-", ms=3, label="process RSS")
    if len(s.malloc_epoch):   # markers: a costly heap's reads can be a few points (capture/memory.py)
        ax.plot(s.malloc_epoch, s.malloc_bytes / MIB, "o-" if len(s.malloc_epoch) < 50 else "-", ms=3,
                label="malloc in use")
    if len(s.traced_epoch):
        ax.plot(s.traced_epoch, s.traced_bytes / MIB, "o-", ms=3, label="tracemalloc traced")
    ax.set(title="Memory over epochs", xlabel="epoch", ylabel="MiB")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def memory_in_time(s):
    """s: analysis.EpochSeries: the RSS read inside the epochs, over the run's time (a run of few
    long epochs, whose per-epoch readings are a point or two)."""
    fig, ax = plt.subplots(figsize=(9, 3.5))
    style = "o-" if len(s.rss_t_s) < 50 else "-"
    ax.plot(s.rss_t_s, s.rss_read_bytes / MIB, style, ms=3, label="process RSS, read inside the epochs")
    ax.plot(s.rss_t_s, (s.rss_read_bytes - s.rss_shared_bytes) / MIB, style, ms=3,
            label="anonymous (RSS less shared pages: mapped files)")
    ax.set(title="Memory through the epochs", xlabel="seconds since the run began", ylabel="MiB")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def top_sites(sites, n=10):
    sites = sites[:n]
    fig, ax = plt.subplots(figsize=(9, 0.45 * max(len(sites), 1) + 1.2))
    if sites:
        labels = [_short(x.site) + f"  [{x.kind}]" for x in sites][::-1]
        ax.barh(labels, [x.size_diff / MIB for x in sites][::-1], color="#d7301f")
    else:
        ax.text(0.5, 0.5, "no traced growth (run with --tracemalloc on or auto)", ha="center", va="center",
                transform=ax.transAxes)
    ax.set(title="Lines whose memory grew most over the traced epochs", xlabel="MiB grown")
    ax.tick_params(axis="y", labelsize=8)
    fig.tight_layout()
    return fig


def ops_by_run(comparison, n=12):
    rows = comparison.rows[:n][::-1]
    fig, ax = plt.subplots(figsize=(9, 0.5 * max(len(rows), 1) + 1.5))
    y = range(len(rows))
    ax.barh([i + 0.2 for i in y], [(r.a_s or 0.0) * 1e3 for r in rows], height=0.4, label=comparison.a.label)
    ax.barh([i - 0.2 for i in y], [(r.b_s or 0.0) * 1e3 for r in rows], height=0.4, label=comparison.b.label)
    ax.set_yticks(list(y), [text.op_label(r.op, r.tags) + ("" if r.only_in is None else " (one run only)")
                            for r in rows], fontsize=8)
    ax.set(title="Time per epoch by op", xlabel="ms per epoch (median)")
    ax.legend(fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def scaling(result):
    xs = [r.max_epochs for r in result.rows]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.plot(xs, [r.median_epoch_s * 1e3 for r in result.rows], "o-", label="median epoch time")
    title = "Epoch time against max_epochs (same epochs run)" + (f"\n{result.label}" if result.label else "")
    ax.set(xscale="log", title=title, xlabel="max_epochs",
           ylabel="ms per epoch")
    ax.set_ylim(bottom=0)
    share = ax.twinx()
    share.plot(xs, [100 * r.gc_share for r in result.rows], "s--", color="#d7301f", label="GC share")
    share.set_ylabel("GC share of epoch time (%)")
    share.set_ylim(0, 100)
    lines = ax.get_legend_handles_labels()[0] + share.get_legend_handles_labels()[0]
    ax.legend(lines, [l_.get_label() for l_ in lines], loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def save(fig, path):
    """PNG or SVG by extension; closes the figure."""
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
