"""The ``--html`` report: one self-contained file, charts as inline SVG drawn by pygal (no
script, no network).

It leads with the headline (ctxfold against its nearest peer) and cost × continuation-fact
retention with the Pareto front (colour = policy); then the totals table, the cost breakdown
per policy as stacked bars on one scale (colour = cost part). Per session: request size per
request number against the trigger and the input budget, continuation-fact retention per
request, cumulative cost (the
scale ends a quarter above the dearest policy on the Pareto front, so cheap policies stay
apart; lines that leave it say where), and cache hits/misses per request for each policy on
one shared scale. A policy has one colour in every chart; titles and legends are HTML, so no
chart clips them; *request* is the session's main-request number everywhere.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ctxfold.replay.billing import BREAKDOWN
from ctxfold.replay.report_text import (
    COLUMNS,
    PARTS,
    cheapest_note,
    cost_points,
    headline,
    paired_costs,
    paired_text,
    pareto_front,
)
from ctxfold.replay.results import Paired, PolicyResult, SessionResult, paired, totals

POLICY_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                  "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39")
PART_COLOURS = {"main_hit_usd": "#2ca02c", "main_miss_usd": "#d62728",
                "main_output_usd": "#1f77b4", "summary_input_usd": "#9467bd",
                "summary_output_usd": "#bcbd22"}
HIT, MISS = "#2ca02c", "#d62728"

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#222;
max-width:1180px}
h1{font-size:22px}h2{font-size:18px;margin-top:36px;border-bottom:1px solid #ddd}
h3{font-size:14px;margin:18px 0 4px}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}
.best{background:#dff5df;font-weight:bold}.failed{color:#b00}.note{max-width:900px}
.small{display:inline-block;width:370px;margin:2px;vertical-align:top}
.small h3{font-weight:normal}
.legend{font-size:12px;margin:0 0 8px 60px}.key{margin-right:16px;white-space:nowrap}
.swatch{display:inline-block;width:16px;margin-right:4px;vertical-align:middle}
"""
_SCRIPT = re.compile(r"<script.*?</script>|<!--.*?-->", re.S)


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _svg(chart: Any) -> str:
    return _SCRIPT.sub("", chart.render(is_unicode=True))


def _config(**kwargs: Any) -> dict[str, Any]:
    from pygal.style import Style

    colours = kwargs.pop("colours", POLICY_COLOURS)
    style = Style(colors=tuple(colours), background="white", plot_background="white",
                  font_family="system-ui, sans-serif", label_font_size=11,
                  major_label_font_size=11, legend_font_size=11, title_font_size=12)
    base = {"js": [], "disable_xml_declaration": True, "style": style, "width": 1100,
            "height": 320, "show_legend": False, "print_values": False, "show_dots": False}
    return {**base, **kwargs}


def colour_map(names: Sequence[str]) -> dict[str, str]:
    """One colour per policy, the same in every chart of the report."""
    return {n: POLICY_COLOURS[i % len(POLICY_COLOURS)] for i, n in enumerate(sorted(names))}


def legend(entries: Mapping[str, str], dashed: Sequence[str] = ()) -> str:
    """An HTML legend (label → colour); ``dashed`` labels are reference lines."""
    items = []
    for label, colour in entries.items():
        mark = (f"border-top:2px dashed {colour};height:0" if label in dashed
                else f"background:{colour};height:10px")
        items.append(f'<span class="key"><span class="swatch" style="{mark}"></span>'
                     f"{_e(label)}</span>")
    return f'<div class="legend">{"".join(items)}</div>'


def breakdown_chart(results: Mapping[str, PolicyResult]) -> str:
    import pygal

    chart = pygal.HorizontalStackedBar(**_config(colours=PART_COLOURS.values(),
                                                 height=70 + 34 * len(results), x_title="USD"))
    # A failed policy's bar covers only the part of its run before the overflow.
    chart.x_labels = [f"{n} (partial)" if r.failed else n for n, r in results.items()]
    for key in BREAKDOWN:
        chart.add(PARTS[key][0], [getattr(r.breakdown, key) for r in results.values()])
    return _svg(chart) + legend({PARTS[k][0]: PART_COLOURS[k] for k in BREAKDOWN})


