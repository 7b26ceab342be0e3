"""One self-contained HTML page: the verdicts first, then figures (embedded PNG), tables, metadata."""

import base64
import html
import io
import json

from . import figures


def _img(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    figures.plt.close(fig)
    return f'<img alt="figure" src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">'


def _table(header, rows):
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


_STYLE = """body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;color:#222;padding:0 1em}
.verdict{font-size:1.1em;background:#f4f8fb;border-left:5px solid #3182bd;padding:.8em 1em}
.cause{display:inline-block;padding:.1em .6em;border-radius:3px;background:#3182bd;color:#fff}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}img{max-width:100%}pre{background:#f6f6f6;padding:.6em;font-size:.8em}"""


def _diagnosis_section(d, s):
    parts = [f"<h2>Run {html.escape(d.run_dir)}</h2>",
             f"<p><span class=cause>{d.primary_cause}</span> {d.epochs} epochs, status {html.escape(d.status)}"
             f"{'' if d.complete else ' (incomplete)'}</p>",
             f"<p class=verdict>{html.escape(d.verdict)}</p>",
             _img(figures.epoch_time(s)), _img(figures.memory(s))]
    if d.allocation["top_sites"]:
        parts.append(_img(figures.top_sites(d.allocation["top_sites"])))
        parts.append(_table(["site", "KiB grown", "blocks", "kind"],
                            [[x["site"], f"{x['size_diff'] / 1024:.1f}", x["count_diff"], x["kind"]]
                             for x in d.allocation["top_sites"]]))
    if d.ops:
        parts.append("<h3>Ops (ms per epoch)</h3>")
        parts.append(_table(["op", "early", "late", "calls/epoch"],
                            [[o["op"], f"{o['early_s'] * 1e3:.2f}", f"{o['late_s'] * 1e3:.2f}",
                              f"{o['calls_per_epoch']:.0f}"] for o in sorted(d.ops, key=lambda o: -o["late_s"])]))
    return "\n".join(parts)


def _comparison_section(c):
    rows = [[r["op"], f"{r['a_s'] * 1e3:.2f}", f"{r['b_s'] * 1e3:.2f}", f"{r['ratio']:.2f}",
             f"{100 * r['a_share']:.1f}%", f"{100 * r['b_share']:.1f}%",
             f"{r['a_if_b_speed_s'] * 1e3:.1f} ({100 * (r['a_if_b_speed_s'] / c.a['epoch_s'] - 1):+.1f}%)"]
            for r in c.rows]
    return "\n".join([
        f"<h2>{html.escape(c.a['label'])} vs {html.escape(c.b['label'])}</h2>",
        f"<p class=verdict>{html.escape(c.verdict)}</p>", _img(figures.ops_by_run(c)),
        _table(["op", f"{c.a['label']} ms", f"{c.b['label']} ms", "ratio", "share A", "share B",
                f"{c.a['label']} epoch at {c.b['label']} speed, ms"], rows)])


def _scaling_section(sc):
    return "\n".join([
        f"<h2>Epoch time against max_epochs{': ' + html.escape(sc.label) if sc.label else ''}</h2>",
        f"<p class=verdict>{html.escape(sc.verdict)}</p>",
        _img(figures.scaling(sc)),
        _table(["max_epochs", "epochs run", "median ms", "GC share"],
               [[f"{r['max_epochs']:,}", r["epochs"], f"{r['median_epoch_s'] * 1e3:.2f}",
                 f"{100 * r['gc_share']:.1f}%"] for r in sc.rows])])


def render(*, title="profiler report", diagnoses=(), comparisons=(), scalings=(), meta=None):
    """diagnoses: [(Diagnosis, series)], comparisons: [Comparison], scalings: [Scaling]."""
    summary = [f"<li><b>{html.escape(d.run_dir)}</b>: {html.escape(d.verdict)}</li>" for d, _ in diagnoses]
    summary += [f"<li>{html.escape(c.verdict)}</li>" for c in comparisons]
    summary += [f"<li>{html.escape(s.verdict)}</li>" for s in scalings]
    body = [f"<h1>{html.escape(title)}</h1>", "<h2>Verdicts</h2>", "<ul>" + "".join(summary) + "</ul>"]
    body += [_scaling_section(s) for s in scalings]
    body += [_comparison_section(c) for c in comparisons]
    body += [_diagnosis_section(d, s) for d, s in diagnoses]
    if meta:
        body.append("<h2>Run metadata</h2><pre>" + html.escape(json.dumps(meta, indent=2, default=str)) + "</pre>")
    return (f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body>{''.join(body)}</body></html>")
