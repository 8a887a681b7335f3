"""Many clients at once: different sessions run concurrently; requests of one session are
serialized, and one that would wait long for its session continues in a fork instead."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
from tests.serve.conftest import Served

from ctxfold import Fault, ReplySpec


def send(served: Served, session: str, text: str, out: dict[str, Any]) -> None:
    started = time.perf_counter()
    out["response"] = served.post("/chat/completions", {
        "model": "m", "messages": [{"role": "user", "content": text}]},
        **{"X-Ctxfold-Session": session})
    out["seconds"] = time.perf_counter() - started


def in_flight(served: Served, session: str, text: str) -> tuple[threading.Thread, dict[str, Any]]:
    """Start a request and return once the upstream has received it."""
    out: dict[str, Any] = {}
    thread = threading.Thread(target=send, args=(served, session, text, out))
    seen = len(served.emu.requests)
    thread.start()
    deadline = time.monotonic() + 10
    while len(served.emu.requests) == seen:
        assert time.monotonic() < deadline, "the first request never reached the upstream"
        time.sleep(0.005)
    return thread, out


def test_different_sessions_run_concurrently(serve) -> None:
    served = serve(script=[ReplySpec(text="slow one"), ReplySpec(text="quick one")],
                   faults=[Fault("slow", at=0, delay=2.0)])
    thread, slow = in_flight(served, "alpha", "take your time")
    quick: dict[str, Any] = {}
    send(served, "beta", "be quick", quick)
    assert quick["response"].status_code == 200 and quick["seconds"] < 1.5
    assert thread.is_alive()  # beta was answered while alpha was still waiting upstream
    thread.join(15)
    assert slow["response"].status_code == 200 and slow["seconds"] >= 2.0
    assert quick["response"].json()["choices"][0]["message"]["content"] == "quick one"


def test_a_busy_session_is_continued_in_a_fork_after_a_short_wait(serve) -> None:
    """A request whose history continues a session another request holds waits at most
    ``fork_after``, then continues beside it: no 30 s wait, no 409."""
    served = serve(script=[ReplySpec(text="first"), ReplySpec(text="second")],
                   faults=[Fault("slow", at=0, delay=2.0)], fork_after=0.3)
    thread, first = in_flight(served, "shared", "one")
    second: dict[str, Any] = {}
    send(served, "shared", "one", second)
    thread.join(15)
    assert second["response"].status_code == 200 and 0.25 <= second["seconds"] < 1.8
    assert first["response"].status_code == 200
    assert first["response"].headers["x-ctxfold-session"] == "shared"
    fork = second["response"].headers["x-ctxfold-session"]
    assert fork.startswith("shared-fork-")
    assert [m.content for m in served.canonical("shared")] == ["one", "first"]
    assert [m.content for m in served.canonical(fork)] == ["one", "second"]


def test_one_session_is_serialized_and_the_second_sees_the_first(serve) -> None:
    served = serve(script=[ReplySpec(text="first"), ReplySpec(text="second")],
                   faults=[Fault("slow", at=0, delay=1.0)])
    thread, first = in_flight(served, "shared", "same question")
    second: dict[str, Any] = {}
    send(served, "shared", "same question", second)
    thread.join(15)
    assert first["response"].status_code == second["response"].status_code == 200
    assert second["seconds"] >= 0.9  # it waited for the first to finish
    # The second request's history lacks the first's answer: a rewind, so a fork.
    assert first["response"].headers["x-ctxfold-session"] == "shared"
    assert second["response"].headers["x-ctxfold-session"].startswith("shared-fork-")
    assert [m.content for m in served.canonical("shared")] == ["same question", "first"]
    health = httpx.get(served.server.base_url + "/healthz", timeout=10).json()
    assert health["status"] == "ok" and health["sessions_open"] == 2


def test_open_sessions_are_bounded_by_the_size_of_their_messages(serve) -> None:
    """Every open session kept its whole transcript in memory, up to 256 of them."""
    served = serve(script=[ReplySpec(text="ok")] * 4, max_open_bytes=300_000)
    for name in ("a", "b", "c"):
        response = served.post("/chat/completions", {"model": "m", "messages": [
            {"role": "user", "content": name * 200_000}]}, **{"X-Ctxfold-Session": name})
        assert response.status_code == 200, response.text
    assert len(served.proxy.pool) == 1 and served.proxy.pool.size() <= 300_000
    again = served.post("/chat/completions", {"model": "m", "messages": [
        {"role": "user", "content": "a" * 200_000}, {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "more"}]}, **{"X-Ctxfold-Session": "a"})
    assert again.status_code == 200 and again.headers["x-ctxfold-session"] == "a"
