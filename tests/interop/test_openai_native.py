"""OpenAI-native in and out: dicts, SDK objects and Responses items go in; exactly what went
in comes back out of ``PreparedRequest.to_openai()`` / ``to_responses()``."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctxfold
from ctxfold import MessageError, ToolSchema, Usage
from ctxfold.interop.parts import part_to_chat, part_to_responses
from ctxfold.interop.responses import input_items
from ctxfold.plugins.estimators.base import NON_TEXT_PART_TOKENS
from ctxfold.plugins.estimators.heuristic import HeuristicEstimator

text = st.text(min_size=0, max_size=40)
url = st.builds(lambda s: "https://example.test/" + s, st.text(alphabet="abc123/", max_size=20))
extra_keys = st.dictionaries(st.sampled_from(["cache_control", "x_note", "detail"]),
                             st.one_of(text, st.integers(), st.booleans()), max_size=2)
part = st.one_of(
    st.builds(lambda t, x: {"type": "text", "text": t, **x}, text, extra_keys),
    st.builds(lambda u, d: {"type": "image_url", "image_url": {"url": u, "detail": d}}, url,
              st.sampled_from(["low", "high", "auto"])),
    st.builds(lambda d: {"type": "input_audio", "input_audio": {"data": d, "format": "wav"}},
              text),
    st.builds(lambda n, d: {"type": "file", "file": {"filename": n, "file_data": d}}, text,
              text),
    st.builds(lambda t: {"type": "input_text", "text": t}, text),
    st.builds(lambda u: {"type": "input_image", "image_url": u}, url),
)
user_message = st.builds(lambda parts: {"role": "user", "content": parts},
                         st.lists(part, min_size=1, max_size=6))


def open_cm(tmp_path, **kwargs: Any) -> ctxfold.ContextManager:
    config = ctxfold.Config(summarizer=ctxfold.Config().summarizer.__class__(name="extractive"),
                            store=ctxfold.Config().store.__class__(path=str(tmp_path / "s")))
    return ctxfold.open_session("native", config=config, **kwargs)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=st.lists(user_message, min_size=1, max_size=4))
def test_dicts_come_back_byte_identical_for_any_part_lists(tmp_path, messages) -> None:
    session = Path(tempfile.mkdtemp(dir=tmp_path))  # hypothesis may repeat an example
    cm = open_cm(session)
    system = {"role": "system", "content": "You are a coding agent."}
    cm.append(system, *messages)
    sent = cm.prepare().to_openai()["messages"]
    expected = [system, *messages]
    dumps = lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":"))  # noqa: E731
    assert [dumps(m) for m in sent] == [dumps(m) for m in expected]
    # ... and from the stored transcript, after a reopen
    again = open_cm(session).prepare().to_openai()["messages"]
    assert [dumps(m) for m in again] == [dumps(m) for m in expected]


def test_assistant_tool_calls_null_content_and_developer_role_round_trip(tmp_path) -> None:
    cm = open_cm(tmp_path)
    given = [
        {"role": "developer", "content": "rules"},
        {"role": "user", "content": [{"type": "text", "text": "look"},
                                     {"type": "image_url", "image_url": {"url": "data:x"}}]},
        {"role": "assistant", "content": None, "reasoning_content": "think",
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "bash", "arguments": "{\"cmd\":\"ls\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
    ]
    cm.append(*given)
    assert cm.prepare().to_openai()["messages"] == given


class SdkMessage:
    """Looks like the OpenAI SDK's ChatCompletionMessage (a pydantic model)."""

    def model_dump(self, exclude_none: bool = False) -> dict[str, Any]:
        data = {"content": None, "refusal": None, "role": "assistant", "annotations": None,
                "tool_calls": [{"id": "c9", "type": "function",
                                "function": {"name": "bash", "arguments": "{}"}}]}
        return {k: v for k, v in data.items() if not (exclude_none and v is None)}


