"""The loopback provider emulator: a real HTTP server on 127.0.0.1.

``Emulator`` accounts every request against a prefix cache (:mod:`ctxfold.emulator.cache`),
answers from a script (:mod:`ctxfold.emulator.script`) in the profile's wire format
(:mod:`ctxfold.emulator.wire_chat`, :mod:`ctxfold.emulator.wire_responses`,
:mod:`ctxfold.emulator.wire_anthropic`), and can inject
faults (:mod:`ctxfold.emulator.faults`). Everything it received is in :attr:`Emulator.requests`,
so tests can count requests on the server side.
"""

from __future__ import annotations

import hmac
import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from http.server import ThreadingHTTPServer
from typing import Any

import attrs

from ctxfold.emulator import wire_anthropic, wire_chat, wire_responses
from ctxfold.emulator.cache import PrefixCache
from ctxfold.emulator.fault_text import bearer, shaped
from ctxfold.emulator.faults import REFUSAL_KINDS, Fault, FaultPlan
from ctxfold.emulator.handler import Handler
from ctxfold.emulator.profiles import Profile, get_profile
from ctxfold.emulator.records import Outcome, RequestRecord
from ctxfold.emulator.request_log import RequestLog
from ctxfold.emulator.script import Script, ScriptRunner
from ctxfold.emulator.tokens import assistant_body, encode_segments, request_segments, token_source
from ctxfold.emulator.wire_chat import Accounting, WireError
from ctxfold.kernel.types import Message

CHAT_PATHS = ("/chat/completions", "/v1/chat/completions")
RESPONSES_PATHS = ("/responses", "/v1/responses")
#: How many stored Responses ``previous_response_id`` can name (oldest forgotten first).
STORED_RESPONSES = 1024


