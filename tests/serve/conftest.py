"""A proxy under test: the loopback emulator as its upstream, ``ctxfold serve`` on an
ephemeral 127.0.0.1 port, sessions in a temporary directory, every upstream body recorded
as the exact bytes sent."""

from __future__ import annotations

import contextlib
import itertools
import json
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest

import ctxfold
from ctxfold import Config, Emulator, Fault, ProviderOptions, ReplySpec
from ctxfold.emulator.records import Outcome
from ctxfold.kernel.config import EstimatorConfig, ProviderConfig, StoreConfig, SummarizerConfig
from ctxfold.serve import ProxyServer, ServeSettings, build_proxy
from ctxfold.serve.guard import GuardSettings
from ctxfold.serve.proxy import Proxy
from ctxfold.transport.provider import serialize_body


class HeaderEmulator(Emulator):
    """An emulator that remembers some headers of every request: ``keys`` holds, per
    request, the value of the one header in ``names`` (lower case), or a tuple of them."""

    def __init__(self, *args: Any, names: Sequence[str] = ("authorization",),
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.names = tuple(names)
        self.keys: list[Any] = []

    def process(self, path: str, raw: bytes,
                headers: Mapping[str, str] | None = None) -> Outcome:
        lower = {k.lower(): v for k, v in (headers or {}).items()}
        values = tuple(lower.get(name) for name in self.names)
        self.keys.append(values[0] if len(values) == 1 else values)
        return super().process(path, raw, headers)

BASH = {"type": "function", "function": {
    "name": "bash", "description": "Run a shell command.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                   "required": ["command"]}}}
BASH_RESPONSES = {"type": "function", "name": "bash", "description": "Run a shell command.",
                  "parameters": BASH["function"]["parameters"]}


ESTIMATOR = "heuristic"


def quarter(text: str) -> int:
    """A fast token count for the emulator (one token per four characters)."""
    return max(1, len(text) // 4)


def call(call_id: str, name: str = "bash", **arguments: Any) -> ReplySpec:
    """A scripted reply that calls one tool."""
    return ReplySpec(text="", tool_calls=(ctxfold.ToolCall(
        id=call_id, name=name, arguments=json.dumps(arguments or {"command": "ls"})),))


def log_text(n: int, label: str = "out") -> str:
    """A tool output of about ``n`` characters."""
    line = f"{label}: lorem ipsum dolor sit amet consectetur adipiscing elit\n"
    return (line * (n // len(line) + 1))[:n]


def extends_between_installs(bodies: Sequence[bytes], field: str = "messages") -> int:
    """The byte-stable-prefix invariant on upstream bodies: whenever a body's history did
    not shrink (no checkpoint was installed in between), its bytes up to the end of the
    previous body's history are the previous body's. Returns how many pairs it checked;
    asserts that at least one install happened."""
    checked = installs = 0
    for previous, body in itertools.pairwise(bodies):
        before, after = json.loads(previous), json.loads(body)
        if len(after[field]) < len(before[field]):
            installs += 1
            continue
        head = serialize_body({"model": before["model"], field: before[field]})[:-2]
        assert body.startswith(head), (len(before[field]), len(after[field]))
        checked += 1
    assert installs >= 1
    return checked


@attrs.define
class Served:
    """One running proxy and its upstream."""

    emu: Emulator
    server: ProxyServer
    proxy: Proxy
    bodies: list[bytes]
    config: Config
    root: Path

    @property
    def base(self) -> str:
        return self.server.base_url + "/v1"

    def post(self, path: str, body: dict[str, Any], **headers: str) -> httpx.Response:
        return httpx.post(self.base + path, json=body, headers=headers, timeout=30)

    def stream(self, path: str, body: dict[str, Any],
               **headers: str) -> tuple[httpx.Response, list[tuple[str, Any]]]:
        """POST a streaming request; the response and its events as (event, data)."""
        events: list[tuple[str, Any]] = []
        with httpx.stream("POST", self.base + path, json={**body, "stream": True},
                          headers=headers, timeout=30) as response:
            name = ""
            for line in response.iter_lines():
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    data = line[6:]
                    events.append((name, data if data == "[DONE]" else json.loads(data)))
                    name = ""
        return response, events

    def canonical(self, session_id: str) -> tuple[ctxfold.Message, ...]:
        return ctxfold.open_session(session_id, config=self.config, create=False).canonical

    def transcript_bytes(self, session_id: str) -> bytes:
        return (self.root / f"{session_id}.jsonl").read_bytes()


@pytest.fixture(autouse=True)
def _bounded(request: pytest.FixtureRequest) -> Iterator[None]:
    # A hung stream must fail the test, not hang CI.
    def expired(_signum: int, _frame: object) -> None:
        raise TimeoutError(f"{request.node.name} took longer than 90 s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(90)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def serving(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """``start(profile, script=..., window=..., faults=..., api_key=..., max_retries=...,
    guard=..., summarizer=..., **settings)``
    starts a proxy in front of a fresh emulator; every one started is stopped at the end."""
    running: list[Served] = []

    def start(profile: str = "deepseek", *, script: Sequence[ReplySpec] | Any = None,
              window: int | None = None, faults: Sequence[Fault] = (),
              api_key: str | None = "local-test-key", api_key_env: str = "",
              emulator: Emulator | None = None, max_retries: int = 0,
              guard: GuardSettings | None = None, summarizer: str = "llm",
              **settings: Any) -> Served:
        emu = emulator or Emulator(profile, script=script, counter=quarter, faults=faults)
        emu.start()
        root = tmp_path / "sessions"
        config = Config(provider=ProviderConfig(name=emu.profile.name,
                                                api_key_env=api_key_env),
                        estimator=EstimatorConfig(name=ESTIMATOR),
                        summarizer=SummarizerConfig(name=summarizer),
                        store=StoreConfig(path=str(root)))
        provider = ctxfold.create_provider(config, options=ProviderOptions(
            base_url=emu.base_url, api_key=api_key, max_retries=max_retries))
        bodies: list[bytes] = []
        proxy = build_proxy(config, provider=provider, on_request=bodies.append,
                            settings=ServeSettings(port=0, window=window, **settings))
        served = Served(emu=emu, server=ProxyServer(proxy, guard=guard).start(), proxy=proxy,
                        bodies=bodies, config=config, root=root)
        running.append(served)
        return served

    try:
        yield start
    finally:
        for served in running:
            served.server.stop()
            served.emu.stop()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """A proxy factory (see :func:`serving`)."""
    with serving(tmp_path) as start:
        yield start