def test_sdk_objects_and_responses_items_are_accepted(tmp_path) -> None:
    cm = open_cm(tmp_path)
    cm.append({"role": "user", "content": "go"}, SdkMessage(),
              {"role": "tool", "tool_call_id": "c9", "content": "ok"})
    cm.append({"type": "message", "role": "assistant",
               "content": [{"type": "output_text", "text": "calling"}]},
              {"type": "function_call", "call_id": "r1", "name": "bash", "arguments": "{}"},
              {"type": "function_call_output", "call_id": "r1", "output": "done"})
    messages = cm.canonical
    assert messages[1].tool_calls[0].id == "c9" and messages[1].content_form == "absent"
    assert messages[3].tool_calls[0].id == "r1"  # the call joined its assistant message
    items = cm.prepare().to_responses()["input"]
    assert items[-3:] == [
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "calling"}]},
        {"type": "function_call", "call_id": "r1", "name": "bash", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "r1", "output": "done"},
    ]


def test_openai_tool_dicts_in_either_form(tmp_path) -> None:
    chat_tool = {"type": "function", "function": {
        "name": "bash", "description": "run", "parameters": {"type": "object"},
        "strict": True}}
    responses_tool = {"type": "function", "name": "grep", "description": "",
                      "parameters": {"type": "object", "properties": {}}}
    cm = open_cm(tmp_path, tools=[chat_tool, responses_tool, ToolSchema(name="ls")])
    cm.append({"role": "user", "content": "hi"})
    prepared = cm.prepare()
    assert prepared.to_openai()["tools"][0] == chat_tool
    assert prepared.to_responses()["tools"][1] == responses_tool
    assert [t.name for t in prepared.tools] == ["bash", "grep", "ls"]


def test_tool_dicts_go_back_out_byte_identical(tmp_path) -> None:
    """Absent keys stay absent and the host's key order is kept (the tools are the head of
    every request's cached prefix)."""
    given = [
        {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"strict": True, "parameters": {}, "name": "ls",
                                          "description": "list"}},
        {"type": "function", "function": {"name": "pwd"}},
    ]
    cm = open_cm(tmp_path, tools=given)
    cm.append({"role": "user", "content": "hi"})
    sent = cm.prepare().to_openai()["tools"]
    assert json.dumps(sent) == json.dumps(given)
    assert [json.dumps(t) for t in cm.prepare().to_responses()["tools"]] == [
        json.dumps({"type": "function", **t["function"]}) for t in given]


@pytest.mark.parametrize(("bad", "where"), [
    ({"role": "wizard", "content": "x"}, r"append\[1\]\.role: unknown role"),
    ({"role": "tool", "tool_call_id": "nope", "content": "x"},
     r"append\[1\]\.tool_call_id: 'nope' answers no tool call"),
    ({"role": "user", "content": [{"text": "no type"}]}, r"append\[1\]\.content\[0\]"),
    ({"role": "user", "content": 7}, r"append\[1\]\.content: must be"),
    (object(), r"append\[1\]: expected a ctxfold Message"),
    ({"role": "user", "content": "\ud800"}, r"append\[1\]: content is not valid text"),
])
def test_bad_input_names_the_index_and_field_and_appends_nothing(tmp_path, bad, where) -> None:
    cm = open_cm(tmp_path)
    with pytest.raises(MessageError, match=where):
        cm.append({"role": "user", "content": "fine"}, bad)
    assert cm.canonical == ()


def test_bad_tools_name_the_position(tmp_path) -> None:
    with pytest.raises(MessageError, match=r"tools\[1\]\.parameters"):
        open_cm(tmp_path, tools=[{"type": "function", "name": "a"},
                                 {"type": "function", "name": "b", "parameters": "x"}])


