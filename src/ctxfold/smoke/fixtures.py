"""What the smoke runs on: its session, config, price table and guards."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from ctxfold.kernel.config import (
    AgentConfig,
    Config,
    EstimatorConfig,
    ProviderConfig,
    StoreConfig,
    SummarizerConfig,
)
from ctxfold.kernel.contracts import Provider
from ctxfold.kernel.errors import SmokeError
from ctxfold.kernel.types import ChatRequest, ChatResponse, Message, ToolCall, ToolSchema, Usage

SESSION = "cm-e2e"
WINDOW = 500_000
COMPACT_RATIO = 0.80
SEED_GROUPS = 80
CONTINUE_GROUPS = 40
FAT_BYTES = 32 * 1024
MAX_OUTPUT_TOKENS = 1024
DEFAULT_MAX_USD = 0.50
DEFAULT_DIR = ".ctxfold/smoke"
LIVE_MODEL = "deepseek-flash"
API_KEY_ENV = "DEEPSEEK_API_KEY"
#: USD per 1M tokens: DeepSeek flash peak prices (https://api-docs.deepseek.com/quick_start/pricing,
#: as of 2026-09-10).
PRICE_HIT, PRICE_MISS, PRICE_OUTPUT = 0.006, 0.30, 1.20
#: Output reserved for the cap check when a request leaves max tokens to the server.
SERVER_DEFAULT_OUTPUT = 8192
READ_FILE = ToolSchema(
    name="read_file",
    description="Read a file of the workspace.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}},
                "required": ["path"]},
)


@attrs.frozen
class SmokeOptions:
    """How to run a step: where, offline or live, and the spend cap in USD."""

    directory: Path = Path(DEFAULT_DIR)
    offline: bool | None = None  # None: offline when DEEPSEEK_API_KEY is unset
    max_usd: float = DEFAULT_MAX_USD

    @property
    def is_offline(self) -> bool:
        return self.offline if self.offline is not None else not os.environ.get(API_KEY_ENV)


def check(ok: bool, step: str, what: str) -> None:
    """Raise :class:`SmokeError` naming the step and the failed assertion unless ``ok``."""
    if not ok:
        raise SmokeError(
            f"smoke {step}: expected {what}, which did not hold; the steps run in order "
            "seed → resume → continue on a fresh --dir (run seed again to start over)"
        )


def cost(usage: Usage) -> float:
    """USD of one response's usage at the flash peak prices."""
    hit, miss = usage.cache_hit_tokens, usage.cache_miss_tokens
    if hit + miss == 0:
        miss = usage.prompt_tokens
    return (hit * PRICE_HIT + miss * PRICE_MISS + usage.completion_tokens * PRICE_OUTPUT) / 1e6


class CostMeter:
    """Wraps a provider: refuses a request whose worst-case price would pass the cap.

    ``estimate(request) -> tokens`` must be set before the first request.
    """

    def __init__(self, inner: Provider, max_usd: float, spent: float = 0.0) -> None:
        self.inner = inner
        self.max_usd = max_usd
        self.spent = spent
        self.requests = 0
        # The engine turns a summarizer error into a failed receipt; keep the refusal so the
        # step can report the cap instead of a confusing follow-on assertion.
        self.refused: SmokeError | None = None
        self.estimate: Callable[[ChatRequest], int] | None = None
        self.name = inner.name
        self.context_window = inner.context_window
        self.cache_ttl_minutes = inner.cache_ttl_minutes

    def complete(self, request: ChatRequest) -> ChatResponse:
        prompt = self.estimate(request) if self.estimate else 0
        output = request.max_output_tokens or SERVER_DEFAULT_OUTPUT
        worst = (prompt * PRICE_MISS + output * PRICE_OUTPUT) / 1e6
        if self.spent + worst > self.max_usd:
            self.refused = SmokeError(
                f"smoke: cost cap: request {self.requests + 1} (~{prompt} prompt tokens) could "
                f"cost up to ${worst:.4f}; spent ${self.spent:.4f} of --max-usd "
                f"{self.max_usd:.2f}; not sent. Raise --max-usd to allow it."
            )
            raise self.refused
        self.requests += 1
        response = self.inner.complete(request)
        self.spent += cost(response.usage)
        return response


class GuardSummarizer:
    """Stands in for the summarizer where the smoke requires that none runs."""

    def __init__(self, step: str) -> None:
        self.step = step
        self.calls = 0

    def summarize(self, request: Any) -> Any:
        self.calls += 1
        raise SmokeError(f"smoke {self.step}: assertion failed: prepare() asked for a summary "
                       "below the trigger (no summary may run in this step)")


def fat_groups(start: int, count: int) -> list[Message]:
    """``count`` × (assistant ``read_file`` call + 32 KiB tool result of ``"x"``)."""
    out: list[Message] = []
    for i in range(start, start + count):
        call_id = f"call_read_{i:04d}"
        arguments = json.dumps({"path": f"src/module_{i:04d}.py"})
        out.append(Message(role="assistant", content="",
                           tool_calls=(ToolCall(id=call_id, name="read_file",
                                                arguments=arguments),)))
        out.append(Message(role="tool", content="x" * FAT_BYTES, tool_call_id=call_id,
                           name="read_file"))
    return out


def seed_messages(groups: int = SEED_GROUPS) -> list[Message]:
    """The seed transcript of the smoke (design §9)."""
    return [
        Message(role="system", content="You are a careful coding agent. Answer tersely."),
        Message(role="user", content="Read every module of the workspace, then wait."),
        *fat_groups(0, groups),
        Message(role="user", content="summarize status when asked"),
        Message(role="assistant", content="standing by"),
    ]


def smoke_config(base: Config, directory: Path, *, live: bool) -> Config:
    """The smoke's pinned config: plugins from ``base``, everything else fixed."""
    return Config(
        agent=AgentConfig(compact_ratio=COMPACT_RATIO, max_output_tokens=MAX_OUTPUT_TOKENS,
                          effort="none"),
        provider=ProviderConfig(name="deepseek" if live else "emulator", profile="deepseek",
                                model=LIVE_MODEL,
                                api_key_env=API_KEY_ENV if live else "",
                                context_window=WINDOW, cache_ttl_minutes=1440),
        estimator=EstimatorConfig(name="deepseek"),
        summarizer=SummarizerConfig(name="llm"),
        store=StoreConfig(path=str(directory / "sessions")),
        plugins=base.plugins,
    )


