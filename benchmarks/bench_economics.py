"""Maintenance economics: ctxfold's defaults and their alternatives, cost beside fidelity.

Run from the repository root::

    python -m benchmarks.bench_economics [--sessions DIR] [--windows 32000,64000,128000]
        [--variants NAME,...] [--peers] [--jobs 2] [--json OUT] [--no-write]

Every session under ``--sessions`` (default: the team's sample of real agent sessions,
``../shared/data/transcripts`` beside the repository) is replayed with ``ctxfold replay``'s one
cost model (input budget = window − 4,096, DeepSeek-flash prices, the emulator's prefix cache,
the extractive summarizer writing the briefing length each request asks for, 2,048 tokens when
it asks for none) — once per *variant* of ctxfold's maintenance constants, and once for the
comparison policies. A variant sets, in this process only:

* ``prune``: :data:`ctxfold.kernel.maintenance.PRUNE_ALONE_RATIO`, below which share of the
  window a pressure prune is installed alone (1.0: whenever it clears the trigger, the seed's
  rule); above it the prune is applied inside the checkpoint the fold builds;
* ``tail``: :data:`ctxfold.kernel.fold.TAIL_RATIO`, the verbatim tail's share of the window
  (the default is 5 %);
* ``briefing``: the briefing length a summary request asks for, as a share of the window
  (``0``: none asked, so the replay's 2,048-token default; the default is 1/48, 512–3,072);
* ``facts``: :data:`ctxfold.engine.review.FACTS_SHARE`, the summary check's list of facts kept
  verbatim as a multiple of the briefing length (``0``: nothing repaired; the default is 2).
* ``head``: :data:`ctxfold.kernel.fold.HEAD_PIN_RATIO`, the share of the window a long task
  statement is clipped to in the checkpoint head (the default is 8 %).

``seed`` is the seed's rules: prune alone whenever it clears the trigger, a 16 % tail, no
length asked, no repair; ``defaults-2026-12-02`` the defaults before the briefing became
window/48 with facts up to twice it, the tail 5 % and the prune-alone target 50 % (window/24,
facts up to half, a 10 % tail, 60 %). Every other variant changes one constant of the
defaults. Every variant runs with the standing rules on (``[checkpoint] extract_rules``).

Per window and variant: cost, fidelity (mean weighted probe retention), constraint retention,
share of requests under 50 %, summaries, prunes, sessions completed, and the cost ratio against
each comparison policy on the sessions both completed, with the fidelity of both on those same
sessions. ``--no-write`` leaves ``docs/performance.md`` alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks._report import REPO, machine_line, write_section

SECTION = "## Maintenance economics"
DEFAULT_SESSIONS = REPO.parent / "shared" / "data" / "transcripts"
COMPARISON = ("codex-like", "opencode-like", "openhands-like")
PEERS = ("pydantic-ai-harness", "langchain-summarization")

#: name -> (prune-alone ratio, tail ratio, briefing share of the window (0 = none asked),
#: facts multiple of the briefing (the summary check's list; 0 = nothing repaired), the task
#: statement's pinned share of the window)
VARIANTS: dict[str, tuple[float, float, float, float, float]] = {
    "default": (0.50, 0.05, 1 / 48, 2, 0.08),
    "seed": (1.00, 0.16, 0.0, 0.0, 0.08),
    "defaults-2026-12-02": (0.60, 0.10, 1 / 24, 1 / 2, 0.08),
    "tail-0.10": (0.50, 0.10, 1 / 48, 2, 0.08),
    "tail-0.03": (0.50, 0.03, 1 / 48, 2, 0.08),
    "briefing-1/24": (0.50, 0.05, 1 / 24, 2, 0.08),
    "briefing-1/32": (0.50, 0.05, 1 / 32, 2, 0.08),
    "briefing-1/64": (0.50, 0.05, 1 / 64, 2, 0.08),
    "briefing-none": (0.50, 0.05, 0.0, 2, 0.08),
    "facts-1/2": (0.50, 0.05, 1 / 48, 1 / 2, 0.08),
    "facts-1": (0.50, 0.05, 1 / 48, 1, 0.08),
    "facts-3": (0.50, 0.05, 1 / 48, 3, 0.08),
    "check-off": (0.50, 0.05, 1 / 48, 0.0, 0.08),
    "prune-alone-0.8": (1.00, 0.05, 1 / 48, 2, 0.08),
    "prune-alone-0.6": (0.60, 0.05, 1 / 48, 2, 0.08),
    "head-0.06": (0.50, 0.05, 1 / 48, 2, 0.06),
}


def _apply(variant: tuple[float, float, float, float, float]) -> None:
    """Set a variant's constants in this (worker) process."""
    from ctxfold.engine import review
    from ctxfold.kernel import checkpoint, fold, maintenance, summary

    prune, tail, briefing, facts, head = variant
    review.FACTS_SHARE = facts
    fold.HEAD_PIN_RATIO = head
    maintenance.PRUNE_ALONE_RATIO = prune
    fold.TAIL_RATIO = tail
    if briefing:
        summary.BRIEFING_RATIO = briefing
        checkpoint.briefing_tokens = summary.briefing_tokens
    else:
        checkpoint.briefing_tokens = lambda _window: 0


