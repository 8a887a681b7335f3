"""What a replay measures: per request, per policy and session, and summed over sessions."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ctxfold.engine.probes import RequestFidelity
from ctxfold.replay.billing import CostBreakdown
from ctxfold.replay.fidelity import FidelitySummary
from ctxfold.replay.retention import Counts, RetentionSummary

#: Numeric fields of a policy's result, in report order (the JSON keys).
FIELDS = ("requests", "prompt_tokens", "cache_hit_tokens", "cache_miss_tokens", "output_tokens",
          "cost_usd", "summaries", "prunes", "max_request_tokens")


@attrs.define
class FoldLedger:
    """A policy's cache ledger (docs/checkpoints.md, "The cache ledger"), billed by the
    replay's prefix cache: its folds' first-request cache reads and writes, the cached
    prefix they invalidated, their summaries' cost and their net saving against not folding
    (each fold credited for the requests sent on its view)."""

    folds: int = 0
    read_tokens: int = 0
    written_tokens: int = 0
    invalidated_tokens: int = 0
    summary_usd: float = 0.0
    net_saving_usd: float = 0.0

    def add(self, other: FoldLedger) -> None:
        for field in attrs.fields(FoldLedger):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

    def as_dict(self) -> dict[str, float]:
        return {"folds": self.folds, "read_tokens": self.read_tokens,
                "written_tokens": self.written_tokens,
                "invalidated_tokens": self.invalidated_tokens,
                "summary_usd": round(self.summary_usd, 8),
                "net_saving_usd": round(self.net_saving_usd, 8)}


@attrs.define
class RequestRecord:
    """One main request of one policy, with the summary requests made for it.

    ``number`` counts the session's main requests from 1 (what the charts call *request*);
    ``message_index`` is the canonical message the request produced.
    """

    number: int
    message_index: int
    prompt_tokens: int
    hit_tokens: int
    output_tokens: int
    summary_calls: int
    summary_prompt_tokens: int
    summary_hit_tokens: int
    summary_output_tokens: int
    view_messages: int
    fidelity: RequestFidelity
    cost_usd: float  # this request plus its summary requests
    retention: Counts = attrs.field(factory=Counts)
    after_first_fold: bool = False
    #: A fold's request: its cache ledger (``read_tokens``, ``written_tokens``,
    #: ``invalidated_tokens``, ``saved_per_request``, ``summary_usd``); ``None`` otherwise.
    ledger: dict[str, float] | None = None

    @property
    def miss_tokens(self) -> int:
        return self.prompt_tokens - self.hit_tokens

    def as_dict(self) -> dict[str, object]:
        return {
            "request": self.number, "message_index": self.message_index,
            "prompt_tokens": self.prompt_tokens, "cache_hit_tokens": self.hit_tokens,
            "cache_miss_tokens": self.miss_tokens, "output_tokens": self.output_tokens,
            "summary_calls": self.summary_calls,
            "summary_prompt_tokens": self.summary_prompt_tokens,
            "summary_cache_hit_tokens": self.summary_hit_tokens,
            "summary_output_tokens": self.summary_output_tokens,
            "view_messages": self.view_messages,
            "fidelity": _round(self.fidelity.weighted),
            "constraint_fidelity": _round(self.fidelity.constraints),
            "cost_usd": round(self.cost_usd, 8),
            "retention": retention_counts_json(self.retention),
            "after_first_fold": self.after_first_fold,
            "ledger": self.ledger,
        }


def retention_counts_json(counts: Counts) -> dict[str, int]:
    """The due and kept pairs of a :class:`Counts` (what the shares are computed from)."""
    return {field.name: getattr(counts, field.name) for field in attrs.fields(Counts)}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


@attrs.define
class PolicyResult:
    """What one policy did over one session (or, summed, over all sessions)."""

    requests: int = 0
    prompt_tokens: int = 0
    cache_hit_tokens: int = 0
    cache_miss_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    summaries: int = 0
    prunes: int = 0
    max_request_tokens: int = 0
    failed: bool = False
    failure: str = ""
    canonical_intact: bool = True
    max_visible_summaries: int = 0
    prefix_stable_between_installs: bool = True
    breakdown: CostBreakdown = attrs.field(factory=CostBreakdown)
    ledger: FoldLedger = attrs.field(factory=FoldLedger)
    records: list[RequestRecord] = attrs.field(factory=list)
    fidelity: FidelitySummary = attrs.field(factory=FidelitySummary)
    retention: RetentionSummary = attrs.field(factory=RetentionSummary)
    fallback_summaries: int = 0
    offers_search: bool = False  # some request offered ctxfold's history search

    @property
    def hit_ratio(self) -> float:
        """Cache-hit share of all prompt tokens (0 when nothing was sent)."""
        return self.cache_hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def add(self, other: PolicyResult) -> None:
        """Accumulate ``other`` into this total (sums, maxima, any-failed, all-invariants,
        records concatenated). The fidelity summary is recomputed by :func:`totals`."""
        for name in FIELDS:
            if name == "max_request_tokens":
                self.max_request_tokens = max(self.max_request_tokens, other.max_request_tokens)
            else:
                setattr(self, name, getattr(self, name) + getattr(other, name))
        self.failed = self.failed or other.failed
        self.canonical_intact = self.canonical_intact and other.canonical_intact
        self.max_visible_summaries = max(self.max_visible_summaries, other.max_visible_summaries)
        self.prefix_stable_between_installs = (
            self.prefix_stable_between_installs and other.prefix_stable_between_installs
        )
        self.breakdown.add(other.breakdown)
        self.ledger.add(other.ledger)
        self.records.extend(other.records)
        self.fallback_summaries += other.fallback_summaries
        self.offers_search = self.offers_search or other.offers_search


@attrs.define
class SessionResult:
    """The replay of one session under every policy, with the ``unlimited`` reference."""

    name: str
    messages: int
    requests: int
    policies: dict[str, PolicyResult]
    unlimited_cost_usd: float
    trigger: int
    probes: int = 0
    facts: int = 0
    #: The file or folder the session was imported from ("" for a generated one).
    source: str = ""


def totals(sessions: Sequence[SessionResult]) -> dict[str, PolicyResult]:
    """Per-policy sums over ``sessions``. Fidelity: the mean over every request of every
    session, and the mean of each session's last-request retention."""
    out: dict[str, PolicyResult] = {}
    lasts: dict[str, list[float]] = {}
    failed: dict[str, list[str]] = {}
    for session in sessions:
        for name, result in session.policies.items():
            out.setdefault(name, PolicyResult()).add(result)
            if result.fidelity.last is not None:
                lasts.setdefault(name, []).append(result.fidelity.last)
            if result.failed:
                failed.setdefault(name, []).append(session.name)
    for name, result in out.items():
        if name in failed:
            result.failure = (f"failed in {len(failed[name])} of {len(sessions)} session(s): "
                              + ", ".join(failed[name]))
        summary = FidelitySummary.of([r.fidelity for r in result.records])
        values = lasts.get(name)
        summary.last = sum(values) / len(values) if values else None
        result.fidelity = summary
        result.retention = _retention([s.policies[name] for s in sessions
                                       if name in s.policies])
    return out


