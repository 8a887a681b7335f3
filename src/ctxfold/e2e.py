"""Cost-capped seed → resume → continue smoke (origin §5), importable and behind ``ctxfold e2e``.

* ``seed``: a fresh session ``cm-e2e`` — system + user, then 80 × (assistant ``read_file``
  call + 32 KiB tool result of ``"x"``), then "summarize status when asked" / "standing by".
  Asserts the view is below the trigger, that ``prepare()`` summarizes nothing, leaves
  projection version 0 and writes no sidecar; saves ``meta.json``.
* ``resume``: reopens, ``resume()`` + ``prepare()``; asserts nothing changed.
* ``continue``: appends 40 more fat groups (after one user "continue" turn, so the transcript
  stays a valid chat for a live API), asserts the view is now ≥ the trigger, ``prepare()``
  runs at most one summary and installs exactly one checkpoint (version + 1); then one real
  turn "Reply with exactly: ok" that must not summarize again.

Numbers (documented in ``docs/cli.md``): window 500,000 tokens, ``compact_ratio`` 0.80 →
trigger 400,000; estimator ``deepseek`` (exact DeepSeek V4 tokenizer: one fat group ≈ 4.1K
tokens, so the seed ≈ 330K < trigger and the continue ≈ 495K ≥ trigger). Effort ``none`` and
``max_output_tokens`` 1024, as in the origin benchmark.

Live (``DEEPSEEK_API_KEY`` set, no ``--offline``): provider ``deepseek``, model
``deepseek-flash``. Offline: provider ``emulator`` with profile ``deepseek`` — the same
``deepseek`` wire code against the loopback emulator started in-process (window 500,000).
Spend is priced with DeepSeek flash *peak* prices (providers.md §1.6: $0.006 hit /
$0.30 miss / $1.20 output per 1M tokens) and capped hard: a request whose worst case would
pass ``max_usd`` is never sent.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ctxfold.kernel.errors import CtxfoldError
from ctxfold.kernel.fingerprint import fingerprint
from ctxfold.kernel.types import Message, ToolCall, ToolSchema, utc_now

if TYPE_CHECKING:
    from ctxfold.config.schema import Config
    from ctxfold.kernel.engine import ContextManager
    from ctxfold.kernel.strategies import ChatRequest, ChatResponse, Provider
    from ctxfold.kernel.types import Usage

SESSION = "cm-e2e"
WINDOW = 500_000
COMPACT_RATIO = 0.80
SEED_GROUPS = 80
CONTINUE_GROUPS = 40
FAT_BYTES = 32 * 1024
MAX_OUTPUT_TOKENS = 1024
DEFAULT_MAX_USD = 0.50
DEFAULT_DIR = ".ctxfold/e2e"
LIVE_MODEL = "deepseek-flash"
API_KEY_ENV = "DEEPSEEK_API_KEY"
#: USD per 1M tokens: DeepSeek flash peak prices (providers.md §1.6, from 2026-09-10).
PRICE_HIT, PRICE_MISS, PRICE_OUTPUT = 0.006, 0.30, 1.20
#: Output reserved for the cap check when a request leaves max tokens to the server.
SERVER_DEFAULT_OUTPUT = 8192
READ_FILE = ToolSchema(
    name="read_file",
    description="Read a file of the workspace.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}},
                "required": ["path"]},
)


class E2EError(CtxfoldError):
    """A smoke-test assertion failed, the cost cap was hit, or a step ran out of order."""


@attrs.frozen
class E2EOptions:
    """How to run a step: where, offline or live, and the spend cap in USD."""

    directory: Path = Path(DEFAULT_DIR)
    offline: bool | None = None  # None: offline when DEEPSEEK_API_KEY is unset
    max_usd: float = DEFAULT_MAX_USD

    @property
    def is_offline(self) -> bool:
        return self.offline if self.offline is not None else not os.environ.get(API_KEY_ENV)


def check(ok: bool, step: str, what: str) -> None:
    """Raise :class:`E2EError` naming the step and the failed assertion unless ``ok``."""
    if not ok:
        raise E2EError(
            f"e2e {step}: expected {what}, which did not hold; the steps run in order "
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
        self.refused: E2EError | None = None
        self.estimate: Callable[[ChatRequest], int] | None = None
        self.name = inner.name
        self.context_window = inner.context_window
        self.cache_ttl_minutes = inner.cache_ttl_minutes
        self.supports_native_compaction = inner.supports_native_compaction

    def complete(self, request: ChatRequest) -> ChatResponse:
        prompt = self.estimate(request) if self.estimate else 0
        output = request.max_output_tokens or SERVER_DEFAULT_OUTPUT
        worst = (prompt * PRICE_MISS + output * PRICE_OUTPUT) / 1e6
        if self.spent + worst > self.max_usd:
            self.refused = E2EError(
                f"e2e: cost cap: request {self.requests + 1} (~{prompt} prompt tokens) could "
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
        raise E2EError(f"e2e {self.step}: assertion failed: prepare() asked for a summary "
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
    """The seed transcript of origin §5."""
    return [
        Message(role="system", content="You are a careful coding agent. Answer tersely."),
        Message(role="user", content="Read every module of the workspace, then wait."),
        *fat_groups(0, groups),
        Message(role="user", content="summarize status when asked"),
        Message(role="assistant", content="standing by"),
    ]


def e2e_config(base: Config, directory: Path, *, live: bool) -> Config:
    """The smoke's pinned config: plugins from ``base``, everything else fixed."""
    from ctxfold.config.schema import (
        AgentConfig,
        Config,
        EstimatorConfig,
        ProviderConfig,
        StoreConfig,
        SummarizerConfig,
    )

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


