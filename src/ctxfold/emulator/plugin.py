"""Provider ``emulator``: the loopback emulator started in-process, spoken to over real HTTP.

With ``[provider] name = "emulator"`` (the default) every ctxfold command works with no API
key and no server to start by hand: the factory starts :class:`ctxfold.emulator.Emulator` on
an ephemeral 127.0.0.1 port and wraps the real provider plugin named by ``[provider] profile``
(``deepseek``, ``mimo``, ``responses`` or ``anthropic``), so the exact wire format, SSE
parsing, usage mapping and overflow handling of that provider run end to end.
"""

from __future__ import annotations

import asyncio
import atexit
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ctxfold.emulator.faults import Fault
from ctxfold.emulator.profiles import PROVIDER_DEFAULTS
from ctxfold.emulator.script import Script
from ctxfold.emulator.server import Emulator
from ctxfold.kernel.config import Config
from ctxfold.kernel.contracts import AsyncProvider, Provider
from ctxfold.kernel.errors import PluginError
from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import (
    PROVIDER,
    ProviderDefaults,
    ProviderOptions,
    StrategyContext,
    StrategySpec,
)
from ctxfold.kernel.types import ChatRequest, ChatResponse

PROFILES = tuple(PROVIDER_DEFAULTS)
#: The profile an empty ``[provider] profile`` selects.
DEFAULT_PROFILE = "deepseek"


@attrs.frozen(kw_only=True)
class EmulatorOptions:
    """The emulator provider's own options (``ProviderOptions.plugin``): the profile to
    imitate instead of ``[provider] profile``, a token ``counter``, a reply ``script`` and
    ``faults`` to inject; ``log_requests``, a file for the masked request log."""

    profile: str = ""
    counter: Callable[[str], int] | None = None
    script: Script | None = None
    faults: Sequence[Fault] | None = None
    log_requests: str | None = None


class EmulatedProvider:
    """A real provider plugin pointed at an in-process emulator it owns."""

    def __init__(self, inner: Provider, emulator: Emulator) -> None:
        self.inner = inner
        self.emulator = emulator
        self.name = f"emulator:{inner.name}"
        self.context_window = inner.context_window
        self.cache_ttl_minutes = inner.cache_ttl_minutes

    def complete(self, request: ChatRequest) -> ChatResponse:
        return self.inner.complete(request)

    async def acomplete(self, request: ChatRequest) -> ChatResponse:
        inner = self.inner
        if isinstance(inner, AsyncProvider):
            return await inner.acomplete(request)
        return await asyncio.to_thread(inner.complete, request)

    async def aclose(self) -> None:
        aclose = getattr(self.inner, "aclose", None)
        if callable(aclose):
            await aclose()
        self.close()

    def body(self, request: ChatRequest) -> Any:
        return self.inner.body(request)  # type: ignore[attr-defined]

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()
        self.emulator.stop()

    def __enter__(self) -> EmulatedProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _profile(config: Config, options: EmulatorOptions) -> str:
    profile = options.profile or config.provider.profile or DEFAULT_PROFILE
    if profile not in PROFILES:
        raise PluginError(
            f"[provider] profile = {profile!r} is not an emulator profile; "
            f"allowed: {', '.join(PROFILES)}"
        )
    return profile


def defaults(config: Config) -> ProviderDefaults:
    """The emulator declares what the provider it imitates declares (``[provider]
    profile``), with no base URL or key variable: it starts its own server, and answers
    without a model (``loopback``)."""
    declared = PROVIDER_DEFAULTS[_profile(config, EmulatorOptions())]
    return attrs.evolve(declared, base_url="", api_key_env="", loopback=True)


def create(context: StrategyContext[ProviderOptions]) -> EmulatedProvider:
    """Start the emulator and build the profile's provider against it."""
    opts = context.options
    own = opts.plugin if opts.plugin is not None else EmulatorOptions()
    if not isinstance(own, EmulatorOptions):
        raise PluginError(f"provider 'emulator': ProviderOptions.plugin must be "
                          f"EmulatorOptions, got {type(own).__name__}")
    cfg = context.config.provider
    profile = _profile(context.config, own)
    emulator = Emulator(
        profile,
        window=cfg.context_window or None,
        counter=own.counter,
        script=own.script,
        faults=own.faults,
        clock=opts.clock,
        log_requests=own.log_requests,
    )
    base_url = emulator.start()
    atexit.register(emulator.stop)
    inner_options = attrs.evolve(opts, base_url=base_url, api_key="emulator-local-key",
                                 plugin=None)
    inner = context.registry.create(PROVIDER, profile, config=context.config,
                                    options=inner_options)
    return EmulatedProvider(inner, emulator)


@hookimpl
def ctxfold_providers() -> list[StrategySpec]:
    """Register the ``emulator`` provider."""
    return [
        StrategySpec(
            name="emulator",
            default=True,
            factory=create,
            defaults=defaults,
            description="loopback emulator started in-process (no key, no network)",
        )
    ]
