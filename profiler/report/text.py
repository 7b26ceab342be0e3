"""Terminal rendering of analysis results."""

import textwrap


def _wrap(text):
    return textwrap.fill(text, width=100)


def diagnosis(d):
    et, g, a = d.epoch_time, d.gc, d.allocation
    lines = [f"run      {d.run_dir}  ({d.epochs} epochs, {d.status}{'' if d.complete else ', INCOMPLETE'})",
             f"cause    {d.primary_cause}", "", _wrap(d.verdict), "",
             f"epoch time   early {et['early_median_s'] * 1e3:9.2f} ms   late {et['late_median_s'] * 1e3:9.2f} ms"
             f"   ratio {et['ratio']:.2f}   trend {et['trend_s_per_epoch'] * 1e6:+.2f} us/epoch",
             f"GC share     early {100 * g['share_early']:8.1f} %    late {100 * g['share_late']:8.1f} %"
             f"    explains {100 * g['explained_fraction']:.0f}% of the change",
             f"memory       RSS {a['rss_growth_bytes_per_epoch'] / 1024:+.1f} KiB/epoch"
             + (f"   malloc {a['malloc_growth_bytes_per_epoch'] / 1024:+.1f} KiB/epoch"
                if a.get("malloc_growth_bytes_per_epoch") is not None else "")
             + (f"   traced {a['traced_growth_bytes_per_epoch'] / 1024:+.1f} KiB/epoch"
                if a["traced_growth_bytes_per_epoch"] is not None else "")]
    if a["top_sites"]:
        lines += ["", "growing lines (traced):"]
        lines += [f"  {s['size_diff'] / 1024:10.1f} KiB  {s['count_diff']:+8d} blocks  {s['kind']:6s}  {s['site']}"
                  for s in a["top_sites"][:5]]
    if d.ops:
        lines += ["", "ops (ms per epoch, early -> late):"]
        lines += [f"  {o['op']:34s} {o['early_s'] * 1e3:9.2f} -> {o['late_s'] * 1e3:9.2f}"
                  for o in sorted(d.ops, key=lambda o: -o["late_s"])[:8]]
    return "\n".join(lines)


def comparison(c):
    a, b = c.a["label"], c.b["label"]
    width = max(len(a), len(b), 10)
    lines = [_wrap(c.verdict), "",
             f"{'op':28s} {a:>{width}s} {b:>{width}s}   ratio   share A  share B   A's epoch at B's speed",
             f"{'epoch (ms)':28s} {c.a['epoch_s'] * 1e3:{width}.2f} {c.b['epoch_s'] * 1e3:{width}.2f}   {c.ratio:5.2f}"]
    for r in c.rows:
        lines.append(f"{r['op']:28s} {r['a_s'] * 1e3:{width}.2f} {r['b_s'] * 1e3:{width}.2f}   {r['ratio']:5.2f}"
                     f"   {100 * r['a_share']:6.1f}%  {100 * r['b_share']:6.1f}%   {r['a_if_b_speed_s'] * 1e3:9.2f} ms"
                     f" ({100 * (r['a_if_b_speed_s'] / c.a['epoch_s'] - 1):+.1f}%)")
    return "\n".join(lines)


def scaling(s):
    lines = ([s.label] if s.label else []) + [_wrap(s.verdict), "", f"{'max_epochs':>12s} {'epochs run':>10s} {'median ms':>10s} {'GC share':>9s}"]
    lines += [f"{r['max_epochs']:12,d} {r['epochs']:10d} {r['median_epoch_s'] * 1e3:10.2f} {100 * r['gc_share']:8.1f}%"
              for r in s.rows]
    return "\n".join(lines)