def test_usage_in_every_shape_and_why_one_was_ignored(tmp_path) -> None:
    cm = open_cm(tmp_path)
    cm.append({"role": "user", "content": "word " * 400})
    cm.prepare()
    chat = {"prompt_tokens": 410, "completion_tokens": 3,
            "prompt_tokens_details": {"cached_tokens": 400}}
    assert cm.observe_usage(chat)
    assert cm.last_usage == Usage(prompt_tokens=410, completion_tokens=3,
                                  cache_hit_tokens=400, cache_miss_tokens=10)

    class SdkUsage:
        def model_dump(self, exclude_none: bool = False) -> dict[str, Any]:
            return {"input_tokens": 412, "output_tokens": 5,
                    "input_tokens_details": {"cached_tokens": 256}}

    observed = cm.observe_usage(SdkUsage())
    assert observed.calibrated and cm.last_usage.cache_hit_tokens == 256
    ignored = cm.observe_usage({"tokens": 3})
    assert not ignored and "neither prompt_tokens" in ignored.reason
    small = cm.observe_usage({"prompt_tokens": 5})
    assert not small and "5 prompt tokens is under 256" in small.reason
    other = cm.observe_usage({"prompt_tokens": 90_000})  # another request's count
    assert not other and "do not fit the prepared request" in other.reason
    assert "image" not in small.reason + other.reason  # only the rule that applied


def test_parts_convert_only_when_they_cross_formats() -> None:
    chat_image = {"type": "image_url", "image_url": {"url": "u", "detail": "low"}}
    assert part_to_responses(chat_image, "user", "w") == {
        "type": "input_image", "image_url": "u", "detail": "low"}
    assert part_to_chat(chat_image, "w") is chat_image
    responses_text = {"type": "input_text", "text": "t"}
    assert part_to_responses(responses_text, "user", "w") is responses_text
    assert part_to_chat(responses_text, "w") == {"type": "text", "text": "t"}
    with pytest.raises(MessageError, match="'video' has no OpenAI Responses form"):
        part_to_responses({"type": "video"}, "user", "messages[2].content[0]")
    with pytest.raises(MessageError, match="'video' has no chat-completions form"):
        part_to_chat({"type": "video"}, "messages[2].content[0]")


def test_responses_input_items_carry_converted_parts() -> None:
    message = ctxfold.message_from_openai(
        {"role": "user", "content": [{"type": "text", "text": "see"},
                                     {"type": "image_url", "image_url": {"url": "u"}}]})
    assert input_items([message]) == [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "see"}, {"type": "input_image", "image_url": "u"}]}]


def test_non_text_parts_count_a_documented_flat_rate() -> None:
    estimator = HeuristicEstimator()
    plain = ctxfold.message_from_openai({"role": "user", "content": [
        {"type": "text", "text": "see this"}]})
    with_image = ctxfold.message_from_openai({"role": "user", "content": [
        {"type": "text", "text": "see this"},
        {"type": "image_url", "image_url": {"url": "data:" + "A" * 5000}}]})
    delta = estimator.count_message(with_image) - estimator.count_message(plain)
    assert delta == NON_TEXT_PART_TOKENS  # the image's base64 is not counted as text


def test_a_request_with_an_image_never_calibrates(tmp_path) -> None:
    cm = open_cm(tmp_path)
    text = "word " * 400
    cm.append({"role": "user", "content": [{"type": "text", "text": text},
                                           {"type": "image_url", "image_url": {"url": "u"}}]})
    cm.prepare()
    refused = cm.observe_usage({"prompt_tokens": 2000, "completion_tokens": 5})
    assert not refused and "image, audio or file parts" in refused.reason
    plain = open_cm(tmp_path / "plain")
    plain.append({"role": "user", "content": text})
    plain.prepare()
    assert plain.observe_usage({"prompt_tokens": 600, "completion_tokens": 5})


# -- Responses items kept exactly ---------------------------------------------------------

item_extras = st.dictionaries(st.sampled_from(["id", "status", "phase", "x_trace"]),
                              st.one_of(text, st.integers()), max_size=3)


