"""What an Anthropic client gets back through the proxy is what the upstream said: several
text blocks with their citations (web search, document citations), the stop sequence that
ended the answer, an in-stream ``overloaded_error``, the order of a tool call's events when a
chat upstream interleaves two calls' argument fragments, and where in the client's request a
block a chat upstream cannot take was found.

Upstreams the emulator cannot imitate are small loopback stand-ins (127.0.0.1 only)."""

from __future__ import annotations

import http.server
import json
import socketserver
import threading
from typing import Any

import anthropic
import httpx
import pytest
from tests.serve.conftest import Served
from tests.serve.test_serve_anthropic import client_of
from tests.serve.test_serve_render_anthropic import read_with_the_sdk

from ctxfold import Fault, ReplySpec, SseEvent, Usage
from ctxfold.interop.anthropic import from_anthropic
from ctxfold.serve.deltas import (
    AnthropicDeltas,
    CallArgs,
    CallStart,
    ResponsesDeltas,
    message_deltas,
)
from ctxfold.serve.render_anthropic import AnthropicRenderer

MODEL = "claude-sonnet-4-6"
CITATION = {"type": "web_search_result_location", "url": "https://example.com/a",
            "title": "A", "encrypted_index": "Eo8BCioIAhgB", "cited_text": "the claim"}
#: An answer as web search makes it: text blocks, the middle one cited
#: (https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/web-search-tool).
CITED = [{"type": "text", "text": "Intro. "},
         {"type": "text", "text": "Cited claim.", "citations": [CITATION]},
         {"type": "text", "text": " End."}]


class _Profile:
    def __init__(self, name: str) -> None:
        self.name = name


class StandIn:
    """A loopback upstream answering every POST from a list of replies: ``(events, body)``
    — SSE events ``[(name or "", data)]`` for a streaming request, the JSON body otherwise.
    ``profile`` names the provider the proxy is configured for."""

    def __init__(self, profile: str, replies: list[tuple[list[tuple[str, Any]], Any]]) -> None:
        self.profile = _Profile(profile)
        self.replies = list(replies)
        self.bodies: list[dict[str, Any]] = []
        self.base_url = ""
        self._server: socketserver.TCPServer | None = None

    def start(self) -> None:
        stand_in = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:
                return

            def do_POST(self) -> None:
                size = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(size))
                stand_in.bodies.append(body)
                events, whole = stand_in.replies.pop(0)
                self.send_response(200)
                if body.get("stream"):
                    self.send_header("content-type", "text/event-stream")
                    self.end_headers()
                    for name, data in events:
                        head = f"event: {name}\n" if name else ""
                        text = data if isinstance(data, str) else json.dumps(data)
                        self.wfile.write(f"{head}data: {text}\n\n".encode())
                    return
                raw = json.dumps(whole).encode()
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def anthropic_reply(content: list[dict[str, Any]], stop_reason: str = "end_turn",
                    stop_sequence: str | None = None) -> tuple[list[tuple[str, Any]], Any]:
    """An Anthropic answer of ``content``: its event stream (a citation as a
    ``citations_delta``, https://docs.anthropic.com/en/docs/build-with-claude/citations)
    and its ``message`` object."""
    usage = {"input_tokens": 10, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0, "output_tokens": 7}
    message = {"id": "msg_up", "type": "message", "role": "assistant", "model": MODEL,
               "content": content, "stop_reason": stop_reason,
               "stop_sequence": stop_sequence, "usage": usage}
    events: list[tuple[str, Any]] = [("message_start", {
        "type": "message_start",
        "message": {**message, "content": [], "stop_reason": None, "stop_sequence": None}})]
    for index, block in enumerate(content):
        assert block["type"] == "text"
        events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                               "content_block": {"type": "text", "text": ""}}))
        events.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                               "delta": {"type": "text_delta",
                                                         "text": block["text"]}}))
        events += [("content_block_delta", {"type": "content_block_delta", "index": index,
                                            "delta": {"type": "citations_delta",
                                                      "citation": c}})
                   for c in block.get("citations", ())]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events += [("message_delta", {"type": "message_delta",
                                  "delta": {"stop_reason": stop_reason,
                                            "stop_sequence": stop_sequence},
                                  "usage": {"output_tokens": 7}}),
               ("message_stop", {"type": "message_stop"})]
    return events, message