class _QuietServer(ThreadingHTTPServer):
    """A client that hangs up (retries, cancelled streams, closed pools) is normal here."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


class Emulator:
    """A provider emulator serving on ``127.0.0.1`` (never any other interface).

    ``profile``: ``deepseek`` | ``mimo`` | ``responses`` | ``anthropic`` or a
    :class:`Profile`; ``window`` overrides its context window; ``counter``:
    ``counter(text) -> int`` or an object with ``encode(text) -> ids`` (default: the DeepSeek
    tokenizer); ``clock``: seconds, for cache TTL and ``created`` stamps; ``script``:
    replies; ``faults``: :class:`Fault` rules; ``log_requests``: a file that gets one masked
    JSON line per request (:mod:`ctxfold.emulator.request_log`); ``require_key``: when set,
    every ``POST`` must send ``Authorization: Bearer <require_key>`` (``anthropic``: or
    ``x-api-key: <require_key>``) and is refused with 401 otherwise, as a provider refuses a
    missing or wrong key (so a caller that loses the key on the way shows).
    """

    def __init__(
        self,
        profile: str | Profile = "deepseek",
        *,
        window: int | None = None,
        counter: Any = None,
        clock: Callable[[], float] | None = None,
        script: Script | None = None,
        faults: Iterable[Fault] | None = None,
        port: int = 0,
        log_requests: str | os.PathLike[str] | None = None,
        require_key: str | None = None,
    ) -> None:
        self.profile = get_profile(profile, window)
        self.clock: Callable[[], float] = clock or time.time
        self.tokens = token_source(counter)
        self.cache = PrefixCache(
            unit=self.profile.cache_unit, ttl=self.profile.cache_ttl,
            policy=self.profile.cache_policy, min_tokens=self.profile.cache_min_tokens,
            interval_units=self.profile.cache_interval_units, clock=self.clock,
        )
        self.faults = FaultPlan(tuple(faults or ()))
        self.requests: list[RequestRecord] = []
        self._script = ScriptRunner(script)
        self._require_key = require_key
        self.log = RequestLog(log_requests) if log_requests is not None else None
        # Stored Responses (store is true by default), for previous_response_id; bounded.
        self._stored: OrderedDict[str, tuple[Message, ...]] = OrderedDict()
        self._port = port
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.stopping = threading.Event()

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> str:
        """Bind 127.0.0.1 (port 0 = ephemeral), serve in a background thread, return the base
        URL (``http://127.0.0.1:PORT``)."""
        if self._server is not None:
            return self.base_url
        handler = type("BoundHandler", (Handler,), {"emulator": self})
        server = _QuietServer(("127.0.0.1", self._port), handler)
        server.daemon_threads = True
        server.block_on_close = False  # stalled streams must not block stop()
        self._server = server
        self.stopping.clear()
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="ctxfold-emulator", daemon=True)
        self._thread.start()
        return self.base_url

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        self.stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Emulator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the running server."""
        if self._server is None:
            raise RuntimeError("the emulator is not running; call start() first")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def reset_cache(self) -> None:
        """Forget every cached prefix."""
        with self._lock:
            self.cache.reset()

    def inject(self, fault: Fault) -> None:
        """Install a fault rule now (``at=None`` → the next ``fault.count`` requests)."""
        self.faults.add(fault)

    # -- request processing (transport-independent) ---------------------------------------------

    def process(self, path: str, raw: bytes,
                headers: Mapping[str, str] | None = None) -> Outcome:
        """Answer one request: pick its fault, parse, account, reply. Thread-safe.
        ``headers`` reach the request log (masked), and the bearer key a fault with
        ``echo_key`` quotes."""
        with self._lock:
            index = len(self.requests)
            self.requests.append(RequestRecord(index=index, path=path, body={}, status=0))
        if not self._key_ok(headers or {}):
            outcome = self._unauthorized(index, path)
        else:
            fault = self.faults.take(index)
            outcome = self._answer(index, path, raw, fault, headers or {})
            if fault is not None:
                outcome = shaped(outcome, fault, bearer(headers or {}), self.profile.wire)
        if self.profile.wire == "anthropic":  # the request's id: a header, and in errors
            request_id = _request_id(index)
            error = outcome.json_body
            if (outcome.status >= 400 and isinstance(error, dict)
                    and error.get("type") == "error"):
                outcome = attrs.evolve(outcome, json_body={**error, "request_id": request_id})
            outcome = attrs.evolve(outcome, headers={"request-id": request_id,
                                                     **outcome.headers})
        if outcome.record is not None:
            with self._lock:
                self.requests[index] = outcome.record
        if self.log is not None:
            self.log.write(index=index, method="POST", path=path, status=outcome.status,
                           headers=headers or {}, raw=raw)
        return outcome

    def _key_ok(self, headers: Mapping[str, str]) -> bool:
        if self._require_key is None:
            return True
        sent = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
        if self.profile.wire == "anthropic":
            api_key = next((v for k, v in headers.items() if k.lower() == "x-api-key"), "")
            if hmac.compare_digest(api_key.encode(), self._require_key.encode()):
                return True
        return hmac.compare_digest(sent.encode(), f"Bearer {self._require_key}".encode())

    def _unauthorized(self, index: int, path: str) -> Outcome:
        if self.profile.wire == "anthropic":
            return Outcome(401, wire_anthropic.error_body(401, "invalid x-api-key (emulated)"),
                record=RequestRecord(index=index, path=path, body={}, status=401))
        err = wire_chat.error_body(self.profile, 401, "Authentication Fails: no API key or a "
                                   "wrong one (emulated)", err_type="authentication_error",
                                   code="invalid_api_key")
        return Outcome(401, err, record=RequestRecord(index=index, path=path, body={}, status=401))

    def models(self, path: str, headers: Mapping[str, str] | None = None) -> Outcome:
        """``GET /v1/models``: the profile's model, in the OpenAI list shape."""
        if path.rstrip("/") not in ("/models", "/v1/models"):
            outcome = Outcome(404, {"error": {
                "message": f"no GET route {path!r}; the emulator serves GET /v1/models and "
                           "POST chat/completions or responses",
                "type": "invalid_request_error", "param": None, "code": None}})
        elif self.profile.wire == "anthropic":
            # https://platform.claude.com/docs/en/api/models/list
            model: dict[str, Any] = {"type": "model", "id": self.profile.model,
                                     "display_name": f"{self.profile.model} (emulated)",
                                     "created_at": "2026-01-01T00:00:00Z"}
            outcome = Outcome(200, {"data": [model], "has_more": False,
                                    "first_id": self.profile.model,
                                    "last_id": self.profile.model})
        else:
            model = {"id": self.profile.model, "object": "model", "created": 0,
                     "owned_by": f"ctxfold-emulator ({self.profile.name})"}
            outcome = Outcome(200, {"object": "list", "data": [model]})
        if self.log is not None:
            self.log.write(index=-1, method="GET", path=path, status=outcome.status,
                           headers=headers or {}, raw=b"")
        return outcome

    def _previous(self, response_id: str) -> tuple[Message, ...] | None:
        with self._lock:
            return self._stored.get(response_id)

    def _store(self, response_id: str, conversation: tuple[Message, ...]) -> None:
        with self._lock:
            self._stored[response_id] = conversation
            while len(self._stored) > STORED_RESPONSES:
                self._stored.popitem(last=False)

    def _record(self, index: int, path: str, body: Mapping[str, Any], status: int,
                fault: Fault | None, **fields: Any) -> RequestRecord:
        return RequestRecord(index=index, path=path, body=body, status=status,
                             fault=fault.kind if fault else None, **fields)

    def _answer(self, index: int, path: str, raw: bytes, fault: Fault | None,
                headers: Mapping[str, str]) -> Outcome:
        profile = self.profile
        if profile.wire == "anthropic":
            return self._answer_anthropic(index, path, raw, fault, headers)
        paths = CHAT_PATHS if profile.wire == "chat" else RESPONSES_PATHS
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            err = wire_chat.error_body(profile, 400, "Invalid Format: the request body must be "
                                       "a JSON object", err_type="invalid_request_error")
            return Outcome(400, err, record=self._record(index, path, {}, 400, fault))
        if path not in paths:
            err = wire_chat.error_body(profile, 404, f"no route {path!r} on the {profile.name} "
                                       f"emulator; use {' or '.join(paths)}",
                                       err_type="invalid_request_error")
            return Outcome(404, err, record=self._record(index, path, body, 404, fault))
        if fault is not None and fault.kind in REFUSAL_KINDS:
            return self._refusal(index, path, body, fault)
        try:
            return self._complete(index, path, body, fault)
        except WireError as exc:
            return Outcome(exc.status, dict(exc.body),
                           record=self._record(index, path, body, exc.status, fault))

    def _refusal(self, index: int, path: str, body: Mapping[str, Any], fault: Fault) -> Outcome:
        anthropic = self.profile.wire == "anthropic"
        headers: dict[str, str] = {}
        if fault.kind == "rate_limit":
            status, err_type = 429, "rate_limit_error"
            text = "Rate Limit Reached: request rate or concurrency limit reached (emulated)"
            headers = {"Retry-After": f"{fault.retry_after:g}"}
        elif fault.kind == "server_error":
            status, err_type = 500, "api_error" if anthropic else "server_error"
            text = "Internal server error (emulated)"
        elif anthropic:  # https://platform.claude.com/docs/en/api/errors
            status, err_type, text = 529, "overloaded_error", "Overloaded (emulated)"
        else:
            status, err_type = 503, "server_error"
            text = "Server Overloaded: please retry after a brief wait (emulated)"
        err = (wire_anthropic.error_body(status, text, err_type=err_type) if anthropic
               else wire_chat.error_body(self.profile, status, text, err_type=err_type))
        return Outcome(status, err, headers=headers, fault=fault,
                       record=self._record(index, path, body, status, fault))

    def _complete(self, index: int, path: str, body: Mapping[str, Any],
                  fault: Fault | None) -> Outcome:
        profile = self.profile
        responses = profile.wire == "responses"
        parsed = (wire_responses.parse_responses(profile, body, self._previous) if responses
                  else wire_chat.parse_chat(profile, body))
        input_ids = encode_segments(self.tokens, request_segments(parsed.messages, parsed.tools))
        prompt = len(input_ids)
        completion_budget = parsed.max_output or profile.default_max_output(body)
        created = int(self.clock())
        response_id = f"emu{index:06d}"
        if prompt + completion_budget > profile.window:
            record = self._record(index, path, body, 400, fault, prompt_tokens=prompt)
            if responses and parsed.stream:
                overflow = wire_responses.overflow_stream(parsed, response_id=response_id,
                                                          created=created)
                return Outcome(200, events=list(overflow), record=record)
            err = (wire_responses.overflow_error() if responses
                   else wire_chat.overflow_error(profile, prompt, completion_budget))
            return Outcome(400, dict(err.body), record=record)
        if fault is not None and fault.kind == "stall":
            # The request waits for inference and never gets it: nothing is cached.
            return Outcome(200, fault=fault, stream=parsed.stream,
                           record=self._record(index, path, body, 200, fault,
                                               prompt_tokens=prompt))
        with self._lock:
            reply = self._script.reply(body, profile, parsed.messages)
            output_ids = encode_segments(self.tokens, [assistant_body(reply.message())])
            reasoning = (len(self.tokens.encode(reply.reasoning)) if reply.reasoning else 0)
            scope = (wire_responses.cache_scope(parsed, input_ids) if responses
                     else parsed.cache_scope)
            persist_output = not reply.reasoning or profile.cache_thinking_output
            result = self.cache.account(scope, input_ids, output_ids if persist_output else ())
        acc = Accounting(prompt=prompt, hit=result.hit_tokens, completion=len(output_ids),
                         reasoning=reasoning)
        if responses:
            if body.get("store", True) is not False:
                self._store(f"resp_{response_id}", (*parsed.conversation, reply.message()))
            usage = wire_responses.usage_dict(acc)
            if parsed.stream:
                events: list[str] = list(wire_responses.responses_stream(
                    parsed, reply, acc, response_id=response_id, created=created))
            else:
                json_body = wire_responses.response_object(
                    parsed, reply, acc, response_id=response_id, created=created)
        else:
            usage = wire_chat.usage_dict(profile, acc)
            if parsed.stream:
                events = list(wire_chat.chat_stream(profile, parsed, reply, acc,
                                                    response_id=response_id, created=created))
            else:
                json_body = wire_chat.chat_response(profile, parsed, reply, acc,
                                                    response_id=response_id, created=created)
        record = self._record(index, path, body, 200, fault, usage=usage, prompt_tokens=prompt,
                              cache_hit_tokens=acc.hit, completion_tokens=acc.completion)
        if parsed.stream:
            return Outcome(200, events=events, fault=fault, record=record, stream=True)
        return Outcome(200, json_body, fault=fault, record=record)


    def _answer_anthropic(self, index: int, path: str, raw: bytes, fault: Fault | None,
                          headers: Mapping[str, str]) -> Outcome:
        """``POST /v1/messages`` and ``/v1/messages/count_tokens`` (:mod:`.wire_anthropic`).
        The ``anthropic-version`` header is required, as by the API
        (https://platform.claude.com/docs/en/api/versioning)."""
        profile = self.profile

        def refused(status: int, body: Mapping[str, Any], message: str) -> Outcome:
            err = wire_anthropic.error_body(status, message)
            return Outcome(status, err, record=self._record(index, path, body, status, fault))

        try:
            body = json.loads(raw or b"null")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return refused(400, {}, "Invalid JSON: the request body must be a JSON object")
        if not any(k.lower() == "anthropic-version" for k in headers):
            return refused(400, body, "anthropic-version: header is required")
        counting = path in wire_anthropic.COUNT_PATHS
        if not counting and path not in wire_anthropic.MESSAGES_PATHS:
            return refused(404, body, f"no route {path!r} on the anthropic emulator; use "
                                      "/v1/messages or /v1/messages/count_tokens")
        if fault is not None and fault.kind in REFUSAL_KINDS:
            return self._refusal(index, path, body, fault)
        try:
            parsed = wire_anthropic.parse_messages(profile, body, count_only=counting)
        except WireError as exc:
            return Outcome(exc.status, dict(exc.body),
                           record=self._record(index, path, body, exc.status, fault))
        input_ids: list[int] = []
        ends: list[int] = []
        for block in parsed.blocks:
            input_ids.extend(self.tokens.encode(block.text))
            ends.append(len(input_ids))
        prompt = len(input_ids)
        if counting:
            return Outcome(200, {"input_tokens": prompt},
                           record=self._record(index, path, body, 200, fault,
                                               prompt_tokens=prompt))
        overflow = wire_anthropic.overflow_error(profile, prompt, parsed.max_tokens)
        if overflow is not None:
            return Outcome(400, dict(overflow.body),
                           record=self._record(index, path, body, 400, fault,
                                               prompt_tokens=prompt))
        if fault is not None and fault.kind == "stall":
            return Outcome(200, fault=fault, stream=parsed.stream,
                           record=self._record(index, path, body, 200, fault,
                                               prompt_tokens=prompt))
        message_id = f"msg_01emu{index:06d}"
        with self._lock:
            reply = self._script.reply(body, profile, parsed.messages)
            result = self.cache.account_marked("", input_ids, ends, parsed.marks,
                                               profile.cache_lookback_blocks, parsed.salts)
        if parsed.max_tokens == 0:  # pre-warming the cache: no output
            blocks: list[dict[str, Any]] = []
            reason = "max_tokens"
        else:
            blocks = wire_anthropic.content_blocks(reply, message_id)
            reason = wire_anthropic.stop_reason(reply)
        output = len(self.tokens.encode(wire_anthropic.output_text(blocks))) if blocks else 0
        usage = wire_anthropic.usage_dict(result, output)
        record = self._record(index, path, body, 200, fault, usage=usage, prompt_tokens=prompt,
                              cache_hit_tokens=result.read, completion_tokens=output,
                              cache_write_tokens=result.written())
        if parsed.stream:
            events = list(wire_anthropic.message_stream(parsed, blocks, reason, usage,
                                                        message_id=message_id))
            return Outcome(200, events=events, fault=fault, record=record, stream=True)
        return Outcome(200, wire_anthropic.message_object(parsed, blocks, reason, usage,
                                                          message_id=message_id),
                       fault=fault, record=record)


def _request_id(index: int) -> str:
    """The ``request-id`` of request ``index`` on the anthropic wire (``req_…``)."""
    return f"req_01emu{index:06d}"