def reply_items(extras: list[dict[str, Any]], n_calls: int, k: int) -> list[dict[str, Any]]:
    """One reply as the Responses API returns it: reasoning, a message, function calls."""
    items: list[dict[str, Any]] = [
        {"type": "reasoning", "id": f"rs_{k}", "summary": [], "encrypted_content": "gAAA"},
        {"type": "message", "role": "assistant", **extras[0],
         "content": [{"type": "output_text", "text": f"step {k}", "annotations": [],
                      "logprobs": []}]},
    ]
    for j in range(n_calls):
        items.append({"arguments": "{}", "call_id": f"c{k}{j}", "name": "bash",
                      "type": "function_call", **extras[1 + j]})
    return items


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(extras=st.lists(item_extras, min_size=4, max_size=4), n_calls=st.integers(0, 3))
def test_responses_items_come_back_byte_identical(tmp_path, extras, n_calls) -> None:
    """Ids, statuses, annotations, unknown fields, key order and whole reasoning items."""
    session = Path(tempfile.mkdtemp(dir=tmp_path))
    cm = open_cm(session)
    given_items: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"type": "message", "role": "user", "id": "u1",
         "content": [{"type": "input_text", "text": "go"}]},
        *reply_items(extras, n_calls, 0),
    ]
    given_items += [{"type": "function_call_output", "call_id": f"c0{j}", "output": "ok",
                     "id": f"fco_{j}"} for j in range(n_calls)]
    cm.append(*given_items)
    assert len(cm.canonical) == 3 + n_calls  # one assistant message for the whole reply
    dumps = lambda v: json.dumps(v, ensure_ascii=False)  # noqa: E731
    assert [dumps(i) for i in cm.prepare().to_responses()["input"]] == \
        [dumps({"type": "message", **i} if "type" not in i else i) for i in given_items]
    again = open_cm(session).prepare().to_responses()["input"]
    assert [dumps(i) for i in again][2:] == [dumps(i) for i in given_items][2:]


def test_a_bounded_function_call_output_keeps_its_item_fields(tmp_path) -> None:
    cm = open_cm(tmp_path)
    cm.append({"role": "user", "content": "go"},
              {"type": "function_call", "call_id": "c1", "name": "cat", "arguments": "{}",
               "id": "fc_1", "status": "completed"},
              {"type": "function_call_output", "call_id": "c1", "output": "x" * 100_000,
               "id": "fco_1", "status": "completed"})
    out = cm.prepare().to_responses()["input"][-1]
    assert list(out) == ["type", "call_id", "output", "id", "status"]
    assert out["id"] == "fco_1" and len(out["output"]) <= 32 * 1024
    assert cm.canonical[-1].raw_content == "x" * 100_000


def test_reasoning_items_stay_out_of_chat_requests(tmp_path) -> None:
    cm = open_cm(tmp_path)
    cm.append({"role": "user", "content": "go"}, *reply_items([{}] * 2, 1, 0),
              {"type": "function_call_output", "call_id": "c00", "output": "ok"})
    chat = cm.prepare().to_openai()["messages"]
    assert [m["role"] for m in chat] == ["user", "assistant", "tool"]
    assert chat[1]["content"][0]["text"] == "step 0" and chat[1]["tool_calls"][0]["id"] == "c00"
    assert "reasoning" not in json.dumps(chat)


def test_importers_keep_no_item_fields(tmp_path) -> None:
    from ctxfold.interop.responses import messages_from_items

    items = reply_items([{"id": "m"}, {"id": "f"}], 1, 0)[1:]
    assert all(not m.responses_items for m in messages_from_items(items, lossless=False))
    with pytest.raises(MessageError, match=r"input\[0\]\.type: input item type 'reasoning'"):
        messages_from_items(reply_items([{}, {}], 1, 0), lossless=False)


