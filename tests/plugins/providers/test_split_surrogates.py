"""Invalid text from a provider is repaired where the stream is assembled: an escaped
surrogate pair split across two chunks becomes its character, a lone half becomes U+FFFD —
never a message that cannot be stored, fingerprinted or sent (issue: a lone surrogate broke
every later read of the session)."""

from __future__ import annotations

from providers_support import Recorder, sse_response

from ctxfold import ChatRequest, Message

ASK = (Message(role="user", content="smile"),)


def chat_chunk(delta: dict, finish: str | None = None) -> dict:
    return {"id": "c1", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def test_a_chat_stream_joins_a_surrogate_pair_split_across_chunks(make_provider) -> None:
    # json.dumps writes "\ud83d" and "\ude00": two frames, each holding one half.
    events = [chat_chunk({"content": "ok \ud83d"}), chat_chunk({"content": "\ude00 done"}),
              chat_chunk({"content": " lone \udc00"}, "stop")]
    provider = make_provider("deepseek", Recorder(sse_response(events)))
    message = provider.complete(ChatRequest(messages=ASK)).message
    assert message.content == "ok \U0001f600 done lone \ufffd"
    message.content.encode("utf-8")  # storable and sendable


def test_a_responses_stream_joins_a_surrogate_pair_split_across_deltas(make_provider) -> None:
    def ev(kind: str, **fields: object) -> tuple[str, dict]:
        return kind, {"type": kind, **fields}

    events = [
        ev("response.output_item.added", output_index=0,
           item={"type": "message", "id": "m1", "role": "assistant", "content": []}),
        ev("response.output_text.delta", item_id="m1", output_index=0, delta="a\ud83d"),
        ev("response.output_text.delta", item_id="m1", output_index=0, delta="\ude00b"),
        ev("response.completed", response={"id": "r1", "status": "completed", "output": []}),
    ]
    provider = make_provider("responses", Recorder(sse_response(events, done=False)))
    assert provider.complete(ChatRequest(messages=ASK)).message.content == "a\U0001f600b"


def test_a_non_streaming_answer_with_a_lone_half_is_repaired(make_provider) -> None:
    import json

    import httpx

    body = {"id": "c2", "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": "x\ud800y"}}]}
    raw = json.dumps(body).encode()  # ASCII: the lone half is an escape, as on the wire
    provider = make_provider("deepseek", Recorder(httpx.Response(
        200, content=raw, headers={"content-type": "application/json"})))
    assert provider.complete(ChatRequest(messages=ASK, stream=False)).message.content == \
        "x\ufffdy"
