"""The parts a session is made of, and loading its transcript and sidecar.

Every strategy comes from the registry by the name in config (or is passed in explicitly,
which tests and embedding hosts may do); nothing here names a built-in plugin. The provider's
declared defaults fill in every ``[provider]`` value the config leaves unset, so the window,
the model in the prompt-cache key and the cache TTL follow the provider that was named.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Container, Sequence
from pathlib import Path
from typing import Any

import attrs

from ctxfold.capabilities.bounding import bound_new_message
from ctxfold.engine.committer import Committer
from ctxfold.engine.sidecar import read_sidecar, sidecar_bytes, sidecar_state
from ctxfold.engine.summarizing import (
    CallableSummarizer,
    SummarizeFn,
    asummarize,
    refuse_loopback_summaries,
)
from ctxfold.engine.transcript import Transcript, load_canonical, with_role
from ctxfold.interop.coerce import to_messages, to_tools
from ctxfold.kernel.config import Config
from ctxfold.kernel.contracts import Estimator, Provider, Pruner, SidecarCodec, Store, Summarizer
from ctxfold.kernel.errors import ConfigError, CtxfoldError, MessageError, SessionError
from ctxfold.kernel.kinds import (
    ESTIMATOR,
    PRUNER,
    SIDECAR_FORMAT,
    STORE,
    SUMMARIZER,
    ProviderDefaults,
    StoreOptions,
    SummarizerOptions,
)
from ctxfold.kernel.registry import UNKNOWN_PROVIDER, Registry
from ctxfold.kernel.state import SidecarState
from ctxfold.kernel.types import Message, SummaryRequest, SummaryResult, ToolSchema
from ctxfold.message_checks import check_message
from ctxfold.session_id import validate_session_id


def prompt_cache_key(config: Config, session_id: str, workspace: str | None = None) -> str:
    """``workspace | session | model`` — no counts, times or hashes (design §6.2)."""
    workspace = workspace if workspace is not None else Path(os.getcwd()).name
    return f"{workspace}|{session_id}|{config.provider.model}"


def check_pairing(batch: Sequence[Message], known: Container[str], where: str) -> set[str]:
    """The call ids ``batch`` adds; :class:`MessageError` for a tool result that answers no
    tool call made before it (in the transcript or earlier in the batch)."""
    added: set[str] = set()
    for i, message in enumerate(batch):
        if message.role == "assistant":
            added.update(call.id for call in message.tool_calls)
        elif message.role == "tool":
            call_id = message.tool_call_id
            if not isinstance(call_id, str) or not call_id:
                raise MessageError(f"{where}[{i}].tool_call_id: a tool result needs the id of "
                                   "the tool call it answers")
            if call_id not in known and call_id not in added:
                raise MessageError(f"{where}[{i}].tool_call_id: {call_id!r} answers no tool "
                                   "call of this session; append the assistant message that "
                                   "made the call first")
    return added


def checked_batch(messages: Sequence[Any], known: Container[str], where: str
                  ) -> tuple[list[Message], set[str]]:
    """``messages`` (ctxfold or OpenAI forms) as a batch ready to append — checked as loading
    will read them back, tool results bounded — and the call ids it adds. A malformed one
    raises :class:`MessageError` naming its index and field: nothing is appended."""
    try:
        converted = to_messages(messages, where=where)
        # Host dicts, items and SDK objects must name their calls; ctxfold messages (a
        # provider's reply recorded by complete(), already billed) are kept as they are.
        hosted = [] if all(isinstance(g, Message) for g in messages) else converted
        for i, message in enumerate(hosted):
            for j, call in enumerate(message.tool_calls):
                if not call.id or not call.name:  # its result could never name it
                    raise MessageError(f"{where}[{i}].tool_calls[{j}]: a tool call needs a "
                                       f"non-empty id and name, got id={call.id!r} "
                                       f"name={call.name!r}")
        calls = check_pairing(converted, known, where)
        for i, message in enumerate(converted):
            check_message(message, where=f"{where}[{i}]")
    except MessageError as exc:
        raise MessageError(f"{exc}; nothing was appended") from None
    return [bound_new_message(m) for m in converted], calls


class SessionWarning(UserWarning):
    """Something a host did to a session that is allowed but probably not meant (a system
    message appended again: a re-run script that resumed its session)."""


def repeated_system(session_id: str, canonical: Transcript, batch: Sequence[Message]) -> str:
    """What to tell a host whose ``batch`` holds a system message the transcript already
    holds — a script run twice resumes its session and opens it again — or ``""``. The same
    text each time, so Python's warning filter shows it once per call site."""
    new = [m.content for m in batch if m.role == "system"]
    if not new or not len(canonical):
        return ""
    held = {m.content for _, m in with_role(canonical, "system")}
    if not any(text in held for text in new):
        return ""
    return (f"session {session_id!r}: a system message it already holds was appended again; "
            "a script run twice resumes its session — append the opening messages only while "
            "`cm.canonical` is empty, or open a new session id")


