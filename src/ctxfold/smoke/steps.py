"""The three smoke steps over one directory: seed, resume, continue."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ctxfold.atomic import atomic_write
from ctxfold.engine.manager import ContextManager
from ctxfold.engine.opening import open_session
from ctxfold.kernel.config import Config
from ctxfold.kernel.contracts import Provider
from ctxfold.kernel.errors import SmokeError
from ctxfold.kernel.fingerprint import fingerprint
from ctxfold.kernel.kinds import PROVIDER, STORE
from ctxfold.kernel.registry import Registry
from ctxfold.kernel.types import Message, RequestShape, ToolSchema, utc_now
from ctxfold.smoke.fixtures import (
    COMPACT_RATIO,
    CONTINUE_GROUPS,
    MAX_OUTPUT_TOKENS,
    READ_FILE,
    SESSION,
    CostMeter,
    GuardSummarizer,
    SmokeOptions,
    check,
    fat_groups,
    seed_messages,
    smoke_config,
)


class Smoke:
    """The three steps over one directory (``<dir>/sessions`` and ``<dir>/meta.json``)."""

    def __init__(self, options: SmokeOptions, base: Config | None = None,
                 out: Callable[[str], None] = print) -> None:
        self.options = options
        self.directory = Path(options.directory)
        self.config = smoke_config(base or Config(), self.directory, live=not options.is_offline)
        self.registry = Registry.from_config(self.config)
        self.out = out

    @property
    def meta_path(self) -> Path:
        return self.directory / "meta.json"

    def _open(self, create: bool, **kwargs: Any) -> ContextManager:
        return open_session(SESSION, config=self.config, registry=self.registry,
                            tools=(READ_FILE,), create=create, **kwargs)

    def _meta(self, step: str) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self.meta_path.read_text())
        except FileNotFoundError:
            raise SmokeError(f"smoke {step}: {self.meta_path} not found; run `ctxfold smoke seed "
                           f"--dir {self.directory}` first") from None
        except ValueError as exc:
            raise SmokeError(f"smoke {step}: {self.meta_path} is not valid JSON ({exc}); run "
                           "`ctxfold smoke seed` again") from None
        return data

    def _save_meta(self, meta: dict[str, Any]) -> None:
        atomic_write(self.meta_path, (json.dumps(meta, indent=2) + "\n").encode())

    @staticmethod
    def _version(cm: ContextManager) -> int:
        projection = cm.state.projection
        return projection.projection_version if projection else 0

    def seed(self) -> dict[str, Any]:
        """Build the seed session below the trigger; nothing may be summarized or written."""
        step = "seed"
        store = self.registry.create(STORE, "fs", config=self.config)
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
              "no sidecar written below the trigger (design §2.4)")
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
        provider = self.registry.create(PROVIDER, self.config.provider.name,
                                        config=self.config)
        try:
            yield provider
        finally:
            close = getattr(provider, "close", None)
            if callable(close):
                close()


def _shape(messages: Sequence[Message], tools: Sequence[ToolSchema]) -> Any:
    return RequestShape(list(messages), tools)


def run_step(step: str, options: SmokeOptions, base: Config | None = None,
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
        raise SmokeError(f"smoke: unknown step {step!r}; use seed, resume or continue")
    result["elapsed_seconds"] = round(time.monotonic() - started, 2)
    return result
