"""``use_capability`` through the proxy: offered with a stable schema, answered by the proxy
itself, never seen by the client — streaming or not, chat or Responses."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.serve.conftest import BASH, BASH_RESPONSES, call, log_text
from tests.serve.test_serve_chat import assemble
from tests.serve.test_serve_responses import final_response

import ctxfold
from ctxfold import ReplySpec
from ctxfold.capabilities.bounding import result_ref
from ctxfold.serve.sessions import USE_CAPABILITY


def capability(call_id: str, **arguments: Any) -> ReplySpec:
    return call(call_id, USE_CAPABILITY, **(arguments or {"action": "list"}))


@pytest.mark.parametrize("stream", [False, True])
def test_the_proxy_answers_use_capability_and_the_client_never_sees_it(serve,
                                                                       stream: bool) -> None:
    served = serve(script=[capability("cap_1"), ReplySpec(text="I looked it up.")])
    history: list[dict[str, Any]] = [{"role": "user", "content": "what can you do?"}]
    body = {"model": "m", "messages": history, "tools": [BASH]}
    if stream:
        response, events = served.stream("/chat/completions", body)
        message = assemble(events)
        assert not any("tool_calls" in d["choices"][0]["delta"] for _n, d in events
                       if d != "[DONE]" and d["choices"])
        finish = [d["choices"][0]["finish_reason"] for _n, d in events
                  if d != "[DONE]" and d["choices"] and d["choices"][0]["finish_reason"]]
    else:
        response = served.post("/chat/completions", body)
        message = response.json()["choices"][0]["message"]
        finish = [response.json()["choices"][0]["finish_reason"]]
    assert message == {"role": "assistant", "content": "I looked it up."}
    assert finish == ["stop"]
    # Two upstream rounds: the second carries the call and the proxy's answer.
    assert len(served.bodies) == 2
    second = json.loads(served.bodies[1])["messages"]
    assert second[-2]["tool_calls"][0]["function"]["name"] == USE_CAPABILITY
    assert second[-1]["role"] == "tool" and "session:tool_result" in second[-1]["content"]
    # The client's next turn continues the session: the hidden exchange is no divergence.
    session = response.headers["x-ctxfold-session"]
    history += [message, {"role": "user", "content": "thanks"}]
    again = served.post("/chat/completions", {"model": "m", "messages": history,
                                               "tools": [BASH]})
    assert again.headers["x-ctxfold-session"] == session
    assert [m.role for m in served.canonical(session)] == [
        "user", "assistant", "tool", "assistant", "user", "assistant"]


def test_the_model_pages_a_bounded_tool_result_through_the_proxy(serve) -> None:
    huge = log_text(60_000, "build")
    args = {"action": "call", "capability_id": "session:tool_result",
            "arguments": {"tool_call_id": "c1", "result_ref": result_ref("c1", huge),
                          "offset": 40_000, "limit": 2000}}
    served = serve(script=[call("c1"), capability("cap_1", **args), ReplySpec(text="seen")])
    history: list[dict[str, Any]] = [{"role": "user", "content": "build it"}]
    first = served.post("/chat/completions", {"model": "m", "messages": history,
                                               "tools": [BASH]})
    history += [first.json()["choices"][0]["message"],
                {"role": "tool", "tool_call_id": "c1", "content": huge}]
    second = served.post("/chat/completions", {"model": "m", "messages": history,
                                                "tools": [BASH]})
    assert second.json()["choices"][0]["message"]["content"] == "seen"
    page = json.loads(served.bodies[-1])["messages"][-1]["content"]
    assert huge.encode()[40_000:41_000].decode() in page  # the text the bound had cut


def test_with_a_client_call_beside_it_only_the_client_call_reaches_the_client(serve) -> None:
    both = ReplySpec(text="", tool_calls=(
        ctxfold.ToolCall(id="cap_1", name=USE_CAPABILITY, arguments='{"action":"list"}'),
        ctxfold.ToolCall(id="c1", name="bash", arguments='{"command":"ls"}')))
    served = serve(script=[both, ReplySpec(text="listed")])
    history: list[dict[str, Any]] = [{"role": "user", "content": "ls"}]
    response, events = served.stream("/chat/completions", {"model": "m", "messages": history,
                                                           "tools": [BASH]})
    message = assemble(events)
    assert [(c["id"], c["function"]["name"]) for c in message["tool_calls"]] == [("c1", "bash")]
    assert [d["choices"][0]["delta"]["tool_calls"][0]["index"] for _n, d in events
            if d != "[DONE]" and d["choices"] and "tool_calls" in d["choices"][0]["delta"]
            ] == [0, 0]
    history += [message, {"role": "tool", "tool_call_id": "c1", "content": "a b"}]
    again = served.post("/chat/completions", {"model": "m", "messages": history,
                                               "tools": [BASH]})
    assert again.headers["x-ctxfold-session"] == response.headers["x-ctxfold-session"]
    sent = json.loads(served.bodies[-1])["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool"]
    assert sent[2]["tool_call_id"] == "cap_1" and sent[3]["tool_call_id"] == "c1"


def test_a_responses_client_never_sees_the_capability_item(serve) -> None:
    served = serve("responses", script=[capability("cap_1"), ReplySpec(text="ok then")])
    body = {"model": "gpt-5.5", "input": "hello", "tools": [BASH_RESPONSES]}
    _response, events = served.stream("/responses", body)
    output = final_response(events)["output"]
    assert [i["type"] for i in output] == ["message"]
    assert output[0]["content"][0]["text"] == "ok then"
    assert not [d for n, d in events if n == "response.output_item.added"
                and d["item"]["type"] == "function_call"]
    plain = served.post("/responses", {**body, "input": "hello again"})
    assert [i["type"] for i in plain.json()["output"]] == ["message"]


def test_rounds_are_bounded_and_the_capability_schema_never_changes(serve) -> None:
    served = serve(script=[capability(f"cap_{i}") for i in range(5)], max_rounds=2)
    response = served.post("/chat/completions", {
        "model": "m", "messages": [{"role": "user", "content": "loop"}], "tools": [BASH]})
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "stop" and "tool_calls" not in choice["message"]
    assert len(served.bodies) == 2
    # Nothing folded or bounded yet: the first round does not offer the tool; once the
    # model called it (a scripted call here), every round carries the same schema.
    assert json.loads(served.bodies[0])["tools"] == [BASH]
    tools = {json.dumps(json.loads(b)["tools"][-1]) for b in served.bodies[1:]}
    assert tools == {json.dumps({"type": "function", "function": {
        "name": USE_CAPABILITY, "description": ctxfold.USE_CAPABILITY_TOOL.description,
        "parameters": dict(ctxfold.USE_CAPABILITY_TOOL.parameters)}})}


def test_the_capability_is_offered_only_when_it_has_something_to_offer(serve) -> None:
    """``use_capability`` rode along with every request: "hello" cost 431 prompt tokens."""
    served = serve(script=[ReplySpec(text="hi"), ReplySpec(text="", tool_calls=(
        ctxfold.ToolCall(id="c1", name="bash", arguments='{"command": "cat big"}'),)),
        ReplySpec(text="read it")])
    hello = served.post("/chat/completions", {"model": "m", "messages": [
        {"role": "user", "content": "hello"}]})
    assert hello.status_code == 200
    assert "tools" not in json.loads(served.bodies[-1])
    history = [{"role": "user", "content": "read the big file"}]
    answer = served.post("/chat/completions", {"model": "m", "messages": history,
                                               "tools": [BASH]}).json()["choices"][0]["message"]
    assert [t["function"]["name"] for t in json.loads(served.bodies[-1])["tools"]] == ["bash"]
    history += [answer, {"role": "tool", "tool_call_id": "c1", "content": "x" * 40_000}]
    served.post("/chat/completions", {"model": "m", "messages": history, "tools": [BASH]})
    sent = json.loads(served.bodies[-1])
    assert [t["function"]["name"] for t in sent["tools"]] == ["bash", USE_CAPABILITY]
    assert "result_ref=" in sent["messages"][-1]["content"]  # a bounded result to page


def test_a_hostile_search_never_stalls_other_sessions_or_healthz(serve) -> None:
    # The model searches a 200 KB tool result with the pattern (Python's re
    # backtracked on it for minutes, holding the GIL) and with the slowest pattern found
    # for RE2 (it runs to the search deadline): meanwhile another session and /healthz
    # answer at once.
    import threading
    import time

    import httpx

    from ctxfold.capabilities.session_search import SEARCH_SECONDS

    def search(query: str) -> ctxfold.ToolCall:
        args = {"action": "call", "capability_id": "session:search",
                "arguments": {"query": query, "regex": True}}
        return ctxfold.ToolCall(id=f"cap_{len(query)}", name=USE_CAPABILITY,
                                arguments=json.dumps(args))

    hostile = ReplySpec(text="", tool_calls=(search("a{0,2000}a{0,2000}b"),
                                             search("(?:a{1,10}){1,90}c")))
    served = serve(script=[hostile, ReplySpec(text="quick one"), ReplySpec(text="searched")])
    history = [{"role": "user", "content": "read the log"},
               {"role": "assistant", "content": None, "tool_calls": [{
                   "id": "c1", "type": "function",
                   "function": {"name": "bash", "arguments": "{\"command\": \"cat log\"}"}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "a" * 200_000}]
    out: dict[str, Any] = {}

    def alpha() -> None:
        started = time.monotonic()
        out["alpha"] = served.post("/chat/completions", {"model": "m", "messages": history,
                                                          "tools": [BASH]},
                                   **{"X-Ctxfold-Session": "alpha"})
        out["alpha_seconds"] = time.monotonic() - started

    thread = threading.Thread(target=alpha)
    thread.start()
    deadline = time.monotonic() + 20
    while not served.emu.requests:
        assert time.monotonic() < deadline, "alpha never reached the upstream"
        time.sleep(0.005)
    time.sleep(0.3)  # alpha's answer arrived: its search runs now
    started = time.monotonic()
    health = httpx.get(served.server.base_url + "/healthz", timeout=10)
    health_seconds = time.monotonic() - started
    beta = served.post("/chat/completions", {"model": "m", "messages": [
        {"role": "user", "content": "be quick"}]}, **{"X-Ctxfold-Session": "beta"})
    beta_seconds = time.monotonic() - started
    searching = thread.is_alive()
    thread.join(30)
    assert health.status_code == 200 and health_seconds < 0.5, health_seconds
    assert beta.json()["choices"][0]["message"]["content"] == "quick one"
    assert beta_seconds < 1.0, beta_seconds
    assert searching  # beta and /healthz were answered while alpha's search ran
    assert out["alpha"].json()["choices"][0]["message"]["content"] == "searched"
    assert out["alpha_seconds"] < SEARCH_SECONDS + 5
    # The model got a clear error for the first pattern and a (cut) answer for the second.
    answers = [m.content for m in served.canonical("alpha") if m.name == USE_CAPABILITY]
    assert answers[0].startswith("error: invalid regex") and "repetition size" in answers[0]
    assert json.loads(answers[1])["partial"] == ["#2"]  # too slow to finish: named, skipped


@pytest.mark.parametrize("stream", [False, True])
def test_the_model_folds_at_a_task_boundary_through_the_proxy(serve, stream: bool) -> None:
    # Task 1 is done (an answer without tool calls) and the user starts task 2: the model
    # asks for its budget, then folds; the proxy answers both itself, the fold's summary by
    # the upstream model, and the client sees only the model's reply.
    served = serve(script=[
        capability("cap_1", action="call", capability_id="session:budget"),
        capability("cap_2", action="call", capability_id="session:fold",
                   arguments={"reason": "task 1 done", "keep": "the parser fix"}),
        ReplySpec(text="Starting task 2."), ReplySpec(text="ok")], window=16_000,
        max_rounds=4)
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                     {"role": "user", "content": "Task 1: fix the parser."}]
    for k in range(8):
        history += [{"role": "assistant", "content": None, "tool_calls": [{
            "id": f"c{k}", "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": f"step {k}"})}}]},
            {"role": "tool", "tool_call_id": f"c{k}", "content": log_text(4000, f"c{k}")}]
    history += [{"role": "assistant", "content": "Task 1 done: the parser is fixed."},
                {"role": "user", "content": "Task 2: add a test for the lexer."}]
    body = {"model": "m", "messages": history, "tools": [BASH]}
    if stream:
        response, events = served.stream("/chat/completions", body)
        message = assemble(events)
    else:
        response = served.post("/chat/completions", body)
        message = response.json()["choices"][0]["message"]
    assert message == {"role": "assistant", "content": "Starting task 2."}
    rounds = [json.loads(b)["messages"] for b in served.bodies]
    assert len(rounds) == 3
    budget = json.loads(rounds[1][-1]["content"])
    # Above half the trigger, below it: no automatic fold yet, a manual one is accepted.
    assert budget["fold_min_tokens"] <= budget["prompt_tokens"] < budget["trigger_tokens"]
    assert budget["checkpoints"] == 0
    assert not any("<compaction-summary>" in json.dumps(m) for m in rounds[1])
    folded = json.loads(rounds[2][-1]["content"])
    assert folded["folded"] is True and folded["checkpoints"] == 1
    assert folded["tokens_after"] < folded["tokens_before"] / 2
    # The summary request went upstream, with the model's note as its focus.
    summaries = [r.body for r in served.emu.requests
                 if "[ctxfold:summary-request]" in json.dumps(r.body["messages"][-1])]
    assert len(summaries) == 1 and "the parser fix" in json.dumps(summaries[0])
    # The third round carries the checkpoint, then verbatim: task 2, both capability
    # exchanges (the fold's own call and answer included).
    third = rounds[2]
    assert "<compaction-summary>" in json.dumps(third)
    tail = third[-5:]
    assert tail[0] == {"role": "user", "content": "Task 2: add a test for the lexer."}
    assert [m.get("tool_call_id") or m["tool_calls"][0]["id"] for m in tail[1:]] == [
        "cap_1", "cap_1", "cap_2", "cap_2"]
    # The transcript holds everything; the client's next turn continues the same session.
    session = response.headers["x-ctxfold-session"]
    canonical = served.canonical(session)
    assert len(canonical) == len(history) + 5 and canonical[-1].content == "Starting task 2."
    history += [message, {"role": "user", "content": "thanks"}]
    again = served.post("/chat/completions", {**body, "messages": history})
    assert again.headers["x-ctxfold-session"] == session
    assert json.loads(served.bodies[-1])["messages"][:len(third)] == third  # byte-stable