def with_model(key: str, model: str) -> str:
    """``key`` with its model part replaced: ``workspace | session | model``."""
    workspace, session, _old = ([*key.split("|"), "", "", ""])[:3]
    return f"{workspace}|{session}|{model}"


class LazySummarizer:
    """Builds the configured summarizer on first use, so opening a session never builds a
    provider client that maintenance may not need."""

    def __init__(self, registry: Registry, config: Config, options: SummarizerOptions) -> None:
        self._registry = registry
        self._config = config
        self._options = options
        self._built: Summarizer | None = None
        registry.get(SUMMARIZER, config.summarizer.name)  # unknown names fail at open

    def _summarizer(self) -> Summarizer:
        if self._built is None:
            self._built = self._registry.create(
                SUMMARIZER, self._config.summarizer.name, config=self._config,
                options=self._options,
            )
        return self._built

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        return self._summarizer().summarize(request)

    async def asummarize(self, request: SummaryRequest) -> SummaryResult:
        return await asummarize(self._summarizer(), request)


@attrs.frozen
class SessionParts:
    """The strategies and settings of one session (shared by its forks)."""

    session_id: str
    config: Config
    registry: Registry
    store: Store
    codec: SidecarCodec
    estimator: Estimator
    pruner: Pruner
    summarizer: Summarizer
    tools: tuple[ToolSchema, ...]
    window: int
    cache_ttl_minutes: int
    clock: Callable[[], float]
    workspace: str | None = None
    #: What the configured provider declares (its output budget rule and field): the wire
    #: forms of a prepared request follow it.
    provider_defaults: ProviderDefaults = attrs.field(factory=lambda: UNKNOWN_PROVIDER)
    #: ``False``: requests never offer ``use_capability`` (a host that answers no tool calls).
    offer_capability: bool = True