def _run(job: tuple[str, Sequence[str], int, Sequence[str],
                   tuple[float, float, float, float, float] | None]
         ) -> tuple[str, int, list[dict[str, Any]]]:
    """One replay in a worker: ``(label, window, per-session policy results)``."""
    from ctxfold.kernel.config import Config
    from ctxfold.kernel.registry import Registry
    from ctxfold.replay import ReplaySettings, replay_sessions
    from ctxfold.replay.report_json import policy_json

    label, paths, window, policies, variant = job
    if variant is not None:
        _apply(variant)
    config = Config()
    registry = Registry.from_config(config)
    from ctxfold.importing import import_session

    sessions = [import_session(p, registry, None, config=config) for p in paths]
    results = replay_sessions(sessions, ReplaySettings(window=window, policies=tuple(policies)),
                              registry=registry, config=config)
    return label, window, [
        {"session": s.name, "policies": {n: policy_json(r) for n, r in s.policies.items()}}
        for s in results
    ]


def _paths(sessions: Path) -> list[str]:
    from ctxfold.importing import expand_paths
    from ctxfold.kernel.config import Config
    from ctxfold.kernel.registry import Registry

    return [str(p) for p in expand_paths([sessions], Registry.from_config(Config()))]


def _fidelity(rows: Mapping[str, Any], names: Sequence[str]) -> float:
    """Mean fidelity over the main requests of the sessions ``names``."""
    weight = sum(rows[n]["requests"] - rows[n]["summaries"] for n in names) or 1
    return sum(rows[n]["fidelity"]["mean"] * (rows[n]["requests"] - rows[n]["summaries"])
               for n in names) / weight


def _summary(runs: Mapping[str, list[dict[str, Any]]], label: str, policy: str,
             against: Sequence[str]) -> dict[str, Any]:
    """Totals of ``policy`` in run ``label`` and its ratios against each of ``against``."""
    mine = {s["session"]: s["policies"][policy] for s in runs[label]}
    reqs = list(mine.values())
    cost = sum(r["cost_usd"] for r in reqs)

    def mean(key: str) -> float:
        rows = [r for r in reqs if r["fidelity"][key] is not None]
        total = sum(r["requests"] - r["summaries"] for r in rows) or 1
        return sum(r["fidelity"][key] * (r["requests"] - r["summaries"]) for r in rows) / total

    out: dict[str, Any] = {
        "cost_usd": cost, "fidelity": mean("mean"), "constraints": mean("constraints"),
        "below_half": mean("below_half"), "summaries": sum(r["summaries"] for r in reqs),
        "prunes": sum(r["prunes"] for r in reqs),
        "completed": sum(not r["failed"] for r in reqs), "sessions": len(reqs), "vs": {},
    }
    for other in against:
        theirs = {s["session"]: s["policies"][other] for s in runs["comparison"]
                  if other in s["policies"]}
        both = [n for n in mine if n in theirs and not mine[n]["failed"]
                and not theirs[n]["failed"]]
        if not both:
            continue
        a = sum(mine[n]["cost_usd"] for n in both)
        b = sum(theirs[n]["cost_usd"] for n in both)

        out["vs"][other] = {"sessions": len(both), "cost_ratio": a / b if b else None,
                            "fidelity": _fidelity(mine, both),
                            "their_fidelity": _fidelity(theirs, both)}
    return out


