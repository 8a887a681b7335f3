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
from ctxfold.replay.pricing import DEFAULT_PROFILE, PRICES, Price, get_price
from ctxfold.replay.runner import PolicyResult, SessionResult, replay_session, totals

__all__ = [
    "DEFAULT_PROFILE",
    "PRICES",
    "PolicyResult",
    "Price",
    "ReplaySettings",
    "SessionResult",
    "get_price",
    "replay_paths",
    "replay_session",
    "replay_sessions",
    "totals",
]


@attrs.frozen
class ReplaySettings:
    """What a replay runs with. ``policies`` empty = every registered policy."""

    window: int = 64_000
    compact_ratio: float = 0.80
    profile: str = DEFAULT_PROFILE
    estimator: str = "deepseek"
    summarizer: str = "extractive"
    policies: tuple[str, ...] = ()
    format: str | None = None


def replay_sessions(sessions: Sequence[object], settings: ReplaySettings, *,
                    registry: object = None, config: object = None,
                    on_step: Callable[[], None] | None = None) -> list[SessionResult]:
    """Replay already imported sessions (:class:`~ctxfold.kernel.types.ImportedSession`)."""
    cfg = config if isinstance(config, Config) else Config()
    reg = registry if isinstance(registry, Registry) else Registry.from_config(cfg)
    price = get_price(settings.profile)
    names = list(settings.policies) or reg.names(POLICY)
    for name in names:
        reg.get(POLICY, name)  # unknown names fail before any work, listing the choices
    estimator = reg.create(ESTIMATOR, settings.estimator, config=cfg)
    summarizer = reg.create(SUMMARIZER, settings.summarizer, config=cfg)
    return [
        replay_session(session, names, registry=reg, config=cfg,  # type: ignore[arg-type]
                       estimator=estimator, summarizer=summarizer, price=price,
                       window=settings.window, compact_ratio=settings.compact_ratio,
                       on_step=on_step)
        for session in sessions
    ]


def replay_paths(paths: Sequence[str | Path], settings: ReplaySettings, *,
                 registry: object = None, config: object = None) -> list[SessionResult]:
    """Import each path (``import_session``) and replay it."""
    cfg = config if isinstance(config, Config) else Config()
    reg = registry if isinstance(registry, Registry) else Registry.from_config(cfg)
    sessions = [import_session(p, reg, settings.format, config=cfg) for p in paths]
    return replay_sessions(sessions, settings, registry=reg, config=cfg)
