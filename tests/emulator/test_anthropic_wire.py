"""The ``anthropic`` profile driven by the official ``anthropic`` SDK: replies and streams
parse, a tool loop runs, cache usage follows the breakpoints, errors and faults map to the
SDK's exception classes."""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import anthropic
import httpx
import pytest

from ctxfold import Emulator, Fault, ReplySpec, ToolCall
from ctxfold.cli.emulate_cmd import run

MODEL = "claude-sonnet-4-6"
EPHEMERAL: dict[str, Any] = {"type": "ephemeral"}
HOUR: dict[str, Any] = {"type": "ephemeral", "ttl": "1h"}
BASH = {"name": "bash", "description": "Run a shell command.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                         "required": ["command"]}}
#: 1,500 characters: above the 1,024-token minimum with one token per character.
LONG_SYSTEM = "You are a careful assistant. " * 52
#: The header every Anthropic client sends (the SDK's default version).
VERSION = {"anthropic-version": "2023-06-01"}


def client_for(emu: Emulator) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=emu.base_url, api_key="test-key", max_retries=0)


@pytest.fixture
def emu(chars, clock) -> Iterator[Emulator]:
    with Emulator("anthropic", counter=chars, clock=clock) as emulator:
        yield emulator


def user(text: str, mark: dict[str, Any] | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": text}
    if mark is not None:
        block["cache_control"] = mark
    return {"role": "user", "content": [block]}


def system(mark: dict[str, Any] | None = EPHEMERAL, text: str = LONG_SYSTEM) -> list[Any]:
    block: dict[str, Any] = {"type": "text", "text": text}
    if mark is not None:
        block["cache_control"] = mark
    return [block]


# -- replies -----------------------------------------------------------------------------------

def test_a_plain_reply_parses_in_the_sdk(chars, clock) -> None:
    with Emulator("anthropic", counter=chars, clock=clock,
                  script=[ReplySpec(text="Hello there.")]) as emu:
        raw = client_for(emu).messages.with_raw_response.create(
            model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "hi"}])
        message = raw.parse()
    assert raw.headers["request-id"].startswith("req_")
    assert message.id.startswith("msg_") and message.type == "message"
    assert (message.role, message.model, message.stop_reason) == ("assistant", MODEL,
                                                                   "end_turn")
    assert [(b.type, getattr(b, "text", None)) for b in message.content] == [
        ("text", "Hello there.")]
    usage = message.usage
    assert usage.output_tokens == len("Hello there.")
    # nothing marked: nothing read or written, the whole prompt is input_tokens
    assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (0, 0)
    assert usage.cache_creation is not None
    assert usage.cache_creation.ephemeral_5m_input_tokens == 0
    assert usage.input_tokens == len("[user]hi") == emu.requests[-1].prompt_tokens


def test_tool_use_and_thinking_blocks(chars, clock) -> None:
    reply = ReplySpec(text="", reasoning="I should list the files.", tool_calls=(
        ToolCall(id="", name="bash", arguments='{"command": "ls -la"}'),))
    with Emulator("anthropic", counter=chars, clock=clock, script=[reply]) as emu:
        message = client_for(emu).messages.create(
            model=MODEL, max_tokens=2000, tools=[BASH],  # type: ignore[list-item]
            messages=[{"role": "user", "content": "what is here?"}])
    thinking, call = message.content
    assert thinking.type == "thinking" and thinking.thinking == "I should list the files."
    assert thinking.signature
    assert call.type == "tool_use" and call.id.startswith("toolu_")
    assert (call.name, call.input) == ("bash", {"command": "ls -la"})
    assert message.stop_reason == "tool_use"


