"""Routing a request to its session: the conversation's sessions (the one its id names and
its forks) indexed by what the client sees of them, the session the history continues or
the fork it continues in, and the checkpoints found by content that a new session starts
from. The rules are in :mod:`ctxfold.serve.sessions` and ``docs/serve.md``."""

from __future__ import annotations

import asyncio
import json
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Sequence
from contextlib import AsyncExitStack

import attrs

from ctxfold.capabilities.bounding import bound_new_message
from ctxfold.engine.manager import ContextManager
from ctxfold.engine.sidecar import fresh_state, save_sidecar
from ctxfold.kernel.contracts import SidecarCodec, Store
from ctxfold.kernel.errors import CtxfoldError, MessageError
from ctxfold.kernel.state import Projection
from ctxfold.kernel.types import Message, RequestShape, ToolSchema
from ctxfold.serve.client_request import ClientRequest, estimated_tools
from ctxfold.serve.errors import ServeError, SessionBusyError
from ctxfold.serve.pool import SessionPool
from ctxfold.serve.sessions import (
    ClientView,
    Match,
    chain_of,
    fork_id,
    is_fork_of,
    key_digest,
    match,
)

#: How often one request re-plans when the branch it chose changed under it.
MAX_REPLANS = 8
#: How many conversations' branch indexes are kept in memory (least recently used out).
MAX_FAMILIES = 4096


@attrs.define
class Family:
    """One conversation: its sessions (the one named by its id, and its forks), each as
    the client sees it. ``listed``: the forks in the store have been indexed."""

    name: str
    views: dict[str, ClientView] = attrs.Factory(dict)
    listed: bool = False


#: How many checkpoints the index of checkpoints found by content keeps (newest used last).
MAX_CHECKPOINTS = 1024


class Checkpoints:
    """Every checkpoint the proxy saw installed, by the hash-chain link of the client-visible
    messages it covers: a request whose history holds that span — a continuation, a fork,
    a repeat, a client's own fork sent as a new conversation — starts from it instead of
    folding again."""

    def __init__(self, capacity: int = MAX_CHECKPOINTS) -> None:
        self.capacity = capacity
        self._by_link: OrderedDict[bytes, tuple[str, Projection]] = OrderedDict()

    def record(self, session_id: str, view: ClientView, projection: Projection | None) -> None:
        """Remember ``session_id``'s projection, when it covers whole client messages."""
        if projection is None or not projection.covered_count:
            return
        groups = view.groups
        g = bisect_left(groups, projection.covered_count, key=lambda group: group.end)
        if g >= view.visible or groups[g].end != projection.covered_count:
            return
        link = view.chain[g]
        self._by_link[link] = (session_id, projection)
        self._by_link.move_to_end(link)
        while len(self._by_link) > self.capacity:
            self._by_link.popitem(last=False)

    def longest(self, chain: Sequence[bytes], limit: int) -> tuple[int, str, Projection] | None:
        """The checkpoint covering the longest prefix of ``chain`` (at most ``limit`` of its
        messages): ``(messages covered, session, projection)``."""
        for g in range(min(limit, len(chain)), 0, -1):
            hit = self._by_link.get(chain[g - 1])
            if hit is not None:
                return g, *hit
        return None


class Held:
    """The session locks one request holds (on its exit stack), each taken once."""

    def __init__(self, pool: SessionPool, stack: AsyncExitStack) -> None:
        self.pool = pool
        self.stack = stack
        self.names: set[str] = set()

    async def lock(self, session_id: str, wait: float | None = None) -> None:
        if session_id not in self.names:
            await self.stack.enter_async_context(self.pool.locked(session_id, wait))
            self.names.add(session_id)


