"""A loopback provider emulator with prefix-cache accounting (``ctxfold emulate``).

It speaks the DeepSeek and MiMo chat-completions, the OpenAI Responses and the Anthropic
Messages wire formats over real HTTP on 127.0.0.1, bills each request's prompt against an
emulated prefix cache the way the provider does, answers from a deterministic script, and
injects faults. See ``docs/emulator.md``.

::

    with Emulator("deepseek", script=[ReplySpec(text="hi")]) as emu:
        client = httpx.Client(base_url=emu.base_url)
        ...
        assert emu.requests[-1].cache_hit_tokens > 0
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "PROFILES",
    "Emulator",
    "Fault",
    "PrefixCache",
    "Profile",
    "ReplySpec",
    "RequestRecord",
    "get_profile",
    "load_script",
]

if TYPE_CHECKING:
    from ctxfold.emulator.cache import PrefixCache
    from ctxfold.emulator.faults import Fault
    from ctxfold.emulator.profiles import PROFILES, Profile, get_profile
    from ctxfold.emulator.records import RequestRecord
    from ctxfold.emulator.rules import load_script
    from ctxfold.emulator.script import ReplySpec
    from ctxfold.emulator.server import Emulator

_WHERE = {
    "PrefixCache": "cache", "Fault": "faults", "PROFILES": "profiles", "Profile": "profiles",
    "get_profile": "profiles", "ReplySpec": "script", "load_script": "rules",
    "Emulator": "server", "RequestRecord": "records",
}


def __getattr__(name: str) -> Any:
    # Lazy so ``import ctxfold.emulator`` stays cheap (no http.server until used).
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxfold.emulator' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"ctxfold.emulator.{module}"), name)
