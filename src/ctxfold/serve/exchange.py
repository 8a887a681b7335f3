"""One client request after routing: upstream rounds until the model answers the client.

Each round sends ctxfold's view (``cm.prepare()``) and reads the answer. When the model
called only ``use_capability``, the proxy appends the call and ``cm.use_capability(...)``'s
answer and sends the next round (at most ``max_rounds`` in all); the client never sees those
calls. The client's own tool calls end the answer and go to the client untouched. An
answer enters the transcript only once it is complete: a stream that breaks leaves nothing
of its round behind. One context overflow is recovered per round, before anything of the
round was forwarded (``prepare("overflow")``, then one retry).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import AsyncExitStack
from typing import Any

import attrs

from ctxfold.engine.manager import ContextManager
from ctxfold.engine.prepared import PreparedRequest
from ctxfold.kernel.errors import ContextLimitError, CtxfoldError
from ctxfold.kernel.types import ChatResponse, Message, Trigger, Usage
from ctxfold.secrets import redact_text
from ctxfold.serve.client_request import ClientRequest
from ctxfold.serve.deltas import (
    CallArgs,
    CallEnd,
    CallStart,
    Delta,
    message_deltas,
    parser_for,
)
from ctxfold.serve.errors import error_answer, in_wire
from ctxfold.serve.render_anthropic import FINISH_REASONS, AnthropicRenderer
from ctxfold.serve.render_chat import ChatRenderer
from ctxfold.serve.render_responses import ResponsesRenderer, response_echo
from ctxfold.serve.sessions import USE_CAPABILITY
from ctxfold.serve.upstream import Upstream
from ctxfold.transport.aclient import AsyncEventStream

log = logging.getLogger("ctxfold.serve")


def _sum(a: Usage, b: Usage) -> Usage:
    return Usage(**{f: getattr(a, f) + getattr(b, f) for f in (
        "prompt_tokens", "completion_tokens", "cache_hit_tokens", "cache_miss_tokens",
        "reasoning_tokens", "cache_write_tokens")}, aggregated=True)


#: How long the rest of an upstream stream is read after its terminal event.
DRAIN_SECONDS = 0.5
#: What a stream sends when it has had nothing to send for a while: an SSE comment.
KEEPALIVE = ": keep-alive\n\n"
_END = object()


async def _awaited(awaitable: Awaitable[Any]) -> AsyncIterator[Any]:
    """One awaitable as a stream of its result."""
    yield await awaitable


def _capability_answer(cm: ContextManager, arguments: str) -> str:
    try:
        decoded = json.loads(arguments or "{}")
    except ValueError:
        decoded = None
    if not isinstance(decoded, Mapping):
        return "error: the use_capability arguments must be a JSON object"
    return cm.use_capability(decoded)


class Exchange:
    """The rounds of one client request (see the module docstring)."""

    def __init__(self, cm: ContextManager, request: ClientRequest, upstream: Upstream, *,
                 forwarded: str | None, max_rounds: int, keepalive: float = 15.0) -> None:
        self.cm = cm
        self.request = request
        self.upstream = upstream
        self.forwarded = forwarded
        self.max_rounds = max_rounds
        self.keepalive = keepalive
        model = request.model or upstream.model
        created = int(time.time())
        self.renderer: ChatRenderer | ResponsesRenderer | AnthropicRenderer
        if request.wire == "chat":
            self.renderer = ChatRenderer(
                response_id=f"chatcmpl-{uuid.uuid4().hex[:24]}", model=model,
                created=created, include_usage=request.include_usage)
        elif request.wire == "messages":
            self.renderer = AnthropicRenderer(message_id=f"msg_{uuid.uuid4().hex[:24]}",
                                              model=model)
        else:
            system = request.history[0] if request.instructions else None
            self.renderer = ResponsesRenderer(
                response_id=f"resp_{uuid.uuid4().hex}", model=model, created=created,
                echo=response_echo(request.fields, system.content if system else None))
        self.usage = Usage()
        self.rounds = 0
        self.finish_reason = "stop"
        self.first: PreparedRequest | None = None
        self._calls: dict[Any, int] = {}  # this round's visible call keys -> client index
        self._hidden: set[Any] = set()
        self._shown_calls = 0
        self._forwarded = False  # something of this round reached the client
        self._recovered = False  # this round already recovered from an overflow
        self._used_capability = False  # the model called use_capability in this answer
        self.actions: list[str] = []
        self._round_stack = AsyncExitStack()
        self._events: AsyncEventStream | None = None

    # -- one round ------------------------------------------------------------------------

    async def _body(self, trigger: Trigger) -> bytes:
        def build() -> tuple[PreparedRequest, bytes]:
            # One worker-thread hop: encoding is O(history) toward an Anthropic upstream
            # (its body is not kept as per-message fragments), so off the event loop too.
            prepared = self.cm.prepare(trigger)
            return prepared, self.upstream.encoded(
                self.request, prepared, offer=self._used_capability,
                cache_key=self.cm.state.prompt_cache_key)

        prepared, body = await asyncio.to_thread(build)
        self.first = self.first or prepared
        self.actions.append(prepared.action.value)
        return body

    async def open_stream(self, first: Trigger = "pressure") -> None:
        """Send a streaming round; returns once the upstream answered with headers, so a
        refusal reaches the client with the provider's own status."""
        if first == "pressure":
            self.rounds += 1
            self._calls, self._hidden, self._forwarded = {}, set(), False
            self._recovered = False
        triggers: tuple[Trigger, ...] = ("pressure", "overflow") if first == "pressure" \
            else ("overflow",)
        for trigger in triggers:
            self._recovered = self._recovered or trigger == "overflow"
            body = await self._body(trigger)
            try:
                self._events = await self._round_stack.enter_async_context(
                    self.upstream.stream(body, self.forwarded, self.request.headers))
                return
            except ContextLimitError:
                if trigger == "overflow":
                    raise

    async def _post(self) -> ChatResponse:
        self.rounds += 1
        self._calls, self._hidden = {}, set()
        triggers: tuple[Trigger, ...] = ("pressure", "overflow")
        for trigger in triggers:
            body = await self._body(trigger)
            try:
                result = await self.upstream.post(body, self.forwarded, self.request.headers)
            except ContextLimitError:
                if trigger == "overflow":
                    raise
                continue
            return self.upstream.translator.parse_response(result.data, result.request_id)
        raise AssertionError("unreachable")  # pragma: no cover

    def _visible(self, delta: Delta) -> list[str]:
        """What the client sees of an upstream delta: nothing of ``use_capability``."""
        if isinstance(delta, CallStart):
            if delta.name == USE_CAPABILITY:
                self._hidden.add(delta.key)
                return []
            self._calls[delta.key] = self._shown_calls
            self._shown_calls += 1
            return self._show(attrs.evolve(delta, key=self._calls[delta.key]))
        if isinstance(delta, CallArgs | CallEnd):
            if delta.key in self._hidden or delta.key not in self._calls:
                return []
            return self._show(attrs.evolve(delta, key=self._calls[delta.key]))
        return self._show(delta)

    def _show(self, delta: Delta) -> list[str]:
        self._forwarded = True
        return self.renderer.feed(delta)

    def _settle(self, response: ChatResponse) -> bool:
        """Record a complete round (worker thread); True when another round follows."""
        message = response.message
        mine = [c for c in message.tool_calls if c.name == USE_CAPABILITY]
        theirs = [c for c in message.tool_calls if c.name != USE_CAPABILITY]
        self._used_capability = self._used_capability or bool(mine)
        answers = [Message(role="tool", tool_call_id=c.id, name=USE_CAPABILITY,
                           content=_capability_answer(self.cm, c.arguments)) for c in mine]
        self.cm.append(message, *answers)
        self.cm.observe_usage(response.usage)
        self.usage = _sum(self.usage, response.usage)
        if theirs:
            self.finish_reason = "tool_calls"
            return False
        # An Anthropic upstream's reasons in OpenAI terms for an OpenAI-format client (an
        # Anthropic client gets them as they are); a round that called only use_capability
        # did not end the answer.
        finish = response.finish_reason if self.request.wire == "messages" else \
            FINISH_REASONS.get(response.finish_reason, response.finish_reason)
        self.finish_reason = "stop" if finish == "tool_calls" else finish
        if isinstance(self.renderer, AnthropicRenderer):
            self.renderer.stop_sequence = response.stop_sequence
        return bool(mine) and self.rounds < self.max_rounds

    # -- the two faces --------------------------------------------------------------------

    async def complete(self) -> dict[str, Any]:
        """A non-streaming answer: every round, then the client's response object."""
        while True:
            response = await self._post()
            for delta in message_deltas(response.message):
                self._visible(delta)
            if not await asyncio.to_thread(self._settle, response):
                return self.renderer.body(self.finish_reason, self.usage)
            self.renderer.end_round()

    async def stream(self, locks: AsyncExitStack) -> AsyncIterator[str]:
        """The streamed answer: chunks forwarded as the upstream sends them. Started after
        :meth:`open_stream`; releases the upstream response and ``locks`` when done."""
        try:
            for text in self.renderer.start():
                yield text
            while True:
                response = None
                try:
                    async for item in self._paced(self._read_round()):
                        if isinstance(item, ChatResponse):
                            response = item
                        else:
                            yield item
                except ContextLimitError:  # an in-stream overflow (Responses): recover once
                    await self._round_stack.aclose()
                    if self._forwarded or self._recovered:
                        raise
                    async for text in self._paced(_awaited(self.open_stream("overflow"))):
                        if text is KEEPALIVE:
                            yield text
                    continue
                await self._round_stack.aclose()
                assert response is not None
                more = False
                async for item in self._paced(_awaited(asyncio.to_thread(self._settle,
                                                                         response))):
                    if item is KEEPALIVE:
                        yield item
                    else:
                        more = item
                if not more:
                    break
                for text in self.renderer.end_round():
                    yield text
                async for text in self._paced(_awaited(self.open_stream())):
                    if text is KEEPALIVE:
                        yield text
            for text in self.renderer.finish(self.finish_reason, self.usage):
                yield text
        except CtxfoldError as exc:  # nothing of the broken round entered the transcript
            log.warning("%s session=%s stream failed: %s", self.request.wire,
                        self.cm.session_id, redact_text(str(exc), self.forwarded))
            status, payload = error_answer(exc, self.forwarded)
            for text in self.renderer.error(in_wire(status, payload, self.request.wire)):
                yield text
        finally:
            await self._round_stack.aclose()
            await locks.aclose()

    async def _paced(self, items: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """``items`` as they come, with an SSE comment (which clients ignore) whenever none
        came for ``keepalive`` seconds: an upstream that stalls, or a summary that runs
        between two rounds, never looks like a dead connection to the client."""
        queue: asyncio.Queue[tuple[Any, BaseException | None]] = asyncio.Queue()

        async def pump() -> None:
            try:
                async for item in items:
                    await queue.put((item, None))
                await queue.put((_END, None))
            except Exception as exc:
                await queue.put((_END, exc))
            finally:
                await items.aclose()  # type: ignore[attr-defined]

        task = asyncio.create_task(pump())
        try:
            while True:
                try:
                    item, error = await asyncio.wait_for(queue.get(), self.keepalive)
                except TimeoutError:
                    yield KEEPALIVE
                    continue
                if item is _END:
                    if error is not None:
                        raise error
                    return
                yield item
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _read_round(self) -> AsyncIterator[str | ChatResponse]:
        """The client chunks of one upstream stream, then its assembled response."""
        assert self._events is not None
        assembler = self.upstream.translator.new_stream()
        parser = parser_for(self.upstream.wire)
        async for event in self._events:
            done = assembler.feed(event)  # raises the typed error of an in-stream failure
            for delta in parser.feed(event):
                for text in self._visible(delta):
                    yield text
            if done:
                break
        for delta in parser.finish():
            for text in self._visible(delta):
                yield text
        response = assembler.finish(self._events.request_id)
        # What follows the terminal event (a `[DONE]` line, the last chunk) is read, so the
        # connection goes back to the pool instead of being closed; bounded, in case an
        # upstream keeps the stream open after it.
        with contextlib.suppress(TimeoutError, CtxfoldError):
            async with asyncio.timeout(DRAIN_SECONDS):
                async for _event in self._events:
                    pass
        yield response
