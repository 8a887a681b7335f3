"""The configured provider as the proxy's upstream, and the body the proxy sends it.

The upstream is the provider ``[provider] name`` selects (any built-in or plugin built with
``build_http_provider``; the in-process emulator by default). The proxy talks to it with
ctxfold's own async transport — the same endpoint, key rule, retries, timeouts, SSE parsing
and typed errors as ``cm.acomplete`` — but sends its own body: the client's request with
the history replaced by ctxfold's view (see :meth:`Upstream.body`).

The upstream's wire format follows from its path (``…/responses``, ``…/messages``, else Chat
Completions); a client of another format has its fields translated (:func:`translate_fields`:
what the other format has no field for is left out, ``docs/serve.md`` lists it). An Anthropic
upstream gets ctxfold's own prompt-cache breakpoints, never the client's
(:func:`~ctxfold.interop.anthropic.place_breakpoints`).
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import attrs

from ctxfold.capabilities.tool import USE_CAPABILITY_TOOL
from ctxfold.engine.prepared import PreparedRequest, to_openai_messages
from ctxfold.interop.anthropic import tool_to_anthropic, wire_of
from ctxfold.interop.chat import tool_schema_to_openai
from ctxfold.interop.responses import input_items, tool_item
from ctxfold.kernel.contracts import Provider
from ctxfold.kernel.errors import ConfigError, MessageError
from ctxfold.kernel.types import Message, SummaryRequest, SummaryResult, ToolSchema
from ctxfold.plugins.providers.anthropic import (
    approximate_tokens,
    output_ladder,
    with_breakpoints,
)
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


def upstream_wire(path: str) -> Wire:
    """The wire format of an upstream endpoint, by its path."""
    tail = path.rstrip("/")
    if tail.endswith("/responses"):
        return "responses"
    return "messages" if tail.endswith("/messages") else "chat"


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


def _openai_choice(value: Mapping[str, Any]) -> Any:
    """An Anthropic ``tool_choice`` in the OpenAI terms
    (https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use)."""
    kind = value["type"]
    if kind == "tool":
        return {"type": "function", "name": value.get("name")}
    return {"any": "required"}.get(kind, kind)


def _anthropic_choice(value: Any) -> Any:
    """An OpenAI ``tool_choice`` (string or function) in Anthropic's terms."""
    if isinstance(value, str):
        return {"type": {"required": "any"}.get(value, value)}
    if isinstance(value, Mapping) and value.get("type") == "function":
        name = value.get("name") or (value.get("function") or {}).get("name")
        return {"type": "tool", "name": name}
    return value


def _from_anthropic_fields(fields: Mapping[str, Any], target: Wire,
                           output_field: str) -> dict[str, Any]:
    """An Anthropic client's fields for a Chat Completions or Responses upstream."""
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if key in ("stream", "temperature", "top_p"):
            out[key] = value
        elif key == "tools":
            out[key] = value  # replaced by the converted tools
        elif key == "max_tokens":
            out["max_output_tokens" if target == "responses" else output_field] = value
        elif key == "stop_sequences" and target == "chat" and value:
            out["stop"] = value
        elif key == "tool_choice" and isinstance(value, Mapping):
            known = value.get("type") in ("auto", "any", "tool", "none")  # Anthropic's kinds
            out[key] = _tool_choice(_openai_choice(value) if known else value, target)
            if value.get("disable_parallel_tool_use"):
                out["parallel_tool_calls"] = False
        elif key == "output_config" and isinstance(value, Mapping) and value.get("effort"):
            effort = value["effort"]
            out.update({"reasoning": {"effort": effort}} if target == "responses"
                       else {"reasoning_effort": effort})
    return out


#: OpenAI reasoning efforts as Anthropic's ``output_config.effort`` (low, medium, high, max:
#: https://docs.anthropic.com/en/docs/build-with-claude/effort); ``none`` has no counterpart
#: (the effort is left to the model's default).
_ANTHROPIC_EFFORTS = {"minimal": "low", "low": "low", "medium": "medium", "high": "high",
                      "xhigh": "max", "max": "max"}


def _to_anthropic_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI client's fields for an Anthropic upstream."""
    out: dict[str, Any] = {}
    parallel = fields.get("parallel_tool_calls")
    for key, value in fields.items():
        if key in ("stream", "temperature", "top_p", "tools"):
            out[key] = value
        elif key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
            out["max_tokens"] = value
        elif key == "stop" and value:
            out["stop_sequences"] = [value] if isinstance(value, str) else value
        elif key == "user" and isinstance(value, str):
            out["metadata"] = {"user_id": value}
        elif key == "tool_choice":
            out[key] = _anthropic_choice(value)
        elif key == "reasoning_effort" or (key == "reasoning" and isinstance(value, Mapping)
                                           and value.get("effort")):
            effort = value if key == "reasoning_effort" else value["effort"]
            if effort in _ANTHROPIC_EFFORTS:
                out["output_config"] = {"effort": _ANTHROPIC_EFFORTS[effort]}
    choice = out.get("tool_choice")
    if parallel is False and (choice is None or (isinstance(choice, Mapping)
                              and choice.get("type") in ("auto", "any", "tool"))):
        out["tool_choice"] = {**(choice if isinstance(choice, Mapping) else {"type": "auto"}),
                              "disable_parallel_tool_use": True}
    return out


