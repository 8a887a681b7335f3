"""No configured or forwarded key, whatever its format, reaches a proxy client, the proxy's
log, a stored file or a library exception — even when the upstream echoes it in an error
status, a streamed error event, an unparsable chunk or a 200 body carrying an ``error``
(issue 29, item 3)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from tests.emulator.conftest import CharTokens

import ctxfold
from ctxfold import (
    ChatRequest,
    Config,
    Emulator,
    Fault,
    Message,
    ProviderError,
    ProviderOptions,
    ReplySpec,
)
from ctxfold.kernel.config import EstimatorConfig, ProviderConfig, StoreConfig

#: Keys of several formats: none needs a known prefix to be masked.
KEYS = [
    "sk-proj-Ab3dE5fG7hJ9kL1mN3pQ5rS7",    # OpenAI-like
    "0f3a9c1e5b2d4f6a8c0e2b4d6f8a0c1e",    # hex, no prefix
    "AIzaSyD9tSrke72PouQMnMXa7eZSW0jkFMBW",  # Google-like
    "Zm9vYmFyOmJheg==",                     # base64, with padding
    "mimo_8c0e2b4d",                        # short, with an underscore
]
FAULTS = [
    Fault("rate_limit", at=0, echo_key=True),
    Fault("overloaded", at=0, echo_key=True),
    Fault("malformed", at=0, echo_key=True),
    Fault("error_body", at=0, echo_key=True),
]


def every_file(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())


def leaks(key: str, *texts: Any) -> list[str]:
    return [str(t)[:200] for t in texts if key in str(t)]


@pytest.mark.parametrize("configured", [True, False], ids=["configured", "forwarded"])
@pytest.mark.parametrize("key", KEYS)
def test_no_key_reaches_a_client_a_log_or_a_file(serve, key: str, configured: bool,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    seen: list[Any] = []
    for stream in (False, True):
        for fault in FAULTS:
            emu = Emulator("deepseek", counter=CharTokens(), script=[ReplySpec(text="ok")],
                           faults=[fault])
            served = serve(emulator=emu, api_key=key if configured else None)
            headers = {} if configured else {"Authorization": f"Bearer {key}"}
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            if stream:
                response, events = served.stream("/chat/completions", body, **headers)
                seen += [response.headers, events]
            else:
                response = served.post("/chat/completions", body, **headers)
                seen += [response.headers, response.text]
            assert response.status_code != 200 or stream, (fault, response.text)
            seen.append(every_file(served.root))
    seen += [r.getMessage() for r in caplog.records]
    seen += [r.exc_text for r in caplog.records if r.exc_text]
    assert leaks(key, *seen) == []


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.kind)
@pytest.mark.parametrize("stream", [False, True])
def test_library_exceptions_hold_no_key(tmp_path: Path, key: str, fault: Fault,
                                        stream: bool) -> None:
    with Emulator("deepseek", counter=CharTokens(), faults=[fault]) as emu:
        config = Config(provider=ProviderConfig(name="deepseek"),
                        estimator=EstimatorConfig(name="heuristic"),
                        store=StoreConfig(path=str(tmp_path)))
        provider = ctxfold.create_provider(config, options=ProviderOptions(
            base_url=emu.base_url, api_key=key, max_retries=0))
        request = ChatRequest(messages=(Message(role="user", content="hi"),), stream=stream,
                              max_output_tokens=64)
        with pytest.raises(ProviderError) as caught:
            provider.complete(request)
    exc = caught.value
    texts = [str(exc), repr(exc), exc.body, *map(repr, vars(exc).values()), exc.args]
    cause = exc.__cause__ or exc.__context__
    while cause is not None:
        texts += [str(cause), repr(vars(cause)) if hasattr(cause, "__dict__") else ""]
        cause = cause.__cause__ or cause.__context__
    assert leaks(key, *texts) == []