def cost_fidelity_chart(results: Mapping[str, PolicyResult], colours: Mapping[str, str],
                        costs: Mapping[str, float] | None = None, x_title: str = "cost USD",
                        ) -> str:
    """Each policy's cost (``costs``, default its total) against its fidelity, with the Pareto
    front of those points."""
    import pygal

    points = cost_points(results, costs)
    front = sorted(points[n] for n in pareto_front(results, costs))
    xmax = max((x for x, _ in points.values()), default=1.0) * 1.1 or 1.0
    chart = pygal.XY(**_config(colours=[*(colours[n] for n in points), "#444444"],
                               stroke=False, show_dots=True, dots_size=6, height=380,
                               x_title=x_title,
                               y_title="continuation facts retained (independent)",
                               range=(0, 1), xrange=(0, xmax),
                               value_formatter=lambda v: f"{v:.0%}",
                               x_value_formatter=lambda v: f"{v:.2f}"))
    for name, point in points.items():
        chart.add(name, [point])
    entries = {(f"{n} (partial)" if results[n].failed else n): colours[n] for n in points}
    if len(front) > 1:
        chart.add("Pareto front", front, stroke=True, show_dots=False,
                  stroke_style={"dasharray": "6,4", "width": 1.5})
        entries["Pareto front"] = "#444444"
    return _svg(chart) + legend(entries, dashed=["Pareto front"])


Points = list[tuple[float, float]]
REFERENCE_COLOURS = ("#444444", "#999999")


def _lines(series: Mapping[str, Points], colours: Mapping[str, str],
           hlines: Mapping[str, float] | None = None, **kwargs: Any) -> str:
    """One line per policy (its report colour) and dashed reference lines, one scale."""
    import pygal

    hlines = hlines or {}
    refs = dict(zip(hlines, REFERENCE_COLOURS, strict=False))
    chart = pygal.XY(**_config(colours=[*(colours[n] for n in series), *refs.values()],
                               x_title="request", **kwargs))
    for name, points in series.items():
        chart.add(name, points)
    xmax = max((x for pts in series.values() for x, _ in pts if x is not None), default=1)
    for label, value in hlines.items():
        chart.add(label, [(1, value), (xmax, value)], stroke_style={"dasharray": "6,4"})
    entries = {n: colours[n] for n in series} | refs
    return _svg(chart) + legend(entries, dashed=list(refs))


def capped(series: Mapping[str, Points], cap: float) -> tuple[dict[str, Points], dict[str, str]]:
    """Each line cut where it leaves ``cap`` (the rest would only flatten the others), and a
    label saying where it left."""
    out: dict[str, Points] = {}
    labels = {}
    for name, points in series.items():
        kept = [p for p in points if p[1] <= cap]
        out[name] = kept
        if len(kept) < len(points):
            left = points[len(kept)][0] if len(kept) < len(points) else 0
            labels[name] = f"{name} (off the scale after request {int(left) - 1})"
    return out, labels


def round_step(n: int) -> int:
    """A round label step for ``n`` categories (about six labels)."""
    for step in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000):
        if n / step <= 8:
            return step
    return max(1, n // 6)


def hit_miss_chart(r: PolicyResult, ymax: float) -> str:
    import pygal

    step = round_step(len(r.records))
    # Every bar gets its request number, only round ones are shown: pygal otherwise squeezes
    # all labels into the bar width and truncates each to "…".
    chart = pygal.StackedBar(**_config(colours=(HIT, MISS), width=370, height=200,
                                       range=(0, ymax), x_title="request", truncate_label=-1,
                                       x_labels_major=[str(rec.number) for rec in r.records
                                                       if rec.number % step == 0],
                                       show_minor_x_labels=False))
    chart.x_labels = [str(rec.number) for rec in r.records]
    chart.add("cache hits", [rec.hit_tokens for rec in r.records])
    chart.add("cache misses", [rec.miss_tokens for rec in r.records])
    return _svg(chart)


def _table(results: Mapping[str, PolicyResult], vs: Mapping[str, Paired] | None = None,
           costs: Mapping[str, float] | None = None) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h, *_ in COLUMNS)
    if vs is not None:
        head += "<th>vs ctxfold</th>"
    front = pareto_front(results, costs)
    rows = []
    for name, r in results.items():
        cells = []
        for _h, get, fmt, lower in COLUMNS:
            values = [get(o) for o in results.values() if not o.failed and get(o) is not None]
            best = (min(values) if lower else max(values)) if values and lower is not None \
                else None
            cls = ' class="best"' if best is not None and get(r) == best and not r.failed else ""
            cells.append(f"<td{cls}>{_e(fmt(get(r)))}</td>")
        failed = f'<td class="failed" title="{_e(r.failure)}">FAILED</td>' if r.failed \
            else "<td>no</td>"
        if vs is not None:
            cells.append(f"<td>{_e(paired_text(vs.get(name)))}</td>")
        label = f"{name} ◆" if name in front else name
        rows.append(f"<tr><td>{_e(label)}</td>{''.join(cells)}{failed}</tr>")
    return f"<table><tr><th>policy</th>{head}<th>failed</th></tr>{''.join(rows)}</table>"


def _failures(results: Mapping[str, PolicyResult]) -> str:
    items = "".join(f"<li><b>{_e(n)}</b>: {_e(r.failure or 'failed (see its sessions)')}</li>"
                    for n, r in results.items() if r.failed)
    return f"<ul class='failed'>{items}</ul>" if items else ""