def translate_fields(fields: Mapping[str, Any], target: Wire, source: Wire = "chat", *,
                     output_field: str = "max_tokens") -> dict[str, Any]:
    """The client's fields (of format ``source``) for the other wire format ``target``: the
    common ones as they are, the output budget (a chat upstream's in ``output_field``),
    stop sequences, reasoning effort and ``tool_choice`` converted, the rest left out."""
    if source == "messages":
        return _from_anthropic_fields(fields, target, output_field)
    if target == "messages":
        return _to_anthropic_fields(fields)
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
                 on_request: Callable[[bytes], None] | None = None,
                 effort: str = "high") -> None:
        inner = http_provider_of(provider)
        self.provider = provider
        self.name = str(getattr(provider, "name", inner.name))
        self.path = inner.translator.path
        self.translator = inner.translator
        self.wire: Wire = upstream_wire(self.path)
        self.model = inner.model
        self.settings = inner.http.settings
        self.on_request = on_request
        #: ``[agent] effort``: what sizes an Anthropic body's required ``max_tokens`` when
        #: nothing else does.
        self.effort = effort
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

    def _http(self, forwarded: str | None,
              headers: Mapping[str, str] | None = None) -> AsyncHttpClient:
        """The client for one request: the client's key when none is configured (sent in
        the provider's own key header: ``x-api-key`` for Anthropic's), and on Anthropic's
        wire the client's ``anthropic-version``/``anthropic-beta`` over the provider's."""
        if self._client is None:  # created in the server's event loop, which then owns it
            self._client = self._make() if self._make else AsyncHttpClient(self.settings)
        forward = forwarded is not None and not self.has_key()
        passed = dict(headers or {}) if self.wire == "messages" else {}
        if not forward and not passed:
            return self._client
        clone = copy.copy(self._client)  # same connection pool, this request's settings
        settings = attrs.evolve(self.settings, headers={**self.settings.headers, **passed})
        clone.settings = attrs.evolve(settings, api_key=forwarded) if forward else settings
        return clone

    def body(self, request: ClientRequest, prepared: PreparedRequest, *,
             cache_key: str, offer: bool = False) -> dict[str, Any]:
        """The upstream body: ``model``, then the view (``messages`` or ``input``; on
        Anthropic's wire ``system`` and ``messages``), then the client's other fields in its
        order — ``tools`` replaced by the view's tools (the client's, then
        ``use_capability``), usage asked for on a chat stream, the session's
        ``prompt_cache_key`` on Responses unless the client set one, ``max_tokens`` and
        ctxfold's breakpoints on Anthropic's. The view right after ``model`` makes every body
        extend the previous one's bytes between installs."""
        if self.wire == "messages":
            return self._anthropic(request, prepared, cache_key, offer)
        view = prepared.to_openai() if self.wire == "chat" else prepared.to_responses()
        field = HISTORY_FIELD[self.wire]
        rest = self._fields(request, prepared, cache_key, offer)
        return {"model": rest.pop("model"), field: view[field], **rest}

    def encoded(self, request: ClientRequest, prepared: PreparedRequest, *,
                cache_key: str, offer: bool = False) -> bytes:
        """The exact bytes of :meth:`body`, each message's JSON cached per message: between
        two checkpoints the view is the same messages plus new ones, so a turn encodes only
        its new messages (and the rest of the body)."""
        if self.wire == "messages":  # consecutive messages merge: encoded whole
            return serialize_body(self._anthropic(request, prepared, cache_key, offer))
        rest = self._fields(request, prepared, cache_key, offer)
        fragments = []
        for at, message in enumerate(prepared.messages):
            try:
                fragments.append(self._fragment(message))
            except MessageError as exc:
                raise _located(exc, request, prepared, at) from None
        history = ",".join(f for f in fragments if f)
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

    def _anthropic(self, request: ClientRequest, prepared: PreparedRequest, cache_key: str,
                   offer: bool) -> dict[str, Any]:
        """The Messages body: ``model``, ``max_tokens`` (the API requires it: the client's,
        else the prepared output budget, else the provider's output ladder, as
        ``complete()`` sends),
        ``system`` and ``messages`` of the view, the other fields; then ctxfold's breakpoints
        (the provider's TTL, the model's cache minimum) in place of any the client set — a
        client's top-level ``cache_control`` (automatic caching) included, which would be a
        fifth."""
        wire = wire_of(prepared.messages)
        rest = self._fields(request, prepared, cache_key, offer)
        rest.pop("cache_control", None)
        body: dict[str, Any] = {"model": rest.pop("model")}
        most = output_ladder(self.effort, str(body["model"]))  # what this model accepts
        room = prepared.max_output_tokens  # sized for the window, not for the client's model
        body["max_tokens"] = rest.pop("max_tokens", None) or (min(room, most) if room else most)
        if wire.system:
            body["system"] = wire.system
        body["messages"] = wire.messages
        body.update(rest)
        return with_breakpoints(body, prepared.messages, wire.positions,
                                ttl=getattr(self.translator, "ttl", "5m"),
                                count=getattr(self.translator, "count", approximate_tokens))

    def _fields(self, request: ClientRequest, prepared: PreparedRequest,
                cache_key: str, offer: bool) -> dict[str, Any]:
        """The body but its history: ``model`` and the other fields (see :meth:`body`);
        ``use_capability`` among the tools when the view has something for it, or when
        ``offer`` (the model called it in an earlier round of this answer)."""
        body: dict[str, Any] = {"model": request.model or self.model}
        fields = request.fields if request.wire == self.wire else translate_fields(
            request.fields, self.wire, request.wire, output_field=prepared.output_field)
        tools = self.tools(request)
        if prepared.offers_capability or offer:
            tools.append(self._tool(USE_CAPABILITY_TOOL))
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

    def _tool(self, tool: ToolSchema) -> dict[str, Any]:
        """A function tool in this upstream's format."""
        if self.wire == "messages":
            return tool_to_anthropic(tool)
        return tool_schema_to_openai(tool) if self.wire == "chat" else tool_item(tool)

    def tools(self, request: ClientRequest) -> list[Any]:
        """The client's tools for this upstream: in the client's own wire format, every
        tool exactly as sent, whatever its type; in another format, its function tools
        converted (:meth:`dropped` names the rest, which have no form there)."""
        if request.wire == self.wire:
            return list(request.fields.get("tools") or [])
        return [self._tool(t) for t in request.tools]

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

    async def post(self, body: Mapping[str, Any] | bytes, forwarded: str | None,
                   headers: Mapping[str, str] | None = None) -> JsonResult:
        """POST a non-streaming body (``headers``: the client's that an upstream of its
        format must see); typed :class:`~ctxfold.ProviderError` on failure."""
        self._observe(body)
        return await self._http(forwarded, headers).post_json(self.path, body,
                                                              max_retries=self.retries)

    @asynccontextmanager
    async def stream(self, body: Mapping[str, Any] | bytes, forwarded: str | None,
                     headers: Mapping[str, str] | None = None
                     ) -> AsyncIterator[AsyncEventStream]:
        """POST a streaming body; entering returns once the response headers arrived."""
        self._observe(body)
        async with self._http(forwarded, headers).stream_events(self.path, body,
                                                       max_retries=self.retries) as events:
            yield events

    async def summarize(self, request: SummaryRequest, forwarded: str | None,
                        headers: Mapping[str, str] | None = None) -> SummaryResult:
        """A checkpoint summary by the upstream model, with the key of the request that
        needed it (``forwarded``) when no key is configured and its ``headers`` (see
        :meth:`post`): the ``llm`` summarizer's request (effort none, the summary cap, no
        retry), sent without streaming."""
        chat = attrs.evolve(LLMSummarizer(self.provider).chat_request(request), stream=False)
        body = self.translator.build_body(chat, model=self.model)
        result = await self._http(forwarded, headers).post_json(self.path, body,
                                                                max_retries=0)
        response = self.translator.parse_response(result.data, result.request_id)
        return SummaryResult(text=response.message.content,
                             finish_reason=response.finish_reason, usage=response.usage)

    async def aclose(self) -> None:
        """Close the connection pool (from the loop that used it)."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _located(exc: MessageError, request: ClientRequest, prepared: PreparedRequest,
             at: int) -> MessageError:
    """``exc`` (a message of the view that has no form on the upstream's wire, converted
    alone and so named ``messages[0]``) naming the client's own message instead: the one it
    was read from, when the view's message is one of the client's history; else its place
    in the view sent upstream."""
    text = str(exc)
    message = prepared.messages[at]
    field = HISTORY_FIELD[request.wire]
    # The view's copy of a client message was stored: its time stamp and id are the store's.
    found = next((h for h, m in enumerate(request.history)
                  if attrs.evolve(message, created_at=m.created_at, id=m.id) == m), None)
    if found is not None and found < len(request.origins) and request.origins[found] >= 0:
        place = f"{field}[{request.origins[found]}]"
    elif found is not None and not request.origins and request.wire == "chat":
        place = f"{field}[{found}]"
    else:
        place = f"the history sent upstream, message {at}"
    return MessageError(re.sub(r"^\w+\[0\]", lambda _: place, text, count=1))
