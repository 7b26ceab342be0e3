"""The rank x step heatmap of a multi-rank run: how far each rank was behind the median rank at
each step, with its generation-2 collections marked."""

import numpy as np

from .figures import plt


def heatmap(h, straggler=None):
    """h: analysis.ranks.RankHeatmap; straggler: the rank to point at, if any."""
    ranks, bins = h.stall_s.shape
    fig, ax = plt.subplots(figsize=(9, min(2.4 + 0.3 * ranks, 8)))
    ms = h.stall_s * 1e3
    top = float(np.quantile(ms, 0.99)) if ms.size else 0.0   # a few huge pauses would wash the rest out
    image = ax.imshow(ms, aspect="auto", cmap="magma_r", interpolation="nearest",
                      extent=(h.edges[0], h.edges[-1], ranks - 0.5, -0.5), vmin=0, vmax=max(top, 1e-3))
    marked, cols = np.nonzero(h.gc2)
    centres = (h.edges[:-1] + h.edges[1:]) / 2
    ax.scatter(centres[cols], marked, marker="|", s=60, color="#08519c", label="generation-2 collection")
    per_bin = max(1, round((h.edges[-1] - h.edges[0]) / bins))
    ax.set(title=f"How far each rank was behind the median rank, per {h.unit}"
                 + (f" (the most in each {per_bin:,} {h.unit}s)" if per_bin > 1 else ""),
           xlabel=f"{h.unit} (aligned across ranks)", ylabel="rank")
    rows = list(range(ranks)) if ranks <= 32 else list(np.linspace(0, ranks - 1, 9).astype(int))
    if straggler in h.ranks and h.ranks.index(straggler) not in rows:
        rows = sorted(rows + [h.ranks.index(straggler)])
    ax.set_yticks(rows, [f"{h.ranks[r]} straggler" if h.ranks[r] == straggler else str(h.ranks[r]) for r in rows])
    if len(marked):
        ax.legend(loc="upper left", fontsize=8, framealpha=0.8)
    fig.colorbar(image, ax=ax, label="ms behind the median rank",
                 extend="max" if ms.max(initial=0) > top else "neither")
    fig.tight_layout()
    return fig
