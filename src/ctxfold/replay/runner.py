"""The replay runner: every policy rebuilds every model request of a recorded session.

For each assistant message of a session, each policy builds the request it would have sent
from the messages before it (a :class:`~ctxfold.kernel.contracts.Policy`). Each request is
billed (:mod:`ctxfold.replay.billing`), checked against the input budget (the window minus the
output reservation — the same for every request of every policy) and scored for fidelity
against the session's probes (:mod:`ctxfold.engine.probes`).
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
from ctxfold.kernel.registry import Registry
from ctxfold.kernel.sessions import ImportedSession, PolicyRequest
from ctxfold.kernel.summary import is_summary_message
from ctxfold.kernel.types import Message, ToolSchema
from ctxfold.replay.billing import Biller, make_cache, token_source_for, unlimited_cost
from ctxfold.replay.fidelity import FidelitySummary
from ctxfold.replay.pricing import Price
from ctxfold.replay.results import PolicyResult, RequestRecord, SessionResult

#: The output reservation every request gets unless told otherwise: room for a typical
#: agent turn (a tool call with its arguments, or a short answer) and for a 2K briefing.
DEFAULT_RESERVE_OUTPUT = 4_096
#: The briefing length every policy's summary requests ask for unless told otherwise. None of
#: the modelled counterparts asks a length (their models write what the prompt asks); 2,048
#: tokens is a structured briefing of the seven ctxfold headings.
DEFAULT_SUMMARY_TOKENS = 2_048


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
                 budget: int, reserve: int) -> None:
        self.policy = policy
        self.biller = biller
        self.scorer = scorer
        self.budget = budget
        self.reserve = reserve
        self.result = PolicyResult()
        self.previous: bytes | None = None

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
        bill = self.biller.bill(req.messages, tools if req.tools is None else req.tools, reply)
        if bill.prompt > self.budget:
            self._overflow(f"request {number} (before message {index})", bill.prompt)
            return
        self._count(bill)
        result.breakdown.add_main(bill)
        cost += bill.cost_usd
        result.prunes += req.prunes
        result.max_request_tokens = max(result.max_request_tokens, bill.prompt)
        result.max_visible_summaries = max(result.max_visible_summaries,
                                           sum(1 for m in req.messages if is_summary_message(m)))
        body = serialize(req.messages)
        if (self.previous is not None and not req.installed
                and not body.startswith(self.previous[:-1])):
            result.prefix_stable_between_installs = False
        self.previous = body
        result.records.append(RequestRecord(
            number=number, message_index=index, prompt_tokens=bill.prompt, hit_tokens=bill.hit,
            output_tokens=bill.output, summary_calls=len(req.summaries),
            summary_prompt_tokens=summary[0], summary_hit_tokens=summary[1],
            summary_output_tokens=summary[2], view_messages=len(req.messages),
            fidelity=self.scorer.score(req.messages, index), cost_usd=cost))

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
    with tempfile.TemporaryDirectory(prefix="ctxfold-replay-") as workdir:
        setup = PolicyOptions(tools=tools, window=budget, compact_ratio=compact_ratio,
                              estimator=estimator, summarizer=summarizer, workdir=Path(workdir),
                              session_name=session.name, reserve_output=reserve_output,
                              summary_tokens=summary_tokens)
        tracks: dict[str, _Track] = {}
        for name, policy in build_policies(policy_names, registry, config, setup,
                                           constants).items():
            cache, thinking = cache_factory(price)
            tracks[name] = _Track(policy, Biller(estimator, tokens, cache, price, thinking),
                                  scorer, budget, reserve_output)
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
            kept = track.policy.canonical()
            if kept is not None:
                # A failed policy stopped observing: its transcript must equal the prefix.
                expected = messages if not track.result.failed else messages[:len(kept)]
                track.result.canonical_intact = _canonical_equal(kept, expected)
            track.result.fidelity = FidelitySummary.of([r.fidelity for r in
                                                        track.result.records])
        return SessionResult(
            name=session.name,
            source=str(session.source) if str(session.source) not in ("", ".") else "",
            messages=len(messages),
            requests=sum(1 for m in messages if m.role == "assistant"),
            policies={name: track.result for name, track in tracks.items()},
            unlimited_cost_usd=unlimited_cost(messages, tools, estimator, tokens, price),
            trigger=setup.trigger,
            probes=len(scorer.probes),
        )
