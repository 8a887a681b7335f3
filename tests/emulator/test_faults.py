"""Every injected fault, seen from a real httpx client."""

from __future__ import annotations

import time

import httpx
import pytest

from ctxfold import Emulator, Fault

BODY = {"messages": [{"role": "user", "content": "hello"}]}
STREAM = {**BODY, "stream": True}


def test_rate_limit_with_retry_after_then_success(chars) -> None:
    faults = [Fault("rate_limit", at=0, count=2, retry_after=3)]
    with Emulator(counter=chars, faults=faults) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        for _ in range(2):
            r = client.post("/chat/completions", json=BODY)
            assert r.status_code == 429
            assert r.headers["retry-after"] == "3"
            assert "Rate Limit" in r.json()["error"]["message"]
        assert client.post("/chat/completions", json=BODY).status_code == 200
        assert [rec.fault for rec in emu.requests] == ["rate_limit", "rate_limit", None]
        assert emu.requests[0].usage is None


def test_overloaded_next_request_only(chars) -> None:
    with Emulator(counter=chars) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        assert client.post("/chat/completions", json=BODY).status_code == 200
        emu.inject(Fault("overloaded"))
        assert client.post("/chat/completions", json=BODY).status_code == 503
        assert client.post("/chat/completions", json=BODY).status_code == 200


def test_connection_dropped_mid_stream(chars) -> None:
    with Emulator(counter=chars, faults=[Fault("drop", after_events=1)]) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        received = []
        with pytest.raises(httpx.RemoteProtocolError), \
                client.stream("POST", "/chat/completions", json=STREAM) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                received.append(line)
        assert any(line.startswith("data: ") for line in received)
        assert not any("[DONE]" in line for line in received)
        assert client.post("/chat/completions", json=BODY).status_code == 200
        assert emu.requests[0].fault == "drop"


def test_connection_dropped_non_streaming(chars) -> None:
    with Emulator(counter=chars, faults=[Fault("drop")]) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            client.post("/chat/completions", json=BODY)
        assert emu.requests[0].fault == "drop"


def test_stall_only_sends_keepalives_until_client_gives_up(chars) -> None:
    fault = Fault("stall", interval=0.05, stall_cap=5.0)
    with Emulator(counter=chars, faults=[fault]) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        lines: list[str] = []
        started = time.monotonic()
        with client.stream("POST", "/chat/completions", json=STREAM) as r:
            for line in r.iter_lines():
                lines.append(line)
                if time.monotonic() - started > 0.5:
                    break  # the client's own total-duration ceiling
        assert lines and all(line in (": keep-alive", "") for line in lines)
        assert lines.count(": keep-alive") >= 3
        assert emu.requests[0].usage is None  # never started inference: nothing cached
        assert client.post("/chat/completions", json=BODY).status_code == 200


def test_stall_server_side_cap_closes(chars) -> None:
    fault = Fault("stall", interval=0.05, stall_cap=0.3)
    with Emulator(counter=chars, faults=[fault]) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        started = time.monotonic()
        with pytest.raises(httpx.RemoteProtocolError), \
                client.stream("POST", "/chat/completions", json=STREAM) as r:
            for _ in r.iter_lines():
                pass
        assert time.monotonic() - started < 5
        assert emu.requests[0].fault == "stall"


def test_malformed_chunk(chars) -> None:
    with Emulator(counter=chars, faults=[Fault("malformed", after_events=2)]) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        with client.stream("POST", "/chat/completions", json=STREAM) as r:
            lines = [line for line in r.iter_lines() if line.startswith("data: ")]
        import json

        bad = [line for line in lines if line != "data: [DONE]" and not _is_json(line[6:])]
        assert len(bad) == 1 and lines.index(bad[0]) == 2
        assert lines[-1] == "data: [DONE]"
        emu.inject(Fault("malformed"))
        r = client.post("/chat/completions", json=BODY)
        assert r.status_code == 200
        with pytest.raises(json.JSONDecodeError):
            r.json()


def _is_json(text: str) -> bool:
    import json

    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def test_slow_first_byte(chars) -> None:
    with Emulator(counter=chars, faults=[Fault("slow", delay=0.6)]) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        started = time.monotonic()
        r = client.post("/chat/completions", json=BODY)
        assert r.status_code == 200 and time.monotonic() - started >= 0.6
        with pytest.raises(httpx.ReadTimeout):
            emu.inject(Fault("slow", delay=2.0))
            client.post("/chat/completions", json=BODY, timeout=httpx.Timeout(10, read=0.3))
        assert emu.requests[0].fault == "slow"


def test_fault_validation() -> None:
    with pytest.raises(ValueError, match="unknown fault kind"):
        Fault("explode")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="count"):
        Fault("drop", count=0)
