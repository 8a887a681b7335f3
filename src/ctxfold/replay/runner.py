"""The replay runner: every policy rebuilds every model request of a recorded session.

For each assistant message of a session, each policy builds the request it would have sent from
the messages before it (a :class:`~ctxfold.kernel.contracts.Policy`). The request is billed like
the provider would bill it:

* prompt tokens: the configured estimator (default ``deepseek``, the exact tokenizer);
* cache hits/misses: the emulator's prefix cache (:class:`ctxfold.emulator.cache.PrefixCache`
  with the rules of the profile's provider), one cache per policy. The request is serialized
  with the emulator's chat template and the recorded assistant message is the reply, so its
  output enters the next request's prefix exactly as the provider sees it. The hit share of
  the emulator's token sequence is applied to the estimator's prompt count;
* output tokens: the reply's tokens in the same template (reasoning, content, tool calls);
* summary requests are extra requests: prompt and output costed, prompt through the cache.

The emulator cache runs on a frozen clock: a replay has no real timing, so no entry expires.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from ctxfold.interop.chat import message_to_openai
from ctxfold.kernel.config import Config
from ctxfold.kernel.contracts import Estimator, Policy, Summarizer
from ctxfold.kernel.errors import CtxfoldError
from ctxfold.kernel.kinds import POLICY, PolicyOptions
from ctxfold.kernel.registry import Registry
from ctxfold.kernel.summary import is_summary_message
from ctxfold.kernel.types import ImportedSession, Message, PolicyRequest, RequestShape, ToolSchema
from ctxfold.replay.pricing import Price

#: Numeric fields of a policy's result, in report order (the JSON keys).
FIELDS = ("requests", "prompt_tokens", "cache_hit_tokens", "cache_miss_tokens", "output_tokens",
          "cost_usd", "summaries", "prunes", "max_request_tokens")


@attrs.define
class Turn:
    """One main request of one policy (for the HTML charts)."""

    index: int
    prompt_tokens: int
    hit_tokens: int
    miss_tokens: int
    cost_usd: float  # this request plus its summary requests


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
    turns: list[Turn] = attrs.field(factory=list)

    @property
    def hit_ratio(self) -> float:
        """Cache-hit share of all prompt tokens (0 when nothing was sent)."""
        return self.cache_hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def add(self, other: PolicyResult) -> None:
        """Accumulate ``other`` into this total (sums, maxima, any-failed, all-invariants)."""
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


@attrs.define
class SessionResult:
    """The replay of one session under every policy."""

    name: str
    messages: int
    requests: int
    policies: dict[str, PolicyResult]
    floor_cost_usd: float
    trigger: int


@attrs.define
class Biller:
    """Bills requests against one policy's prefix cache."""

    estimator: Estimator
    tokens: Any  # ctxfold.emulator.tokens.TokenSource
    cache: Any  # ctxfold.emulator.cache.PrefixCache
    price: Price
    persist_thinking_output: bool = False

    def bill(self, messages: Sequence[Message], tools: Sequence[ToolSchema],
             reply: Message) -> tuple[int, int, int, float]:
        """(prompt, hit, output, cost) of one request answered by ``reply``."""
        from ctxfold.emulator.tokens import assistant_body, encode_segments, request_segments

        ids = encode_segments(self.tokens, request_segments(messages, tools))
        out_ids = encode_segments(self.tokens, [assistant_body(reply)])
        # DeepSeek's reasoner does not persist the end of a thinking reply (emulator profile).
        persist = not reply.reasoning_content or self.persist_thinking_output
        result = self.cache.account("replay", ids, out_ids if persist else ())
        prompt = self.estimator.estimate(RequestShape(list(messages), list(tools)))
        hit = min(prompt, round(prompt * result.hit_tokens / len(ids))) if ids else 0
        output = len(out_ids)
        return prompt, hit, output, self.price.cost(hit, prompt - hit, output)


def serialize(messages: Sequence[Message]) -> bytes:
    """The request's message list as a provider would receive it (compact JSON bytes)."""
    return json.dumps([message_to_openai(m, local_fields=False) for m in messages],
                      ensure_ascii=False, separators=(",", ":")).encode()


def make_cache(price: Price) -> tuple[Any, bool]:
    """A fresh prefix cache with the rules of ``price``'s emulator profile, on a frozen clock."""
    from ctxfold.emulator.cache import PrefixCache
    from ctxfold.emulator.profiles import get_profile

    profile = get_profile(price.emulator_profile)
    cache = PrefixCache(unit=profile.cache_unit, ttl=profile.cache_ttl,
                        policy=profile.cache_policy, min_tokens=profile.cache_min_tokens,
                        interval_units=profile.cache_interval_units, clock=lambda: 0.0)
    return cache, profile.cache_thinking_output