def _table(window: int, rows: Mapping[str, Mapping[str, Any]], against: Sequence[str]) -> str:
    head = ("| variant | completed | cost USD | fidelity | constraints | <50% | summaries | prunes"
            + "".join(f" | vs {a}" for a in against) + " |")
    lines = [f"**{window:,} (input budget {window - 4096:,})**", "", head,
             "|" + "---|" * (8 + len(against))]
    for name, r in rows.items():
        cells = []
        for a in against:
            v = r["vs"].get(a)
            cells.append("—" if v is None or v["cost_ratio"] is None else
                         f"{v['cost_ratio']:.2f}× ({v['sessions']}; {v['fidelity']:.0%} vs "
                         f"{v['their_fidelity']:.0%})")
        lines.append(
            f"| `{name}` | {r['completed']}/{r['sessions']} | {r['cost_usd']:.4f} | "
            f"{r['fidelity']:.0%} | {r['constraints']:.0%} | {r['below_half']:.0%} | "
            f"{r['summaries']} | {r['prunes']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_economics",
        description="Replay the sample sessions under variants of ctxfold's maintenance "
                    "constants and under the comparison policies; cost beside fidelity.")
    parser.add_argument("--sessions", type=Path, default=DEFAULT_SESSIONS,
                        help="folder (or file) of recorded sessions (default: %(default)s)")
    parser.add_argument("--windows", default="32000,64000,128000",
                        help="comma-separated context windows (default: %(default)s)")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="comma-separated variant names (default: all): "
                             + ", ".join(VARIANTS))
    parser.add_argument("--peers", action="store_true",
                        help="also compare with the real libraries (needs ctxfold[peers])")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default: 2)")
    parser.add_argument("--json", type=Path, help="write every figure as JSON here")
    parser.add_argument("--no-write", action="store_true",
                        help="print the tables; leave docs/performance.md alone")
    args = parser.parse_args(argv)
    if not args.sessions.exists():
        parser.error(f"--sessions {args.sessions}: no such file or folder")
    names = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants: unknown {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    windows = [int(w) for w in args.windows.split(",") if w]
    against = [*COMPARISON, *(PEERS if args.peers else ())]
    paths = _paths(args.sessions)
    jobs = [("comparison", paths, w, against, None) for w in windows]
    jobs += [(n, paths, w, ["ctxfold"], VARIANTS[n]) for w in windows for n in names]
    runs: dict[int, dict[str, list[dict[str, Any]]]] = {w: {} for w in windows}
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for label, window, result in pool.map(_run, jobs):
            runs[window][label] = result
            print(f"done: {label} at {window:,}", file=sys.stderr)
    figures = {w: {n: _summary(runs[w], n, "ctxfold", against) for n in names} for w in windows}
    for w in windows:  # the comparison policies themselves, for the record
        for policy in against:
            figures[w][policy] = _summary(runs[w], "comparison", policy, ())
    tables = "\n\n".join(_table(w, figures[w], against) for w in windows)
    text = (
        f"{SECTION}\n\n{machine_line('python -m benchmarks.bench_economics')}\n\n"
        f"Sessions: {len(paths)} from `SESSIONS_DIR` (the team's sample of real agent "
        "sessions, not distributed with ctxfold). One cost model for every row "
        "(docs/replay.md). *vs X* = ctxfold's cost ÷ X's on the sessions both completed "
        "(their number; ctxfold's fidelity vs X's on those sessions).\n\n" + tables + "\n")
    print(text)
    if args.json:
        args.json.write_text(json.dumps({str(w): figures[w] for w in windows}, indent=1))
    if not args.no_write:
        write_section(SECTION, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