def _session(s: SessionResult, budget: int, colours: Mapping[str, str]) -> str:
    sizes: dict[str, Points] = {n: [(rec.number, rec.prompt_tokens) for rec in r.records]
                                for n, r in s.policies.items()}
    fidelity: dict[str, Points] = {
        n: [(rec.number, rec.retention.facts_kept / rec.retention.facts_due)
            for rec in r.records if rec.retention.facts_due] for n, r in s.policies.items()}
    costs: dict[str, Points] = {}
    for n, r in s.policies.items():
        total = 0.0
        points: Points = []
        for rec in r.records:
            total += rec.cost_usd
            points.append((float(rec.number), total))
        costs[n] = points
    # The cost scale ends a quarter above the dearest policy on the Pareto front.
    front = pareto_front(s.policies) or set(s.policies)  # the per-session chart: USD
    cap = 1.25 * max((s.policies[n].cost_usd for n in front), default=1.0)
    shown, off = capped(costs, cap)
    ymax = max((rec.prompt_tokens for r in s.policies.values() for rec in r.records),
               default=1)
    small = "".join(f'<div class="small"><h3>{_e(n)}: cache hits (green) and misses (red) '
                    f"per request</h3>{hit_miss_chart(r, ymax)}</div>"
                    for n, r in s.policies.items())
    off_note = ("<p class='note'>" + _e("; ".join(off.values())) + ".</p>") if off else ""
    return (f"<h2>{_e(s.name)}</h2><p>{s.messages} messages, {s.requests} recorded requests, "
            f"{s.facts} facts, {s.probes} probes; unlimited ${s.unlimited_cost_usd:.4f}</p>"
            f"{_table(s.policies)}{_failures(s.policies)}"
            "<h3>Request size (tokens) per request</h3>"
            + _lines(sizes, colours, {"trigger (ctxfold)": s.trigger, "input budget": budget},
                     y_title="tokens")
            + "<h3>Continuation facts per request (share of the facts the agent used again "
              "that the request still carries)</h3>"
            + _lines(fidelity, colours, range=(0, 1), y_title="fidelity",
                     value_formatter=lambda v: f"{v:.0%}")
            + "<h3>Cumulative cost (USD; the scale ends 25% above the dearest Pareto-front "
              "policy)</h3>"
            + _lines(shown, colours, y_title="USD", range=(0, cap)) + off_note
            + f"<div>{small}</div>")


def _cost_fidelity(sessions: Sequence[SessionResult], summed: Mapping[str, PolicyResult],
                   colours: Mapping[str, str]) -> str:
    costs = paired_costs(sessions)
    if costs is None:
        return cost_fidelity_chart(summed, colours)
    return cost_fidelity_chart(summed, colours, costs,
                               "cost ÷ ctxfold's, on the sessions both completed")


def report_html(sessions: Sequence[SessionResult], *, profile: str, window: int,
                reserve_output: int = 0) -> str:
    """The whole report as one self-contained HTML document."""
    summed = totals(sessions)
    unlimited = sum(s.unlimited_cost_usd for s in sessions)
    budget = window - reserve_output
    note = cheapest_note(summed, paired(sessions))
    lead = headline(sessions)
    colours = colour_map(list(summed))
    body = "".join(_session(s, budget, colours) for s in sessions)
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>ctxfold replay</title><style>{_CSS}</style></head><body>"
            f"<h1>ctxfold replay — profile {_e(profile)}, window {window:,}, input budget "
            f"{budget:,}</h1>"
            f"<p class='note'><b>{_e(lead)}</b></p>"
            "<h3>Cost × continuation facts (up and left is better; dashed: the Pareto front)"
            "</h3>" + _cost_fidelity(sessions, summed, colours)
            + f"<h2>Totals ({len(sessions)} session(s))</h2>"
            + _table(summed, paired(sessions) if len(sessions) > 1 else None,
                     paired_costs(sessions)) +
            f"{_failures(summed)}"
            f"<p class='note'>{_e(note)}</p>"
            f"<p class='note'>Unlimited (append-only with an unlimited window and a perfect "
            f"cache: the cost of keeping everything, fidelity 100%): ${unlimited:.4f}. "
            "◆ marks the cost × fidelity Pareto front; green cells are the best of each "
            "column among policies that did not fail; <i>vs ctxfold</i> is a policy's cost "
            "divided by ctxfold's on the (n) sessions both completed. <i>continuation</i>: the "
            "facts the agent used again that the request still carried; <i>far</i>: those not "
            "in the last 20 messages; <i>needles</i>: facts seen once before (+search: with "
            "ctxfold's history search, an upper bound); <i>probes (diag.)</i>: the engine's own "
            "probes, which its summary check optimises. What the requests carry, not answer "
            "quality (docs/replay.md).</p>"
            "<h3>Cost breakdown per policy (USD, one scale)</h3>" + breakdown_chart(summed)
            + f"{body}</body></html>\n")
