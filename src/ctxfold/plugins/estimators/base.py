"""Incremental, calibrated token estimation (design §2.2, §2.3).

:class:`TokenizerEstimator` implements the :class:`~ctxfold.kernel.contracts.IncrementalEstimator`
protocol for any tokenizer that can count one text: subclasses provide
:meth:`~TokenizerEstimator.count_text` and the base counts a whole
:class:`~ctxfold.kernel.types.RequestShape` the way design §2.2 describes the
request shape:

* per message ``message_overhead`` + role + content + name + tool_call_id, plus
  ``reasoning_content`` only for assistant messages with tool calls (DeepSeek replays
  reasoning only there), plus per tool call ``call_overhead`` + id + name + arguments;
* per tool schema ``tool_overhead`` + name + description + JSON of the parameters, plus a
  one-off ``tools_preamble`` when any tool is offered and ``request_overhead`` per request;
* ``local_only`` messages are never sent, so never counted; ``raw_content`` never counts.

Per-message counts are cached (bounded LRU) by message value and by
:func:`~ctxfold.kernel.fingerprint.message_fingerprint`, so estimating turn n+1 tokenizes only
the new message. Calibration follows design §2.3: ratio = provider prompt tokens / raw
estimate of exactly that request, accepted only when 0.05 < prompt tokens / request chars < 2,
never from ``estimated`` or ``aggregated`` usage (origin bug #7930), reset on model change.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence

from ctxfold.kernel.fingerprint import message_fingerprint
from ctxfold.kernel.types import (
    MIN_CALIBRATION_TOKENS,
    Message,
    RequestShape,
    TextStats,
    ToolCall,
    ToolSchema,
    Usage,
)
from ctxfold.plugins.estimators._cache import LRUCache
from ctxfold.plugins.estimators.rules import (
    COLD_CJK_TOKENS_PER_CHAR,
    DEFAULT_CACHE_SIZE,
    NON_TEXT_PART_TOKENS,
    SANITY_MAX_TOKENS_PER_CHAR,
    SANITY_MIN_TOKENS_PER_CHAR,
    Calibration,
    cjk_count,
    non_text_parts,
)


class TokenizerEstimator:
    """Base of the built-in estimators: cached per-message counts plus calibration.

    Subclasses set :attr:`name`, implement :meth:`count_text` and may override
    :meth:`count_texts` (batch tokenization), :meth:`message_texts` / :meth:`call_texts`
    (template-specific rendering) and the overhead class attributes. The
    ``count_call_ids`` = False leaves tool-call ids out (on calls and on tool results) for
    chat templates that do not render them. ``cjk_aware`` enables design §2.3's CJK
    correction of calibrated estimates; it only makes sense for estimators whose raw count
    prices CJK at the cold rate (the heuristic).
    """

    name: str = "incremental"
    message_overhead: int = 4
    call_overhead: int = 8
    reasoning_overhead: int = 0
    tool_overhead: int = 8
    request_overhead: int = 0
    tools_preamble: int = 0
    count_call_ids: bool = True
    cjk_aware: bool = False

    #: Bump when the same message would count differently (tokenizer data, template rules
    #: not captured by the overhead attributes): persisted counts of another key are ignored.
    count_version: str = "1"

    def __init__(self, cache_size: int = DEFAULT_CACHE_SIZE) -> None:
        # Two levels: by message value (hashing a frozen Message reuses the cached hashes
        # of its strings, so a hit costs O(fields), not O(content)) and by fingerprint
        # (dedups messages that differ only in local fields such as id or raw_content).
        self._by_message: LRUCache[Message, TextStats] = LRUCache(cache_size)
        self._by_fingerprint: LRUCache[str, TextStats] = LRUCache(cache_size)
        self._by_tool: LRUCache[str, TextStats] = LRUCache(max(1, cache_size // 100))
        self._calibration: Calibration | None = None
        # Counts measured since the last take_new_counts(), kept only once seed_counts()
        # said they are persisted (else nothing would ever drain them).
        self._new: dict[str, TextStats] | None = None
        self._persisted: Mapping[str, TextStats] = {}

    # -- persisted counts ----------------------------------------------------------------------

    @property
    def count_key(self) -> str:
        """Identity and version of this estimator's raw per-message counts: its name, its
        :attr:`count_version` and a digest of every rule a count depends on. Persisted counts
        are keyed by it and by the message fingerprint; any change invalidates them."""
        rules = (type(self).__qualname__, self.count_version, self.message_overhead,
                 self.call_overhead, self.reasoning_overhead, self.count_call_ids,
                 NON_TEXT_PART_TOKENS, *self.count_identity())
        digest = hashlib.sha256(repr(rules).encode()).hexdigest()[:12]
        return f"{self.name}-{self.count_version}-{digest}"

    def count_identity(self) -> tuple[object, ...]:
        """What else a count depends on (e.g. the encoding); override in subclasses."""
        return ()

    def seed_counts(self, counts: Mapping[str, TextStats]) -> None:
        """Take persisted counts (message fingerprint → raw stats, of :attr:`count_key`) and
        start recording new ones for :meth:`take_new_counts`."""
        self._persisted = counts  # looked up on a cache miss: seeding costs nothing
        if self._new is None:
            self._new = {}

    def take_new_counts(self) -> dict[str, TextStats]:
        """The counts measured since the last call (after :meth:`seed_counts`), to persist."""
        new, self._new = self._new, ({} if self._new is not None else None)
        return new or {}

    # -- what subclasses provide -------------------------------------------------------------

    def count_text(self, text: str) -> int:
        """Tokens of one text without special tokens; subclasses must implement it."""
        raise NotImplementedError

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        """Tokens of several texts; override to batch-encode."""
        return [self.count_text(t) if t else 0 for t in texts]

    # -- per message -------------------------------------------------------------------------

    def call_texts(self, call: ToolCall) -> tuple[list[str], int]:
        """The texts of one tool call and its structural overhead in tokens.

        Default: ``call_overhead`` + id (if ``count_call_ids``) + name + the JSON arguments
        as sent. Override when a chat template renders calls differently.
        """
        texts = [call.id] if self.count_call_ids else []
        texts.extend((call.name, call.arguments))
        return texts, self.call_overhead

    def message_texts(self, message: Message) -> tuple[list[str], int]:
        """The counted texts of one message and its structural overhead in tokens.

        A message given as content parts counts the text of its text parts, and
        :data:`NON_TEXT_PART_TOKENS` for each other part (image, audio, file): what an image
        costs varies by provider and resolution, so this is a documented flat rate (requests
        holding such parts are never calibrated from, see :meth:`calibrate`)."""
        texts = [message.role, message.text, message.name or ""]
        overhead = self.message_overhead + NON_TEXT_PART_TOKENS * non_text_parts(message)
        if self.count_call_ids and message.tool_call_id:
            texts.append(message.tool_call_id)
        if message.role == "assistant" and message.tool_calls and message.reasoning_content:
            texts.append(message.reasoning_content)
            overhead += self.reasoning_overhead
        for call in message.tool_calls:
            call_texts, call_overhead = self.call_texts(call)
            texts.extend(call_texts)
            overhead += call_overhead
        return texts, overhead

    def _measure_message(self, message: Message) -> TextStats:
        texts, overhead = self.message_texts(message)
        tokens = overhead + sum(self.count_texts(texts))
        return TextStats(tokens, sum(map(len, texts)), sum(map(cjk_count, texts)))

    def message_stats(self, message: Message) -> TextStats:
        """Raw stats of one message (cached); zero for ``local_only`` messages."""
        if message.local_only:
            return TextStats()
        stats = self._by_message.get(message)
        if stats is not None:
            return stats
        key = message_fingerprint(message)
        stats = self._by_fingerprint.get(key) or self._persisted.get(key)
        if stats is None:
            stats = self._measure_message(message)
            self._by_fingerprint.put(key, stats)
            if self._new is not None:
                self._new[key] = stats
        self._by_message.put(message, stats)
        return stats

    def tool_stats(self, tool: ToolSchema) -> TextStats:
        """Raw stats of one tool schema (cached by its canonical JSON)."""
        params = json.dumps(dict(tool.parameters), ensure_ascii=False, sort_keys=True,
                            separators=(",", ":"))
        key = json.dumps([tool.name, tool.description, params], ensure_ascii=False)
        stats = self._by_tool.get(key)
        if stats is None:
            # The provider sees the parameters in the request's own key order.
            wire = json.dumps(dict(tool.parameters), ensure_ascii=False)
            texts = [tool.name, tool.description, wire]
            stats = TextStats(self.tool_overhead + sum(self.count_texts(texts)),
                              sum(map(len, texts)), sum(map(cjk_count, texts)))
            self._by_tool.put(key, stats)
        return stats

    def shape_stats(self, shape: RequestShape) -> TextStats:
        """Raw stats of a whole request shape (overheads included)."""
        total = TextStats(self.request_overhead)
        if shape.tools:
            total = total + TextStats(self.tools_preamble)
            for tool in shape.tools:
                total = total + self.tool_stats(tool)
        tokens, chars, cjk = total.tokens, total.chars, total.cjk
        for message in shape.messages:
            s = self.message_stats(message)
            tokens += s.tokens
            chars += s.chars
            cjk += s.cjk
        return TextStats(tokens, chars, cjk)

    # -- estimates ---------------------------------------------------------------------------

    def raw_estimate(self, shape: RequestShape) -> int:
        """Uncalibrated token count of ``shape``."""
        return self.shape_stats(shape).tokens

    def estimate(self, shape: RequestShape) -> int:
        """Calibrated admission estimate of ``shape`` (raw until calibrated)."""
        return self.scale(self.shape_stats(shape))

    def count_message(self, message: Message) -> int:
        """Calibrated planning count of one message (tail sizing); 0 when ``local_only``."""
        return self.scale(self.message_stats(message))

    def count_messages(self, messages: Iterable[Message]) -> int:
        """Calibrated planning count of several messages, without request/tool overheads."""
        total = TextStats()
        for message in messages:
            total = total + self.message_stats(message)
        return self.scale(total)

    def scale(self, stats: TextStats) -> int:
        """Apply the calibration to raw ``stats``.

        With ``cjk_aware``, CJK characters beyond the calibration sample's CJK share are
        priced at the cold rate and only the rest at the calibrated ratio (design §2.3): a
        ratio learned on English text would otherwise underprice a switch to Chinese.
        """
        cal = self._calibration
        if cal is None or stats.tokens <= 0:
            return max(stats.tokens, 0)
        excess = 0.0
        if self.cjk_aware and stats.chars > 0:
            excess = max(0.0, stats.cjk - cal.cjk_share * stats.chars)
        cold = excess * COLD_CJK_TOKENS_PER_CHAR
        rest = max(0.0, stats.tokens - cold)
        return math.ceil(rest * cal.ratio + cold)

    # -- calibration -------------------------------------------------------------------------

    @property
    def calibration(self) -> Calibration | None:
        """The current calibration, ``None`` when cold."""
        return self._calibration

    def calibrate(self, shape: RequestShape, usage: Usage) -> bool:
        """Learn from the provider's prompt tokens for exactly ``shape``; True if accepted.

        Ignored: ``estimated`` or ``aggregated`` usage, non-positive prompt tokens, an empty
        shape, and a prompt-tokens-per-character ratio outside 0.05–2 (design §2.3), which means
        the usage does not belong to this request. Only the latest accepted sample counts.
        Requests under ``MIN_CALIBRATION_TOKENS`` are ignored too: on a 13-token request the
        fixed template overheads dominate and the ratio would mis-scale every later request.
        So are requests with image, audio or file parts: the provider counts those by its own
        rule, and a ratio learnt from them would mis-scale the text.
        """
        if usage.estimated or usage.aggregated or usage.prompt_tokens < MIN_CALIBRATION_TOKENS:
            return False
        if any(m.parts and non_text_parts(m) for m in shape.messages):
            return False
        stats = self.shape_stats(shape)
        if stats.chars <= 0 or stats.tokens <= 0:
            return False
        per_char = usage.prompt_tokens / stats.chars
        if not SANITY_MIN_TOKENS_PER_CHAR < per_char < SANITY_MAX_TOKENS_PER_CHAR:
            return False
        self._calibration = Calibration(
            ratio=usage.prompt_tokens / stats.tokens,
            cjk_share=stats.cjk / stats.chars,
            prompt_tokens=usage.prompt_tokens,
        )
        return True

    def reset_calibration(self) -> None:
        """Forget the calibration (the model changed); the count caches stay valid."""
        self._calibration = None

    def clear_cache(self) -> None:
        """Drop every cached count (tests, or to release memory)."""
        self._by_message.clear()
        self._by_fingerprint.clear()
        self._by_tool.clear()
