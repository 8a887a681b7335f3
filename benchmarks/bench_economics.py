"""Maintenance economics: ctxfold beside the peers, per price profile and window, in one run.

Run from the repository root::

    python -m benchmarks.bench_economics [--sessions DIR] [--windows 32000,64000,128000]
        [--profiles deepseek-flash,openai,anthropic-sonnet] [--variants NAME,...] [--peers]
        [--jobs 2] [--json OUT] [--no-write]

Every session under ``--sessions`` (default: the team's sample of real agent sessions,
``../shared/data/transcripts`` beside the repository) is replayed with ``ctxfold replay``'s one
cost model (docs/replay.md: input budget = window − 4,096, the emulator's prefix cache under
each profile's rules, the extractive summarizer writing each policy's own summary length,
ctxfold's summaries billed in full) once per window and price profile, with ctxfold, its
``variants`` and the comparison policies. Retention is the replay's independent measure
(continuation facts, far facts; :mod:`ctxfold.replay.retention`, which the engine does not
import).

The table of each window and profile compares every row with the **cheapest peer that
completes every session** there (the issue-27 bar: ctxfold at ≤ 0.90× its cost with
continuation and far facts ≥ its own): cost ratio, then continuation and far facts of both.

A *variant* changes some of ctxfold's maintenance settings, in its worker process only
(:data:`DEFAULTS` are the engine's, which a test keeps equal to the code):

* ``prune``: :data:`ctxfold.kernel.maintenance.PRUNE_ALONE_RATIO`, below which share of the
  window a pressure prune is installed alone; above it the prune goes inside the checkpoint;
* ``tail``: :data:`ctxfold.kernel.maintenance.TAIL_RATIO`, the verbatim tail's share of the window;
* ``briefing``: the briefing length a summary request asks for, as a share of the window
  (``0``: none asked, so the replay's 2,048-token default);
* ``facts``: :data:`ctxfold.engine.check.FACTS_SHARE`, the summary check's verbatim facts
  list as a multiple of the briefing length (``0``: nothing repaired);
* ``head``: :data:`ctxfold.kernel.maintenance.HEAD_PIN_RATIO`, the share of the window a long task
  statement is clipped to in the checkpoint head;
* ``ratio``: ``compact_ratio``, the trigger's share of the input budget;
* ``bound``: a factor on the bound tool results get at creation
  (:data:`ctxfold.capabilities.bounding.TOOL_CONTENT_BOUND` and the per-tool head/tail);
* ``cap``: the summary request's output cap as a multiple of the briefing length, at least
  1,024 tokens and never above the engine's rule (``0``: the rule,
  :func:`ctxfold.kernel.summary.summary_output_cap`, a quarter of the window up to 8,192) —
  the room a summary request leaves for its answer decides how much of the fold region it
  can hold;
* ``facts_billed``: ``False`` bills the facts list the summary check appends as what it is —
  text the engine adds without a model call, paid as input where the checkpoint is sent —
  instead of as summary output (the fair replay's rule; a modelling choice, not a setting);
* ``offer``: when ``use_capability`` rides along — ``auto`` (the engine's rule: once the view
  holds a checkpoint or a bounded result), ``always`` (from the first request), ``never``.

``default`` is the engine as shipped (it runs in the same replay as the peers). ``--no-write``
leaves ``docs/performance.md`` alone.
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
DEFAULT_PROFILES = ("deepseek-flash", "openai", "anthropic-sonnet")
COMPARISON = ("codex-like", "opencode-like", "openhands-like")
PEERS = ("pydantic-ai-harness", "langchain-summarization")
#: The bar of issue 27: ctxfold's cost at most this share of the cheapest completing peer's.
BAR = 0.90

Variant = dict[str, Any]

#: The engine's settings as shipped (tests/replay/test_economics_variants.py keeps them equal
#: to the code).
DEFAULTS: Variant = {"prune": 0.50, "tail": 0.05, "briefing": 1 / 48, "facts": 2, "head": 0.08,
                     "ratio": 0.80, "bound": 1.0, "offer": "auto", "cap": 0,
                     "facts_billed": True}

#: name -> what it changes from :data:`DEFAULTS`.
VARIANTS: dict[str, Variant] = {
    "default": {},
    "seed": {"prune": 1.00, "tail": 0.16, "briefing": 0.0, "facts": 0.0},
    "tail-0.10": {"tail": 0.10},
    "tail-0.03": {"tail": 0.03},
    "briefing-1/32": {"briefing": 1 / 32},
    "briefing-1/64": {"briefing": 1 / 64},
    "facts-1": {"facts": 1},
    "check-off": {"facts": 0.0},
    "prune-alone-0.8": {"prune": 1.00},
    "prune-never-alone": {"prune": 0.0},
    "head-0.04": {"head": 0.04},
    "ratio-0.85": {"ratio": 0.85},
    "ratio-0.90": {"ratio": 0.90},
    "bound-0.5": {"bound": 0.5},
    "cap-4x": {"cap": 4},
    "cap-3x": {"cap": 3},
    "facts-as-input": {"facts_billed": False},
    "offer-always": {"offer": "always"},
    "offer-never": {"offer": "never"},
    "bound-0.5+offer-always": {"bound": 0.5, "offer": "always"},
    "check-off+offer-always": {"facts": 0.0, "offer": "always"},
}


def _apply(variant: Variant) -> float:
    """Set a variant's settings in this (worker) process; its ``compact_ratio``."""
    from ctxfold.capabilities import bounding
    from ctxfold.engine import check, offer
    from ctxfold.kernel import maintenance, summary
    from ctxfold.plugins.policies import ctxfold_engine

    v = {**DEFAULTS, **variant}
    ctxfold_engine.BILL_FACTS_AS_OUTPUT = v["facts_billed"]
    check.FACTS_SHARE = v["facts"]
    maintenance.HEAD_PIN_RATIO = v["head"]
    maintenance.PRUNE_ALONE_RATIO = v["prune"]
    maintenance.TAIL_RATIO = v["tail"]
    if v["briefing"]:
        summary.BRIEFING_RATIO = v["briefing"]
        maintenance.briefing_tokens = summary.briefing_tokens
    else:
        maintenance.briefing_tokens = lambda _window: 0
    if v["bound"] != 1.0:
        f = v["bound"]
        bounding.TOOL_CONTENT_BOUND = int(bounding.TOOL_CONTENT_BOUND * f)
        bounding._CLASS_BUDGETS = tuple((names, (int(h * f), int(t * f)))
                                        for names, (h, t) in bounding._CLASS_BUDGETS)
        bounding.DEFAULT_BUDGET = (int(bounding.DEFAULT_BUDGET[0] * f),
                                   int(bounding.DEFAULT_BUDGET[1] * f))
    if v["cap"]:
        rule, multiple = summary.summary_output_cap, v["cap"]

        def cap(window: int) -> int:
            return min(rule(window), max(1024, int(multiple * summary.briefing_tokens(window))))

        summary.summary_output_cap = cap
        maintenance.summary_output_cap = cap
    if v["offer"] != "auto":
        always = v["offer"] == "always"
        original = offer.CapabilityOffer.offers

        def offers(self: Any, projection: Any, canonical: Any) -> bool:
            if self.offered is self.tools:  # the host's own tool list: unchanged
                return bool(original(self, projection, canonical))
            return always

        offer.CapabilityOffer.offers = offers  # type: ignore[method-assign]
    return float(v["ratio"])


