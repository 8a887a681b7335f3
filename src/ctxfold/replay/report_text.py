"""The terminal report: one table per session and a totals table (rich).

Columns: policy, requests, prompt tokens, cache-hit ratio, cost, summaries, prunes, max
request size, failed. The best value of each column is highlighted (bold green on a
terminal; marked ``*`` in plain text, which is what a pipe gets).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import IO, Any

from ctxfold.replay.runner import PolicyResult, SessionResult, totals

#: (header, value getter, formatter, lower is better?) — ``None`` = not ranked.
_Column = tuple[str, Callable[[PolicyResult], float], Callable[[float], str], bool | None]
COLUMNS: tuple[_Column, ...] = (
    ("requests", lambda r: r.requests, lambda v: f"{int(v):,}", None),
    ("prompt tokens", lambda r: r.prompt_tokens, lambda v: f"{int(v):,}", True),
    ("cache hit", lambda r: r.hit_ratio, lambda v: f"{v:.1%}", False),
    ("cost USD", lambda r: r.cost_usd, lambda v: f"{v:.4f}", True),
    ("summaries", lambda r: r.summaries, lambda v: f"{int(v)}", None),
    ("prunes", lambda r: r.prunes, lambda v: f"{int(v)}", None),
    ("max request", lambda r: r.max_request_tokens, lambda v: f"{int(v):,}", True),
)


def _best(results: dict[str, PolicyResult], getter: Callable[[PolicyResult], float],
          lower: bool) -> float | None:
    # A failed policy stopped early: its sums are not comparable, so it never wins.
    values = [getter(r) for r in results.values() if not r.failed]
    if not values:
        return None
    return min(values) if lower else max(values)


def _table(title: str, results: dict[str, PolicyResult], plain: bool,
           caption: str = "") -> Any:
    from rich.table import Table

    table = Table(title=title, caption=caption or None, title_justify="left")
    table.add_column("policy")
    for header, *_ in COLUMNS:
        table.add_column(header, justify="right")
    table.add_column("failed")
    bests = {header: (_best(results, get, lower) if lower is not None else None)
             for header, get, _fmt, lower in COLUMNS}
    for name, result in results.items():
        cells = [name]
        for header, get, fmt, _lower in COLUMNS:
            value = get(result)
            text = fmt(value)
            if bests[header] is not None and value == bests[header] and not result.failed:
                text = f"{text}*" if plain else f"[bold green]{text}[/]"
            cells.append(text)
        cells.append("FAILED" if result.failed else "no")
        table.add_row(*cells)
    return table


def print_report(sessions: Sequence[SessionResult], *, profile: str, window: int,
                 file: IO[str], terminal: bool | None = None) -> None:
    """Print every session table and the totals table to ``file``."""
    from rich.console import Console

    console = Console(file=file, force_terminal=terminal, width=None if terminal else 120,
                      no_color=not terminal if terminal is not None else None)
    plain = not console.is_terminal
    for session in sessions:
        console.print(_table(
            f"{session.name} — {session.messages} messages, {session.requests} requests, "
            f"trigger {session.trigger:,} of window {window:,}",
            session.policies, plain,
        ))
        for name, result in session.policies.items():
            if result.failed:
                console.print(f"  {name} failed: {result.failure}", markup=False)
    floor = sum(s.floor_cost_usd for s in sessions)
    console.print(_table(
        f"totals — {len(sessions)} session(s), profile {profile}, window {window:,}",
        totals(sessions), plain,
        caption=f"floor (every token a miss once, every resend a hit): ${floor:.4f}"
                + ("; * = best of column" if plain else ""),
    ))