def test_streams_assemble_in_the_sdk(chars, clock) -> None:
    replies = [
        ReplySpec(text="Let me look at that for you, one moment please."),
        ReplySpec(text="", reasoning="A long enough thought to come in pieces, surely.",
                  tool_calls=(ToolCall(id="", name="bash", arguments=json.dumps(
                      {"command": "find . -name '*.py' | xargs wc -l | sort -n"})),)),
    ]
    with Emulator("anthropic", counter=chars, clock=clock, script=replies) as emu:
        client = client_for(emu)
        with client.messages.stream(model=MODEL, max_tokens=500,
                                    messages=[{"role": "user", "content": "hi"}]) as stream:
            text = "".join(stream.text_stream)
            first = stream.get_final_message()
        second = client.messages.create(
            model=MODEL, max_tokens=500, tools=[BASH], stream=True,  # type: ignore[list-item]
            messages=[{"role": "user", "content": "count lines"}])
        events = list(second)
    assert text == replies[0].text == first.content[0].text  # type: ignore[union-attr]
    assert first.stop_reason == "end_turn" and first.usage.output_tokens == len(text)
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    delta_kinds = [d.type for d in deltas]
    assert "signature_delta" in delta_kinds and delta_kinds.count("thinking_delta") > 1
    fragments = [d.partial_json for d in deltas if d.type == "input_json_delta"]
    assert len(fragments) > 2
    assert json.loads("".join(fragments)) == json.loads(replies[1].tool_calls[0].arguments)
    final = events[-2]
    assert final.type == "message_delta" and final.delta.stop_reason == "tool_use"
    assert final.usage.output_tokens == emu.requests[-1].completion_tokens


def test_the_raw_stream_has_event_names_and_a_ping(emu) -> None:
    body = {"model": MODEL, "max_tokens": 50, "stream": True,
            "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=emu.base_url, timeout=10, headers=VERSION) as client, \
            client.stream("POST", "/v1/messages", json=body) as response:
        names = [line[7:] for line in response.iter_lines() if line.startswith("event: ")]
        assert response.headers["request-id"].startswith("req_")
    assert names == ["message_start", "ping", "content_block_start", "content_block_delta",
                     "content_block_stop", "message_delta", "message_stop"]


def test_a_tool_loop_of_several_turns_reads_the_cache(chars, clock) -> None:
    from ctxfold.emulator.rules import rules_from_dict

    script = rules_from_dict({"rules": [
        {"when": {"last": "user"}, "reply": {"tool_calls": [
            {"name": "bash", "arguments": {"command": "step {{results}}"}}]}},
        {"when": {"last": "tool", "results_at_least": 3}, "reply": {"text": "All done."}},
        {"when": {"last": "tool"}, "reply": {"tool_calls": [
            {"name": "bash", "arguments": {"command": "step {{results}}"}}]}},
    ]}, "test")
    with Emulator("anthropic", counter=chars, clock=clock, script=script) as emu:
        client = client_for(emu)
        messages: list[dict[str, Any]] = [user("Do the three steps.")]
        usages = []
        for _ in range(6):
            for m in messages:  # one moving breakpoint, on the newest message
                for block in m["content"]:
                    block.pop("cache_control", None)
            messages[-1]["content"][-1]["cache_control"] = EPHEMERAL
            reply = client.messages.create(model=MODEL, max_tokens=1000, system=system(),
                                           tools=[BASH], messages=messages)  # type: ignore
            usages.append(reply.usage)
            if reply.stop_reason != "tool_use":
                break
            messages.append({"role": "assistant",
                             "content": [b.model_dump(exclude_none=True) for b in reply.content]})
            calls = [b for b in reply.content if b.type == "tool_use"]
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": c.id, "content": f"ran {c.input}"}
                for c in calls]})
    assert len(usages) == 4 and reply.content[0].text == "All done."  # type: ignore
    assert usages[0].cache_read_input_tokens == 0
    for before, after in pairwise(usages):
        # each turn reads everything the turn before wrote or read, and writes the new part
        assert after.cache_read_input_tokens == (before.cache_read_input_tokens or 0) + (
            before.cache_creation_input_tokens or 0)
        assert (after.cache_creation_input_tokens or 0) > 0 and after.input_tokens == 0


# -- cache accounting ------------------------------------------------------------------------

