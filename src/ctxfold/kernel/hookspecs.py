"""The hooks of ctxfold: the whole contract between the kernel and its plugins.

Two kinds of hook:

* **Registration hooks** (``ctxfold_<family>``) return a list of :class:`StrategySpec`
  descriptors. The registry calls each through ``pm.hook``, so pluggy's rules hold: every
  implementation is called, the plugin registered last first (``tryfirst``/``trylast`` move
  one), and a ``wrapper=True`` implementation sees, and may change, the lists of those it
  wraps. The registry gathers all descriptors, records which plugin registered each, and
  refuses duplicate names. The kernel then selects one strategy per family by the name in
  config.
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

from ctxfold.kernel.kinds import StrategySpec
from ctxfold.kernel.state import Receipt
from ctxfold.kernel.types import Message

PROJECT = "ctxfold"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# -- registration hooks ------------------------------------------------------------------------


@hookspec
def ctxfold_estimators() -> Sequence[StrategySpec]:
    """Register token estimators (kind ``estimator``), selected by ``[estimator] name``.

    Each factory returns an :class:`~ctxfold.kernel.contracts.Estimator`; one that is also an
    :class:`~ctxfold.kernel.contracts.IncrementalEstimator` gets the O(new messages) path.
    Factories receive :class:`~ctxfold.kernel.kinds.EstimatorOptions`. All implementations are
    called.
    """


@hookspec
def ctxfold_pruners() -> Sequence[StrategySpec]:
    """Register tool-result pruners (kind ``pruner``), selected by ``[pruner] name``.

    Each factory returns a :class:`~ctxfold.kernel.contracts.Pruner` and receives
    :class:`~ctxfold.kernel.kinds.NoOptions`. All implementations are called.
    """


@hookspec
def ctxfold_summarizers() -> Sequence[StrategySpec]:
    """Register summarizers (kind ``summarizer``), selected by ``[summarizer] name``.

    Each factory returns a :class:`~ctxfold.kernel.contracts.Summarizer` and receives
    :class:`~ctxfold.kernel.kinds.SummarizerOptions`. All implementations are called.
    """


@hookspec
def ctxfold_stores() -> Sequence[StrategySpec]:
    """Register session stores (kind ``store``), selected by ``[store] name``.

    Each factory returns a :class:`~ctxfold.kernel.contracts.Store` and receives
    :class:`~ctxfold.kernel.kinds.StoreOptions`. All implementations are called.
    """


@hookspec
def ctxfold_providers() -> Sequence[StrategySpec]:
    """Register provider adapters (kind ``provider``), selected by ``[provider] name``.

    Each factory returns a :class:`~ctxfold.kernel.contracts.Provider` and receives
    :class:`~ctxfold.kernel.kinds.ProviderOptions`. Each descriptor declares the provider's
    defaults in ``StrategySpec.defaults`` (:class:`~ctxfold.kernel.contracts.ProviderDefaults`:
    model, context window, cache TTL, output budget, overflow parser, request-id headers).
    All implementations are called.
    """


@hookspec
def ctxfold_sidecar_formats() -> Sequence[StrategySpec]:
    """Register sidecar codecs (kind ``sidecar_format``), selected by
    ``[store] sidecar_format``.

    Each factory returns a :class:`~ctxfold.kernel.contracts.SidecarCodec` (decodes every
    historic form it knows into the current :class:`~ctxfold.kernel.state.SidecarState`,
    encodes the current form) and receives :class:`~ctxfold.kernel.kinds.NoOptions`. All
    implementations are called.
    """


@hookspec
def ctxfold_config_migrations() -> Sequence[StrategySpec]:
    """Register configuration migrations (kind ``config_migration``).

    Each factory returns a :class:`~ctxfold.kernel.contracts.ConfigMigration` (normalises
    retired keys when a config is loaded; names them for ``ctxfold config migrate``) and
    receives :class:`~ctxfold.kernel.kinds.NoOptions`. All implementations are called; every
    migration registered is applied, in the order pluggy calls the hook (the plugin
    registered last first, ``tryfirst``/``trylast`` move one; each list in its own order).
    """


@hookspec
def ctxfold_importers() -> Sequence[StrategySpec]:
    """Register transcript importers (kind ``importer``) used by ``estimate`` and ``replay``.

    Each factory returns an :class:`~ctxfold.kernel.contracts.Importer` and receives
    :class:`~ctxfold.kernel.kinds.ImporterOptions`. Auto-detection tries every importer by
    ``priority``. All implementations are called.
    """


@hookspec
def ctxfold_policies() -> Sequence[StrategySpec]:
    """Register replay policies (kind ``policy``), selected by ``ctxfold replay --policy``.

    Each factory returns a :class:`~ctxfold.kernel.contracts.Policy` and receives
    :class:`~ctxfold.kernel.kinds.PolicyOptions`. All implementations are called.
    """


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

    Never called below the trigger, where ``prepare()`` has no effects at all (design §2.4).
    Return values are ignored.
    """
