"""``ctxfold replay``: replay recorded agent sessions under several context policies and
compare what each would have cost (see ``docs/replay.md``).

::

    from ctxfold.replay import ReplaySettings, replay_paths
    results = replay_paths(["session.jsonl"], ReplaySettings(window=64_000))

Heavy modules (tokenizers, rich) are imported only when a replay runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from ctxfold.importing import import_session
from ctxfold.kernel.config import Config
from ctxfold.kernel.kinds import ESTIMATOR, POLICY, SUMMARIZER
from ctxfold.kernel.registry import Registry
from ctxfold.replay.live import DEFAULT_MAX_USD
from ctxfold.replay.pricing import DEFAULT_PROFILE, PRICES, Price, get_price
from ctxfold.replay.results import PolicyResult, RequestRecord, SessionResult, totals
from ctxfold.replay.runner import (
    DEFAULT_RESERVE_OUTPUT,
    DEFAULT_SUMMARY_TOKENS,
    replay_session,
)

__all__ = [
    "DEFAULT_PROFILE",
    "DEFAULT_RESERVE_OUTPUT",
    "DEFAULT_SUMMARY_TOKENS",
    "PRICES",
    "PolicyResult",
    "Price",
    "ReplaySettings",
    "RequestRecord",
    "SessionResult",
    "get_price",
    "replay_paths",
    "replay_session",
    "replay_sessions",
    "totals",
]


@attrs.frozen
class ReplaySettings:
    """What a replay runs with. ``policies`` empty = every available policy.
    ``reserve_output`` is taken off the window for every request of every policy.
    ``summary_tokens`` ``None``: each policy's summaries are written to its own requested
    length (ctxfold's window/48; :data:`DEFAULT_SUMMARY_TOKENS` for those that ask none); a
    number: every policy's, ctxfold's included, to that length (the equal-length run).
    ``summarizer_provider`` names a provider whose model writes every summary instead of the
    offline ``extractive`` summarizer, behind a ``max_usd`` spend cap
    (:mod:`ctxfold.replay.live`)."""

    window: int = 64_000
    compact_ratio: float = 0.80
    reserve_output: int = DEFAULT_RESERVE_OUTPUT
    summary_tokens: int | None = None
    profile: str = DEFAULT_PROFILE
    estimator: str = "deepseek"
    summarizer: str = "extractive"
    policies: tuple[str, ...] = ()
    format: str | None = None
    summarizer_provider: str | None = None
    max_usd: float = DEFAULT_MAX_USD


def replay_sessions(sessions: Sequence[object], settings: ReplaySettings, *,
                    registry: object = None, config: object = None,
                    on_step: Callable[[], None] | None = None,
                    on_session: Callable[[int, SessionResult], None] | None = None,
                    ) -> list[SessionResult]:
    """Replay already imported sessions (:class:`~ctxfold.kernel.sessions.ImportedSession`);
    ``on_step`` is called after every recorded request, ``on_session`` after every session."""
    cfg = config if isinstance(config, Config) else Config()
    reg = registry if isinstance(registry, Registry) else Registry.from_config(cfg)
    price = get_price(settings.profile)
    names = list(settings.policies) or reg.available(POLICY)
    for name in names:
        reg.get(POLICY, name)  # unknown names fail before any work, listing the choices
    estimator = reg.create(ESTIMATOR, settings.estimator, config=cfg)
    meter = None
    if settings.summarizer_provider:
        from ctxfold.replay.live import live_summarizer

        summarizer, meter = live_summarizer(settings.summarizer_provider, cfg, reg, price,
                                            settings.max_usd, estimator)
    else:
        summarizer = reg.create(SUMMARIZER, settings.summarizer, config=cfg)
    equal = settings.summary_tokens is not None
    length = settings.summary_tokens if settings.summary_tokens is not None \
        else DEFAULT_SUMMARY_TOKENS
    results = []
    try:
        for index, session in enumerate(sessions):
            result = replay_session(
                session, names, registry=reg, config=cfg,  # type: ignore[arg-type]
                estimator=estimator, summarizer=summarizer, price=price,
                window=settings.window, compact_ratio=settings.compact_ratio,
                reserve_output=settings.reserve_output,
                summary_tokens=length,
                equal_summary_length=equal, on_step=on_step)
            if meter is not None and meter.refused is not None:
                raise meter.refused  # the cap stopped summaries: the figures would mislead
            results.append(result)
            if on_session is not None:
                on_session(index, result)
    finally:
        if meter is not None:
            meter.close()
    return results


def replay_paths(paths: Sequence[str | Path], settings: ReplaySettings, *,
                 registry: object = None, config: object = None) -> list[SessionResult]:
    """Import each path (``import_session``) and replay it."""
    cfg = config if isinstance(config, Config) else Config()
    reg = registry if isinstance(registry, Registry) else Registry.from_config(cfg)
    sessions = [import_session(p, reg, settings.format, config=cfg) for p in paths]
    return replay_sessions(sessions, settings, registry=reg, config=cfg)