def test_turn_two_reads_turn_one_and_writes_only_the_new_part(emu) -> None:
    client = client_for(emu)
    first = client.messages.create(model=MODEL, max_tokens=100, system=system(),
                                   messages=[user("Question one?", EPHEMERAL)])  # type: ignore
    head = len("[system]" + LONG_SYSTEM) + len("[user]Question one?")
    assert (first.usage.cache_read_input_tokens, first.usage.cache_creation_input_tokens,
            first.usage.input_tokens) == (0, head, 0)
    history = [user("Question one?"),
               {"role": "assistant", "content": [{"type": "text", "text": "OK."}]},
               user("Question two?", EPHEMERAL)]
    second = client.messages.create(model=MODEL, max_tokens=100, system=system(),
                                    messages=history)  # type: ignore[arg-type]
    new = len("[assistant]OK.") + len("[user]Question two?")
    assert (second.usage.cache_read_input_tokens, second.usage.cache_creation_input_tokens,
            second.usage.input_tokens) == (head, new, 0)
    record = emu.requests[-1]  # the server-side view a measurement reads
    assert (record.prompt_tokens, record.cache_hit_tokens, record.cache_write_tokens) == (
        head + new, head, new)
    counted = client.messages.count_tokens(model=MODEL, system=system(),
                                           messages=history)  # type: ignore[arg-type]
    assert counted.input_tokens == head + new


def test_the_uncached_tail_after_the_last_breakpoint_is_input_tokens(emu) -> None:
    usage = client_for(emu).messages.create(
        model=MODEL, max_tokens=100, system=system(),
        messages=[user("not marked")]).usage  # type: ignore[arg-type]
    assert usage.cache_creation_input_tokens == len("[system]" + LONG_SYSTEM)
    assert usage.input_tokens == len("[user]not marked")


def test_nothing_is_cached_under_the_minimum(emu) -> None:
    client = client_for(emu)
    for _ in range(2):
        usage = client.messages.create(model=MODEL, max_tokens=100,
                                       system=system(text="Be brief."),
                                       messages=[user("hi", EPHEMERAL)]).usage  # type: ignore
        assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (0, 0)
        assert usage.input_tokens == len("[system]Be brief.") + len("[user]hi")


def test_one_hour_and_five_minute_writes_are_reported_apart(emu) -> None:
    usage = client_for(emu).messages.create(
        model=MODEL, max_tokens=100, system=system(HOUR),
        messages=[user("x" * 300, EPHEMERAL)]).usage  # type: ignore[arg-type]
    assert usage.cache_creation is not None
    assert usage.cache_creation.ephemeral_1h_input_tokens == len("[system]" + LONG_SYSTEM)
    assert usage.cache_creation.ephemeral_5m_input_tokens == len("[user]" + "x" * 300)
    assert usage.cache_creation_input_tokens == (usage.cache_creation.ephemeral_1h_input_tokens
                                                 + usage.cache_creation.ephemeral_5m_input_tokens)


def test_entries_expire_after_their_ttl(emu, clock) -> None:
    client = client_for(emu)

    def ask() -> anthropic.types.Usage:
        return client.messages.create(model=MODEL, max_tokens=100, system=system(HOUR),
                                      messages=[user("x" * 300, EPHEMERAL)]).usage  # type: ignore
    ask()
    clock.advance(299)
    assert ask().cache_read_input_tokens == len("[system]" + LONG_SYSTEM + "[user]" + "x" * 300)
    clock.advance(301)  # the 5-minute entry is gone, the 1-hour one is not
    later = ask()
    assert later.cache_read_input_tokens == len("[system]" + LONG_SYSTEM)
    assert later.cache_creation is not None
    assert later.cache_creation.ephemeral_5m_input_tokens == len("[user]" + "x" * 300)
    clock.advance(3601)
    assert ask().cache_read_input_tokens == 0


