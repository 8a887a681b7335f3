"""Sessions through the proxy: named by a header or derived from the request, the client's
history reconciled with the canonical transcript, a diverging history forked."""

from __future__ import annotations

import json
from typing import Any

from tests.serve.conftest import Served

import ctxfold
from ctxfold.emulator import ReplySpec
from ctxfold.kernel.types import Message, ToolCall
from ctxfold.serve.sessions import (
    client_groups,
    derive_session_id,
    fork_id,
    reconcile,
)


def turn(served: Served, history: list[dict[str, Any]], **headers: str) -> Any:
    response = served.post("/chat/completions", {"model": "m", "messages": history},
                           **headers)
    assert response.status_code == 200, response.text
    return response


def test_without_a_header_the_session_is_derived_from_model_system_and_first_user() -> None:
    a = [Message(role="system", content="s"), Message(role="user", content="task one")]
    again = [*a, Message(role="assistant", content="ok"), Message(role="user", content="more")]
    other = [Message(role="system", content="s"), Message(role="user", content="task two")]
    assert derive_session_id("m", a) == derive_session_id("m", again)
    assert derive_session_id("m", a) != derive_session_id("m", other)
    assert derive_session_id("m", a) != derive_session_id("m2", a)
    assert derive_session_id("m", a).startswith("serve-") and len(derive_session_id("m", a)) == 30


def test_the_header_names_the_session_and_a_hostile_one_is_refused(serve, tmp_path) -> None:
    served = serve(script=[ReplySpec(text="hi")])
    response = turn(served, [{"role": "user", "content": "x"}], **{"X-Ctxfold-Session": "agent-7"})
    assert response.headers["x-ctxfold-session"] == "agent-7"
    assert (served.root / "agent-7.jsonl").exists()
    for hostile in ("../escape", ".hidden", "a/b", "x" * 200):
        bad = served.post("/chat/completions", {"model": "m", "messages": [
            {"role": "user", "content": "x"}]}, **{"X-Ctxfold-Session": hostile})
        assert bad.status_code == 400
        assert "session ids must match" in bad.json()["error"]["message"]
    assert sorted(p.name for p in tmp_path.rglob("*.jsonl")) == ["agent-7.jsonl"]


def test_an_edited_history_forks_from_the_common_prefix_and_never_overwrites(serve) -> None:
    served = serve(script=[ReplySpec(text=f"answer {i}") for i in range(6)])
    named = {"X-Ctxfold-Session": "work"}
    history = [{"role": "user", "content": "one"}]
    history.append(turn(served, history, **named).json()["choices"][0]["message"])
    history.append({"role": "user", "content": "two"})
    history.append(turn(served, history, **named).json()["choices"][0]["message"])
    before = served.transcript_bytes("work")
    edited = [*history[:2], {"role": "user", "content": "two, but better"}]
    forked = turn(served, edited, **named)
    fork = forked.headers["x-ctxfold-session"]
    assert fork == fork_id("work", 2, ("user", ("two, but better",), (), ""))
    assert fork.startswith("work-fork-")
    assert served.transcript_bytes("work") == before  # the original is untouched
    assert [m.content for m in served.canonical(fork)] == [
        "one", "answer 0", "two, but better", "answer 2"]
    # The edited branch goes on: the same divergence reaches the same fork, no new one.
    edited += [forked.json()["choices"][0]["message"], {"role": "user", "content": "three"}]
    assert turn(served, edited, **named).headers["x-ctxfold-session"] == fork
    assert len(served.canonical(fork)) == 6
    # The original branch goes on too.
    history.append({"role": "user", "content": "also three"})
    assert turn(served, history, **named).headers["x-ctxfold-session"] == "work"
    assert sorted(p.name for p in served.root.glob("*.jsonl")) == [
        f"{fork}.jsonl", "work.jsonl"]


def test_a_rewound_history_forks_with_the_prefix_only(serve) -> None:
    served = serve(script=[ReplySpec(text="first"), ReplySpec(text="retried")])
    history = [{"role": "user", "content": "go"}]
    original = turn(served, history).headers["x-ctxfold-session"]
    retried = turn(served, history)  # the client lost the answer and sent the same request
    fork = retried.headers["x-ctxfold-session"]
    assert fork != original and fork.startswith(original + "-fork-")
    assert [m.content for m in served.canonical(original)] == ["go", "first"]
    assert [m.content for m in served.canonical(fork)] == ["go", "retried"]


def test_content_parts_and_unknown_fields_reach_the_transcript_and_upstream_exactly(
        serve) -> None:
    served = serve(script=[ReplySpec(text="nice picture")])
    user = {"role": "user", "content": [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}],
        "name": "ana", "x_vendor_field": {"keep": True}}
    response = turn(served, [user])
    assert json.loads(served.bodies[-1])["messages"][0] == user
    kept = served.canonical(response.headers["x-ctxfold-session"])[0]
    assert ctxfold.message_to_openai(kept, local_fields=False) == user


def test_the_groups_hide_the_proxys_capability_exchanges() -> None:
    cap = ToolCall(id="k1", name="use_capability", arguments="{}")
    mine = ToolCall(id="c1", name="bash", arguments="{}")
    canonical = [
        Message(role="user", content="u"),
        Message(role="assistant", content="let me look. ", tool_calls=(cap,)),
        Message(role="tool", tool_call_id="k1", content="page"),
        Message(role="assistant", content="found", tool_calls=(mine,)),
        Message(role="tool", tool_call_id="c1", content="out"),
    ]
    groups = client_groups(canonical)
    assert [(g.start, g.end) for g in groups] == [(0, 1), (1, 4), (4, 5)]
    client = [Message(role="user", content="u"),
              Message(role="assistant", content="let me look. found", tool_calls=(mine,)),
              Message(role="tool", tool_call_id="c1", content="out"),
              Message(role="user", content="next")]
    plan = reconcile("s", canonical, client)
    assert (plan.fork_id, plan.covered, [m.content for m in plan.new]) == ("", 5, ["next"])
    plan = reconcile("s", canonical, [*client[:1], Message(role="user", content="other")])
    assert plan.fork_id and plan.covered == 1
