"""The Responses API through ``ctxfold serve``, and each client format against the other
upstream format."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.serve.conftest import BASH, BASH_RESPONSES, Served, log_text
from tests.serve.test_serve_chat import SYSTEM, TASKS, assert_byte_stable, chat_loop, script

from ctxfold import Message, ReplySpec, SseEvent, Usage
from ctxfold.interop.coerce import to_messages
from ctxfold.serve.deltas import Item, ResponsesDeltas
from ctxfold.serve.render_responses import ResponsesRenderer
from ctxfold.serve.sessions import reconcile


def final_response(events: list[tuple[str, Any]]) -> dict[str, Any]:
    done = [d for name, d in events if name in ("response.completed", "response.incomplete")]
    assert len(done) == 1, [name for name, _ in events]
    return done[0]["response"]


def responses_loop(served: Served, *, stream: bool, model: str = "gpt-5.5",
                   tool_size: int = 3000) -> tuple[list[dict[str, Any]], list[Any]]:
    """A Responses agent: ``instructions`` + the whole ``input`` resent, store=false."""
    items: list[dict[str, Any]] = []
    responses: list[Any] = []
    for task in TASKS:
        items.append({"role": "user", "content": task})
        while True:
            body = {"model": model, "instructions": SYSTEM, "input": items,
                    "tools": [BASH_RESPONSES], "store": False}
            if stream:
                response, events = served.stream("/responses", body)
                assert response.status_code == 200, events
                final = final_response(events)
                numbers = [d["sequence_number"] for _n, d in events]
                assert numbers == list(range(len(numbers)))
                deltas = "".join(d["delta"] for n, d in events
                                 if n == "response.output_text.delta")
                texts = [p["text"] for i in final["output"] if i["type"] == "message"
                         for p in i["content"]]
                assert deltas == "".join(texts)
            else:
                response = served.post("/responses", body)
                assert response.status_code == 200, response.text
                final = response.json()
            responses.append(response)
            assert final["object"] == "response" and final["usage"]["input_tokens"] > 0
            items.extend(final["output"])
            calls = [i for i in final["output"] if i["type"] == "function_call"]
            if not calls:
                break
            for c in calls:
                items.append({"type": "function_call_output", "call_id": c["call_id"],
                              "output": log_text(tool_size, c["call_id"])})
    return items, responses


@pytest.mark.parametrize("stream", [False, True])
def test_a_responses_tool_loop_installs_a_checkpoint_with_byte_stable_inputs(
        serve, stream: bool) -> None:
    served = serve("responses", script=script(), window=6000)
    items, responses = responses_loop(served, stream=stream)
    actions = [r.headers["x-ctxfold-action"] for r in responses]
    assert "summary" in actions
    assert len({r.headers["x-ctxfold-session"] for r in responses}) == 1
    assert assert_byte_stable(served.bodies, actions, field="input") >= 5
    keys = {json.loads(b)["prompt_cache_key"] for b in served.bodies}
    assert len(keys) == 1 and keys.pop().endswith("|gpt-5.5")  # one cache key per session
    first = json.loads(served.bodies[0])
    assert first["input"][0] == {"type": "message", "role": "system", "content": SYSTEM}
    assert "instructions" not in first and first["store"] is False
    assert [t["name"] for t in first["tools"]] == ["bash"]  # nothing to page yet
    session = responses[-1].headers["x-ctxfold-session"]
    history = [Message(role="system", content=SYSTEM), *to_messages(items)]
    plan = reconcile(served.canonical(session), history)
    assert plan.extends and plan.matched == len(history)  # every item the client holds is kept


def test_a_chat_client_can_use_a_responses_upstream(serve) -> None:
    served = serve("responses", script=script(per_task=2))
    _messages, answers = chat_loop(served, stream=True)
    assert all(r.headers["x-ctxfold-session"] == answers[0][0].headers["x-ctxfold-session"]
               for r, _e in answers)
    body = json.loads(served.bodies[-1])
    assert "input" in body and "messages" not in body
    assert body["tools"][0] == {"type": "function", **BASH["function"]}
    assert "temperature" in body and "stream_options" not in body


def test_a_responses_client_can_use_a_chat_upstream(serve) -> None:
    served = serve("deepseek", script=script(per_task=2))
    body_fields = {"max_output_tokens": 900, "reasoning": {"effort": "high"}}
    items = [{"role": "user", "content": "go"}]
    response = served.post("/responses", {"model": "deepseek-flash", "input": items,
                                          "tools": [BASH_RESPONSES], **body_fields})
    assert response.status_code == 200, response.text
    output = response.json()["output"]
    assert [i["type"] for i in output] == ["function_call"]
    sent = json.loads(served.bodies[-1])
    assert sent["messages"] == [{"role": "user", "content": "go"}]
    assert sent["max_tokens"] == 900 and sent["reasoning_effort"] == "high"
    assert "max_output_tokens" not in sent and "reasoning" not in sent
    items += [*output, {"type": "function_call_output", "call_id": output[0]["call_id"],
                        "output": "ok"}]
    response, events = served.stream("/responses", {"model": "deepseek-flash", "input": items,
                                                    "tools": [BASH_RESPONSES]})
    assert final_response(events)["output"][0]["type"] == "function_call"
    assert json.loads(served.bodies[-1])["messages"][-1] == {
        "role": "tool", "content": "ok", "tool_call_id": output[0]["call_id"]}


CODEX_TOOLS = [
    BASH_RESPONSES,
    {"type": "namespace", "name": "multi_agent_v1", "tools": [
        {"type": "function", "name": "spawn", "parameters": {"type": "object"}}]},
    {"type": "web_search", "external_web_access": False},
    {"type": "custom", "name": "apply_patch", "description": "Apply a patch.",
     "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}},
]


def test_tools_of_every_type_pass_to_a_responses_upstream_untouched(serve) -> None:
    """Codex's namespace, web_search and custom tools were refused with 400."""
    served = serve("responses", script=[ReplySpec(text="ok")])
    body = {"model": "gpt-5.5", "input": "hello", "tools": CODEX_TOOLS, "store": False}
    response = served.post("/responses", body)
    assert response.status_code == 200, response.text
    assert json.loads(served.bodies[-1])["tools"] == CODEX_TOOLS
    assert "x-ctxfold-dropped-tools" not in response.headers