def test_top_level_cache_control_marks_the_last_block(emu) -> None:
    body = {"model": MODEL, "max_tokens": 10, "system": LONG_SYSTEM,
            "cache_control": EPHEMERAL, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=emu.base_url, timeout=10, headers=VERSION) as client:
        first = client.post("/v1/messages", json=body).json()["usage"]
        second = client.post("/v1/messages", json=body).json()["usage"]
    whole = len("[system]" + LONG_SYSTEM + "[user]hi")
    assert (first["cache_creation_input_tokens"], first["input_tokens"]) == (whole, 0)
    assert (second["cache_read_input_tokens"], second["cache_creation_input_tokens"]) == (
        whole, 0)


# -- validation and faults ---------------------------------------------------------------------

def test_missing_max_tokens_is_an_anthropic_error_body(emu) -> None:
    with httpx.Client(base_url=emu.base_url, timeout=10, headers=VERSION) as client:
        response = client.post("/v1/messages", json={
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 400
    body = response.json()
    assert body["type"] == "error" and body["error"] == {
        "type": "invalid_request_error", "message": "max_tokens: Field required"}
    assert body["request_id"] == response.headers["request-id"]


def test_the_version_header_is_required(emu) -> None:
    body = {"model": MODEL, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=emu.base_url, timeout=10) as client:
        without = client.post("/v1/messages", json=body)
        with_it = client.post("/v1/messages", json=body, headers=VERSION)
    assert without.status_code == 400
    assert without.json()["error"]["message"] == "anthropic-version: header is required"
    assert with_it.status_code == 200


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"system": [{"type": "text", "text": f"s{i}", "cache_control": EPHEMERAL}
                 for i in range(5)], "messages": [{"role": "user", "content": "hi"}]},
     "A maximum of 4 blocks with cache_control may be provided. Found 5."),
    ({"system": system(EPHEMERAL), "messages": [user("hi", HOUR)]},
     "messages.0.content.0.cache_control.ttl: a ttl='1h' cache_control block must not come "
     "after a ttl='5m' cache_control block."),
    ({"messages": [user("hi"), {"role": "assistant", "content": "ok"},
                   {"role": "user", "content": [{"type": "tool_result",
                                                 "tool_use_id": "toolu_missing",
                                                 "content": "x"}]}]},
     "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: "
     "toolu_missing"),
    ({"messages": [user("hi"), {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}}]}, user("and?")]},
     "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after"),
    ({"messages": [{"role": "system", "content": "hi"}]},
     "messages.0.role: Input should be 'user' or 'assistant'"),
    ({"messages": [user("hi"), {"role": "assistant", "content": [
        {"type": "text", "text": ""},
        {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}}]},
                   {"role": "user", "content": [{"type": "tool_result",
                                                 "tool_use_id": "toolu_1", "content": "x"}]}]},
     "messages: text content blocks must be non-empty"),
    ({"messages": [user(" \n")]},
     "messages: text content blocks must contain non-whitespace text"),
    ({"messages": [user("", EPHEMERAL)]},
     "messages.0.content.0.text: cache_control cannot be set for empty text blocks"),
    ({"messages": [{"role": "user", "content": []}]},
     "messages.0: all messages must have non-empty content"),
    ({"messages": [user("hi")], "thinking": {"type": "enabled", "budget_tokens": 2000}},
     "`max_tokens` must be greater than `thinking.budget_tokens`"),
])
def test_invalid_requests_are_bad_request_errors(emu, kwargs: dict[str, Any],
                                                 message: str) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client_for(emu).messages.create(model=MODEL, max_tokens=100, **kwargs)
    assert caught.value.status_code == 400
    assert message in caught.value.message
    assert caught.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert caught.value.request_id is not None and caught.value.request_id.startswith("req_")


