"""The hooks of ctxfold: the whole contract between the kernel and its plugins.

Two kinds of hook:

* **Registration hooks** (``ctxfold_<family>``) return a list of :class:`StrategySpec`
  descriptors. Every implementation is called; the registry gathers all descriptors, records
  which plugin registered each, and refuses duplicate names. The kernel then selects one
  strategy per family by the name in config.
* **Observer hooks** are called for their side effects (logging, metrics, policy checks).
  Their return values are ignored; an exception in an observer propagates to the caller.

Built-in plugins use exactly these hooks (see ``ctxfold.plugins.DEFAULT_PLUGINS``); third
parties are loaded from the entry-point group ``ctxfold``. Plugins mark implementations with
:data:`hookimpl`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pluggy

from ctxfold.kernel.strategies import StrategySpec
from ctxfold.kernel.types import Message, Receipt

PROJECT = "ctxfold"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

#: Registration hooks by strategy kind; the registry walks this table.
REGISTRATION_HOOKS = {
    "estimator": "ctxfold_estimators",
    "pruner": "ctxfold_pruners",
    "summarizer": "ctxfold_summarizers",
    "store": "ctxfold_stores",
    "provider": "ctxfold_providers",
    "sidecar_format": "ctxfold_sidecar_formats",
    "config_migration": "ctxfold_config_migrations",
    "importer": "ctxfold_importers",
    "policy": "ctxfold_policies",
}


# -- registration hooks ------------------------------------------------------------------------


@hookspec
def ctxfold_estimators() -> Sequence[StrategySpec]:
    """Register token estimators (kind ``estimator``).

    Each factory returns an object satisfying :class:`ctxfold.kernel.strategies.Estimator`.
    Selected by ``[estimator] name``. All implementations are called.
    """
    raise NotImplementedError


@hookspec
def ctxfold_pruners() -> Sequence[StrategySpec]:
    """Register tool-result pruners (kind ``pruner``).

    Each factory returns a :class:`ctxfold.kernel.strategies.Pruner`. All implementations are
    called.
    """
    raise NotImplementedError


@hookspec
def ctxfold_summarizers() -> Sequence[StrategySpec]:
    """Register summarizers (kind ``summarizer``), selected by ``[summarizer] name``.

    Each factory returns a :class:`ctxfold.kernel.strategies.Summarizer`. All implementations
    are called.
    """
    raise NotImplementedError


@hookspec
def ctxfold_stores() -> Sequence[StrategySpec]:
    """Register session stores (kind ``store``), selected by ``[store] name``.

    Each factory returns a :class:`ctxfold.kernel.strategies.Store`. All implementations are
    called.
    """
    raise NotImplementedError


@hookspec
def ctxfold_providers() -> Sequence[StrategySpec]:
    """Register provider adapters (kind ``provider``), selected by ``[provider] name``.

    All implementations are called.
    """
    raise NotImplementedError


@hookspec
def ctxfold_sidecar_formats() -> Sequence[StrategySpec]:
    """Register sidecar codecs (kind ``sidecar_format``).

    A codec decodes every historic sidecar form it knows into the current
    :class:`ctxfold.kernel.types.SidecarState` and encodes the current form. All
    implementations are called; the kernel uses the one named ``v3``.
    """
    raise NotImplementedError


@hookspec
def ctxfold_config_migrations() -> Sequence[StrategySpec]:
    """Register configuration migrations (kind ``config_migration``).

    A migration normalises legacy keys when a config is loaded and rewrites files for
    ``ctxfold config migrate``. All implementations are called, in registration order.
    """
    raise NotImplementedError


@hookspec
def ctxfold_importers() -> Sequence[StrategySpec]:
    """Register transcript importers (kind ``importer``) used by ``estimate`` and ``replay``.

    All implementations are called.
    """
    raise NotImplementedError


@hookspec
def ctxfold_policies() -> Sequence[StrategySpec]:
    """Register replay policies (kind ``policy``). All implementations are called."""
    raise NotImplementedError


# -- observer hooks ----------------------------------------------------------------------------


@hookspec
def ctxfold_before_request(session_id: str, request: Mapping[str, Any]) -> None:
    """Called with the provider request body just before it is sent.

    ``request`` is read-only. Return values are ignored.
    """


@hookspec
def ctxfold_after_install(session_id: str, receipt: Receipt) -> None:
    """Called after a projection (prune or summary checkpoint) was committed and persisted.

    Return values are ignored.
    """


@hookspec
def ctxfold_after_prepare(session_id: str, messages: Sequence[Message], tokens: int) -> None:
    """Called after a ``prepare()`` that maintained (pruned, summarized, or recorded a
    blocked/failed attempt), with the provider-visible messages and their estimate.

    Never called below the trigger, where ``prepare()`` has no effects at all (SPEC §1.2).
    Return values are ignored.
    """
