"""The ``--json`` report: exactly the documented format (``docs/replay.schema.json``).

::

    {"version": 4, "profile": str, "window": int, "reserve_output": int,
     "summary_tokens": int, "equal_summary_length": bool, "summarizer": str,
     "sessions": [{"name", "source", "messages", "requests", "probes", "facts",
                   "references": {"unlimited": {"cost_usd"}},
                   "policies": {POLICY: {<numeric fields>, "failed", "failure",
                                         "cost_breakdown": {...}, "ledger": {...},
                                         "retention": {...},
                                         "fidelity": {...}, "invariants": {...},
                                         ["per_request": [...]]}}}],
     "totals": {POLICY: {<numeric fields>, "failed", "cost_breakdown", "retention",
                         "fidelity", "vs_ctxfold": {"sessions", "cost_ratio"}}},
     "references": {"unlimited": {"cost_usd", "meaning"}},
     "missing_policies": {POLICY: why}}

``totals.<policy>.failed`` is the number of sessions in which the policy failed;
``vs_ctxfold`` is its cost divided by ctxfold's over the sessions both completed.
``retention`` is the independent measure (:mod:`ctxfold.replay.retention`); ``fidelity`` the
probe score, a diagnostic of what the engine's summary check optimises.
``per_request`` appears with ``--per-request``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxfold.replay.fidelity import FidelitySummary
from ctxfold.replay.results import (
    FIELDS,
    Paired,
    PolicyResult,
    SessionResult,
    paired,
    retention_counts_json,
    totals,
)
from ctxfold.replay.retention import Counts, RetentionSummary

VERSION = 4

UNLIMITED_MEANING = (
    "append-only with an unlimited window and a perfect cache: every token new to the "
    "conversation paid once at the miss price, every resent token at the hit price, every "
    "reply at the output price; the cost of keeping everything (fidelity 1.0). Not a lower "
    "bound: a policy that sends less pays less, and what it dropped shows in its fidelity.")


def _numbers(result: PolicyResult) -> dict[str, Any]:
    out: dict[str, Any] = {name: getattr(result, name) for name in FIELDS}
    out["cost_usd"] = round(result.cost_usd, 8)
    return out


def fidelity_json(summary: FidelitySummary) -> dict[str, float | None]:
    """A fidelity summary as JSON (``null`` where there was nothing to retain)."""
    def r(value: float | None) -> float | None:
        return None if value is None else round(value, 4)

    return {"mean": r(summary.mean), "constraints": r(summary.constraints),
            "last": r(summary.last), "below_half": r(summary.below_half)}


def _shares(counts: Counts) -> dict[str, Any]:
    def r(value: float | None) -> float | None:
        return None if value is None else round(value, 4)

    return {"continuation": r(counts.continuation), "far": r(counts.far),
            "needles": r(counts.needles), "needles_with_search": r(counts.needles_with_search),
            "counts": retention_counts_json(counts)}


def retention_json(summary: RetentionSummary) -> dict[str, Any]:
    """A retention summary as JSON: shares (``null`` where nothing was due) and the pooled
    counts, over all requests and from the first fold on (``null``: never folded)."""
    after = summary.after_first_fold
    return {**_shares(summary.all),
            "after_first_fold": None if after is None else _shares(after)}


def _paired_json(p: Paired) -> dict[str, Any]:
    ratio = p.cost_ratio
    return {"sessions": p.sessions, "cost_ratio": None if ratio is None else round(ratio, 4)}


def policy_json(result: PolicyResult, *, per_request: bool = False) -> dict[str, Any]:
    """One policy's entry of one session."""
    out = _numbers(result)
    out["failed"] = result.failed
    out["failure"] = result.failure or None
    out["cost_breakdown"] = result.breakdown.as_dict()
    out["ledger"] = result.ledger.as_dict()
    out["fallback_summaries"] = result.fallback_summaries
    out["retention"] = retention_json(result.retention)
    out["fidelity"] = fidelity_json(result.fidelity)
    out["invariants"] = {
        "canonical_intact": result.canonical_intact,
        "max_visible_summaries": result.max_visible_summaries,
        "prefix_stable_between_installs": result.prefix_stable_between_installs,
    }
    if per_request:
        out["per_request"] = [record.as_dict() for record in result.records]
    return out


def report_json(sessions: Sequence[SessionResult], *, profile: str, window: int,
                reserve_output: int = 0, summary_tokens: int = 0, per_request: bool = False,
                missing: Mapping[str, str] | None = None, equal_summary_length: bool = False,
                summarizer: str = "extractive") -> dict[str, Any]:
    """The whole report as a JSON-ready dict."""
    summed = totals(sessions)
    vs = paired(sessions)
    failed_count = {
        name: sum(1 for s in sessions if name in s.policies and s.policies[name].failed)
        for name in summed
    }
    return {
        "version": VERSION,
        "profile": profile,
        "window": window,
        "reserve_output": reserve_output,
        "summary_tokens": summary_tokens,
        "equal_summary_length": equal_summary_length,
        "summarizer": summarizer,
        "sessions": [
            {
                "name": s.name,
                "source": s.source,
                "messages": s.messages,
                "requests": s.requests,
                "probes": s.probes,
                "facts": s.facts,
                "references": {"unlimited": {"cost_usd": round(s.unlimited_cost_usd, 8)}},
                "policies": {name: policy_json(r, per_request=per_request)
                             for name, r in s.policies.items()},
            }
            for s in sessions
        ],
        "totals": {
            name: {**_numbers(r), "failed": failed_count[name],
                   "cost_breakdown": r.breakdown.as_dict(),
                   "ledger": r.ledger.as_dict(),
                   "fallback_summaries": r.fallback_summaries,
                   "retention": retention_json(r.retention),
                   "fidelity": fidelity_json(r.fidelity),
                   "vs_ctxfold": _paired_json(vs[name])}
            for name, r in summed.items()
        },
        "references": {"unlimited": {
            "cost_usd": round(sum(s.unlimited_cost_usd for s in sessions), 8),
            "meaning": UNLIMITED_MEANING}},
        "missing_policies": dict(missing or {}),
    }
