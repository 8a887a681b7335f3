"""What a prepared request carries on the wire: ``use_capability`` exactly when the view
holds something to look up, answered by ``cm.answer(call)``; an output budget when the
window leaves less room than the provider reserves by default."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import attrs
import pytest
from tests.conftest import make_config
from tests.engine.test_manager import call, rounds, seed

import ctxfold
from ctxfold import Message, RequestShape, ToolCall
from ctxfold.kernel.config import AgentConfig, ProviderConfig
from ctxfold.testing import RecordingSummarizer

BASH = {"type": "function", "function": {"name": "bash", "description": "Run a command.",
                                         "parameters": {"type": "object", "properties": {}}}}


def names(payload: dict) -> list[str]:
    return [t["function"]["name"] if "function" in t else t["name"]
            for t in payload.get("tools", [])]


def test_use_capability_is_offered_only_when_there_is_something_to_look_up(
        open_session) -> None:
    cm = open_session(window=20_000, ratio=0.5, summarizer=RecordingSummarizer(),
                      tools=[BASH])
    seed(cm)
    prepared = cm.prepare()
    assert not prepared.offers_capability and not cm.offers_capability
    assert names(prepared.to_openai()) == ["bash"] and names(prepared.to_responses()) == ["bash"]
    cm.append(call(0), Message(role="tool", content="x" * 40_000, tool_call_id="c0",
                               name="bash"))  # bounded at creation: the full text is kept
    prepared = cm.prepare()
    assert prepared.offers_capability and prepared.projection_version == 0
    assert names(prepared.to_openai()) == ["bash", "use_capability"]
    assert names(prepared.to_responses()) == ["bash", "use_capability"]
    # The estimate counts the tool the request carries.
    assert prepared.tokens == cm.estimator.estimate(
        RequestShape(list(prepared.messages), prepared.tools))
    cm.rewind(2)  # back before the bounded result: nothing to look up any more
    assert not cm.prepare().offers_capability


def test_a_checkpoint_offers_use_capability_and_counts_it(open_session) -> None:
    cm = open_session(window=20_000, ratio=0.5, summarizer=RecordingSummarizer(),
                      tools=[BASH])
    seed(cm)
    rounds(cm, 30, 1_500)  # small results: nothing bounded
    assert not cm.offers_capability
    prepared = cm.prepare()
    assert prepared.action.value == "summary" and prepared.offers_capability
    assert [t.name for t in prepared.tools] == ["bash", "use_capability"]
    assert prepared.tokens == cm.estimator.estimate(
        RequestShape(list(prepared.messages), prepared.tools))
    assert cm.summarizer.requests[0].tools == (cm.tools[0],)  # aligned with the request before


def test_the_summary_request_carries_the_tool_when_the_request_before_it_did(
        open_session) -> None:
    cm = open_session(window=20_000, ratio=0.5, summarizer=RecordingSummarizer(),
                      tools=[BASH])
    seed(cm)
    cm.append(call(99), Message(role="tool", content="y" * 40_000, tool_call_id="c99",
                                name="bash"))
    before = cm.prepare()
    assert before.offers_capability
    rounds(cm, 30, 1_500)
    cm.prepare()
    assert [t.name for t in cm.summarizer.requests[0].tools] == ["bash", "use_capability"]


def test_a_host_that_answers_no_tool_calls_can_keep_the_tool_out(open_session) -> None:
    cm = open_session(window=20_000, ratio=0.5, summarizer=RecordingSummarizer(),
                      tools=[BASH], offer_capability=False)
    seed(cm)
    rounds(cm, 30, 1_500)
    prepared = cm.prepare()
    assert prepared.action.value == "summary" and not prepared.offers_capability
    assert names(prepared.to_openai()) == ["bash"]
    assert cm.summarizer.requests[0].tools == (cm.tools[0],)


def test_a_host_that_offers_the_tool_itself_gets_it_once(open_session) -> None:
    cm = open_session(tools=[BASH, ctxfold.USE_CAPABILITY_TOOL])
    seed(cm)
    prepared = cm.prepare()
    assert prepared.offers_capability
    assert names(prepared.to_openai()) == ["bash", "use_capability"]


def test_answer_replies_in_the_form_of_the_call(open_session) -> None:
    from openai.types.chat import ChatCompletionMessageToolCall
    from openai.types.responses import ResponseFunctionToolCall

    cm = open_session()
    seed(cm)
    arguments = json.dumps({"action": "call", "capability_id": "session:search",
                            "arguments": {"query": "setup.py"}})
    sdk = ChatCompletionMessageToolCall(id="k1", type="function", function={
        "name": "use_capability", "arguments": arguments})
    answer = cm.answer(sdk)
    assert answer["role"] == "tool" and answer["tool_call_id"] == "k1"
    assert json.loads(answer["content"])["hits"][0]["ref"] == "#1"
    as_dict = cm.answer(sdk.model_dump())
    assert as_dict == answer
    own = cm.answer(ToolCall(id="k2", name="use_capability", arguments='{"action": "list"}'))
    assert own["tool_call_id"] == "k2" and "session:search" in own["content"]
    item = ResponseFunctionToolCall(type="function_call", call_id="k3", name="use_capability",
                                    arguments=arguments)
    reply = cm.answer(item)
    assert reply["type"] == "function_call_output" and reply["call_id"] == "k3"
    assert json.loads(reply["output"])["hits"]
    assert cm.answer({"name": "use_capability", "args": {"action": "list"}, "id": "k4",
                      "type": "tool_call"})["tool_call_id"] == "k4"  # LangChain's form
    assert cm.answer(ToolCall(id="k5", name="bash", arguments="{}")) is None
    bad = cm.answer(ToolCall(id="k6", name="use_capability", arguments="not json"))
    assert bad["content"].startswith("error: ")
    with pytest.raises(ctxfold.MessageError, match="no id"):
        cm.answer({"type": "function", "function": {"name": "use_capability"}})
    assert asyncio.run(cm.aanswer(sdk)) == answer
    assert asyncio.run(cm.aanswer(ToolCall(id="k7", name="bash"))) is None
    cm.append({"role": "assistant", "tool_calls": [sdk.model_dump()]}, answer)  # appends as is


@pytest.mark.parametrize(("window", "provider", "cap", "expected"), [
    (16_000, "emulator", 0, "room"),        # DeepSeek reserves 64K: the room is sent
    (400_000, "emulator", 0, None),         # the reservation fits: the field is left out
    (400_000, "emulator", 1_000, 1_000),    # [agent] max_output_tokens is always sent
    (16_000, "responses", 0, "room"),       # OpenAI reserves 64K at high effort
    (400_000, "responses", 0, None),
])
def test_the_wire_forms_carry_an_output_budget_when_the_window_needs_one(
        tmp_path: Path, window: int, provider: str, cap: int, expected: object) -> None:
    base = make_config(tmp_path, window=window)
    config = attrs.evolve(base, agent=AgentConfig(compact_ratio=0.5, max_output_tokens=cap),
                          provider=ProviderConfig(name=provider, context_window=window))
    cm = ctxfold.open_session("s", config=config, summarizer=RecordingSummarizer())
    seed(cm)
    prepared = cm.prepare()
    chat, responses = prepared.to_openai(), prepared.to_responses()
    field = "max_tokens" if provider == "emulator" else "max_completion_tokens"
    room = window - prepared.tokens - 256 - math.ceil(prepared.tokens / 4)  # estimate margin
    value = room if expected == "room" else expected
    assert prepared.max_output_tokens == value
    assert chat.get(field) == value and responses.get("max_output_tokens") == value
    other = {"max_tokens", "max_completion_tokens"} - {field}
    assert not other & set(chat) and ctxfold.to_openai(prepared) == chat
