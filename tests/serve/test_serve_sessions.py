"""Sessions through the proxy: a conversation named by a header, by the client's own id or
by its opening; the client's history matched to a branch of it by what the client means
(not its bytes); a diverging history continued in a fork that keeps its checkpoint."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest
from tests.serve.conftest import Served, call, log_text

import ctxfold
from ctxfold import Fault, Message, ReplySpec, ToolCall
from ctxfold.serve.sessions import (
    ClientView,
    client_key,
    conversation_session,
    derive_session_id,
    is_fork_of,
    normal_arguments,
    reconcile,
)


def turn(served: Served, history: list[dict[str, Any]], **headers: str) -> Any:
    response = served.post("/chat/completions", {"model": "m", "messages": history},
                           **headers)
    assert response.status_code == 200, response.text
    return response


def sessions(served: Served) -> list[str]:
    return sorted(p.name[:-len(".jsonl")] for p in served.root.glob("*.jsonl"))


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


# -- what a client means, not its bytes --------------------------------------------------------

def test_arguments_compare_by_their_json_and_text_by_its_words() -> None:
    assert normal_arguments('{"path": ".", "n": [1, 2]}') == normal_arguments(
        '{"n":[1,2],"path":"."}')
    assert normal_arguments('{"a": "x  y"}') != normal_arguments('{"a": "x y"}')  # values kept
    assert normal_arguments("not json  at\nall") == normal_arguments("not json at all")
    spaced = Message(role="assistant", content="", tool_calls=(
        ToolCall(id="c1", name="ls", arguments='{"path": "."}'),))
    compact = Message(role="assistant", content="Let me look.", tool_calls=(
        ToolCall(id="c1", name="ls", arguments='{"path":"."}'),))
    assert client_key(spaced) == client_key(compact)  # the calls identify it
    other = Message(role="assistant", content="", tool_calls=(
        ToolCall(id="c1", name="ls", arguments='{"path":"src"}'),))
    assert client_key(spaced) != client_key(other)
    assert client_key(Message(role="user", content="hi\n")) == client_key(
        Message(role="user", content=" hi"))


def test_a_client_that_reserializes_arguments_continues_one_session(serve) -> None:
    """AI SDK clients send arguments back compact, LangChain and llm spaced: one session,
    no fork (this forked on every tool round, then 400 after 16 forks)."""
    script = [ReplySpec(text="", tool_calls=(ctxfold.ToolCall(
        id=f"c{i}", name="bash", arguments=json.dumps({"command": f"ls {i}"})),))
        for i in range(20)]
    served = serve(script=script)
    history: list[dict[str, Any]] = [{"role": "user", "content": "list everything"}]
    for i in range(20):
        answer = turn(served, history).json()["choices"][0]["message"]
        for tool_call in answer["tool_calls"]:  # re-parsed and re-serialized, both styles
            parsed = json.loads(tool_call["function"]["arguments"])
            tool_call["function"]["arguments"] = json.dumps(
                parsed, separators=(",", ":") if i % 2 else (", ", ": "))
        answer["content"] = None if i % 3 else answer["content"]
        history += [answer, {"role": "tool", "tool_call_id": answer["tool_calls"][0]["id"],
                             "content": f"file{i}"}]
    assert len(sessions(served)) == 1
    assert len(served.canonical(sessions(served)[0])) == 40  # the last result is not sent


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
    view = ClientView(canonical)
    assert [(g.start, g.end) for g in view.groups] == [(0, 1), (1, 4), (4, 5)]
    incremental = ClientView()
    for message in canonical:
        incremental.extend([message])
    assert incremental.chain == view.chain
    client = [Message(role="user", content="u"),
              Message(role="assistant", content="let me look. found", tool_calls=(mine,)),
              Message(role="tool", tool_call_id="c1", content="out"),
              Message(role="user", content="next")]
    found = reconcile(canonical, client)
    assert (found.extends, found.matched, found.covered) == (True, 3, 5)
    found = reconcile(canonical, [*client[:1], Message(role="user", content="other")])
    assert (found.extends, found.matched, found.covered) == (False, 1, 1)


# -- forks ---------------------------------------------------------------------------------

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
    assert is_fork_of("work", fork)
    assert served.transcript_bytes("work") == before  # the original is untouched
    assert [m.content for m in served.canonical(fork)] == [
        "one", "answer 0", "two, but better", "answer 2"]
    # The edited branch goes on in its fork, no new one.
    edited += [forked.json()["choices"][0]["message"], {"role": "user", "content": "three"}]
    assert turn(served, edited, **named).headers["x-ctxfold-session"] == fork
    assert len(served.canonical(fork)) == 6
    # The original branch goes on too.
    history.append({"role": "user", "content": "also three"})
    assert turn(served, history, **named).headers["x-ctxfold-session"] == "work"
    assert sessions(served) == sorted([fork, "work"])


def test_a_repeated_request_forks_beside_the_original_never_inside_a_fork(serve) -> None:
    """The 18th identical one-off request was a 400 (one nested fork per repeat)."""
    served = serve(script=[ReplySpec(text=f"answer {i}") for i in range(30)])
    history = [{"role": "system", "content": "Classify."},
               {"role": "user", "content": "Classify: is 7 prime?"}]
    names = [turn(served, history).headers["x-ctxfold-session"] for _ in range(25)]
    family = names[0]
    assert len(set(names)) == 25 and all(is_fork_of(family, n) for n in names[1:])
    for name in names:
        assert [m.content for m in served.canonical(name)][:2] == [
            "Classify.", "Classify: is 7 prime?"]
    # Each repeat's conversation continues in its own branch.
    answer = served.canonical(names[17])[-1]
    again = turn(served, [*history, {"role": "assistant", "content": answer.content},
                          {"role": "user", "content": "why?"}])
    assert again.headers["x-ctxfold-session"] == names[17]


def test_forks_are_found_again_after_a_restart(serve, tmp_path) -> None:
    served = serve(script=[ReplySpec(text=f"a{i}") for i in range(8)])
    history = [{"role": "user", "content": "start"}]
    history.append(turn(served, history).json()["choices"][0]["message"])
    edited = [*history, {"role": "user", "content": "left"}]
    fork = turn(served, edited).headers["x-ctxfold-session"]
    edited.append({"role": "assistant", "content": served.canonical(fork)[-1].content})
    served.server.stop()
    again = serve(script=[ReplySpec(text="after restart")])
    again.root = served.root
    response = again.post("/chat/completions", {"model": "m", "messages": [
        *edited, {"role": "user", "content": "more"}]})
    assert response.status_code == 200, response.text
    assert response.headers["x-ctxfold-session"] == fork


# -- conversations -------------------------------------------------------------------------

def test_the_clients_own_conversation_id_names_the_session(serve) -> None:
    served = serve(script=[ReplySpec(text="one"), ReplySpec(text="two")])
    history = [{"role": "user", "content": "same opening"}]
    a = turn(served, history, session_id="thread-a").headers["x-ctxfold-session"]
    b = turn(served, history, session_id="thread-b").headers["x-ctxfold-session"]
    assert a == conversation_session("thread-a") and b == conversation_session("thread-b")
    assert a != b and not is_fork_of(a, b)


def test_conversations_sharing_an_opening_do_not_block_each_other(serve) -> None:
    """Two at once used to mean the second waited 30 s, then 409."""
    served = serve(script=[ReplySpec(text="one"), ReplySpec(text="two")],
                   faults=[Fault("slow", at=0, delay=3.0)], fork_after=0.2)
    opening = [{"role": "system", "content": "s"}, {"role": "user", "content": "hello"}]
    results: list[httpx.Response] = []
    first = threading.Thread(target=lambda: results.append(served.post(
        "/chat/completions", {"model": "m", "messages": opening})))
    first.start()
    while not served.emu.requests:
        time.sleep(0.005)
    started = time.perf_counter()
    second = served.post("/chat/completions", {"model": "m", "messages": opening})
    assert second.status_code == 200 and time.perf_counter() - started < 2.0
    first.join()
    assert results[0].status_code == 200
    names = {second.headers["x-ctxfold-session"], results[0].headers["x-ctxfold-session"]}
    assert len(names) == 2


def test_a_fork_of_a_long_session_keeps_its_checkpoint(serve) -> None:
    """A fork started without its parent's checkpoint and was over the ceiling at once."""
    served = serve(script=[call(f"c{i}") for i in range(40)], window=6000)
    history: list[dict[str, Any]] = [{"role": "system", "content": "agent"},
                                     {"role": "user", "content": "build it"}]
    for i in range(14):
        answer = turn(served, history).json()["choices"][0]["message"]
        history += [answer, {"role": "tool", "tool_call_id": answer["tool_calls"][0]["id"],
                             "content": log_text(2400, f"step{i}")}]
    name = sessions(served)[0]
    parent = ctxfold.open_session(name, config=served.config, create=False,
                                  summarize=lambda _r: "")
    assert parent.state.projection is not None
    # The client edits the last tool result it sent (a rewind past the checkpoint's span).
    edited = [*history[:-3], {**history[-3], "content": "edited output"}]
    sent_before = len(served.bodies)
    response = served.post("/chat/completions", {"model": "m", "messages": edited})
    assert response.status_code == 200, response.text
    fork = response.headers["x-ctxfold-session"]
    assert is_fork_of(name, fork)
    # The parent's checkpoint came along: no new summary was needed.
    assert len(served.bodies) == sent_before + 1
    assert response.headers["x-ctxfold-action"] == "none"
    sent = json.loads(served.bodies[-1])["messages"]
    assert "<compaction-summary>" in json.dumps(sent)
    assert len(sent) < len(edited)