def test_consecutive_turns_of_one_role_are_combined_not_refused(emu) -> None:
    client = client_for(emu)
    merged = client.messages.create(model=MODEL, max_tokens=100, messages=[
        {"role": "user", "content": "one"}, {"role": "user", "content": "two"}])
    starts_with_assistant = client.messages.create(model=MODEL, max_tokens=100, messages=[
        {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "hi"}])
    prefill = client.messages.create(model=MODEL, max_tokens=100, messages=[
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}])
    assert prefill.content
    assert merged.stop_reason == starts_with_assistant.stop_reason == "end_turn"
    # combined: one role marker for both blocks
    assert merged.usage.input_tokens == len("[user]one") + len("two")


def test_overflow_messages(chars, clock) -> None:
    with Emulator("anthropic", counter=chars, clock=clock, window=1000) as emu:
        client = client_for(emu)
        with pytest.raises(anthropic.BadRequestError) as too_long:
            client.messages.create(model=MODEL, max_tokens=10,
                                   messages=[{"role": "user", "content": "x" * 1200}])
        with pytest.raises(anthropic.BadRequestError) as with_output:
            client.messages.create(model=MODEL, max_tokens=500,
                                   messages=[{"role": "user", "content": "x" * 600}])
        with pytest.raises(anthropic.BadRequestError) as too_much_output:
            # streaming: the SDK refuses a non-streaming max_tokens above ~21K by itself
            client.messages.create(model=MODEL, max_tokens=100_000, stream=True,
                                   messages=[{"role": "user", "content": "hi"}])
    assert "prompt is too long: 1206 tokens > 1000 maximum" in too_long.value.message
    assert ("input length and `max_tokens` exceed context limit: 606 + 500 > 1000"
            in with_output.value.message)
    assert "max_tokens: 100000 > 64000" in too_much_output.value.message


@pytest.mark.parametrize(("kind", "error", "status", "err_type"), [
    ("rate_limit", anthropic.RateLimitError, 429, "rate_limit_error"),
    ("overloaded", anthropic.OverloadedError, 529, "overloaded_error"),
    ("server_error", anthropic.InternalServerError, 500, "api_error"),
])
def test_faults_map_to_the_sdk_exceptions(chars, clock, kind: str, error: type[Exception],
                                          status: int, err_type: str) -> None:
    fault = Fault(kind, at=0, retry_after=7)  # type: ignore[arg-type]
    with Emulator("anthropic", counter=chars, clock=clock, faults=[fault]) as emu:
        with pytest.raises(error) as caught:
            client_for(emu).messages.create(model=MODEL, max_tokens=10,
                                            messages=[{"role": "user", "content": "hi"}])
        assert client_for(emu).messages.create(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]).content
    exc = caught.value
    assert isinstance(exc, anthropic.APIStatusError) and exc.status_code == status
    assert exc.body["error"]["type"] == err_type  # type: ignore[index]
    if kind == "rate_limit":
        assert exc.response.headers["retry-after"] == "7"


def test_an_error_event_ends_a_stream(chars, clock) -> None:
    fault = Fault("error_body", at=0, after_events=2)
    with Emulator("anthropic", counter=chars, clock=clock, faults=[fault]) as emu, \
            pytest.raises(anthropic.APIStatusError) as caught, \
            client_for(emu).messages.stream(
                model=MODEL, max_tokens=10,
                messages=[{"role": "user", "content": "hi"}]) as stream:
        stream.get_final_message()
    assert caught.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]


@pytest.mark.parametrize("kind", ["malformed", "drop"])
def test_a_broken_stream_fails_in_the_sdk(chars, clock, kind: str) -> None:
    # anthropic 2.x speaks HTTP through ``httpx2``; a connection cut mid-stream surfaces as
    # its RemoteProtocolError, not wrapped in an APIError.
    import httpx2

    fault = Fault(kind, at=0, after_events=3)  # type: ignore[arg-type]
    with Emulator("anthropic", counter=chars, clock=clock, faults=[fault]) as emu, \
            pytest.raises((anthropic.APIError, httpx2.HTTPError, ValueError)), \
            client_for(emu).messages.stream(
                model=MODEL, max_tokens=10,
                messages=[{"role": "user", "content": "hi"}]) as stream:
        stream.get_final_message()