def test_a_chat_upstream_gets_the_function_tools_and_the_rest_is_named(serve) -> None:
    served = serve(script=[ReplySpec(text="ok")])
    body = {"model": "deepseek-flash", "input": "hello", "tools": CODEX_TOOLS,
            "tool_choice": "auto", "store": False}
    response = served.post("/responses", body)
    assert response.status_code == 200, response.text
    sent = json.loads(served.bodies[-1])
    assert [t["function"]["name"] for t in sent["tools"]] == ["bash"]
    assert response.headers["x-ctxfold-dropped-tools"] == (
        "namespace:multi_agent_v1, web_search, custom:apply_patch")
    only_others = served.post("/responses", {**body, "input": "again",
                                             "tools": CODEX_TOOLS[1:]})
    assert only_others.status_code == 200, only_others.text
    sent = json.loads(served.bodies[-1])
    assert "tools" not in sent and "tool_choice" not in sent  # no choice among no tools


def test_an_output_item_the_proxy_does_not_model_reaches_the_client_whole() -> None:
    item = {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_p",
            "name": "apply_patch", "input": "*** Begin Patch\n*** End Patch\n",
            "status": "completed"}
    parser = ResponsesDeltas()
    deltas = parser.feed(SseEvent(event="response.output_item.done", data=json.dumps(
        {"type": "response.output_item.done", "output_index": 0, "item": item})))
    assert deltas == [Item(0, item)]
    renderer = ResponsesRenderer(response_id="r", model="m", created=0)
    events = renderer.feed(deltas[0])
    names = [e.split("\n", 1)[0] for e in events]
    assert names == ["event: response.output_item.added", "event: response.output_item.done"]
    assert renderer.body("stop", Usage())["output"] == [item]