def test_a_clients_own_fork_under_a_new_id_starts_from_the_checkpoint(serve) -> None:
    """Codex's ``exec fork`` sends the parent's whole history under a new thread id: a new
    conversation, which used to start with no checkpoint (a fold of everything again, or a
    400 when one fold could not bring it under the ceiling)."""
    served = serve(script=[call(f"c{i}") for i in range(40)], window=6000)
    history: list[dict[str, Any]] = [{"role": "system", "content": "agent"},
                                     {"role": "user", "content": "build it"}]
    for i in range(14):
        answer = turn(served, history, session_id="thread-1").json()["choices"][0]["message"]
        history += [answer, {"role": "tool", "tool_call_id": answer["tool_calls"][0]["id"],
                             "content": log_text(2400, f"step{i}")}]
    parent = conversation_session("thread-1")
    projection = ctxfold.open_session(parent, config=served.config, create=False,
                                      summarize=lambda _r: "").state.projection
    assert projection is not None
    sent_before = len(served.bodies)
    forked = turn(served, history, session_id="thread-2")  # the whole history, a new id
    assert forked.headers["x-ctxfold-session"] == conversation_session("thread-2")
    assert len(served.bodies) == sent_before + 1  # no summary: it started from the checkpoint
    sent = json.loads(served.bodies[-1])["messages"]
    assert "<compaction-summary>" in json.dumps(sent) and len(sent) < len(history)
    child = ctxfold.open_session(conversation_session("thread-2"), config=served.config,
                                 create=False, summarize=lambda _r: "")
    assert child.state.projection is not None
    assert child.state.projection.covered_count >= projection.covered_count


def test_a_resent_history_is_read_from_where_it_differs_with_the_same_result() -> None:
    """The proxy re-reads only what changed; what it reads must equal a full read."""
    from ctxfold.serve.client_request import RecentHistories, parse_request
    from ctxfold.serve.sessions import chain_of, key_digest

    base = [{"role": "system", "content": "s"}, {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type":
             "function", "function": {"name": "ls", "arguments": '{"p": "."}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "a b"}]
    recent = RecentHistories()
    bodies = [base, [*base, {"role": "assistant", "content": "done"}],
              [*base[:2], {"role": "user", "content": "edited"}],
              [*base, {"role": "assistant", "content": "done"},
               {"role": "user", "content": "more"}]]
    for messages in bodies:
        body = {"model": "m", "messages": json.loads(json.dumps(messages))}  # fresh dicts
        fast = parse_request("chat", body, recent)
        full = parse_request("chat", body)
        assert fast.history == full.history
        assert list(fast.chain) == chain_of([key_digest(m) for m in full.history])
    bad = {"model": "m", "messages": [*base, {"role": "tool", "content": 3}]}
    with pytest.raises(ctxfold.CtxfoldError, match=r"messages\[4\]"):
        parse_request("chat", bad, recent)