def test_responses_items_go_to_chat_in_chat_form_and_unknown_ones_are_refused(tmp_path) -> None:
    cm = open_cm(tmp_path)
    cm.append({"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "look"}, {"type": "input_image", "image_url": "u"}]})
    chat = cm.prepare().to_openai()["messages"]
    assert chat == [{"role": "user", "content": [
        {"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "u"}}]}]
    # An item type the chat form cannot carry is named, not sent as an empty message.
    cm.append({"type": "web_search_call", "id": "ws_1", "status": "completed"})
    with pytest.raises(MessageError, match=r"messages\[1\]: Responses item type "
                                           r"'web_search_call' has no chat completions form"):
        cm.prepare().to_openai()
    items = cm.prepare().to_responses()["input"]
    assert items[-1] == {"type": "web_search_call", "id": "ws_1", "status": "completed"}


def test_a_part_no_openai_format_knows_is_refused_on_the_way_out(tmp_path) -> None:
    cm = open_cm(tmp_path)
    cm.append({"role": "user", "content": [{"type": "text", "text": "a"},
                                           {"type": "hologram", "data": "x"}]})
    with pytest.raises(MessageError, match=r"messages\[0\]\.content\[1\]: content part type "
                                           r"'hologram' is no OpenAI content part"):
        cm.prepare().to_openai()


def test_a_provider_refuses_a_part_type_it_cannot_take_naming_it() -> None:
    from ctxfold import ChatRequest, Message
    from ctxfold.plugins.providers.deepseek import DeepSeekTranslator
    from ctxfold.plugins.providers.mimo import MiMoTranslator

    audio = ctxfold.message_from_openai({"role": "user", "content": [
        {"type": "text", "text": "hear"},
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]})
    request = ChatRequest(messages=(Message(role="system", content="s"), audio))
    with pytest.raises(MessageError, match=r"messages\[1\]\.content\[1\]: provider 'deepseek' "
                                           r"does not accept content parts of type 'input_audio'"):
        DeepSeekTranslator().build_body(request, model="deepseek-flash")
    body = MiMoTranslator().build_body(request, model="mimo-v2.5-pro")  # MiMo takes it as is
    assert body["messages"][1]["content"][1]["type"] == "input_audio"


@pytest.mark.parametrize(("bad", "where"), [
    ({"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
     r"append\[1\]\.tool_calls\[0\]: a tool call needs a non-empty id"),
    ({"role": "user", "content": [{"type": "text", "text": 5}]},
     r"append\[1\]\.content\[0\]\.text: a text part needs a string 'text'"),
])
def test_a_call_without_id_or_a_text_part_without_text_is_refused(tmp_path, bad, where) -> None:
    cm = open_cm(tmp_path)
    with pytest.raises(MessageError, match=where):
        cm.append({"role": "user", "content": "go"}, bad)
    assert cm.canonical == ()


def test_an_sdk_message_keeps_its_null_content(tmp_path) -> None:
    import pydantic  # the OpenAI SDK's models (openai is a dev dependency)

    class Function(pydantic.BaseModel):
        name: str
        arguments: str

    class Call(pydantic.BaseModel):
        id: str
        type: str
        function: Function

    class SdkMessage(pydantic.BaseModel):  # the shape of the SDK's ChatCompletionMessage
        role: str
        content: str | None = None
        refusal: str | None = None
        tool_calls: list[Call] | None = None

    reply = SdkMessage.model_validate({"role": "assistant", "content": None, "refusal": None,
                                       "tool_calls": [{"id": "c1", "type": "function",
                                                       "function": {"name": "bash",
                                                                    "arguments": "{}"}}]})
    cm = open_cm(tmp_path)
    cm.append({"role": "user", "content": "go"}, reply)
    assert cm.prepare().to_openai()["messages"][1] == {
        "role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}


def test_a_provider_reply_with_an_unnamed_call_is_still_recorded(tmp_path) -> None:
    from ctxfold import Message, ToolCall

    cm = open_cm(tmp_path)
    cm.append({"role": "user", "content": "go"})
    reply = Message(role="assistant", content="", tool_calls=(ToolCall("call_0", "", "{}"),))
    cm.append(reply)  # what complete() does with an upstream reply: it was paid for
    assert cm.canonical[-1].tool_calls[0].id == "call_0"
