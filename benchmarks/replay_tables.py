"""The results tables of ``docs/replay.md`` from ``ctxfold replay --json`` reports.

Run each window's replay with ``--json`` (see docs/replay.md, "Results on the shared
transcripts"), then::

    python benchmarks/replay_tables.py r32.json r64.json r128.json [--timing "1:03 / 440 MB" ...]

prints, per report, the totals table (every policy on every session) and the table on the
sessions both a policy and ctxfold completed (costs summed, retention pooled over those
sessions), in the format of the docs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

OURS = "ctxfold"


def pct(kept: int, due: int) -> str:
    return f"{round(100 * kept / due)}%" if due else "–"


def pooled(sessions: list[dict[str, Any]], name: str, kind: str) -> tuple[int, int]:
    kept = due = 0
    for session in sessions:
        counts = session["policies"][name]["retention"]["counts"]
        kept += counts[f"{kind}_kept"]
        due += counts[f"{kind}_due"]
    return kept, due


def shared(report: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [s for s in report["sessions"]
            if not s["policies"][name]["failed"] and not s["policies"][OURS]["failed"]]


def ratio(sessions: list[dict[str, Any]], name: str) -> float | None:
    ours = sum(s["policies"][OURS]["cost_usd"] for s in sessions)
    theirs = sum(s["policies"][name]["cost_usd"] for s in sessions)
    return theirs / ours if ours else None


def tables(report: dict[str, Any], timing: str) -> str:
    window, reserve = report["window"], report["reserve_output"]
    unlimited = report["references"]["unlimited"]["cost_usd"]
    total = len(report["sessions"])
    lines = [f"#### {window:,} (input budget {window - reserve:,}), unlimited ${unlimited:.4f}"
             + (f"; {timing}" if timing else ""),
             "| policy | completed | cost USD | vs ctxfold (shared) | continuation | far | "
             "after first fold | needles | needles + search | probes (diag.) | summaries |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, t in report["totals"].items():
        done = sum(not s["policies"][name]["failed"] for s in report["sessions"])
        both = shared(report, name)
        r = ratio(both, name)
        ret = t["retention"]
        after = ret.get("after_first_fold") or {}
        # Only ctxfold's policies offer history search (needles + search is their bound).
        search = ret.get("needles_with_search") if name.startswith(OURS) else None
        lines.append(
            f"| `{name}` | {done}/{total} | {t['cost_usd']:.4f} | "
            f"{'–' if r is None else f'{r:.2f}×'} ({len(both)}) | "
            f"{round(100 * ret['continuation'])}% | {round(100 * ret['far'])}% | "
            f"{'–' if not after else str(round(100 * after['continuation'])) + '%'} | "
            f"{round(100 * ret['needles'])}% | "
            f"{'–' if search is None else str(round(100 * search)) + '%'} | "
            f"{round(100 * t['fidelity']['mean'])}% | {t['summaries']} |")
    lines += ["", "On the sessions both completed (ctxfold first):", "",
              "| policy | sessions both completed | its cost ÷ ctxfold's | continuation: ctxfold "
              "vs it | far: ctxfold vs it | needles: ctxfold vs it |",
              "|---|---|---|---|---|---|"]
    for name in report["totals"]:
        if name == OURS:
            continue
        both = shared(report, name)
        if not both:
            continue
        r = ratio(both, name)
        cells = []
        for kind in ("facts", "far", "needles"):
            ours, theirs = pooled(both, OURS, kind), pooled(both, name, kind)
            cell = f"{pct(*ours)} vs {pct(*theirs)}"
            if kind == "needles":
                searchable = sum(s["policies"][OURS]["retention"]["counts"]
                                 ["needles_searchable"] for s in both)
                cell = f"{pct(*ours)} (search {pct(searchable, ours[1])}) vs {pct(*theirs)}"
            cells.append(cell)
        lines.append(f"| `{name}` | {len(both)} | "
                     f"{'–' if r is None else f'{r:.2f}×'} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--timing", action="append", default=[],
                        help="per report, e.g. 'wall time 1:03, peak 440 MB'")
    args = parser.parse_args()
    timings = [*args.timing, *[""] * len(args.reports)]
    print("\n\n".join(tables(json.loads(p.read_text()), t)
                      for p, t in zip(args.reports, timings, strict=False)))


if __name__ == "__main__":
    main()