class Smoke:
    """The three steps over one directory (``<dir>/sessions`` and ``<dir>/meta.json``)."""

    def __init__(self, options: E2EOptions, base: Config | None = None,
                 out: Callable[[str], None] = print) -> None:
        from ctxfold.config.schema import Config
        from ctxfold.kernel.registry import Registry, make_plugin_manager

        self.options = options
        self.directory = Path(options.directory)
        self.config = e2e_config(base or Config(), self.directory, live=not options.is_offline)
        self.registry = Registry(make_plugin_manager(self.config.plugins.disabled))
        self.out = out

    @property
    def meta_path(self) -> Path:
        return self.directory / "meta.json"

    def _open(self, create: bool, **kwargs: Any) -> ContextManager:
        from ctxfold.kernel.engine import ContextManager

        return ContextManager.open(SESSION, config=self.config, registry=self.registry,
                                   tools=(READ_FILE,), create=create, **kwargs)

    def _meta(self, step: str) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self.meta_path.read_text())
        except FileNotFoundError:
            raise E2EError(f"e2e {step}: {self.meta_path} not found; run `ctxfold e2e seed "
                           f"--dir {self.directory}` first") from None
        except ValueError as exc:
            raise E2EError(f"e2e {step}: {self.meta_path} is not valid JSON ({exc}); run "
                           "`ctxfold e2e seed` again") from None
        return data

    def _save_meta(self, meta: dict[str, Any]) -> None:
        from ctxfold.kernel.atomic import atomic_write

        atomic_write(self.meta_path, (json.dumps(meta, indent=2) + "\n").encode())

    @staticmethod
    def _version(cm: ContextManager) -> int:
        projection = cm.state.projection
        return projection.projection_version if projection else 0

    def seed(self) -> dict[str, Any]:
        """Build the seed session below the trigger; nothing may be summarized or written."""
        step = "seed"
        from ctxfold.kernel.strategies import StrategyContext

        store = self.registry.create("store", "fs", StrategyContext(
            config=self.config, registry=self.registry))
        if store.exists(SESSION):
            store.delete(SESSION)
        self.meta_path.unlink(missing_ok=True)
        guard = GuardSummarizer(step)
        cm = self._open(True, summarizer=guard, store=store)
        cm.append(*seed_messages())
        trigger, projected = cm.trigger_tokens, cm.estimate()
        check(trigger > 0, step, f"trigger {trigger} > 0")
        check(projected < trigger, step, f"seed view {projected} tokens < trigger {trigger}")
        prepared = cm.prepare()
        check(guard.calls == 0 and cm.summary_calls == 0, step,
              f"0 summary calls (got {cm.summary_calls})")
        check(self._version(cm) == 0, step,
              f"projection version 0 (got {self._version(cm)})")
        check(store.read_sidecar(SESSION) is None, step,
              "no sidecar written below the trigger (SPEC invariant 2)")
        meta = {
            "seeded_at": utc_now(), "mode": "offline" if self.options.is_offline else "live",
            "session": SESSION, "window": cm.window, "compact_ratio": COMPACT_RATIO,
            "messages": len(cm.canonical), "canonical_tokens": cm.estimate(cm.canonical),
            "projected_tokens": prepared.tokens, "trigger_tokens": trigger,
            "view_fingerprint": fingerprint(prepared.messages),
            "projection_version": 0, "summary_calls": 0, "spent_usd": 0.0,
        }
        self._save_meta(meta)
        self.out(f"seed ok projected={prepared.tokens} trigger={trigger} version=0 "
                 f"summary_calls=0 spent=$0.0000")
        return meta

    def resume(self) -> dict[str, Any]:
        """Reopen the session: resume labels the cache; prepare must change nothing."""
        step = "resume"
        meta = self._meta(step)
        guard = GuardSummarizer(step)
        cm = self._open(False, summarizer=guard)
        version = self._version(cm)
        check(len(cm.canonical) == meta["messages"], step,
              f"{meta['messages']} messages kept (got {len(cm.canonical)})")
        check(version == meta["projection_version"], step,
              f"projection version {meta['projection_version']} (got {version})")
        resumed = cm.resume()
        prepared = cm.prepare()
        check(guard.calls == 0 and cm.summary_calls == 0, step, "0 summary calls")
        check(self._version(cm) == version, step,
              f"projection version unchanged at {version} (got {self._version(cm)})")
        # Compare the provider-visible bytes, not token counts: the estimator's calibration
        # lives in memory, so counts differ between processes for the same view.
        check(fingerprint(prepared.messages) == meta["view_fingerprint"], step,
              f"view unchanged (fingerprint {meta['view_fingerprint']}, got "
              f"{fingerprint(prepared.messages)})")
        idle = resumed.idle_seconds
        self.out(f"resume ok idle={'unknown' if idle is None else f'{idle:.1f}s'} "
                 f"version={version} summary_calls=0 cache={resumed.cache_state}")
        return {**meta, "idle_seconds": idle, "cache_state": str(resumed.cache_state)}

    def continue_(self) -> dict[str, Any]:
        """Push past the trigger: one checkpoint, ≤ 1 summary, then one turn without one."""
        step = "continue"
        meta = self._meta(step)
        with self._provider() as provider:
            meter = CostMeter(provider, self.options.max_usd, float(meta.get("spent_usd", 0)))
            cm = self._open(False, provider=meter)
            meter.estimate = lambda r: cm.estimator.estimate(_shape(r.messages, r.tools))
            before = self._version(cm)
            check(before == meta["projection_version"], step,
                  f"projection version {meta['projection_version']} at start (got {before})")
            start = (len(cm.canonical) - 4) // 2
            cm.append(Message(role="user", content="Continue: read the next modules."),
                      *fat_groups(start, CONTINUE_GROUPS))
            pressure = cm.estimate()
            check(pressure >= cm.trigger_tokens, step,
                  f"view {pressure} tokens >= trigger {cm.trigger_tokens} after "
                  f"{CONTINUE_GROUPS} more groups")
            prepared = cm.prepare()
            if meter.refused is not None:
                raise meter.refused
            summaries = cm.summary_calls
            check(summaries <= 1, step, f"at most 1 summary call (got {summaries})")
            check(self._version(cm) == before + 1, step,
                  f"projection version {before + 1} after one checkpoint "
                  f"(got {self._version(cm)})")
            check(prepared.tokens < cm.trigger_tokens, step,
                  f"checkpoint view {prepared.tokens} < trigger {cm.trigger_tokens}")
            cm.append(Message(role="user", content="Reply with exactly: ok"))
            response = cm.complete(meter, max_output_tokens=MAX_OUTPUT_TOKENS)
            check(cm.summary_calls == summaries, step,
                  f"no summary in the real turn (got {cm.summary_calls - summaries})")
            check(self._version(cm) == before + 1, step,
                  f"projection version stays {before + 1} in the real turn")
            check(bool(response.message.content.strip()), step, "a non-empty reply")
            projected = cm.estimate()
            meta.update(projection_version=self._version(cm), messages=len(cm.canonical),
                        projected_tokens=projected, summary_calls=summaries,
                        spent_usd=round(meter.spent, 6), continued_at=utc_now(),
                        canonical_tokens=cm.estimate(cm.canonical),
                        view_fingerprint=fingerprint(cm.view()))
            self._save_meta(meta)
            self.out(f"continue ok version={self._version(cm)} projected={projected} "
                     f"summary_calls={summaries} spent=${meter.spent:.4f}")
            return meta

    @contextmanager
    def _provider(self) -> Iterator[Provider]:
        """``deepseek`` live; offline ``emulator`` (DeepSeek profile, started in-process)."""
        from ctxfold.kernel.strategies import StrategyContext

        provider = self.registry.create("provider", self.config.provider.name, StrategyContext(
            config=self.config, registry=self.registry))
        try:
            yield provider
        finally:
            close = getattr(provider, "close", None)
            if callable(close):
                close()


def _shape(messages: Sequence[Message], tools: Sequence[ToolSchema]) -> Any:
    from ctxfold.kernel.types import RequestShape

    return RequestShape(list(messages), tools)


def run_step(step: str, options: E2EOptions, base: Config | None = None,
             out: Callable[[str], None] = print) -> dict[str, Any]:
    """Run ``seed``, ``resume`` or ``continue``; returns the step's metadata."""
    smoke = Smoke(options, base, out)
    started = time.monotonic()
    if step == "seed":
        result = smoke.seed()
    elif step == "resume":
        result = smoke.resume()
    elif step == "continue":
        result = smoke.continue_()
    else:
        raise E2EError(f"e2e: unknown step {step!r}; use seed, resume or continue")
    result["elapsed_seconds"] = round(time.monotonic() - started, 2)
    return result