def _retention(results: Sequence[PolicyResult]) -> RetentionSummary:
    """The pooled retention of several sessions' results (the after-first-fold counts of the
    sessions in which the policy folded)."""
    total = RetentionSummary()
    for r in results:
        total.all.add(r.retention.all)
        if r.retention.after_first_fold is not None:
            total.after_first_fold = total.after_first_fold or Counts()
            total.after_first_fold.add(r.retention.after_first_fold)
    return total


@attrs.frozen
class Paired:
    """A policy against a baseline over the sessions both completed: how many, the ratio of
    their costs (``None`` when they completed none together), and both policies' sums over
    those sessions (fidelity and cost breakdown on the same basis)."""

    sessions: int
    cost_ratio: float | None
    policy: PolicyResult | None = None
    baseline: PolicyResult | None = None


def paired(sessions: Sequence[SessionResult], baseline: str = "ctxfold") -> dict[str, Paired]:
    """Each policy's cost relative to ``baseline`` on the sessions both completed — the only
    fair reading of totals in which some policies failed somewhere."""
    out: dict[str, Paired] = {}
    names = {n for s in sessions for n in s.policies}
    for name in sorted(names):
        both = [s for s in sessions if name in s.policies and baseline in s.policies
                and not s.policies[name].failed and not s.policies[baseline].failed]
        base = sum(s.policies[baseline].cost_usd for s in both)
        cost = sum(s.policies[name].cost_usd for s in both)
        shared = totals([attrs.evolve(s, policies={n: s.policies[n] for n in (name, baseline)})
                         for s in both]) if both else {}
        out[name] = Paired(len(both), cost / base if base else None,
                           shared.get(name), shared.get(baseline))
    return out