def blocks_of(message: Any) -> list[dict[str, Any]]:
    return [b.model_dump(exclude_none=True) for b in message.content]


# -- finding 1: text blocks and citations -------------------------------------------------

def test_cited_text_blocks_stream_to_the_sdk_as_they_were_sent() -> None:
    events, _ = anthropic_reply(CITED)
    parser = AnthropicDeltas()
    renderer = AnthropicRenderer(message_id="msg_1", model=MODEL)
    chunks = renderer.start()
    for name, data in events:
        for delta in parser.feed(SseEvent(event=name, data=json.dumps(data))):
            chunks += renderer.feed(delta)
    chunks += renderer.finish("stop", Usage())
    assert blocks_of(read_with_the_sdk(chunks)) == CITED


def test_cited_text_blocks_of_a_whole_answer_stay_apart() -> None:
    [message] = from_anthropic(None, [{"role": "assistant", "content": CITED}])
    renderer = AnthropicRenderer(message_id="msg_1", model=MODEL)
    for delta in message_deltas(message):
        renderer.feed(delta)
    assert renderer.body("stop", Usage())["content"] == CITED


@pytest.mark.parametrize("stream", [False, True])
def test_a_cited_answer_comes_back_whole_and_the_session_goes_on(serve, stream: bool) -> None:
    upstream = StandIn("anthropic", [anthropic_reply(CITED), anthropic_reply(CITED),
                                     anthropic_reply([{"type": "text", "text": "ok"}])])
    served: Served = serve(emulator=upstream)
    client = client_of(served)
    history: list[dict[str, Any]] = [{"role": "user", "content": "what is new?"}]
    sessions = []
    for turn in ("tell me more", "again"):
        if stream:
            with client.messages.stream(model=MODEL, max_tokens=100,
                                        messages=history) as answer:
                message = answer.get_final_message()
                sessions.append(answer.response.headers["x-ctxfold-session"])
        else:
            raw = client.messages.with_raw_response.create(model=MODEL, max_tokens=100,
                                                           messages=history)
            message = raw.parse()
            sessions.append(raw.headers["x-ctxfold-session"])
        assert blocks_of(message) == CITED
        history += [{"role": "assistant", "content": blocks_of(message)},
                    {"role": "user", "content": turn}]
    raw = client.messages.with_raw_response.create(model=MODEL, max_tokens=100,
                                                   messages=history)
    sessions.append(raw.headers["x-ctxfold-session"])
    assert len(set(sessions)) == 1, sessions  # no fork: the client's history is the stored one
    sent = [m for m in upstream.bodies[-1]["messages"] if m["role"] == "assistant"]
    assert [[{k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]]
            for m in sent] == [CITED, CITED]


# -- finding 4: the stop sequence ---------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
def test_the_stop_sequence_that_ended_the_answer_reaches_the_client(serve,
                                                                     stream: bool) -> None:
    text = [{"type": "text", "text": "counting 1 2 3"}]
    upstream = StandIn("anthropic", [anthropic_reply(text, "stop_sequence", "STOP")])
    client = client_of(serve(emulator=upstream))
    request = {"model": MODEL, "max_tokens": 100, "stop_sequences": ["STOP"],
               "messages": [{"role": "user", "content": "count"}]}
    if stream:
        with client.messages.stream(**request) as answer:
            message = answer.get_final_message()
    else:
        message = client.messages.create(**request)
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "STOP")


def test_an_openai_client_is_told_stop_for_a_stop_sequence(serve) -> None:
    served = serve("anthropic", script=[ReplySpec(text="done", finish_reason="stop_sequence")])
    answer = served.post("/chat/completions", {"model": MODEL, "stop": ["STOP"],
                                               "messages": [{"role": "user", "content": "x"}]})
    assert answer.json()["choices"][0]["finish_reason"] == "stop"


# -- finding 5: an in-stream overloaded_error ---------------------------------------------

def test_an_in_stream_overloaded_error_reaches_the_anthropic_client_as_it_is(serve) -> None:
    served = serve("anthropic", script=[ReplySpec(text="done")] * 2,
                   faults=[Fault("error_body", at=0, after_events=2)])
    client = client_of(served)
    with pytest.raises(anthropic.APIStatusError) as failed, \
            client.messages.stream(model=MODEL, max_tokens=100,
                                   messages=[{"role": "user", "content": "hi"}]) as answer:
        answer.get_final_message()
    assert failed.value.body["error"]["type"] == "overloaded_error"