def test_an_echoed_key_is_the_x_api_key(chars, clock) -> None:
    """``echo_key`` quotes the key the client sent in ``x-api-key``, so a test can check
    that no key leaks through a proxy."""
    fault = Fault("rate_limit", at=0, echo_key=True)
    with Emulator("anthropic", counter=chars, clock=clock, faults=[fault]) as emu, \
            pytest.raises(anthropic.RateLimitError) as caught:
        anthropic.Anthropic(base_url=emu.base_url, api_key="sk-ant-secret-123",
                            max_retries=0).messages.create(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert "sk-ant-secret-123" in caught.value.message


def test_wrong_key_is_refused_and_x_api_key_is_accepted(chars, clock) -> None:
    with Emulator("anthropic", counter=chars, clock=clock, require_key="right") as emu:
        ok = anthropic.Anthropic(base_url=emu.base_url, api_key="right", max_retries=0)
        assert ok.messages.create(model=MODEL, max_tokens=10,
                                  messages=[{"role": "user", "content": "hi"}]).content
        wrong = anthropic.Anthropic(base_url=emu.base_url, api_key="wrong", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError) as caught:
            wrong.messages.create(model=MODEL, max_tokens=10,
                                  messages=[{"role": "user", "content": "hi"}])
    assert caught.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]


def test_count_tokens_and_models(emu) -> None:
    client = client_for(emu)
    counted = client.messages.count_tokens(model=MODEL, tools=[BASH],  # type: ignore[list-item]
                                           messages=[{"role": "user", "content": "hi"}])
    usage = client.messages.create(model=MODEL, max_tokens=10, tools=[BASH],  # type: ignore
                                   messages=[{"role": "user", "content": "hi"}]).usage
    assert counted.input_tokens == usage.input_tokens > len("[user]hi")
    assert [m.id for m in client.models.list()] == [MODEL]


def test_cli_serves_the_anthropic_profile(capsys) -> None:
    args = argparse.Namespace(port=0, profile="anthropic", window=None, script=None, fault=[])
    ready, stop = threading.Event(), threading.Event()
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(run(args, ready=ready, stop=stop)))
    thread.start()
    try:
        assert ready.wait(10)
        printed = capsys.readouterr()
        base_url = printed.out.strip()
        assert f"ANTHROPIC_BASE_URL={base_url}" in printed.err
        client = anthropic.Anthropic(base_url=base_url, api_key="k", max_retries=0)
        reply = client.messages.create(model=MODEL, max_tokens=10,
                                       messages=[{"role": "user", "content": "hi"}])
        assert reply.content[0].text == "OK."  # type: ignore[union-attr]
    finally:
        stop.set()
        thread.join(10)
    assert result == [0]


@pytest.mark.parametrize("last", ["tool", "user"])
def test_a_summary_request_gets_the_extractive_summary(chars, clock, last: str) -> None:
    """ctxfold's ``llm`` summarizer runs over this wire too: the emulator reads the Messages
    body back into ctxfold messages, by its own code — also when the region ends with a
    user message, which the API combines with the instruction after it."""
    from ctxfold import Message
    from ctxfold.kernel.summary import build_summary_request
    from ctxfold.plugins.summarizers.extractive import ExtractiveSummarizer

    region = [
        Message(role="user", content="Fix the failing test in src/app/util.py."),
        Message(role="assistant", content="Running the tests first.", tool_calls=(
            ToolCall(id="toolu_1", name="bash", arguments='{"command": "pytest -q"}'),)),
        Message(role="tool", tool_call_id="toolu_1", content="FAILED test_parse - ValueError"),
    ]
    if last == "user":
        region += [Message(role="assistant", content="The parser rejects empty input."),
                   Message(role="user", content="Then make it accept an empty string.")]
    request = build_summary_request(Message(role="system", content="You are a coding agent."),
                                    region, (), window=100_000)
    expected = ExtractiveSummarizer().summarize(request).text
    messages: list[dict[str, Any]] = []
    for m in request.messages[1:]:
        if m.role == "assistant":
            messages.append({"role": "assistant", "content": [
                {"type": "text", "text": m.content},
                *({"type": "tool_use", "id": c.id, "name": c.name,
                   "input": json.loads(c.arguments)} for c in m.tool_calls)]})
        elif m.role == "tool":
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content}]})
        else:
            messages.append({"role": "user", "content": m.content})
    with Emulator("anthropic", counter=chars, clock=clock,
                  script=[ReplySpec(text="scripted")]) as emu:
        reply = client_for(emu).messages.create(
            model=MODEL, max_tokens=request.max_tokens, system=request.messages[0].content,
            messages=messages)  # type: ignore[arg-type]
    assert expected and reply.content[0].text == expected  # type: ignore[union-attr]


