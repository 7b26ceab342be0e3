"""One self-contained HTML page: the verdicts first (when it holds more than one result), then a
section per result (figures as embedded PNG, tables), then metadata. Each section is a function of
one result, so a new kind of result (ranks, say) adds a section function and passes its HTML to
render(sections=...)."""

import base64
import html
import io
import json

from . import figures, text


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


def findings_table(d):
    if not d.findings:
        return "<p>No finding.</p>"
    return _table(["finding", "cause", "share of run time", "evidence", "fix"],
                  [[f.pattern, f.cause, text.pct(f.time_fraction), text.evidence(f), text.remedy(f)]
                   for f in d.findings])


def ranks_section(ra, heatmap):
    """A multi-rank run: the time lost waiting, the rank x step heatmap, a row per rank."""
    from . import rank_figures, rank_text
    lines = rank_text.summary(ra)
    return "\n".join([
        "<h2>Ranks</h2>", "<p>" + "<br>".join(html.escape(line) for line in lines[:lines.index("")]) + "</p>",   # the table's above
        _img(rank_figures.heatmap(heatmap, ra.stragglers.rank if ra.stragglers else None)),
        _table(["rank", "host", "status", ra.unit + "s", "median", "GC share", "stalled", "cost", "RSS/epoch",
                "data wait", "own work"],
               [[r.rank, r.host or "-", r.status, r.steps if ra.unit == "step" else r.epochs, text.ms(r.median_s),
                 text.pct(r.gc_share), r.straggled, text.ms(r.stall_s), rank_text.rate(r.rss_growth_bytes_per_epoch),
                 rank_text.wait(r.data_wait_s), rank_text.wait(r.own_s)]
                for r in ra.per_rank])])


def diagnosis_section(d, s, steps=None):
    """d: Diagnosis, s: EpochSeries, steps: StepSeries or None."""
    parts = [f"<h2>Run {html.escape(d.run_dir)}</h2>",
             f"<p><span class=cause>{d.primary_cause}</span> "
             f"{text.epochs_told(d)}, status {html.escape(d.status)}"
             f"{'' if d.complete else ' (incomplete)'}</p>",
             f"<p class=verdict>{html.escape(text.verdict(d))}</p>", "<h3>Findings</h3>", findings_table(d)]
    if steps is not None:
        spikes = d.spikes if d.spikes.unit == "step" else None
        parts.append(_img(figures.step_time(steps, spikes and spikes.median_s, spikes and spikes.threshold_s)))
    parts += [_img(figures.epoch_time(s)), _img(figures.memory(s))]
    if d.allocation.rss_trend is not None:   # few epochs: their readings on the way
        parts.append(_img(figures.memory_in_time(s)))
    sites = d.allocation.top_sites
    if sites:
        parts.append(_img(figures.top_sites(sites)))
        parts.append(_table(["site", "KiB grown", "blocks", "kind"],
                            [[x.site, f"{x.size_diff / 1024:.1f}", x.count_diff, x.kind] for x in sites]))
    if d.ops:
        parts.append("<h3>Ops (ms per epoch)</h3>")
        parts.append(_table(["op", "early", "late", "calls/epoch"],
                            [[text.op_label(o.name, o.tags), f"{o.early_s * 1e3:.2f}", f"{o.late_s * 1e3:.2f}",
                              f"{o.calls_per_epoch:.0f}"] for o in sorted(d.ops, key=lambda o: -o.late_s)]))
    return "\n".join(parts)


def _ms_or_dash(seconds):
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def comparison_section(c):
    rows = [[text.op_label(r.op, r.tags), _ms_or_dash(r.a_s), _ms_or_dash(r.b_s),
             "-" if r.ratio is None else f"{r.ratio:.2f}",
             "-" if r.a_share is None else text.pct(r.a_share), "-" if r.b_share is None else text.pct(r.b_share),
             (f"only in {c.a.label if r.only_in == 'a' else c.b.label}" if r.only_in is not None else
              f"{_ms_or_dash(r.a_if_b_speed_s)} ({text.relative(r.a_if_b_speed_s, c.a.epoch_s)})"
              if c.what_ifs else "-")]
            for r in c.rows]
    return "\n".join([
        f"<h2>{html.escape(c.a.label)} vs {html.escape(c.b.label)}</h2>",
        f"<p class=verdict>{html.escape(text.comparison_verdict(c))}</p>",
        _table(["run", c.a.label, c.b.label, "ratio, or share of run time"], [list(row) for row in text.run_rows(c)]),
        _img(figures.ops_by_run(c)),
        _table(["op", f"{c.a.label} ms", f"{c.b.label} ms", "ratio", "share A", "share B",
                f"{c.a.label} epoch at {c.b.label} speed, ms"], rows)])


def scaling_section(sc):
    return "\n".join([
        f"<h2>Epoch time against max_epochs{': ' + html.escape(sc.label) if sc.label else ''}</h2>",
        f"<p class=verdict>{html.escape(text.scaling_verdict(sc))}</p>",
        _img(figures.scaling(sc)),
        _table(["max_epochs", "epochs run", "median ms", "GC share"],
               [[f"{r.max_epochs:,}", r.epochs, f"{r.median_epoch_s * 1e3:.2f}", text.pct(r.gc_share)]
                for r in sc.rows])])


def render(*, title="profiler report", diagnoses=(), comparisons=(), scalings=(), sections=(), meta=None):
    """One page. diagnoses: [(Diagnosis, EpochSeries)] or [(Diagnosis, EpochSeries, StepSeries|None)],
    comparisons: [Comparison], scalings: [Scaling]; sections: [(verdict or None, HTML)] for other
    results (e.g. ranks), placed before the runs."""
    summary = [f"<li><b>{html.escape(d[0].run_dir)}</b>: {html.escape(text.verdict(d[0]))}</li>" for d in diagnoses]
    summary += [f"<li>{html.escape(text.comparison_verdict(c))}</li>" for c in comparisons]
    summary += [f"<li>{html.escape(text.scaling_verdict(s))}</li>" for s in scalings]
    summary += [f"<li>{html.escape(v)}</li>" for v, _ in sections if v]
    body = [f"<h1>{html.escape(title)}</h1>"]
    if len(summary) > 1:   # one result's verdict leads its own section: not twice
        body += ["<h2>Verdicts</h2>", "<ul>" + "".join(summary) + "</ul>"]
    body += [scaling_section(s) for s in scalings]
    body += [comparison_section(c) for c in comparisons]
    body += [part for _, part in sections]
    body += [diagnosis_section(*d) for d in diagnoses]
    if meta:
        body.append("<h2>Run metadata</h2><pre>" + html.escape(json.dumps(meta, indent=2, default=str)) + "</pre>")
    return (f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body>{''.join(body)}</body></html>")