# -- finding 6: interleaved tool-call fragments of a chat upstream ------------------------

def test_each_tool_use_blocks_input_comes_before_its_stop() -> None:
    renderer = AnthropicRenderer(message_id="msg_1", model=MODEL)
    chunks = renderer.start()
    for delta in (CallStart(0, "call_a", "bash"), CallStart(1, "call_b", "bash"),
                  CallArgs(0, '{"command":'), CallArgs(1, '{"command": "pwd"}'),
                  CallArgs(0, ' "ls"}')):
        chunks += renderer.feed(delta)
    chunks += renderer.finish("tool_calls", Usage())
    events = [json.loads(c.splitlines()[1][6:]) for c in chunks]
    stopped: set[int] = set()
    for event in events:
        if event["type"] == "content_block_stop":
            stopped.add(event["index"])
        elif event["type"] == "content_block_delta":
            assert event["index"] not in stopped, events
    message = read_with_the_sdk(chunks)
    assert [(b.id, b.input) for b in message.content] == [("call_a", {"command": "ls"}),
                                                        ("call_b", {"command": "pwd"})]


def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[str, Any]:
    """One Chat Completions stream chunk."""
    return "", {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                **({"usage": {"prompt_tokens": 10, "completion_tokens": 5,
                              "total_tokens": 15}} if finish else {})}


def test_a_chat_upstreams_interleaved_calls_stream_to_the_sdk_in_order(serve) -> None:
    def call(index: int, arguments: str, **start: str) -> dict[str, Any]:
        return {"tool_calls": [{"index": index, **({"id": start["id"], "type": "function"}
                                                   if start else {}),
                                "function": {**({"name": "bash"} if start else {}),
                                             "arguments": arguments}}]}

    events = [chunk({"role": "assistant", **call(0, "", id="call_a")}),
              chunk(call(1, "", id="call_b")), chunk(call(0, '{"command":')),
              chunk(call(1, '{"command": "pwd"}')), chunk(call(0, ' "ls"}')),
              chunk({}, "tool_calls"), ("", "[DONE]")]
    client = client_of(serve(emulator=StandIn("deepseek", [(events, None)])))
    stops = []
    with client.messages.stream(model=MODEL, max_tokens=100,
                                messages=[{"role": "user", "content": "look"}],
                                tools=[{"name": "bash",
                                        "input_schema": {"type": "object"}}]) as answer:
        for event in answer:
            if event.type == "content_block_stop":
                stops.append(event.content_block.model_dump(exclude_none=True))
    assert stops == [
        {"type": "tool_use", "id": "call_a", "name": "bash", "input": {"command": "ls"}},
        {"type": "tool_use", "id": "call_b", "name": "bash", "input": {"command": "pwd"}}]


# -- finding 8: where a refused block was -------------------------------------------------

DOCUMENT = {"type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "hello"}}


@pytest.mark.parametrize(("messages", "where"), [
    ([{"role": "user", "content": "x"},
      {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash",
                                         "input": {}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                    "content": [DOCUMENT]}]}], "messages[2]"),
    ([{"role": "user", "content": "z"},
      {"role": "assistant", "content": [{"type": "server_tool_use", "id": "srvtoolu_1",
                                         "name": "web_search", "input": {"query": "q"}},
                                        {"type": "text", "text": "ans"}]},
      {"role": "user", "content": "ok"}], "messages[1]"),
])
def test_a_refusal_toward_a_chat_upstream_names_the_clients_message(
        serve, messages: list[dict[str, Any]], where: str) -> None:
    served = serve("deepseek", script=[ReplySpec(text="ok")])
    answer = served.post("/messages", {"model": MODEL, "max_tokens": 100,
                                       "messages": messages,
                                       "tools": [{"name": "bash",
                                                  "input_schema": {"type": "object"}}]},
                         **{"x-api-key": "k"})
    assert answer.status_code == 400, answer.text
    said = answer.json()["error"]["message"]
    assert where in said and "messages[0]" not in said, said