class Router:
    """The conversations this proxy routes and the sessions they hold."""

    def __init__(self, pool: SessionPool, store: Store, codec: SidecarCodec, *,
                 lock_wait: float, fork_after: float) -> None:
        self.pool = pool
        self.store = store
        self.codec = codec
        self.lock_wait = lock_wait
        self.fork_after = fork_after
        self.families: OrderedDict[str, Family] = OrderedDict()
        self.checkpoints = Checkpoints()

    def _family(self, name: str) -> Family:
        family = self.families.pop(name, None) or Family(name)
        self.families[name] = family  # most recently used last
        while len(self.families) > MAX_FAMILIES:
            del self.families[next(iter(self.families))]
        return family

    def _index(self, family: Family, session_id: str, tools: Sequence[ToolSchema]) -> None:
        """Read a session of the family into its index (worker thread)."""
        cm = self.pool.get(session_id, tools, create=False)
        family.views[session_id] = ClientView(cm.messages_from(0))

    def _list(self, family: Family, tools: Sequence[ToolSchema]) -> None:
        """Index the family's sessions in the store not indexed yet (worker thread)."""
        for session_id in self.store.list_sessions():
            if session_id not in family.views and (
                    session_id == family.name or is_fork_of(family.name, session_id)):
                self._index(family, session_id, tools)
        family.listed = True

    @staticmethod
    def _best(family: Family, chain: Sequence[bytes]) -> tuple[str, Match] | None:
        """The session the history continues (the longest one it extends), else the one
        it shares the longest prefix with."""
        best: tuple[str, Match] | None = None
        for session_id, view in list(family.views.items()):  # (threads add views)
            found = match(view, chain)
            if best is None or (found.extends, found.matched) > (best[1].extends,
                                                                  best[1].matched):
                best = (session_id, found)
        return best

    async def route(self, family_id: str, request: ClientRequest,
                    stack: AsyncExitStack) -> tuple[str, ContextManager]:
        """Lock the session the request's history continues (on ``stack``) and append
        what is new — in a fork when the history diverges from every session of its
        conversation, or continues one that another request holds. Returns the session
        that holds the history now."""
        history, tools = request.history, estimated_tools(request)
        if request.chain:
            digests, chain = list(request.digests), list(request.chain)
        else:
            digests = await asyncio.to_thread(lambda: [key_digest(m) for m in history])
            chain = chain_of(digests)
        family = self._family(family_id)
        held = Held(self.pool, stack)
        for _ in range(MAX_REPLANS):
            best = self._best(family, chain)
            if (best is None or not best[1].extends) and not family.listed:
                await asyncio.to_thread(self._list, family, tools)
                best = self._best(family, chain)
            if best is None:  # a new conversation: its first session
                started = await self._start(family, request, chain, held)
                if started is not None:
                    return started
                best = (family.name, Match(matched=0, covered=0, extends=True))
            session_id, found = best
            if found.extends:
                try:
                    await held.lock(session_id, self.fork_after)
                except SessionBusyError:  # held by another request: continue beside it
                    return await self._fork(family, session_id, found, request, digests,
                                            chain, held)
                cm, found = await asyncio.to_thread(self._continue, family, session_id, tools,
                                                    chain, history)
                if found.extends:
                    held.stack.callback(self._settled, family, session_id, cm)
                    return session_id, cm
                continue  # it changed while we waited: plan again
            return await self._fork(family, session_id, found, request, digests, chain,
                                    held)
        raise ServeError(f"session {family_id!r}: the conversation kept changing under "
                         f"this request ({MAX_REPLANS} attempts); retry it", status=409,
                         kind="conflict", code="session_busy")

    def would_send(self, family_id: str, request: ClientRequest
                   ) -> tuple[list[Message], ContextManager | None]:
        """What the proxy would send for ``request`` now, without routing it (nothing is
        appended or locked; worker thread): its history after the longest checkpoint that
        covers a prefix of it, and the open session it continues, if any (whose estimator
        counts it)."""
        history = request.history
        chain = list(request.chain) or chain_of([key_digest(m) for m in history])
        hit = self.checkpoints.longest(chain, len(chain))
        view = [*hit[2].messages, *history[hit[0]:]] if hit is not None else list(history)
        family = self.families.get(family_id)
        best = self._best(family, chain) if family is not None else None
        return view, self.pool.peek(best[0]) if best is not None and best[1].matched else None

    def _refresh(self, family: Family, session_id: str,
                 tools: Sequence[ToolSchema]) -> ContextManager:
        """Open the session (its lock held) and bring its index entry up to date."""
        cm = self.pool.get(session_id, tools)
        view = family.views.get(session_id)
        if cm.sync() or view is None or view.length > cm.message_count:
            view = family.views[session_id] = ClientView(cm.messages_from(0))
        else:
            view.extend(cm.messages_from(view.length))
        return cm

    def _continue(self, family: Family, session_id: str, tools: Sequence[ToolSchema],
                  chain: Sequence[bytes], history: Sequence[Message]
                  ) -> tuple[ContextManager, Match]:
        """The session (its lock held) brought up to date and matched again; when the
        history still extends it, its new messages appended (worker thread: one hop for
        the whole continuation)."""
        cm = self._refresh(family, session_id, tools)
        found = match(family.views[session_id], chain)
        if found.extends:
            self._write(family, session_id, cm, history[found.matched:])
        return cm, found

    def _write(self, family: Family, session_id: str, cm: ContextManager,
               new: Sequence[Message]) -> None:
        """Append the request's new messages (worker thread)."""
        if new:
            try:
                _admit(cm, new)
                cm.append(*new)
            except MessageError as exc:
                named = f"session {session_id!r}: "  # the session's own refusals name it
                said = str(exc)
                raise ServeError(said if said.startswith(named) else named + said) from None
        self._settled(family, session_id, cm)

    async def _append(self, family: Family, session_id: str, cm: ContextManager,
                      new: Sequence[Message], held: Held) -> None:
        """Append the request's new messages; when the request lets the session go, its
        index entry reads the answer too (before the lock is released)."""
        held.stack.callback(self._settled, family, session_id, cm)
        await asyncio.to_thread(self._write, family, session_id, cm, new)

    def _settled(self, family: Family, session_id: str, cm: ContextManager) -> None:
        """The session's index entry reads what the request added (the answer, a
        checkpoint), and a checkpoint joins the index of checkpoints found by content."""
        view = family.views.get(session_id)
        if view is not None and view.length <= cm.message_count:
            view.extend(cm.messages_from(view.length))
            self.checkpoints.record(session_id, view, cm.state.projection)
        self.pool.measure(session_id, cm)

    def _view_of(self, session_id: str) -> ClientView | None:
        for family in list(self.families.values()):
            if session_id in family.views:
                return family.views[session_id]
        return None

    async def _start(self, family: Family, request: ClientRequest, chain: Sequence[bytes],
                     held: Held) -> tuple[str, ContextManager] | None:
        """A new conversation whose history holds a span a checkpoint covers (a client's
        own fork of a conversation, sent under a new id): its first session is a fork of
        the session that checkpoint belongs to, so it starts from that checkpoint instead
        of folding the whole history again. ``None`` when no checkpoint applies."""
        hit = self.checkpoints.longest(chain, len(chain))
        view = self._view_of(hit[1]) if hit is not None else None
        if hit is None or view is None:
            return None
        source, found = hit[1], match(view, chain)
        if found.matched < hit[0]:
            return None
        await held.lock(family.name, self.lock_wait)
        if await asyncio.to_thread(self.store.exists, family.name):
            return None  # created meanwhile (another replica): route as usual
        tools = estimated_tools(request)
        source_cm = await asyncio.to_thread(self.pool.get, source, tools)
        await asyncio.to_thread(source_cm.fork, family.name, found.covered)
        await asyncio.to_thread(self._seed, family.name, hit[2], found.covered)
        cm = await asyncio.to_thread(self.pool.get, family.name, tools, create=False)
        family.views[family.name] = ClientView(cm.messages_from(0))
        await self._append(family, family.name, cm, request.history[found.matched:], held)
        return family.name, cm

    def _seed(self, session_id: str, projection: Projection, limit: int) -> None:
        """Give a new fork ``projection`` when it lies within the fork's ``limit`` messages
        and covers more than the checkpoint the fork carried from its source (worker
        thread). The session validates it on open like any stored checkpoint (its
        covered-prefix hash), so one that does not match is set aside, never used."""
        if projection.covered_count > limit:
            return
        try:
            raw = self.store.read_sidecar(session_id)
            carried = self.codec.decode(json.loads(raw)).projection if raw else None
        except (CtxfoldError, ValueError, TypeError, KeyError, RecursionError):
            carried = None
        if carried is not None and carried.covered_count >= projection.covered_count:
            return
        save_sidecar(self.store, self.codec, session_id,
                     attrs.evolve(fresh_state(), projection=projection))

    async def _fork(self, family: Family, source: str, found: Match, request: ClientRequest,
                    digests: Sequence[bytes], chain: Sequence[bytes],
                    held: Held) -> tuple[str, ContextManager]:
        """Continue the history in a fork of ``source`` holding its first
        ``found.covered`` messages (the source's checkpoint comes along when it covers no
        more). The fork's name depends only on the shared prefix and the first differing
        message, so every replica finds the same one; a name another history took gets
        the next attempt number."""
        history, tools = request.history, estimated_tools(request)
        prefix = chain[found.matched - 1] if found.matched else b""
        differing = digests[found.matched] if found.matched < len(digests) else None
        attempt = 0
        while True:
            target = fork_id(family.name, prefix, differing, attempt)
            attempt += 1
            if target == source:
                continue
            await held.lock(target)
            source_cm = await asyncio.to_thread(self.pool.get, source, tools)
            if target not in family.views and await asyncio.to_thread(
                    self.store.exists, target):
                await asyncio.to_thread(self._index, family, target, tools)
            if target in family.views:
                cm = await asyncio.to_thread(self._refresh, family, target, tools)
                found_here = match(family.views[target], chain)
                if found_here.extends:  # this history's own fork (another replica made it)
                    await self._append(family, target, cm, history[found_here.matched:], held)
                    return target, cm
                continue  # taken by another history: the next name (its lock stays held)
            await asyncio.to_thread(source_cm.fork, target, found.covered)
            hit = self.checkpoints.longest(chain, found.matched)
            if hit is not None:
                await asyncio.to_thread(self._seed, target, hit[2], found.covered)
            cm = await asyncio.to_thread(self.pool.get, target, tools, create=False)
            family.views[target] = ClientView(cm.messages_from(0))
            await self._append(family, target, cm, history[found.matched:], held)
            return target, cm