def build_parts(
    session_id: str,
    *,
    config: Config,
    registry: Registry | None = None,
    tools: Sequence[Any] = (),
    store_path: str | None = None,
    store: Store | None = None,
    estimator: Estimator | None = None,
    pruner: Pruner | None = None,
    summarizer: Summarizer | None = None,
    summarize: SummarizeFn | None = None,
    provider: Provider | None = None,
    window: int | None = None,
    cache_ttl_minutes: int | None = None,
    clock: Callable[[], float] | None = None,
    workspace: str | None = None,
    offer_capability: bool = True,
) -> SessionParts:
    """Select every strategy of a session. Explicit parts win over the config's names; a
    passed ``provider`` is the one the ``llm`` summarizer uses and, when the config leaves
    the cache TTL unset, the one whose TTL labels a resume. ``summarize`` is the host's own
    summary function. ``tools`` may be :class:`ToolSchema` objects or OpenAI tool dicts."""
    session_id = validate_session_id(session_id)
    registry = registry or Registry.from_config(config)
    resolved = registry.resolve(config)
    if summarize is not None:
        if summarizer is not None:
            raise ConfigError("pass either summarizer= or summarize=, not both")
        summarizer = CallableSummarizer(summarize)
    if summarizer is None and provider is None:
        refuse_loopback_summaries(resolved, registry)
    # A provider knows its own cache; a host's stand-in may not say (then the config's TTL).
    own = getattr(provider, "cache_ttl_minutes", 0)
    ttl = cache_ttl_minutes or (
        own if not config.provider.cache_ttl_minutes and isinstance(own, int) and own > 0
        else resolved.provider.cache_ttl_minutes
    )
    return SessionParts(
        session_id=session_id,
        config=resolved,
        registry=registry,
        store=store or registry.create(STORE, resolved.store.name, config=resolved,
                                       options=StoreOptions(path=store_path)),
        codec=registry.create(SIDECAR_FORMAT, resolved.store.sidecar_format, config=resolved),
        estimator=estimator or registry.create(ESTIMATOR, resolved.estimator.name,
                                               config=resolved),
        pruner=pruner or registry.create(PRUNER, resolved.pruner.name, config=resolved),
        summarizer=summarizer or LazySummarizer(registry, resolved,
                                                SummarizerOptions(provider=provider)),
        tools=to_tools(tools),
        window=window or resolved.provider.context_window,
        cache_ttl_minutes=ttl,
        clock=clock or time.time,
        workspace=workspace,
        provider_defaults=registry.provider_defaults(resolved),
        offer_capability=offer_capability,
    )


@attrs.frozen
class LoadedSession:
    """A session's transcript, its sidecar state (owned by the committer), the notices
    loading produced (a sidecar set aside, a projection dropped) and the transcript's store
    revision, taken before it was read."""

    canonical: Transcript
    committer: Committer
    notices: tuple[str, ...]
    revision: str


def load_session(parts: SessionParts, *, create: bool) -> LoadedSession:
    """Load (or create) the session's transcript and sidecar."""
    store, codec, session_id = parts.store, parts.codec, parts.session_id
    if not store.exists(session_id):
        if not create:
            raise SessionError(f"session {session_id!r} does not exist in the store")
        store.create(session_id)
    # The revision before anything is read (an append landing meanwhile is a move the next
    # prepare notices), the sidecar before the transcript (sidecar.sidecar_state says why).
    revision = store.revision(session_id)
    raw = read_sidecar(store, session_id)
    canonical = load_canonical(store, session_id)
    state, notices, discarded = sidecar_state(store, codec, session_id, raw, canonical)
    if not state.prompt_cache_key:
        key = prompt_cache_key(parts.config, session_id, parts.workspace)
        state = attrs.evolve(state, prompt_cache_key=key)

    # The sidecar bytes this process last read or wrote: every write is a compare-and-swap
    # against them, so another process's commit is never overwritten. They are the bytes the
    # state came from: re-read here, they could hold a commit the state lacks, which the
    # first write would then overwrite.
    seen: list[bytes | None] = [None if discarded or not isinstance(raw, bytes) else raw]

    def reload() -> SidecarState | None:
        raw = _read_quietly(store, session_id)
        seen[0] = raw
        if raw is None:
            return None
        try:
            return codec.decode(json.loads(raw))
        except (CtxfoldError, ValueError, TypeError, KeyError, RecursionError):
            return None

    def save(new: SidecarState) -> bool:
        data = sidecar_bytes(codec, new)
        if not store.replace_sidecar(session_id, data, seen[0]):
            return False
        seen[0] = data
        return True

    committer = Committer(
        state,
        save=save,
        reload=reload,
        clock=parts.clock,
    )
    # The very transcript the projection was validated against: its covered-prefix hash is
    # then extended, not recomputed, by the next install (kernel.fingerprint).
    return LoadedSession(canonical=canonical, committer=committer, notices=tuple(notices),
                         revision=revision)


def _read_quietly(store: Store, session_id: str) -> bytes | None:
    try:
        return store.read_sidecar(session_id)
    except (CtxfoldError, OSError):
        return None


__all__ = ["LoadedSession", "SessionParts", "SessionWarning", "build_parts", "load_session",
           "repeated_system"]
