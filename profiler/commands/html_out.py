"""Write an HTML page next to a command's text output."""

import sys
from pathlib import Path


def write_html(path, **sections):
    from ..report import html
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(html.render(**sections), encoding="utf-8")
    print(f"wrote {path}", file=sys.stderr)