#: Characters per token of the window a too-long message is first counted on.
_ADMIT_CHARS = 8


def _admit(cm: ContextManager, new: Sequence[Message]) -> None:
    """Refuse, before anything is written, a new message no request could ever carry: one
    that alone is at or above the window's hard ceiling (tool results count bounded, as
    they are stored). Appended, it would make every later request of the session fail."""
    for i, message in enumerate(new):
        if len(message.text) * 4 < cm.hard_ceiling:  # at most 4 tokens per character
            continue
        stored = bound_new_message(message)
        # Count a window's worth of characters first: a message far over the window (a
        # pasted 50 MB log) is refused without tokenizing all of it.
        head = stored.text[:_ADMIT_CHARS * cm.hard_ceiling]
        if len(head) < len(stored.text) and cm.estimator.estimate(RequestShape(
                [Message(role=stored.role, content=head)], ())) >= cm.hard_ceiling:
            tokens = cm.hard_ceiling
        else:
            tokens = cm.estimator.estimate(RequestShape([stored], ()))
        if tokens >= cm.hard_ceiling:
            raise ServeError(
                f"a new message of the request ({stored.role}, the {i + 1}. of "
                f"{len(new)}) holds at least {tokens} tokens, at or above what the window of "
                f"{cm.window} tokens can carry ({cm.hard_ceiling}); nothing was written — "
                "send it shorter or in parts", code="context_length_exceeded")