def test_an_anthropic_upstreams_calls_stream_as_they_arrive() -> None:
    # Anthropic says when a tool_use block is complete (content_block_stop): the next call
    # streams at once, not held until the round ends.
    parser = AnthropicDeltas()
    renderer = AnthropicRenderer(message_id="msg_1", model=MODEL)
    said: list[list[str]] = []
    for index, call_id in enumerate(("toolu_a", "toolu_b")):
        for name, data in (
                ("content_block_start", {"type": "content_block_start", "index": index,
                                         "content_block": {"type": "tool_use", "id": call_id,
                                                           "name": "bash", "input": {}}}),
                ("content_block_delta", {"type": "content_block_delta", "index": index,
                                         "delta": {"type": "input_json_delta",
                                                   "partial_json": '{"command": "ls"}'}}),
                ("content_block_stop", {"type": "content_block_stop", "index": index})):
            said.append([c for d in parser.feed(SseEvent(event=name, data=json.dumps(data)))
                         for c in renderer.feed(d)])
    kinds = [[json.loads(c.splitlines()[1][6:])["type"] for c in chunks] for chunks in said]
    assert kinds == [["content_block_start"], ["content_block_delta"], ["content_block_stop"],
                     ["content_block_start"], ["content_block_delta"], ["content_block_stop"]]


# -- the refusal of a message the session cannot take names the session once -------------

def test_a_refused_append_names_the_session_once(serve) -> None:
    served = serve("anthropic", script=[ReplySpec(text="ok")])
    answer = served.post("/messages", {
        "model": MODEL, "max_tokens": 10,
        "messages": [{"role": "user", "content": "x"},
                     {"role": "user", "content": [{"type": "tool_result",
                                                   "tool_use_id": "toolu_none",
                                                   "content": "r"}]}]},
        **{"x-api-key": "k"})
    assert answer.status_code == 400
    said = answer.json()["error"]["message"]
    assert said.count(f"session {answer.headers['x-ctxfold-session']!r}") == 1, said


# -- a path or method the proxy does not serve, in the client's shape ----------------------

@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/v1/messages", 405), ("POST", "/v1/messages/batches", 404)])
def test_an_unserved_messages_path_is_refused_in_anthropics_shape(
        serve, method: str, path: str, status: int) -> None:
    served = serve("anthropic", script=[])
    answer = httpx.request(method, served.server.base_url + path, json={},
                           headers={"x-api-key": "k"}, timeout=30)
    assert answer.status_code == status
    assert answer.json()["type"] == "error"
    assert answer.json()["error"]["type"] == ("not_found_error" if status == 404
                                              else "invalid_request_error")


def test_an_unserved_openai_path_is_refused_in_openais_shape(serve) -> None:
    served = serve("deepseek", script=[])
    answer = httpx.get(served.server.base_url + "/v1/embeddings", timeout=30)
    assert answer.status_code == 404
    assert answer.json()["error"]["type"] == "invalid_request_error"  # as OpenAI's API says
    assert "/v1/embeddings" in answer.json()["error"]["message"]


def test_a_responses_upstreams_calls_stream_as_they_arrive() -> None:
    # A Responses upstream says when a call is complete (output_item.done): the next call
    # streams at once to an Anthropic client, not held until the round ends.
    parser = ResponsesDeltas()
    renderer = AnthropicRenderer(message_id="msg_1", model=MODEL)
    said: list[list[str]] = []
    for index, call_id in enumerate(("call_a", "call_b")):
        item = {"type": "function_call", "id": f"fc_{index}", "call_id": call_id,
                "name": "bash", "arguments": ""}
        for data in ({"type": "response.output_item.added", "output_index": index,
                      "item": item},
                     {"type": "response.function_call_arguments.delta", "output_index": index,
                      "item_id": item["id"], "delta": '{"command": "ls"}'},
                     {"type": "response.output_item.done", "output_index": index,
                      "item": {**item, "arguments": '{"command": "ls"}'}}):
            said.append([c for d in parser.feed(SseEvent(event=data["type"],
                                                         data=json.dumps(data)))
                         for c in renderer.feed(d)])
    kinds = [[json.loads(c.splitlines()[1][6:])["type"] for c in chunks] for chunks in said]
    assert kinds == [["content_block_start"], ["content_block_delta"], ["content_block_stop"],
                     ["content_block_start"], ["content_block_delta"], ["content_block_stop"]]
