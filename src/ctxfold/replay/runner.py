"""The replay runner: every policy rebuilds every model request of a recorded session.

For each assistant message of a session, each policy builds the request it would have sent
from the messages before it (a :class:`~ctxfold.kernel.contracts.Policy`). Each request is
billed (:mod:`ctxfold.replay.billing`), checked against the input budget (the window minus the
output reservation — the same for every request of every policy) and scored twice: by the
independent retention of continuation facts, far facts and needles
(:mod:`ctxfold.replay.retention`, the headline), and by the engine's own probes
(:mod:`ctxfold.engine.probes`, a diagnostic: what the summary check optimises).

Alike for every policy: earlier reasoning is not sent back (each request's messages lose
``reasoning_content``; the reply's reasoning is billed as output), a request bills the tools
it offers, and after each main request the policy may read the usage a provider would report
for it (``observe_usage(Usage)``, for the libraries that size their context from it).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from ctxfold.engine.probes import FidelityScorer, extract_probes
from ctxfold.interop.chat import message_to_openai
from ctxfold.kernel.config import Config
from ctxfold.kernel.contracts import Estimator, Policy, Summarizer
from ctxfold.kernel.errors import CtxfoldError
from ctxfold.kernel.kinds import POLICY, PolicyOptions
from ctxfold.kernel.ledger import LedgerEntry
from ctxfold.kernel.registry import Registry
from ctxfold.kernel.sessions import ImportedSession, PolicyRequest
from ctxfold.kernel.summary import is_summary_message
from ctxfold.kernel.types import Message, RequestShape, ToolSchema, Usage
from ctxfold.replay.billing import Biller, make_cache, token_source_for, unlimited_cost
from ctxfold.replay.fidelity import FidelitySummary
from ctxfold.replay.pricing import Price
from ctxfold.replay.results import FoldLedger, PolicyResult, RequestRecord, SessionResult
from ctxfold.replay.retention import RetentionScorer, RetentionSummary

#: The tool whose presence in a request means the policy offers history search.
SEARCH_TOOL = "use_capability"

#: The output reservation every request gets unless told otherwise: room for a typical
#: agent turn (a tool call with its arguments, or a short answer) and for a 2K briefing.
DEFAULT_RESERVE_OUTPUT = 4_096
#: The briefing length of summary requests that ask for none. None of the modelled
#: counterparts asks its model for a length (docs/replay.md cites each prompt), so a model
#: writes what it writes; 2,048 tokens stands in for that, and ``--summary-tokens N`` gives
#: every policy, ctxfold included, the same length instead (the sensitivity run).
DEFAULT_SUMMARY_TOKENS = 2_048


def without_reasoning(messages: Sequence[Message]) -> tuple[Message, ...]:
    """``messages`` as every policy's request sends them: earlier reasoning is not sent back
    (one rule for all; the libraries drop it, and so does DeepSeek's own template)."""
    return tuple(attrs.evolve(m, reasoning_content=None) if m.reasoning_content else m
                 for m in messages)


def serialize(messages: Sequence[Message]) -> bytes:
    """The request's message list as a provider would receive it (compact JSON bytes)."""
    return json.dumps([message_to_openai(m, local_fields=False) for m in messages],
                      ensure_ascii=False, separators=(",", ":")).encode()


def build_policies(
    names: Sequence[str], registry: Registry, config: Config, setup: PolicyOptions,
    constants: Mapping[str, Mapping[str, float]] | None = None,
) -> dict[str, Policy]:
    """Instantiate the named policies with ``setup``; ``constants[name]`` tunes policy
    ``name``'s constants."""
    tuned = constants or {}
    return {
        name: registry.create(POLICY, name, config=config, options=attrs.evolve(
            setup, constants=dict(tuned.get(name, {}))))
        for name in names
    }


def _canonical_equal(kept: Sequence[Message], imported: Sequence[Message]) -> bool:
    def key(m: Message) -> tuple[Any, ...]:
        full = m.raw_content if m.raw_content is not None else m.content
        return (m.role, full, m.tool_calls, m.tool_call_id, m.name, m.reasoning_content)

    return len(kept) == len(imported) and all(
        key(a) == key(b) for a, b in zip(kept, imported, strict=True)
    )


class _Track:
    """Per-policy running state during a session."""

    def __init__(self, policy: Policy, biller: Biller, scorer: FidelityScorer,
                 budget: int, reserve: int, retention: RetentionScorer,
                 messages: Sequence[Message] = ()) -> None:
        self.policy = policy
        self.biller = biller
        self.scorer = scorer
        self.retention = retention
        self.budget = budget
        self.reserve = reserve
        self.result = PolicyResult()
        self.previous: bytes | None = None
        self.folded = False  # maintained at least once (summary, prune, cut)
        self.messages = messages
        #: The previous main request: its message index, prompt and output tokens (what the
        #: prefix cache holds after it), and the ledger entry of the fold whose view is sent.
        self.last: tuple[int, int, int] = (-1, 0, 0)
        self.fold: LedgerEntry | None = None

    def _overflow(self, what: str, tokens: int) -> None:
        self.result.failed = True
        self.result.failure = (
            f"{what} has {tokens:,} tokens, above the input budget of {self.budget:,} "
            f"(window {self.budget + self.reserve:,} minus the {self.reserve:,}-token output "
            "reservation): a provider overflow")

    def step(self, index: int, reply: Message, tools: Sequence[ToolSchema]) -> None:
        result = self.result
        number = len(result.records) + 1
        try:
            req: PolicyRequest = self.policy.request()
        except CtxfoldError as exc:  # PolicyFailedError, or a maintenance error of the engine
            result.failed, result.failure = True, f"request {number}: {exc}"
            return
        cost = 0.0
        summary = [0, 0, 0]  # prompt, hit, output of this request's summary calls
        for call in req.summaries:
            bill = self.biller.bill(call.request.messages, call.request.tools,
                                    Message(role="assistant", content=call.text))
            if bill.prompt > self.budget:
                self._overflow(f"the summary request before request {number}", bill.prompt)
                return
            if bill.prompt + bill.output > self.budget + self.reserve:  # its briefing too
                result.failed, result.failure = True, (
                    f"the summary request before request {number}: {bill.prompt:,} prompt + "
                    f"{bill.output:,} output tokens exceed the {self.budget + self.reserve:,}"
                    "-token window (the briefing asked for is longer than the reservation)")
                return
            self._count(bill)
            result.breakdown.add_summary(bill)
            result.summaries += 1
            cost += bill.cost_usd
            summary = [summary[0] + bill.prompt, summary[1] + bill.hit,
                       summary[2] + bill.output]
        messages = without_reasoning(req.messages)
        offered = tuple(req.tools) if req.tools is not None else tuple(tools)
        bill = self.biller.bill(messages, offered, reply)
        if bill.prompt > self.budget:
            self._overflow(f"request {number} (before message {index})", bill.prompt)
            return
        self._count(bill)
        observe_usage = getattr(self.policy, "observe_usage", None)
        if observe_usage is not None:
            observe_usage(Usage(prompt_tokens=bill.prompt, completion_tokens=bill.output,
                                cache_hit_tokens=bill.hit, cache_miss_tokens=bill.miss))
        result.breakdown.add_main(bill)
        cost += bill.cost_usd
        result.prunes += req.prunes
        result.summaries += req.fallback_summaries
        result.fallback_summaries += req.fallback_summaries
        self.folded = self.folded or req.installed or bool(req.summaries)
        result.max_request_tokens = max(result.max_request_tokens, bill.prompt)
        result.max_visible_summaries = max(result.max_visible_summaries,
                                           sum(1 for m in messages if is_summary_message(m)))
        search = any(t.name == SEARCH_TOOL for t in offered)
        result.offers_search = result.offers_search or search
        body = serialize(messages)
        if (self.previous is not None and not req.installed
                and not body.startswith(self.previous[:-1])):
            result.prefix_stable_between_installs = False
        self.previous = body
        ledger = None
        if req.installed:
            ledger = self._fold(index, bill, summary)
        elif self.fold is not None:  # one more request on the fold's view; a summary that
            # was asked for and not installed is a cost of keeping that view
            f = self.fold
            self.fold = attrs.evolve(
                f, requests=f.requests + 1, summary_input=f.summary_input + summary[0],
                summary_read=f.summary_read + summary[1],
                summary_output=f.summary_output + summary[2])
        self.last = (index, bill.prompt, bill.output)
        result.records.append(RequestRecord(
            number=number, message_index=index, prompt_tokens=bill.prompt, hit_tokens=bill.hit,
            output_tokens=bill.output, summary_calls=len(req.summaries),
            summary_prompt_tokens=summary[0], summary_hit_tokens=summary[1],
            summary_output_tokens=summary[2], view_messages=len(messages),
            fidelity=self.scorer.score(messages, index), cost_usd=cost,
            retention=self.retention.score(messages, index, search=search),
            after_first_fold=self.folded, ledger=ledger))

    def _fold(self, index: int, bill: Any, summary: Sequence[int]) -> dict[str, float]:
        """Open the ledger entry of the fold this request is the first after; its record's
        ledger. Not folding, the request would have sent the previous request, its reply
        and the messages since."""
        self.close()
        before, prompt, output = self.last
        new = without_reasoning(self.messages[before + 1:index])
        unfolded = prompt + output + self.biller.estimator.estimate(RequestShape(list(new)))
        p = self.biller.price
        cached = prompt + (output if p.caches_replies else 0)  # what the provider held
        self.fold = LedgerEntry(
            read=bill.hit, written=bill.miss, invalidated=max(cached - bill.hit, 0),
            saved_per_request=max(unfolded - bill.prompt, 0), requests=1,
            summary_input=summary[0], summary_read=summary[1], summary_output=summary[2],
            estimated=False)
        return {"read_tokens": bill.hit, "written_tokens": bill.miss,
                "invalidated_tokens": self.fold.invalidated,
                "saved_per_request": self.fold.saved_per_request,
                "summary_usd": round(self.fold.summary_cost(p.hit, p.uncached, p.output), 8)}

    def close(self) -> None:
        """Add the open fold's entry to the policy's ledger (its view is no longer sent)."""
        if self.fold is None:
            return
        f, p = self.fold, self.biller.price
        self.result.ledger.add(FoldLedger(
            folds=1, read_tokens=f.read, written_tokens=f.written,
            invalidated_tokens=f.invalidated,
            summary_usd=f.summary_cost(p.hit, p.uncached, p.output),
            net_saving_usd=f.net_saving(p.hit, p.uncached, p.output)))
        self.fold = None

    def _count(self, bill: Any) -> None:
        r = self.result
        r.requests += 1
        r.prompt_tokens += bill.prompt
        r.cache_hit_tokens += bill.hit
        r.cache_miss_tokens += bill.miss
        r.output_tokens += bill.output
        r.cost_usd += bill.cost_usd


def replay_session(
    session: ImportedSession,
    policy_names: Sequence[str],
    *,
    registry: Registry,
    config: Config,
    estimator: Estimator,
    summarizer: Summarizer,
    price: Price,
    window: int,
    compact_ratio: float,
    reserve_output: int = DEFAULT_RESERVE_OUTPUT,
    summary_tokens: int = DEFAULT_SUMMARY_TOKENS,
    equal_summary_length: bool = False,
    tokens: Any = None,
    cache_factory: Callable[[Price], tuple[Any, bool]] = make_cache,
    on_step: Callable[[], None] | None = None,
    constants: Mapping[str, Mapping[str, float]] | None = None,
) -> SessionResult:
    """Replay one imported session under ``policy_names``; see the module docstring."""
    tokens = tokens if tokens is not None else token_source_for(estimator)
    messages = list(session.messages)
    tools = tuple(session.tools)
    budget = window - reserve_output
    scorer = FidelityScorer(extract_probes(messages))
    retention = RetentionScorer(messages)
    with tempfile.TemporaryDirectory(prefix="ctxfold-replay-") as workdir:
        setup = PolicyOptions(tools=tools, window=budget, compact_ratio=compact_ratio,
                              estimator=estimator, summarizer=summarizer, workdir=Path(workdir),
                              session_name=session.name, reserve_output=reserve_output,
                              summary_tokens=summary_tokens,
                              equal_summary_length=equal_summary_length)
        tracks: dict[str, _Track] = {}
        for name, policy in build_policies(policy_names, registry, config, setup,
                                           constants).items():
            cache, thinking = cache_factory(price)
            tracks[name] = _Track(policy, Biller(estimator, tokens, cache, price, thinking),
                                  scorer, budget, reserve_output, retention, messages)
        for index, message in enumerate(messages):
            if message.role == "assistant":
                for track in tracks.values():
                    if not track.result.failed:
                        track.step(index, message, tools)
                if on_step is not None:
                    on_step()
            for track in tracks.values():
                if not track.result.failed:
                    track.policy.observe(message)
        for track in tracks.values():
            track.close()
            kept = track.policy.canonical()
            if kept is not None:
                # A failed policy stopped observing: its transcript must equal the prefix.
                expected = messages if not track.result.failed else messages[:len(kept)]
                track.result.canonical_intact = _canonical_equal(kept, expected)
            track.result.fidelity = FidelitySummary.of([r.fidelity for r in
                                                        track.result.records])
            track.result.retention = RetentionSummary.of(
                [(r.retention, r.after_first_fold) for r in track.result.records])
        return SessionResult(
            name=session.name,
            source=str(session.source) if str(session.source) not in ("", ".") else "",
            messages=len(messages),
            requests=sum(1 for m in messages if m.role == "assistant"),
            policies={name: track.result for name, track in tracks.items()},
            unlimited_cost_usd=unlimited_cost(messages, tools, estimator, tokens, price),
            trigger=setup.trigger,
            probes=len(scorer.probes),
            facts=len(retention.facts),
        )