Job = tuple[str, Sequence[str], int, str, Sequence[str], Variant | None]


def _run(job: Job) -> tuple[str, int, str, dict[str, dict[str, Any]]]:
    """One replay in a worker: ``(label, window, profile, {policy: {session: result}})``."""
    from ctxfold.importing import import_session
    from ctxfold.kernel.config import Config
    from ctxfold.kernel.registry import Registry
    from ctxfold.replay import ReplaySettings, replay_sessions
    from ctxfold.replay.report_json import policy_json

    label, paths, window, profile, policies, variant = job
    ratio = _apply(variant) if variant is not None else DEFAULTS["ratio"]
    config = Config()
    registry = Registry.from_config(config)
    sessions = [import_session(p, registry, None, config=config) for p in paths]
    results = replay_sessions(
        sessions, ReplaySettings(window=window, compact_ratio=ratio, profile=profile,
                                 policies=tuple(policies)),
        registry=registry, config=config)
    by_policy: dict[str, dict[str, Any]] = {}
    for s in results:
        for name, r in s.policies.items():
            # a variant's ctxfold is reported under the variant's name
            row_name = label if name == "ctxfold" and label != "default" else name
            by_policy.setdefault(row_name, {})[s.name] = policy_json(r)
    return label, window, profile, by_policy


