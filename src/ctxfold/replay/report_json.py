"""The ``--json`` report: exactly the documented format (``docs/replay.schema.json``).

::

    {"version": 1, "profile": str, "window": int,
     "sessions": [{"name", "messages", "requests",
                   "policies": {POLICY: {<numeric fields>, "failed",
                                         "invariants": {"canonical_intact",
                                                        "max_visible_summaries",
                                                        "prefix_stable_between_installs"}}}}],
     "totals": {POLICY: {<numeric fields>, "failed"}},
     "floor": {"cost_usd": float}}

``totals.<policy>.failed`` is the number of sessions in which the policy failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxfold.replay.runner import FIELDS, PolicyResult, SessionResult, totals

VERSION = 1


def _numbers(result: PolicyResult) -> dict[str, Any]:
    out: dict[str, Any] = {name: getattr(result, name) for name in FIELDS}
    out["cost_usd"] = round(result.cost_usd, 8)
    return out


def policy_json(result: PolicyResult) -> dict[str, Any]:
    """One policy's entry of one session."""
    out = _numbers(result)
    out["failed"] = result.failed
    out["invariants"] = {
        "canonical_intact": result.canonical_intact,
        "max_visible_summaries": result.max_visible_summaries,
        "prefix_stable_between_installs": result.prefix_stable_between_installs,
    }
    return out


def report_json(sessions: Sequence[SessionResult], *, profile: str, window: int) -> dict[str, Any]:
    """The whole report as a JSON-ready dict."""
    summed = totals(sessions)
    failed_count = {
        name: sum(1 for s in sessions if name in s.policies and s.policies[name].failed)
        for name in summed
    }
    return {
        "version": VERSION,
        "profile": profile,
        "window": window,
        "sessions": [
            {
                "name": s.name,
                "messages": s.messages,
                "requests": s.requests,
                "policies": {name: policy_json(r) for name, r in s.policies.items()},
            }
            for s in sessions
        ],
        "totals": {
            name: {**_numbers(r), "failed": failed_count[name]} for name, r in summed.items()
        },
        "floor": {"cost_usd": round(sum(s.floor_cost_usd for s in sessions), 8)},
    }
