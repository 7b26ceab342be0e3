"""Flamegraphs from py-spy's collapsed stacks (capture/pyspy.py records them): draw one as SVG,
or diff two.

A flamegraph is nested rectangles with tooltips. The differential graph is drawn with B's widths
and coloured by each frame's change in share of samples from A to B: red grew, blue shrank.
"""

import html
import os
import zlib
from pathlib import Path

from ..errors import FlamegraphError, RunWriteError
from ..replaced import replaced


def read_folded(path):
    """{stack tuple (root first): samples} from a collapsed-stacks file. py-spy writes samples
    taken with no Python frame on the stack (native code, e.g. numba compiling) as ' N'. It
    sometimes breaks a line with a stray newline inside a frame (py-spy issue #772: '...lib/pyth'
    then 'on3.10/...'): a line without a count is the head of the next one and is joined to it."""
    stacks, head, first = {}, "", None
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").split("\n")
    except OSError as e:   # a directory, a file we may not read
        raise FlamegraphError(f"cannot read {path}: {e.strerror or e}") from e
    for number, line in enumerate(lines, 1):
        line = head + line.rstrip("\r")
        if not line.strip():
            continue
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            head, first = line, first or number
            continue
        key = tuple(stack.split(";")) if stack else ("(no Python frames)",)
        stacks[key] = stacks.get(key, 0) + int(count)
        head, first = "", None
    if head:
        raise FlamegraphError(f"{path} line {first} is not 'frame;frame;... count'")
    if not stacks:
        raise FlamegraphError(f"{path} holds no samples (did the command run long enough to be sampled?)")
    return stacks


def _tree(stacks):
    root = {"n": 0, "kids": {}}
    for stack, count in stacks.items():
        node = root
        node["n"] += count
        for frame in stack:
            node = node["kids"].setdefault(frame, {"n": 0, "kids": {}})
            node["n"] += count
    return root


def _share_by_path(stacks):
    """{frame path prefix: share of all samples} for diff colouring."""
    total = sum(stacks.values())
    shares = {}
    for stack, count in stacks.items():
        for i in range(1, len(stack) + 1):
            shares[stack[:i]] = shares.get(stack[:i], 0.0) + count / total
    return shares


def _warm(name):
    h = zlib.crc32(name.encode())
    return f"rgb({205 + h % 50},{(h >> 8) % 150 + 50},{(h >> 16) % 55})"


def _diff_color(delta, scale):
    t = min(abs(delta) / scale, 1.0) if scale > 0 else 0.0
    fade = int(255 - 190 * t)
    return f"rgb(255,{fade},{fade})" if delta > 0 else f"rgb({fade},{fade},255)"


def render_svg(stacks, *, title, baseline=None, width=1200, row=17):
    """SVG text. With `baseline` (stacks of the 'before' run) frames are coloured by change."""
    root = _tree(stacks)
    shares = _share_by_path(stacks)
    base = _share_by_path(baseline) if baseline is not None else None
    deltas = {p: s - base.get(p, 0.0) for p, s in shares.items()} if base is not None else {}
    scale = max((abs(d) for d in deltas.values()), default=0.0)

    rects, depth_max = [], 0

    def walk(node, path, x, depth):
        nonlocal depth_max
        depth_max = max(depth_max, depth)
        for name, kid in sorted(node["kids"].items()):
            w = kid["n"] / root["n"] * width
            p = path + (name,)
            if w >= 0.3:
                rects.append((x, depth, w, name, kid["n"], p))
                walk(kid, p, x, depth + 1)
            x += w

    walk(root, (), 0.0, 0)
    height = (depth_max + 1) * row + 50
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="monospace" font-size="11">',
           '<rect width="100%" height="100%" fill="#fafafa"/>',
           f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="15">{html.escape(title)}</text>']
    for x, depth, w, name, n, p in rects:
        y = height - (depth + 1) * row - 10
        pct = 100 * n / root["n"]
        if base is not None:
            fill = _diff_color(deltas.get(p, 0.0), scale)
            tip = f"{name}: {n} samples, {pct:.2f}% ({100 * deltas.get(p, 0.0):+.2f} points vs baseline)"
        else:
            fill, tip = _warm(name), f"{name}: {n} samples, {pct:.2f}%"
        label = name if len(name) * 6.5 < w - 4 else (name[:int((w - 4) / 6.5) - 2] + ".." if w > 30 else "")
        out.append(f'<g><title>{html.escape(tip)}</title><rect x="{x:.1f}" y="{y}" width="{max(w - 0.5, 0.1):.1f}" '
                   f'height="{row - 1}" fill="{fill}" rx="2"/>'
                   f'<text x="{x + 3:.1f}" y="{y + row - 5}">{html.escape(label)}</text></g>')
    out.append("</svg>")
    return "\n".join(out)


def write_svg(stacks, svg_path, **kwargs):
    svg_path = Path(svg_path)
    page = render_svg(stacks, **kwargs)
    try:
        svg_path.parent.mkdir(parents=True, exist_ok=True)
        with replaced(svg_path) as target:   # an earlier graph stays until this one is written whole
            target.write_text(page, encoding="utf-8")
    except OSError as e:
        raise RunWriteError(f"cannot write the flamegraph to {svg_path}: {e.strerror or e}") from e
    return svg_path


def diff(folded_a, folded_b, svg_path):
    """A differential flamegraph of B against A (red: share grew in B; blue: shrank)."""
    a, b = read_folded(folded_a), read_folded(folded_b)
    title = f"{os.path.basename(str(folded_b))} vs {os.path.basename(str(folded_a))}: red grew, blue shrank"
    return write_svg(b, svg_path, title=title, baseline=a)