def token_source_for(estimator: Estimator) -> Any:
    """The emulator token source matching ``estimator``: the DeepSeek tokenizer for the
    ``deepseek`` estimator, else the estimator's own text counter (message-granular)."""
    from ctxfold.emulator.tokens import token_source

    if getattr(estimator, "name", "") == "deepseek" or not hasattr(estimator, "count_text"):
        return token_source(None)
    return token_source(estimator.count_text)


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

    def __init__(self, policy: Policy, biller: Biller) -> None:
        self.policy = policy
        self.biller = biller
        self.result = PolicyResult()
        self.previous: bytes | None = None

    def step(self, index: int, reply: Message, tools: Sequence[ToolSchema], window: int) -> None:
        result = self.result
        try:
            req: PolicyRequest = self.policy.request()
        except CtxfoldError as exc:  # PolicyFailedError, or a maintenance error of the engine
            result.failed, result.failure = True, str(exc)
            return
        cost = 0.0
        for call in req.summaries:
            summary_reply = Message(role="assistant", content=call.text)
            prompt, hit, out, c = self.biller.bill(call.request.messages, call.request.tools,
                                                   summary_reply)
            self._count(prompt, hit, out, c)
            result.summaries += 1
            cost += c
        prompt, hit, out, c = self.biller.bill(req.messages, tools, reply)
        if prompt > window:
            result.failed = True
            result.failure = (f"request before message {index} has {prompt} tokens, above the "
                              f"window of {window} (provider overflow)")
            return
        self._count(prompt, hit, out, c)
        cost += c
        result.prunes += req.prunes
        result.max_request_tokens = max(result.max_request_tokens, prompt)
        result.max_visible_summaries = max(result.max_visible_summaries,
                                           sum(1 for m in req.messages if is_summary_message(m)))
        body = serialize(req.messages)
        if (self.previous is not None and not req.installed
                and not body.startswith(self.previous[:-1])):
            result.prefix_stable_between_installs = False
        self.previous = body
        result.turns.append(Turn(index, prompt, hit, prompt - hit, cost))

    def _count(self, prompt: int, hit: int, out: int, cost: float) -> None:
        r = self.result
        r.requests += 1
        r.prompt_tokens += prompt
        r.cache_hit_tokens += hit
        r.cache_miss_tokens += prompt - hit
        r.output_tokens += out
        r.cost_usd += cost


def floor_cost(messages: Sequence[Message], tools: Sequence[ToolSchema], estimator: Estimator,
               tokens: Any, price: Price) -> float:
    """The physical limit for resending this session's full history: every prompt token new
    to the conversation paid once at the miss price, every resent token (the previous
    prompt and the previous reply, which the provider caches) at the hit price, every reply
    at the output price. Messages after the last assistant reply are never sent."""
    from ctxfold.emulator.tokens import assistant_body, encode_segments

    hits = misses = outputs = 0
    reusable = 0  # tokens of the previous request plus its reply
    for i, message in enumerate(messages):
        if message.role != "assistant":
            continue
        prompt = estimator.estimate(RequestShape(list(messages[:i]), list(tools)))
        new = max(0, prompt - reusable)
        misses += new
        hits += prompt - new
        output = len(encode_segments(tokens, [assistant_body(message)]))
        outputs += output
        reusable = prompt + output
    return price.cost(hits, misses, outputs)


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
    tokens: Any = None,
    cache_factory: Callable[[Price], tuple[Any, bool]] = make_cache,
    on_step: Callable[[], None] | None = None,
    constants: Mapping[str, Mapping[str, float]] | None = None,
) -> SessionResult:
    """Replay one imported session under ``policy_names``; see the module docstring."""
    tokens = tokens if tokens is not None else token_source_for(estimator)
    messages = list(session.messages)
    tools = tuple(session.tools)
    with tempfile.TemporaryDirectory(prefix="ctxfold-replay-") as workdir:
        setup = PolicyOptions(tools=tools, window=window, compact_ratio=compact_ratio,
                              estimator=estimator, summarizer=summarizer, workdir=Path(workdir),
                              session_name=session.name)
        tracks: dict[str, _Track] = {}
        built = build_policies(policy_names, registry, config, setup, constants)
        for name, policy in built.items():
            cache, thinking = cache_factory(price)
            tracks[name] = _Track(policy, Biller(estimator, tokens, cache, price, thinking))
        for index, message in enumerate(messages):
            if message.role == "assistant":
                for track in tracks.values():
                    if not track.result.failed:
                        track.step(index, message, tools, window)
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
        return SessionResult(
            name=session.name,
            messages=len(messages),
            requests=sum(1 for m in messages if m.role == "assistant"),
            policies={name: track.result for name, track in tracks.items()},
            floor_cost_usd=floor_cost(messages, tools, estimator, tokens, price),
            trigger=setup.trigger,
        )


def totals(sessions: Sequence[SessionResult]) -> dict[str, PolicyResult]:
    """Per-policy sums over ``sessions`` (turn records are not carried over)."""
    out: dict[str, PolicyResult] = {}
    for session in sessions:
        for name, result in session.policies.items():
            out.setdefault(name, PolicyResult()).add(result)
    return out
