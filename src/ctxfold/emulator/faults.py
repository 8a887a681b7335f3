"""Fault injection: make chosen requests fail the way real providers fail.

Kinds:

* ``rate_limit`` — HTTP 429 with a ``Retry-After`` header (seconds) and the provider's
  error envelope.
* ``overloaded`` — HTTP 503 ("Server Overloaded", providers.md §1.7); on the ``anthropic``
  wire HTTP 529 ``overloaded_error`` (https://platform.claude.com/docs/en/api/errors).
* ``server_error`` — HTTP 500 (``api_error`` on the ``anthropic`` wire, ``server_error``
  elsewhere).
* ``drop`` — the response starts (headers and ``after_events`` SSE events, or part of a JSON
  body) and then the connection is closed without a proper end.
* ``stall`` — a 200 stream that only sends ``: keep-alive`` comments every ``interval``
  seconds (empty lines for non-streaming requests, as DeepSeek does), until the client gives
  up or ``stall_cap`` seconds pass, then closes.
* ``malformed`` — one SSE event whose data is not JSON (a non-JSON body when not streaming),
  after ``after_events`` good events.
* ``slow`` — wait ``delay`` seconds before the first byte, then answer normally.
* ``error_body`` — a 200 answer that reports an error: the JSON body is ``{"error": {...}}``,
  or, streaming, after ``after_events`` good events an error event (chat: a ``data:`` chunk
  ``{"error": {...}}``; Responses: ``event: error``; Anthropic: ``event: error`` with
  ``{"type": "error", "error": {"type": "overloaded_error", …}}``, the documented mid-stream
  error) ends the stream; the JSON body is Anthropic's error body there.

``echo_key=True`` makes the fault's text quote the request's bearer key, as a provider that
echoes a wrong key does ("Incorrect API key provided: …"): in the error message of
``rate_limit``, ``overloaded``, ``server_error`` and ``error_body``, in the broken data of
``malformed``.

A fault applies to request number ``at`` (0-based, counting every request the emulator
received) and the ``count - 1`` after it, or — with ``at=None`` — to the next ``count``
requests from the moment it is installed.
"""

from __future__ import annotations

import threading
from typing import Literal

import attrs

FaultKind = Literal["rate_limit", "overloaded", "server_error", "drop", "stall", "malformed",
                    "slow", "error_body"]
FAULT_KINDS: tuple[str, ...] = ("rate_limit", "overloaded", "server_error", "drop", "stall",
                                "malformed", "slow", "error_body")
#: The faults answered with an error status instead of the completion.
REFUSAL_KINDS: tuple[str, ...] = ("rate_limit", "overloaded", "server_error")


@attrs.frozen
class Fault:
    """One fault rule (see the module docstring for the kinds)."""

    kind: FaultKind
    at: int | None = None
    count: int = 1
    retry_after: float = 1.0
    delay: float = 0.0
    stall_cap: float = 30.0
    interval: float = 0.2
    after_events: int = 1
    echo_key: bool = False

    def __attrs_post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; choose one of {FAULT_KINDS}")
        if self.count < 1:
            raise ValueError(f"fault count must be >= 1, got {self.count}")


@attrs.define
class _Pending:
    fault: Fault
    remaining: int


class FaultPlan:
    """The installed faults; :meth:`take` answers which one hits a request."""

    def __init__(self, faults: list[Fault] | tuple[Fault, ...] = ()) -> None:
        self._lock = threading.Lock()
        self._indexed: list[Fault] = [f for f in faults if f.at is not None]
        # "next N requests" rules with their remaining uses, in installation order.
        self._pending: list[_Pending] = [_Pending(f, f.count) for f in faults if f.at is None]

    def add(self, fault: Fault) -> None:
        """Install ``fault`` (``at=None`` → the next ``count`` requests)."""
        with self._lock:
            if fault.at is None:
                self._pending.append(_Pending(fault, fault.count))
            else:
                self._indexed.append(fault)

    def clear(self) -> None:
        """Remove every fault."""
        with self._lock:
            self._indexed.clear()
            self._pending.clear()

    def take(self, index: int) -> Fault | None:
        """The fault for request ``index``, consuming one use of a "next N" rule."""
        with self._lock:
            for fault in self._indexed:
                assert fault.at is not None
                if fault.at <= index < fault.at + fault.count:
                    return fault
            if self._pending:
                entry = self._pending[0]
                entry.remaining -= 1
                if entry.remaining <= 0:
                    self._pending.pop(0)
                return entry.fault
        return None