@pytest.mark.parametrize("change", [
    {"tool_choice": {"type": "any"}},
    {"thinking": {"type": "enabled", "budget_tokens": 1024}},
    {"image": True},
])
def test_settings_that_invalidate_only_the_messages_cache(emu, change: dict[str, Any]) -> None:
    """Tool choice, thinking settings and images invalidate the messages part of the cache
    but keep the tools and system part (the prompt-caching guide's invalidation table)."""
    client = client_for(emu)
    history: list[dict[str, Any]] = [user("x" * 300, EPHEMERAL)]
    client.messages.create(model=MODEL, max_tokens=2000, system=system(), tools=[BASH],
                           messages=history)  # type: ignore[arg-type]
    extra = {k: v for k, v in change.items() if k != "image"}
    if change.get("image"):
        pixel = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA"
                 "60e6kgAAAABJRU5ErkJggg==")
        # the same first message, then an image after it: only the image's presence
        # changes what came before it
        history = [user("x" * 300), {"role": "assistant", "content": "Seen."},
                   {"role": "user", "content": [
                       {"type": "image", "source": {"type": "base64",
                                                    "media_type": "image/png", "data": pixel}},
                       {"type": "text", "text": "and this?", "cache_control": EPHEMERAL}]}]
    else:
        history = [user("x" * 300), {"role": "assistant", "content": "Seen."},
                   user("and this?", EPHEMERAL)]
    usage = client.messages.create(model=MODEL, max_tokens=2000, system=system(),
                                   tools=[BASH], messages=history, **extra).usage  # type: ignore
    head = emu.requests[0].prompt_tokens - len("[user]" + "x" * 300)
    assert usage.cache_read_input_tokens == head  # tools + system only
    assert usage.cache_creation_input_tokens == emu.requests[-1].prompt_tokens - head


def test_a_claude_code_shaped_request_is_served(emu) -> None:
    """What Claude Code sends (``?beta=true``, beta headers, system blocks with breakpoints,
    a server tool, metadata, temperature) is accepted and billed."""
    body = {
        "model": MODEL, "max_tokens": 32000, "stream": True, "temperature": 1,
        "metadata": {"user_id": "user_abc_session_1"},
        "system": [{"type": "text", "text": "You are Claude Code.",
                    "cache_control": HOUR},
                   {"type": "text", "text": LONG_SYSTEM, "cache_control": HOUR}],
        "tools": [BASH, {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}],
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>context</system-reminder>"},
            {"type": "text", "text": "list the files", "cache_control": EPHEMERAL}]}],
    }
    headers = {**VERSION, "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14",
               "x-api-key": "dummy"}
    with httpx.Client(base_url=emu.base_url, timeout=10, headers=headers) as client, \
            client.stream("POST", "/v1/messages?beta=true", json=body) as response:
        lines = list(response.iter_lines())
        assert response.status_code == 200
    start = json.loads(next(line[6:] for line in lines if '"message_start"' in line))
    usage = start["message"]["usage"]
    assert usage["cache_creation"]["ephemeral_1h_input_tokens"] > 1024
    assert usage["cache_creation"]["ephemeral_5m_input_tokens"] > 0
    assert emu.requests[-1].path == "/v1/messages"
