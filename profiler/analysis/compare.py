"""compare(run_a, run_b) -> Comparison: two runs op by op, with a what-if for every op.

Typically the same model in NCHW and NHWC. Ops are matched by name; their tags (the layout) tell
the runs apart. The what-if is the arithmetic the second seed's reporter did by hand: if op X in
run A ran at its speed in run B, A's epoch would take (A's epoch - X in A + X in B).
"""

from dataclasses import asdict, dataclass, field

import numpy as np

from .. import rundir
from . import stats


@dataclass
class Comparison:
    a: dict          # {"run_dir", "label", "epoch_s", "ops_s"}
    b: dict
    ratio: float     # A's epoch time / B's
    rows: list = field(default_factory=list)
    verdict: str = ""

    def to_dict(self):
        return asdict(self)


def _label(run):
    meta = run.meta.get("meta", {})
    return meta.get("label") or meta.get("layout") or run.path.name


def _profile(run_dir):
    run = rundir.read_run(run_dir)
    if not run.epochs:
        raise rundir.RunDirError(f"{run.path} has no finished epochs to compare")
    records = run.epochs[stats.warmup(len(run.epochs)):]
    ops = {}
    for key in sorted({k for r in records for k in r.get("ops", {})}):
        name, _, tag = key.partition("[")
        series = [r.get("ops", {}).get(key, {}).get("total_s", 0.0) for r in records]
        entry = ops.setdefault(name, {"s": 0.0, "tags": []})
        entry["s"] += float(np.median(series))
        entry["tags"].append(tag.rstrip("]"))
    return {"run_dir": str(run.path), "label": _label(run),
            "epoch_s": float(np.median([r["wall_s"] for r in records])), "ops": ops}


def compare(run_a, run_b):
    a, b = _profile(run_a), _profile(run_b)
    if a["label"] == b["label"]:
        a["label"], b["label"] = f"A ({a['label']})", f"B ({b['label']})"
    rows = []
    for name in sorted(set(a["ops"]) | set(b["ops"])):
        sa = a["ops"].get(name, {"s": 0.0})["s"]
        sb = b["ops"].get(name, {"s": 0.0})["s"]
        rows.append({
            "op": name, "a_s": sa, "b_s": sb, "ratio": sa / sb if sb > 0 else float("inf") if sa > 0 else 1.0,
            "a_share": sa / a["epoch_s"], "b_share": sb / b["epoch_s"],
            "a_if_b_speed_s": a["epoch_s"] - sa + sb,    # A's epoch if this op ran at B's speed
            "b_if_a_speed_s": b["epoch_s"] - sb + sa,
        })
    rows.sort(key=lambda r: -abs(r["a_s"] - r["b_s"]))
    for side in (a, b):
        side["ops_s"] = {k: v["s"] for k, v in side.pop("ops").items()}
    comparison = Comparison(a=a, b=b, ratio=a["epoch_s"] / b["epoch_s"], rows=rows)
    comparison.verdict = _verdict(comparison)
    return comparison


def _verdict(c):
    a, b = c.a, c.b
    slow, fast = (a, b) if a["epoch_s"] >= b["epoch_s"] else (b, a)
    key = "a_if_b_speed_s" if slow is a else "b_if_a_speed_s"
    text = (f"{slow['label']} takes {slow['epoch_s'] * 1e3:.1f} ms per epoch, {fast['label']} "
            f"{fast['epoch_s'] * 1e3:.1f} ms ({slow['epoch_s'] / fast['epoch_s']:.2f}x).")
    gains = sorted(c.rows, key=lambda r: r[key])
    best = [r for r in gains if r[key] < slow["epoch_s"]][:2]
    for r in best:
        what_if = r[key]
        s_slow = r["a_s"] if slow is a else r["b_s"]
        s_fast = r["b_s"] if slow is a else r["a_s"]
        text += (f" If {r['op']} in {slow['label']} ran at its {fast['label']} speed ({s_slow * 1e3:.2f} -> "
                 f"{s_fast * 1e3:.2f} ms per epoch), the {slow['label']} epoch would take {what_if * 1e3:.1f} ms "
                 f"instead of {slow['epoch_s'] * 1e3:.1f} ms ({100 * (what_if / slow['epoch_s'] - 1):+.1f}%).")
    if not best:
        text += " No op is faster in the faster run; the difference is outside the timed ops."
    return text
