"""What the emulator records of each request and what it sends back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ctxfold.emulator.faults import Fault


@attrs.frozen
class RequestRecord:
    """One request as the emulator saw it.

    ``usage`` is the wire ``usage`` object sent back (``None`` when the request was rejected
    or hit by a fault before inference); ``fault`` names the injected fault, if any.
    ``cache_write_tokens``: the tokens written to the cache (billed as writes: the
    ``anthropic`` profile's ``cache_creation_input_tokens``; 0 on the other profiles, whose
    providers bill no writes).
    """

    index: int
    path: str
    body: Mapping[str, Any]
    status: int
    usage: Mapping[str, Any] | None = None
    prompt_tokens: int = 0
    cache_hit_tokens: int = 0
    completion_tokens: int = 0
    fault: str | None = None
    cache_write_tokens: int = 0



@attrs.frozen
class Outcome:
    """What to send back: a JSON body, or SSE ``events`` (``stream``); ``fault`` shapes how."""

    status: int
    json_body: Any = None
    events: list[str] | None = None
    headers: dict[str, str] = attrs.field(factory=dict)
    fault: Fault | None = None
    record: RequestRecord | None = None
    stream: bool = False
    #: What a ``malformed`` or ``error_body`` fault sends: streaming, one raw SSE event
    #: before event number ``after_events``; else the whole 200 body.
    injected: str | None = None
