"""HTTP transport of the emulator: writes an :class:`Outcome`, applying its fault.

Streams use chunked transfer encoding, one chunk per SSE event, flushed as written, so a client
sees events as they are produced (and a dropped connection mid-stream looks like one).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol

from ctxfold.emulator.faults import Fault
from ctxfold.emulator.records import Outcome
from ctxfold.kernel.errors import CtxfoldError


class Processor(Protocol):
    """What the handler asks of the emulator it serves: answer a request, and say when it is
    stopping (slow faults stop waiting then)."""

    stopping: threading.Event

    def process(self, path: str, raw: bytes,
                headers: Mapping[str, str] | None = None) -> Outcome:
        """The outcome of one ``POST`` to ``path`` with body ``raw``."""
        ...

    def models(self, path: str, headers: Mapping[str, str] | None = None) -> Outcome:
        """The outcome of one ``GET`` of ``path`` (``/v1/models``)."""
        ...


class _Dropped(CtxfoldError):
    """The client went away (or we dropped it on purpose)."""


class Handler(BaseHTTPRequestHandler):
    """Serves ``POST`` requests of one connection; the emulator is bound as a class attribute."""

    emulator: Processor
    protocol_version = "HTTP/1.1"
    server_version = "ctxfold-emulator"

    def setup(self) -> None:
        # Headers and body go out in separate writes: without TCP_NODELAY, Nagle's algorithm
        # holds the body until the client acknowledges the headers, which a client delays by
        # up to 40 ms (delayed ACK) — a 40 ms stall per request on loopback that would
        # swamp every latency measured through the emulator.
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default stderr access log (tests and the CLI stay quiet)."""

    def do_GET(self) -> None:
        outcome = self.emulator.models(self.path.split("?", 1)[0], dict(self.headers.items()))
        self._send_json(outcome.status, outcome.json_body)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        outcome = self.emulator.process(self.path.split("?", 1)[0], raw,
                                        dict(self.headers.items()))
        fault = outcome.fault
        try:
            if fault is not None and fault.kind == "slow":
                self._sleep(fault.delay)
            if fault is not None and fault.kind == "stall":
                self._stall(fault, outcome.stream)
            elif outcome.events is not None:
                self._send_events(outcome)
            elif fault is not None and fault.kind in ("drop", "malformed") \
                    and outcome.status == 200:
                self._send_broken_json(outcome, fault)
            else:
                self._send_json(outcome.status, outcome.json_body, outcome.headers)
        except (_Dropped, BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # -- writers -----------------------------------------------------------------------------

    def _sleep(self, seconds: float) -> None:
        self.emulator.stopping.wait(max(0.0, seconds))

    def _send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-request-id", f"emu-{id(body):x}")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _start_chunked(self, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.flush()

    def _chunk(self, text: str) -> None:
        data = text.encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _end_chunked(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _drop(self) -> None:
        """Close the socket abruptly: no terminating chunk, no further bytes."""
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        raise _Dropped

    def _send_events(self, outcome: Outcome) -> None:
        fault = outcome.fault
        events = outcome.events or []
        self._start_chunked("text/event-stream; charset=utf-8", outcome.headers)
        for position, event in enumerate(events):
            if fault is not None and position == fault.after_events:
                if fault.kind == "drop":
                    self._drop()
                if fault.kind == "malformed":
                    self._chunk(outcome.injected or 'data: {"id": "broken", "choices": '
                                '[{"delta": \n\n')
                if fault.kind == "error_body" and outcome.injected is not None:
                    self._chunk(outcome.injected)
                    break
            self._chunk(event)
        self._end_chunked()

    def _send_broken_json(self, outcome: Outcome, fault: Fault) -> None:
        data = json.dumps(outcome.json_body, ensure_ascii=False).encode()
        if fault.kind == "malformed":
            data = (outcome.injected or "").encode() or data[: max(1, len(data) // 2)]
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        self._drop()

    def _stall(self, fault: Fault, stream: bool) -> None:
        """Only keep-alives (SSE comments, or empty lines for a JSON body) until the client
        gives up, the cap passes, or the emulator stops; then drop the connection."""
        self._start_chunked("text/event-stream; charset=utf-8" if stream else "application/json")
        deadline = time.monotonic() + fault.stall_cap
        beat = ": keep-alive\n\n" if stream else "\n"
        while time.monotonic() < deadline and not self.emulator.stopping.is_set():
            self._chunk(beat)
            self._sleep(fault.interval)
        self._drop()
