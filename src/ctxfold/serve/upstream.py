"""The configured provider as the proxy's upstream, and the body the proxy sends it.

The upstream is the provider ``[provider] name`` selects (any built-in or plugin built with
``build_http_provider``; the in-process emulator by default). The proxy talks to it with
ctxfold's own async transport — the same endpoint, key rule, retries, timeouts, SSE parsing
and typed errors as ``cm.acomplete`` — but sends its own body: the client's request with
the history replaced by ctxfold's view (see :meth:`Upstream.body`).
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import attrs

from ctxfold.capabilities.tool import USE_CAPABILITY_TOOL
from ctxfold.engine.prepared import PreparedRequest, to_openai_messages
from ctxfold.interop.chat import tool_schema_to_openai
from ctxfold.interop.responses import input_items, tool_item
from ctxfold.kernel.contracts import Provider
from ctxfold.kernel.errors import ConfigError
from ctxfold.kernel.types import Message, SummaryRequest, SummaryResult
from ctxfold.plugins.summarizers.llm import LLMSummarizer
from ctxfold.serve.client_request import HISTORY_FIELD, ClientRequest, Wire
from ctxfold.transport.aclient import AsyncEventStream, AsyncHttpClient
from ctxfold.transport.provider import HttpProvider, serialize_body
from ctxfold.transport.settings import JsonResult

#: Fields both wire formats read alike, passed on when the client's format differs.
_COMMON = frozenset({"stream", "tools", "temperature", "top_p", "parallel_tool_calls", "user",
                     "metadata", "service_tier"})


#: Messages whose JSON the upstream keeps (then it starts over).
_MAX_FRAGMENTS = 65_536


def _dumps(value: Any) -> str:
    """JSON as the transport sends it (compact, UTF-8 kept)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


#: Fields that only mean something when tools are offered.
_TOOL_FIELDS = frozenset({"tools", "tool_choice", "parallel_tool_calls"})


def http_provider_of(provider: Provider) -> HttpProvider:
    """The :class:`~ctxfold.HttpProvider` behind ``provider`` (the emulator wraps one)."""
    inner = getattr(provider, "inner", provider)
    if not isinstance(inner, HttpProvider):
        raise ConfigError(
            f"provider {getattr(provider, 'name', type(provider).__name__)!r} is not an HTTP "
            "provider: ctxfold serve streams through ctxfold's transport, so the provider "
            "plugin must be built with ctxfold.build_http_provider")
    return inner


def _tool_choice(value: Any, target: Wire) -> Any:
    if not isinstance(value, Mapping) or value.get("type") != "function":
        return value
    name = value.get("name") or (value.get("function") or {}).get("name")
    return {"type": "function", "name": name} if target == "responses" else {
        "type": "function", "function": {"name": name}}


def translate_fields(fields: Mapping[str, Any], target: Wire) -> dict[str, Any]:
    """The client's fields for the other wire format: the common ones as they are, the
    output budget, reasoning effort and ``tool_choice`` converted, the rest left out."""
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if key in _COMMON:
            out[key] = value
        elif key == "tool_choice":
            out[key] = _tool_choice(value, target)
        elif target == "responses" and key in ("max_tokens", "max_completion_tokens"):
            out["max_output_tokens"] = value
        elif target == "responses" and key == "reasoning_effort":
            out["reasoning"] = {"effort": value}
        elif target == "chat" and key == "max_output_tokens":
            out["max_tokens"] = value
        elif target == "chat" and key == "reasoning" and isinstance(value, Mapping) \
                and value.get("effort"):
            out["reasoning_effort"] = value["effort"]
    return out


