"""The ``--html`` report: one self-contained file with inline SVG charts (no script, no CDN).

Per session: request size per turn against the trigger and the window; cache hits vs misses
per turn (one small chart per policy); cumulative cost per policy. Then the totals table.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from ctxfold.replay.report_text import COLUMNS
from ctxfold.replay.runner import PolicyResult, SessionResult, totals

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
           "#17becf", "#7f7f7f", "#bcbd22")
W, H, PAD = 760, 260, 48

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#222;
max-width:1100px}
h1{font-size:22px}h2{font-size:18px;margin-top:36px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}
.best{background:#dff5df;font-weight:bold}.failed{color:#b00}
.small{display:inline-block;margin:4px}svg{background:#fff}
.legend span{display:inline-block;margin-right:14px;font-size:13px}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _axes(ymax: float, xmax: float, title: str, w: int, h: int) -> list[str]:
    out = [f'<svg width="{w}" height="{h}" '
           f'viewBox="0 0 {w} {h}" role="img" aria-label="{_e(title)}">',
           f'<text x="{PAD}" y="16" font-size="13" font-weight="bold">{_e(title)}</text>',
           f'<line x1="{PAD}" y1="{h - PAD}" x2="{w - 10}" y2="{h - PAD}" stroke="#888"/>',
           f'<line x1="{PAD}" y1="24" x2="{PAD}" y2="{h - PAD}" stroke="#888"/>']
    for k in range(5):
        value = ymax * k / 4
        y = h - PAD - (h - PAD - 24) * k / 4
        label = f"{value:,.0f}" if ymax >= 10 else f"{value:.3f}"
        out.append(f'<text x="{PAD - 4}" y="{y + 4:.1f}" font-size="10" '
                   f'text-anchor="end">{label}</text>')
    out.append(f'<text x="{w - 10}" y="{h - PAD + 16}" font-size="10" text-anchor="end">'
               f'turn (max {int(xmax)})</text>')
    return out


def _xy(x: float, y: float, xmax: float, ymax: float, w: int, h: int) -> tuple[float, float]:
    px = PAD + (w - PAD - 10) * (x / xmax if xmax else 0)
    py = h - PAD - (h - PAD - 24) * (y / ymax if ymax else 0)
    return px, py


def line_chart(series: dict[str, list[tuple[float, float]]], title: str,
               hlines: Sequence[tuple[str, float]] = (), w: int = W, h: int = H) -> str:
    """An inline SVG line chart; ``hlines`` are labelled horizontal reference lines."""
    points = [p for values in series.values() for p in values]
    xmax = max((x for x, _ in points), default=1) or 1
    ymax = max([y for _, y in points] + [v for _, v in hlines] + [1e-9]) * 1.05
    out = _axes(ymax, xmax, title, w, h)
    for label, value in hlines:
        _, y = _xy(0, value, xmax, ymax, w, h)
        out.append(f'<line x1="{PAD}" y1="{y:.1f}" x2="{w - 10}" y2="{y:.1f}" stroke="#555" '
                   f'stroke-dasharray="5,4"/><text x="{w - 12}" y="{y - 3:.1f}" font-size="10" '
                   f'text-anchor="end">{_e(label)} {value:,.0f}</text>')
    for i, (name, values) in enumerate(series.items()):
        if not values:
            continue
        path = " ".join(f"{px:.1f},{py:.1f}" for px, py in
                        (_xy(x, y, xmax, ymax, w, h) for x, y in values))
        out.append(f'<polyline fill="none" stroke="{PALETTE[i % len(PALETTE)]}" '
                   f'stroke-width="1.5" points="{path}"><title>{_e(name)}</title></polyline>')
    out.append("</svg>")
    return "".join(out)


def stacked_bars(hits: list[float], misses: list[float], title: str, w: int = 360,
                 h: int = 170) -> str:
    """Inline SVG: per turn a bar of cache hits (green) under cache misses (red)."""
    n = max(len(hits), 1)
    ymax = max([a + b for a, b in zip(hits, misses, strict=True)] + [1]) * 1.05
    out = _axes(ymax, n, title, w, h)
    bw = (w - PAD - 10) / n
    for i, (hit, miss) in enumerate(zip(hits, misses, strict=True)):
        x = PAD + i * bw
        _, y_hit = _xy(0, hit, n, ymax, w, h)
        _, y_all = _xy(0, hit + miss, n, ymax, w, h)
        base = h - PAD
        out.append(f'<rect x="{x:.1f}" y="{y_hit:.1f}" width="{max(bw, 0.5):.2f}" '
                   f'height="{base - y_hit:.1f}" fill="#2ca02c"/>')
        out.append(f'<rect x="{x:.1f}" y="{y_all:.1f}" width="{max(bw, 0.5):.2f}" '
                   f'height="{y_hit - y_all:.1f}" fill="#d62728"/>')
    out.append("</svg>")
    return "".join(out)


def _legend(names: Sequence[str]) -> str:
    return '<div class="legend">' + "".join(
        f'<span><b style="color:{PALETTE[i % len(PALETTE)]}">&#9632;</b> {_e(n)}</span>'
        for i, n in enumerate(names)) + "</div>"


def _table(results: dict[str, PolicyResult]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h, *_ in COLUMNS)
    rows = []
    for name, r in results.items():
        cells = []
        for _h, get, fmt, lower in COLUMNS:
            values = [get(o) for o in results.values() if not o.failed]
            best = (min(values) if lower else max(values)) if values and lower is not None \
                else None
            cls = ' class="best"' if best is not None and get(r) == best and not r.failed else ""
            cells.append(f"<td{cls}>{_e(fmt(get(r)))}</td>")
        failed = f'<td class="failed" title="{_e(r.failure)}">FAILED</td>' if r.failed \
            else "<td>no</td>"
        rows.append(f"<tr><td>{_e(name)}</td>{''.join(cells)}{failed}</tr>")
    return f"<table><tr><th>policy</th>{head}<th>failed</th></tr>{''.join(rows)}</table>"


def _session(s: SessionResult, window: int) -> str:
    names = list(s.policies)
    sizes: dict[str, list[tuple[float, float]]] = {
        n: [(float(t.index), float(t.prompt_tokens)) for t in r.turns]
        for n, r in s.policies.items()
    }
    costs: dict[str, list[tuple[float, float]]] = {}
    for n, r in s.policies.items():
        total = 0.0
        pts: list[tuple[float, float]] = []
        for t in r.turns:
            total += t.cost_usd
            pts.append((float(t.index), total))
        costs[n] = pts
    bars = "".join(
        f'<div class="small">{stacked_bars([t.hit_tokens for t in r.turns], [t.miss_tokens for t in r.turns], f"{n}: hits (green) / misses (red)")}</div>'  # noqa: E501
        for n, r in s.policies.items())
    return (f"<h2>{_e(s.name)}</h2><p>{s.messages} messages, {s.requests} recorded requests; "
            f"floor cost ${s.floor_cost_usd:.4f}</p>{_table(s.policies)}{_legend(names)}"
            + line_chart(sizes, "request size (tokens) per turn",
                         [("trigger", s.trigger), ("window", window)])
            + line_chart(costs, "cumulative cost (USD)") + f"<div>{bars}</div>")


def report_html(sessions: Sequence[SessionResult], *, profile: str, window: int) -> str:
    """The whole report as one self-contained HTML document."""
    floor = sum(s.floor_cost_usd for s in sessions)
    body = "".join(_session(s, window) for s in sessions)
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>ctxfold replay</title><style>{_CSS}</style></head><body>"
            f"<h1>ctxfold replay — profile {_e(profile)}, window {window:,}</h1>"
            f"<h2>Totals ({len(sessions)} session(s))</h2>{_table(totals(sessions))}"
            f"<p>Floor (every token a miss once, every resend a hit): ${floor:.4f}. "
            f"Green cells are the best of each column among policies that did not fail.</p>"
            f"{body}</body></html>\n")
