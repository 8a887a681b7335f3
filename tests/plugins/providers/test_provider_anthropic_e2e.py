"""``[provider] name = "anthropic"`` from a ctxfold.toml, ``cm.complete()`` against a loopback
HTTP server that answers recorded Anthropic stream bodies: the key header, the reply's
thinking signature sent back exactly, tool results, usage with cache reads."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

import ctxfold

KEY = "sk-ant-test-0123456789abcdef"


def event(kind: str, **fields: Any) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n"


def recorded_reply(blocks: list[dict[str, Any]], stop: str, usage: dict[str, int]) -> bytes:
    """A recorded stream: every block in one delta (the deltas' splitting is tested with
    the provider)."""
    out = [event("message_start", message={
        "id": "msg_x", "type": "message", "role": "assistant", "content": [],
        "model": "claude-sonnet-4-6", "stop_reason": None, "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1}}), event("ping")]
    for i, block in enumerate(blocks):
        kind = block["type"]
        start = {"text": {"type": "text", "text": ""},
                 "thinking": {"type": "thinking", "thinking": ""},
                 "tool_use": {**block, "input": {}}}[kind]
        out.append(event("content_block_start", index=i, content_block=start))
        if kind == "text":
            out.append(event("content_block_delta", index=i,
                             delta={"type": "text_delta", "text": block["text"]}))
        elif kind == "thinking":
            out.append(event("content_block_delta", index=i,
                             delta={"type": "thinking_delta", "thinking": block["thinking"]}))
            out.append(event("content_block_delta", index=i,
                             delta={"type": "signature_delta",
                                    "signature": block["signature"]}))
        else:
            out.append(event("content_block_delta", index=i,
                             delta={"type": "input_json_delta",
                                    "partial_json": json.dumps(block["input"])}))
        out.append(event("content_block_stop", index=i))
    out.append(event("message_delta", delta={"stop_reason": stop, "stop_sequence": None},
                     usage={"output_tokens": 20}))
    out.append(event("message_stop"))
    return "".join(out).encode()


THINK = {"type": "thinking", "thinking": "List first.", "signature": "RXFRQkNnSVlBaElN"}
CALL = {"type": "tool_use", "id": "toolu_01", "name": "ls", "input": {"dir": "."}}
REPLIES = [
    recorded_reply([THINK, {"type": "text", "text": "Listing."}, CALL], "tool_use",
                   {"input_tokens": 30, "cache_creation_input_tokens": 2000,
                    "cache_read_input_tokens": 0}),
    recorded_reply([{"type": "text", "text": "Two files: a.py, b.py."}], "end_turn",
                   {"input_tokens": 25, "cache_creation_input_tokens": 60,
                    "cache_read_input_tokens": 2000}),
]


class Recorded(BaseHTTPRequestHandler):
    """Answers each POST /v1/messages with the next recorded reply; keeps what it got."""

    seen: ClassVar[list[tuple[str, dict[str, str], dict[str, Any]]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        reply = REPLIES[min(len(self.seen), len(REPLIES)) - 1]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("request-id", f"req_{len(self.seen)}")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    Recorded.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recorded)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_cm_complete_with_anthropic_selected_in_toml(
        server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CTXFOLD_CONFIG_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    (tmp_path / "ctxfold.toml").write_text(
        f'[provider]\nname = "anthropic"\nbase_url = "{server}"\n'
        '[store]\npath = "sessions"\n[summarizer]\nname = "extractive"\n')
    cm = ctxfold.open_session("e2e")
    cm.append({"role": "system", "content": "You list files."},
              {"role": "user", "content": "What is here?"})
    with ctxfold.create_provider() as provider:
        assert provider.name == "anthropic" and provider.model == "claude-sonnet-4-6"
        first = cm.complete(provider)
        assert first.finish_reason == "tool_calls"
        assert first.message.tool_calls[0].arguments == '{"dir":"."}'
        assert first.usage.cache_write_tokens == 2000
        cm.append({"role": "tool", "tool_call_id": "toolu_01", "content": "a.py\nb.py"})
        second = cm.complete(provider)
    assert second.message.content == "Two files: a.py, b.py."
    assert (second.usage.prompt_tokens, second.usage.cache_hit_tokens) == (2085, 2000)

    (path1, headers, body1), (_p, _h, body2) = Recorded.seen
    assert path1 == "/v1/messages"
    assert headers["x-api-key"] == KEY and headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in headers
    assert body1["system"] == [{"type": "text", "text": "You list files."}]
    assert body1["messages"] == [{"role": "user", "content": "What is here?"}]
    assert body1["max_tokens"] > 0
    # the assistant turn goes back exactly as it came (signature included), then the result
    assert body2["messages"][1] == {"role": "assistant", "content": [
        THINK, {"type": "text", "text": "Listing."}, CALL]}
    assert body2["messages"][2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": "a.py\nb.py"}]}
    # the stored transcript keeps the reply's blocks: a reopened session sends the same
    again = ctxfold.open_session("e2e").prepare().messages
    assert [m.anthropic_blocks for m in again] == [m.anthropic_blocks for m in
                                                   cm.prepare().messages]
    assert any("RXFRQkNnSVlBaElN" in b for m in again for b in m.anthropic_blocks)
