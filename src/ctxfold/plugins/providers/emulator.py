"""Provider ``emulator``: the loopback emulator started in-process, spoken to over real HTTP.

With ``[provider] name = "emulator"`` (the default) every ctxfold command works with no API
key and no server to start by hand: the factory starts :class:`ctxfold.emulator.Emulator` on
an ephemeral 127.0.0.1 port and wraps the real provider plugin named by ``[provider] profile``
(``deepseek``, ``mimo`` or ``responses``), so the exact wire format, SSE parsing, usage
mapping and overflow handling of that provider run end to end.
"""

from __future__ import annotations

import atexit
from typing import Any

from ctxfold.kernel.errors import PluginError
from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.strategies import ChatRequest, ChatResponse, StrategyContext, StrategySpec

PROFILES = ("deepseek", "mimo", "responses")


class EmulatedProvider:
    """A real provider plugin pointed at an in-process emulator it owns."""

    supports_native_compaction = False

    def __init__(self, inner: Any, emulator: Any) -> None:
        self.inner = inner
        self.emulator = emulator
        self.name = f"emulator:{inner.name}"
        self.context_window = inner.context_window
        self.cache_ttl_minutes = inner.cache_ttl_minutes

    def complete(self, request: ChatRequest) -> ChatResponse:
        response: ChatResponse = self.inner.complete(request)
        return response

    def body(self, request: ChatRequest) -> Any:
        return self.inner.body(request)

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()
        self.emulator.stop()

    def __enter__(self) -> EmulatedProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def create(context: StrategyContext) -> EmulatedProvider:
    """Start the emulator and build the profile's provider against it."""
    from ctxfold.emulator import Emulator

    cfg = context.config.provider
    profile = str(context.options.get("profile") or cfg.profile)
    if profile not in PROFILES:
        raise PluginError(
            f"[provider] profile = {profile!r} is not an emulator profile; "
            f"allowed: {', '.join(PROFILES)}"
        )
    emulator = Emulator(
        profile,
        window=cfg.context_window or None,
        counter=context.options.get("counter"),
        script=context.options.get("script"),
        faults=context.options.get("faults"),
        clock=context.options.get("clock"),
    )
    base_url = emulator.start()
    atexit.register(emulator.stop)
    options = {
        **{k: v for k, v in context.options.items() if k not in ("profile", "script", "faults")},
        "base_url": base_url,
        "api_key": "emulator-local-key",
    }
    inner_context = StrategyContext(config=context.config, registry=context.registry,
                                    options=options)
    inner = context.registry.create("provider", profile, inner_context)
    return EmulatedProvider(inner, emulator)


@hookimpl
def ctxfold_providers() -> list[StrategySpec]:
    """Register the ``emulator`` provider."""
    return [
        StrategySpec(
            kind="provider",
            name="emulator",
            factory=create,
            description="loopback emulator started in-process (no key, no network)",
        )
    ]
