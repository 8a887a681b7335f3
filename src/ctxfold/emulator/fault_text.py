"""What a fault says (:mod:`ctxfold.emulator.faults`): the request's key echoed in its text
(``echo_key``), an error reported inside a 200 answer (``error_body``)."""

from __future__ import annotations

import json
from collections.abc import Mapping

import attrs

from ctxfold.emulator.faults import REFUSAL_KINDS, Fault
from ctxfold.emulator.records import Outcome
from ctxfold.emulator.wire_anthropic import error_body, error_event


def bearer(headers: Mapping[str, str]) -> str:
    """The key of an ``Authorization: Bearer`` header, else of an ``x-api-key`` header
    (Anthropic's; empty when none)."""
    value = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
    if value[:7].lower() == "bearer ":
        return value[7:].strip()
    return next((v.strip() for k, v in headers.items() if k.lower() == "x-api-key"), "")


def shaped(outcome: Outcome, fault: Fault, key: str, wire: str) -> Outcome:
    """``outcome`` with what its ``fault`` sends on a ``wire`` (``chat``, ``responses`` or
    ``anthropic``)."""
    said = f" (key provided: {key})" if fault.echo_key else ""
    if fault.kind in REFUSAL_KINDS and said:
        body = json.loads(json.dumps(outcome.json_body))
        body["error"]["message"] += said
        return attrs.evolve(outcome, json_body=body)
    if outcome.status != 200 or fault.kind not in ("malformed", "error_body"):
        return outcome
    if fault.kind == "malformed":
        if wire == "anthropic" and outcome.events is not None:
            # The Anthropic SDKs skip an SSE event without an ``event:`` name: name it.
            text = '{"type": "content_block_delta", "broken' + said + '": '
            return attrs.evolve(outcome, injected=f"event: content_block_delta\ndata: {text}\n\n")
        if not said:
            return outcome
        text = '{"id": "broken' + said + '", "choices": [{"delta": '
        return attrs.evolve(outcome, injected=f"data: {text}\n\n" if outcome.events
                            is not None else text)
    if wire == "anthropic":
        text = "The server had an error while processing your request" + said
        if outcome.events is None:
            return attrs.evolve(outcome, json_body=error_body(500, text, err_type="api_error"),
                                injected=None)
        return attrs.evolve(outcome, injected=error_event("overloaded_error", text))
    error = {"message": "The server had an error while processing your request" + said,
             "type": "server_error", "code": "server_error"}
    if outcome.events is None:
        return attrs.evolve(outcome, json_body={"error": error}, injected=None)
    if wire == "responses":
        event = {"type": "error", "sequence_number": 0, **error}
        return attrs.evolve(outcome, injected=f"event: error\ndata: {json.dumps(event)}\n\n")
    return attrs.evolve(outcome, injected=f"data: {json.dumps({'error': error})}\n\n")
