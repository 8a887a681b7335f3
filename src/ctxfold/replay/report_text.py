"""The terminal report (rich): the headline — ctxfold against its nearest peer, cost beside
the independent retention — then one table per session, the totals, the cost breakdown as
stacked bars, and a note on what the cheapest policy gave up.

Columns: policy, requests, cache-hit ratio, cost, then the independent retention
(:mod:`ctxfold.replay.retention`): continuation facts over all requests, far facts, continuation
facts from the first fold on, needles in the request and with history search (an upper bound,
``–`` where the policy offers none); then the probe score (``probes (diag.)``: what the engine's
summary check optimises, so ctxfold's is partly by construction), summaries, prunes, max
request, failed. The best value of each ranked column is highlighted (bold green on a
terminal; marked ``*`` in plain text, which is what a pipe gets). A policy on the cost ×
continuation-fact Pareto front is marked ``◆``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

from ctxfold.replay.billing import BREAKDOWN
from ctxfold.replay.results import Paired, PolicyResult, SessionResult, paired, totals


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def _num(value: float | None) -> float:
    return -1.0 if value is None else value


#: (header, value getter, formatter, lower is better?) — ``None`` = not ranked.
_Column = tuple[str, Callable[[PolicyResult], Any], Callable[[Any], str], bool | None]
def continuation(r: PolicyResult) -> float | None:
    """The headline fidelity: continuation facts retained over all requests."""
    return r.retention.all.continuation


def _after(r: PolicyResult) -> float | None:
    after = r.retention.after_first_fold
    return None if after is None else after.continuation


def _searched(r: PolicyResult) -> float | None:
    return r.retention.all.needles_with_search if r.offers_search else None


COLUMNS: tuple[_Column, ...] = (
    ("requests", lambda r: r.requests, lambda v: f"{int(v):,}", None),
    ("cache hit", lambda r: r.hit_ratio, lambda v: f"{v:.1%}", False),
    ("cost USD", lambda r: r.cost_usd, lambda v: f"{v:.4f}", True),
    ("continuation", continuation, _pct, False),
    ("far", lambda r: r.retention.all.far, _pct, False),
    ("after fold", _after, _pct, False),
    ("needles", lambda r: r.retention.all.needles, _pct, False),
    ("+search", _searched, _pct, None),
    ("probes (diag.)", lambda r: r.fidelity.mean, _pct, None),
    ("summaries", lambda r: r.summaries, lambda v: f"{int(v)}", None),
    ("prunes", lambda r: r.prunes, lambda v: f"{int(v)}", None),
    ("max request", lambda r: r.max_request_tokens, lambda v: f"{int(v):,}", True),
)
#: Breakdown parts: label and the glyph of its bar segment (distinct without colour too).
PARTS: dict[str, tuple[str, str, str]] = {
    "main_hit_usd": ("main cache hits", "░", "green"),
    "main_miss_usd": ("main cache misses", "█", "red"),
    "main_output_usd": ("main output", "▒", "blue"),
    "summary_input_usd": ("summary input", "▓", "magenta"),
    "summary_output_usd": ("summary output", "≡", "yellow"),
}
BAR_WIDTH = 48


def cost_points(results: Mapping[str, PolicyResult],
                costs: Mapping[str, float] | None = None) -> dict[str, tuple[float, float]]:
    """(cost, continuation-fact retention) per policy: its own cost among the policies that
    completed, or, with ``costs`` (cost ÷ ctxfold's on shared sessions), every policy that has
    one."""
    if costs is None:
        return {n: (r.cost_usd, v) for n, r in results.items()
                if not r.failed and (v := continuation(r)) is not None}
    return {n: (costs[n], v) for n, r in results.items()
            if n in costs and (v := continuation(r)) is not None}


def pareto_front(results: Mapping[str, PolicyResult],
                 costs: Mapping[str, float] | None = None) -> set[str]:
    """Completed policies no other completed policy beats on both cost and continuation-fact
    retention (see :func:`cost_points`): a partial run's cost and retention cover other
    sessions and requests than a complete one's, so it is plotted but never on the front."""
    points = {n: p for n, p in cost_points(results, costs).items() if not results[n].failed}
    return {n for n, p in points.items()
            if not any(o != p and o[0] <= p[0] and o[1] >= p[1] for o in points.values())}


def paired_costs(sessions: Sequence[SessionResult]) -> dict[str, float] | None:
    """Cost ÷ ctxfold's per policy on the sessions both completed (``None`` for one session,
    where the plain costs are comparable)."""
    if len(sessions) < 2:
        return None
    return {n: p.cost_ratio for n, p in paired(sessions).items() if p.cost_ratio is not None}


def is_ctxfold(name: str) -> bool:
    """ctxfold or one of its own variants (never its own comparison)."""
    return name == "ctxfold" or name.startswith("ctxfold-")


def _share_pair(a: float | None, b: float | None) -> str:
    return f"{_pct(a)} vs {_pct(b)}"


def headline(sessions: Sequence[SessionResult]) -> str:
    """ctxfold against its nearest peer — the other policy (not a ctxfold variant) whose cost
    on the sessions both completed is closest to ctxfold's — on those sessions: the cost
    ratio, continuation facts, far facts and needles (with search where offered), and
    whether either is on the cost × continuation-fact Pareto front."""
    vs = paired(sessions)
    candidates = [(abs(math.log(p.cost_ratio)), n) for n, p in vs.items()
                  if not is_ctxfold(n) and p.cost_ratio and p.policy is not None]
    if "ctxfold" not in vs or not candidates:
        return ""
    _gap, name = min(candidates)
    p = vs[name]
    a, b = p.policy, p.baseline
    assert a is not None and b is not None
    ours, theirs = b.retention.all, a.retention.all
    text = (f"ctxfold vs its nearest peer, {name}, on the {p.sessions} session(s) both "
            f"completed: {name} costs {p.cost_ratio:.2f}× ctxfold; continuation facts "
            f"{_share_pair(ours.continuation, theirs.continuation)}, far facts "
            f"{_share_pair(ours.far, theirs.far)}, needles "
            f"{_share_pair(ours.needles, theirs.needles)}")
    if ours.needles_with_search is not None and b.offers_search:
        text += f" (ctxfold with history search, an upper bound: {_pct(ours.needles_with_search)})"
    summed = totals(sessions)
    front = pareto_front(summed, paired_costs(sessions))
    on = [n for n in ("ctxfold", name) if n in front]
    text += (". On the cost × continuation-fact front: " + ", ".join(on) if on
             else ". Neither is on the cost × continuation-fact front")
    return text + "."


def cheapest_note(results: Mapping[str, PolicyResult],
                  vs: Mapping[str, Paired] | None = None) -> str:
    """What the cheapest policy saved, where (the largest part of the cost breakdown), and
    what it gave up, against ctxfold (or, when ctxfold is the cheapest, against the
    runner-up). With ``vs`` (several sessions, see :func:`paired`) the comparison is on the
    sessions both completed, cost and fidelity alike. ctxfold's own variants
    (``ctxfold-plain``) are never the policy it is compared with: the headline is about the
    other systems."""
    if vs is not None:
        ranked = sorted((p.cost_ratio, n) for n, p in vs.items()
                        if not is_ctxfold(n) and p.cost_ratio is not None)
        if not ranked or "ctxfold" not in results:
            return ""
        ratio, name = ranked[0]
        a, b = vs[name].policy, vs[name].baseline
        if ratio >= 1:
            return (f"ctxfold is the cheapest on the sessions it shares with each policy; the "
                    f"closest, {name}, costs {ratio:.2f}× as much.")
        text = (f"{name} is the cheapest: {ratio:.2f}× ctxfold's cost on the "
                f"{vs[name].sessions} session(s) both completed")
        if a is None or b is None:
            return text + "."
        return text + _saving_clause(a, b) + _fidelity_clause(a, b, "ctxfold") + "."
    done = sorted(((r.cost_usd, n) for n, r in results.items()
                   if not r.failed and (n == "ctxfold" or not _ours(n))))
    if len(done) < 2:
        return ""
    names = [name for _cost, name in done]
    cheapest = names[0]
    other = "ctxfold" if cheapest != "ctxfold" and "ctxfold" in names else names[1]
    a, b = results[cheapest], results[other]
    saved = b.cost_usd - a.cost_usd
    text = (f"{cheapest} is the cheapest (${a.cost_usd:.4f}, {saved / b.cost_usd:.0%} under "
            f"{other})")
    return text + _saving_clause(a, b) + _fidelity_clause(a, b, other) + "."


def _ours(name: str) -> bool:
    """ctxfold itself or one of its variants (``ctxfold-plain``)."""
    return name == "ctxfold" or name.startswith("ctxfold-")


def _saving_clause(a: PolicyResult, b: PolicyResult) -> str:
    parts = {k: getattr(b.breakdown, k) - getattr(a.breakdown, k) for k in BREAKDOWN}
    key = max(parts, key=lambda k: parts[k])
    return f"; most of the difference is {PARTS[key][0]} (${parts[key]:.4f} less)"


def _fidelity_clause(a: PolicyResult, b: PolicyResult, other: str) -> str:
    x, y = a.retention.all, b.retention.all
    if x.continuation is None or y.continuation is None:
        return ""
    return (f"; it keeps {x.continuation:.0%} of the continuation facts against {other}'s "
            f"{y.continuation:.0%} (far facts {_pct(x.far)} vs {_pct(y.far)})")


def _best(results: Mapping[str, PolicyResult], getter: Callable[[PolicyResult], Any],
          lower: bool) -> Any:
    # A failed policy stopped early: its sums are not comparable, so it never wins.
    values = [getter(r) for r in results.values() if not r.failed and getter(r) is not None]
    if not values:
        return None
    return min(values) if lower else max(values)


def paired_text(p: Paired | None) -> str:
    """``1.12× (9)``: cost against ctxfold on the 9 sessions both completed."""
    if p is None or p.cost_ratio is None:
        return "–"
    return f"{p.cost_ratio:.2f}× ({p.sessions})"


def _table(title: str, results: Mapping[str, PolicyResult], plain: bool,
           caption: str = "", vs: Mapping[str, Paired] | None = None,
           costs: Mapping[str, float] | None = None) -> Any:
    from rich.table import Table

    table = Table(title=title, caption=caption or None, title_justify="left",
                  caption_justify="left")
    table.add_column("policy", no_wrap=True)
    for header, *_ in COLUMNS:
        table.add_column(header, justify="right")
    if vs is not None:
        table.add_column("vs ctxfold", justify="right")
    table.add_column("failed")
    bests = {header: (_best(results, get, lower) if lower is not None else None)
             for header, get, _fmt, lower in COLUMNS}
    front = pareto_front(results, costs)
    for name, result in results.items():
        cells = [f"{name} ◆" if name in front else name]
        for header, get, fmt, _lower in COLUMNS:
            value = get(result)
            text = fmt(value)
            if bests[header] is not None and value == bests[header] and not result.failed:
                text = f"{text}*" if plain else f"[bold green]{text}[/]"
            cells.append(text)
        if vs is not None:
            cells.append(paired_text(vs.get(name)))
        cells.append("FAILED" if result.failed else "no")
        table.add_row(*cells)
    return table


def breakdown_bars(results: Mapping[str, PolicyResult], plain: bool) -> list[str]:
    """One stacked bar per policy on one shared scale (the most expensive policy's cost)."""
    top = max((r.cost_usd for r in results.values()), default=0.0) or 1.0
    width = max((len(n) for n in results), default=0)
    lines = []
    for name, r in results.items():
        bar = []
        for key, (_label, glyph, colour) in PARTS.items():
            cells = round(getattr(r.breakdown, key) / top * BAR_WIDTH)
            if cells:
                bar.append(glyph * cells if plain else f"[{colour}]{glyph * cells}[/]")
        flag = "  (failed: partial)" if r.failed else ""
        lines.append(f"{name:<{width}}  {''.join(bar)} ${r.cost_usd:.4f}{flag}")
    legend = "   ".join(f"{glyph} {label}" for label, glyph, _c in PARTS.values())
    return [*lines, f"{'':<{width}}  {legend}"]


def print_report(sessions: Sequence[SessionResult], *, profile: str, window: int,
                 file: IO[str], terminal: bool | None = None, reserve_output: int = 0,
                 missing: Mapping[str, str] | None = None) -> None:
    """Print every session table, the totals, the breakdown and the notes to ``file``."""
    from rich.console import Console

    console = Console(file=file, force_terminal=terminal, width=None if terminal else 180,
                      no_color=not terminal if terminal is not None else None)
    plain = not console.is_terminal
    budget = f"window {window:,} (input budget {window - reserve_output:,})"
    lead = headline(sessions)
    if lead:
        console.print(lead, markup=False)
    for session in sessions:
        console.print(_table(
            f"{session.name} — {session.messages} messages, {session.requests} requests, "
            f"{session.facts} facts, {session.probes} probes, {budget}; unlimited "
            f"${session.unlimited_cost_usd:.4f}",
            session.policies, plain,
        ))
        for name, result in session.policies.items():
            if result.failed:
                console.print(f"  {name} failed: {result.failure}", markup=False)
    summed = totals(sessions)
    unlimited = sum(s.unlimited_cost_usd for s in sessions)
    console.print(_table(
        f"totals — {len(sessions)} session(s), profile {profile}, {budget}", summed, plain,
        caption=(f"unlimited (keep everything, perfect cache, fidelity 100%): ${unlimited:.4f}."
                 " continuation = facts the agent used again that the request still carried; "
                 "far = those not in the last 20 messages; after fold = continuation from the "
                 "policy's first fold on; needles = facts seen once before; +search = with "
                 "ctxfold's history search (an upper bound); probes (diag.) = the engine's own "
                 "probes, what its summary check optimises. ◆ = on the cost × continuation "
                 "Pareto front; vs ctxfold = cost ÷ ctxfold's on the (n) sessions both "
                 "completed" + ("; * = best of column" if plain else "")
                 + ". Offline unless a summarizer provider was named: recorded replies, cache "
                 "and prices modelled."),
        vs=paired(sessions) if len(sessions) > 1 else None, costs=paired_costs(sessions),
    ))
    console.print("cost breakdown (one scale for all policies):")
    for line in breakdown_bars(summed, plain):
        console.print(line, markup=not plain, highlight=False)
    note = cheapest_note(summed, paired(sessions))
    if note:
        console.print(note, markup=False)
    for name, why in (missing or {}).items():
        console.print(f"not run: {name}: {why}", markup=False)