def _paths(sessions: Path) -> list[str]:
    from ctxfold.importing import expand_paths
    from ctxfold.kernel.config import Config
    from ctxfold.kernel.registry import Registry

    return [str(p) for p in expand_paths([sessions], Registry.from_config(Config()))]


def _pooled(rows: Sequence[Mapping[str, Any]], kept: str, due: str) -> float | None:
    """A retention share pooled over sessions: kept pairs ÷ due pairs."""
    k = sum(r["retention"]["counts"][kept] for r in rows)
    d = sum(r["retention"]["counts"][due] for r in rows)
    return k / d if d else None


def _totals(rows: Mapping[str, Mapping[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    picked = [rows[n] for n in names]
    return {
        "cost_usd": sum(r["cost_usd"] for r in picked),
        "continuation": _pooled(picked, "facts_kept", "facts_due"),
        "far": _pooled(picked, "far_kept", "far_due"),
        "summaries": sum(r["summaries"] for r in picked),
        "prunes": sum(r["prunes"] for r in picked),
    }


def figures(by_policy: Mapping[str, Mapping[str, Mapping[str, Any]]],
            peers: Sequence[str], rows: Sequence[str]) -> dict[str, Any]:
    """One window and profile: every row's totals, the cheapest peer completing every
    session, and each row against it on the sessions both completed."""
    sessions = sorted({s for p in by_policy.values() for s in p})
    complete = [p for p in peers if p in by_policy
                and all(not by_policy[p][s]["failed"] for s in sessions)]
    cheapest = min(complete, key=lambda p: _totals(by_policy[p], sessions)["cost_usd"],
                   default=None)
    out: dict[str, Any] = {"sessions": len(sessions), "cheapest_peer": cheapest, "rows": {}}
    for name in [*rows, *peers]:
        if name not in by_policy:
            continue
        mine = by_policy[name]
        done = [s for s in sessions if not mine[s]["failed"]]
        row = {"completed": len(done), **_totals(mine, done)}
        if cheapest is not None and name != cheapest:
            both = [s for s in done if not by_policy[cheapest][s]["failed"]]
            a, b = _totals(mine, both), _totals(by_policy[cheapest], both)
            ratio = a["cost_usd"] / b["cost_usd"] if b["cost_usd"] else None
            row["vs_cheapest"] = {
                "sessions": len(both), "cost_ratio": ratio,
                "continuation": [a["continuation"], b["continuation"]],
                "far": [a["far"], b["far"]],
                "meets_bar": bool(
                    ratio is not None and ratio <= BAR and len(both) == len(sessions)
                    and (a["continuation"] or 0) >= (b["continuation"] or 0)
                    and (a["far"] or 0) >= (b["far"] or 0)),
            }
        out["rows"][name] = row
    return out


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def table(window: int, profile: str, fig: Mapping[str, Any]) -> str:
    cheapest = fig["cheapest_peer"] or "none"
    lines = [f"**{window:,} (input budget {window - 4096:,}), {profile}** — cheapest peer "
             f"completing all {fig['sessions']}: `{cheapest}`", "",
             "| policy | completed | cost USD | continuation | far | summaries | prunes | "
             f"vs `{cheapest}`: cost | continuation | far | ≤{BAR:.2f}× at ≥ retention |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in fig["rows"].items():
        v = r.get("vs_cheapest")
        vs = ("— | — | — | —" if v is None or v["cost_ratio"] is None else
              f"{v['cost_ratio']:.2f}× ({v['sessions']}) | {_pct(v['continuation'][0])} vs "
              f"{_pct(v['continuation'][1])} | {_pct(v['far'][0])} vs {_pct(v['far'][1])} | "
              + ("yes" if v["meets_bar"] else "no"))
        lines.append(
            f"| `{name}` | {r['completed']}/{fig['sessions']} | {r['cost_usd']:.4f} | "
            f"{_pct(r['continuation'])} | {_pct(r['far'])} | {r['summaries']} | "
            f"{r['prunes']} | {vs} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_economics",
        description="Replay the sample sessions under each price profile and window with "
                    "ctxfold, its variants and the peers; cost beside independent retention.")
    parser.add_argument("--sessions", type=Path, default=DEFAULT_SESSIONS,
                        help="folder (or file) of recorded sessions (default: %(default)s)")
    parser.add_argument("--windows", default="32000,64000,128000",
                        help="comma-separated context windows (default: %(default)s)")
    parser.add_argument("--profiles", default=",".join(DEFAULT_PROFILES),
                        help="comma-separated replay price profiles (default: %(default)s)")
    parser.add_argument("--variants", default="default",
                        help="comma-separated ctxfold variants (default: %(default)s): "
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
    from ctxfold.replay.pricing import PRICES

    profiles = [p for p in args.profiles.split(",") if p]
    names = [v for v in args.variants.split(",") if v]
    for flag, given, known in (("--profiles", profiles, PRICES), ("--variants", names, VARIANTS)):
        unknown = sorted(set(given) - set(known))
        if unknown:
            parser.error(f"{flag}: unknown {', '.join(unknown)}; known: {', '.join(known)}")
    try:
        windows = [int(w) for w in args.windows.split(",") if w]
    except ValueError:
        parser.error(f"--windows {args.windows!r}: comma-separated integers expected")
    peers = [*COMPARISON, *(PEERS if args.peers else ())]
    paths = _paths(args.sessions)
    jobs: list[Job] = [("default", paths, w, p, ["ctxfold", *peers], None)
                       for w in windows for p in profiles]
    jobs += [(n, paths, w, p, ["ctxfold"], VARIANTS[n])
             for w in windows for p in profiles for n in names if n != "default"]
    runs: dict[tuple[int, str], dict[str, dict[str, Any]]] = {}
    # One job per worker process: a variant patches module constants, which must not leak
    # into the next job.
    with ProcessPoolExecutor(max_workers=max(1, args.jobs), max_tasks_per_child=1) as pool:
        for label, window, profile, result in pool.map(_run, jobs):
            runs.setdefault((window, profile), {}).update(result)
            print(f"done: {label} at {window:,}, {profile}", file=sys.stderr)
    rows = ["ctxfold" if n == "default" else n for n in names]
    figs = {(w, p): figures(runs[(w, p)], peers, rows) for w in windows for p in profiles}
    tables = "\n\n".join(table(w, p, figs[(w, p)]) for w in windows for p in profiles)
    text = (
        f"{SECTION}\n\n{machine_line('python -m benchmarks.bench_economics')}\n\n"
        f"Sessions: {len(paths)} from `SESSIONS_DIR` (the team's sample of real agent "
        "sessions, not distributed with ctxfold). One cost model for every row "
        "(docs/replay.md); continuation and far facts are the replay's independent "
        "measure. *vs X* compares with the cheapest peer that completes every session, on "
        "the sessions both completed (their number).\n\n" + tables + "\n")
    print(text)
    if args.json:
        args.json.write_text(json.dumps({f"{w}/{p}": figs[(w, p)] for w, p in figs},
                                        indent=1))
    if not args.no_write:
        write_section(SECTION, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