class Upstream:
    """Where the proxy sends its requests. ``on_request`` sees the exact bytes of each
    body before it is sent (tests compare them between turns)."""

    def __init__(self, provider: Provider, *, retries: int = 0,
                 on_request: Callable[[bytes], None] | None = None) -> None:
        inner = http_provider_of(provider)
        self.provider = provider
        self.name = str(getattr(provider, "name", inner.name))
        self.path = inner.translator.path
        self.translator = inner.translator
        self.wire: Wire = "responses" if self.path.rstrip("/").endswith("/responses") \
            else "chat"
        self.model = inner.model
        self.settings = inner.http.settings
        self.on_request = on_request
        self._fragments: dict[int, tuple[Message, str]] = {}
        #: Retries of a client's request: none by default — the client (its SDK) retries
        #: what the proxy answers with a 429 or 5xx, so attempts do not multiply.
        self.retries = retries
        # The provider's own factory keeps its seams (an async transport, clock, sleep).
        self._make: Callable[[], AsyncHttpClient] | None = getattr(inner, "_make_async", None)
        self._client: AsyncHttpClient | None = None

    def has_key(self) -> bool:
        """Whether a key is configured (read now: a rotated variable takes effect)."""
        s = self.settings
        return bool(s.api_key if s.api_key is not None else os.environ.get(s.api_key_env))

    def needs_key(self) -> bool:
        """Whether a request must bring a key: the provider needs one and has none."""
        return self.settings.require_key and not self.has_key()

    def _http(self, forwarded: str | None) -> AsyncHttpClient:
        if self._client is None:  # created in the server's event loop, which then owns it
            self._client = self._make() if self._make else AsyncHttpClient(self.settings)
        if forwarded is None or self.has_key():
            return self._client
        clone = copy.copy(self._client)  # same connection pool, the client's key
        clone.settings = attrs.evolve(self.settings, api_key=forwarded)
        return clone

    def body(self, request: ClientRequest, prepared: PreparedRequest, *,
             cache_key: str, offer: bool = False) -> dict[str, Any]:
        """The upstream body: ``model``, then the view (``messages`` or ``input``), then the
        client's other fields in its order — ``tools`` replaced by the view's tools (the
        client's, then ``use_capability``), usage asked for on a chat stream, the session's
        ``prompt_cache_key`` on Responses unless the client set one. The view right after
        ``model`` makes every body extend the previous one's bytes between installs."""
        view = prepared.to_openai() if self.wire == "chat" else prepared.to_responses()
        field = HISTORY_FIELD[self.wire]
        rest = self._fields(request, prepared, cache_key, offer)
        return {"model": rest.pop("model"), field: view[field], **rest}

    def encoded(self, request: ClientRequest, prepared: PreparedRequest, *,
                cache_key: str, offer: bool = False) -> bytes:
        """The exact bytes of :meth:`body`, each message's JSON cached per message: between
        two checkpoints the view is the same messages plus new ones, so a turn encodes only
        its new messages (and the rest of the body)."""
        rest = self._fields(request, prepared, cache_key, offer)
        history = ",".join(f for f in map(self._fragment, prepared.messages) if f)
        head = (f'{{"model":{_dumps(rest.pop("model"))},'
                f'"{HISTORY_FIELD[self.wire]}":[{history}]')
        tail = _dumps(rest)
        return (head + ("}" if tail == "{}" else "," + tail[1:])).encode()

    def _fragment(self, message: Message) -> str:
        """``message``'s part of the history, as JSON (cached by the message object)."""
        cached = self._fragments.get(id(message))
        if cached is not None and cached[0] is message:
            return cached[1]
        form = to_openai_messages([message]) if self.wire == "chat" else input_items([message])
        text = ",".join(map(_dumps, form))
        if len(self._fragments) >= _MAX_FRAGMENTS:
            self._fragments.clear()
        self._fragments[id(message)] = (message, text)
        return text

    def _fields(self, request: ClientRequest, prepared: PreparedRequest,
                cache_key: str, offer: bool) -> dict[str, Any]:
        """The body but its history: ``model`` and the other fields (see :meth:`body`);
        ``use_capability`` among the tools when the view has something for it, or when
        ``offer`` (the model called it in an earlier round of this answer)."""
        body: dict[str, Any] = {"model": request.model or self.model}
        fields = request.fields if request.wire == self.wire else translate_fields(
            request.fields, self.wire)
        tools = self.tools(request)
        if prepared.offers_capability or offer:
            tools.append(tool_schema_to_openai(USE_CAPABILITY_TOOL) if self.wire == "chat"
                         else tool_item(USE_CAPABILITY_TOOL))
        for key, value in fields.items():
            if key in _TOOL_FIELDS and not tools:
                continue  # every tool was left out: no empty list, no choice among none
            body[key] = tools if key == "tools" else value
        if "tools" not in body and tools:
            body["tools"] = tools
        if self.wire == "chat" and request.stream:
            options = body.get("stream_options")
            body["stream_options"] = {**(options if isinstance(options, Mapping) else {}),
                                      "include_usage": True}
        if self.wire == "responses" and cache_key and not body.get("prompt_cache_key"):
            body["prompt_cache_key"] = cache_key
        return body

    def tools(self, request: ClientRequest) -> list[Any]:
        """The client's tools for this upstream: in the client's own wire format, every
        tool exactly as sent, whatever its type; in the other format, its function tools
        converted (:meth:`dropped` names the rest, which have no form there)."""
        if request.wire == self.wire:
            return list(request.fields.get("tools") or [])
        return [tool_schema_to_openai(t) if self.wire == "chat" else tool_item(t)
                for t in request.tools]

    def dropped(self, request: ClientRequest) -> list[str]:
        """The client's tools this upstream cannot be offered (another wire format, and not
        a function tool): ``type`` or ``type:name`` each."""
        if request.wire == self.wire:
            return []
        return [f"{t['type']}:{t['name']}" if isinstance(t.get("name"), str) else
                str(t["type"]) for t in request.other_tools]

    def _observe(self, body: Mapping[str, Any] | bytes) -> None:
        if self.on_request is not None:
            self.on_request(body if isinstance(body, bytes) else serialize_body(body))

    async def post(self, body: Mapping[str, Any] | bytes,
                   forwarded: str | None) -> JsonResult:
        """POST a non-streaming body; typed :class:`~ctxfold.ProviderError` on failure."""
        self._observe(body)
        return await self._http(forwarded).post_json(self.path, body,
                                                     max_retries=self.retries)

    @asynccontextmanager
    async def stream(self, body: Mapping[str, Any] | bytes,
                     forwarded: str | None) -> AsyncIterator[AsyncEventStream]:
        """POST a streaming body; entering returns once the response headers arrived."""
        self._observe(body)
        async with self._http(forwarded).stream_events(self.path, body,
                                                       max_retries=self.retries) as events:
            yield events

    async def summarize(self, request: SummaryRequest, forwarded: str | None) -> SummaryResult:
        """A checkpoint summary by the upstream model, with the key of the request that
        needed it (``forwarded``) when no key is configured: the ``llm`` summarizer's request
        (effort none, the summary cap, no retry), sent without streaming."""
        chat = attrs.evolve(LLMSummarizer(self.provider).chat_request(request), stream=False)
        body = self.translator.build_body(chat, model=self.model)
        result = await self._http(forwarded).post_json(self.path, body, max_retries=0)
        response = self.translator.parse_response(result.data, result.request_id)
        return SummaryResult(text=response.message.content,
                             finish_reason=response.finish_reason, usage=response.usage)

    async def aclose(self) -> None:
        """Close the connection pool (from the loop that used it)."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None
