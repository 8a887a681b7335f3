"""Summary-instruction requests get the extractive summary of their own messages, so the
``llm`` summarizer path runs end to end over HTTP."""

from __future__ import annotations

import httpx
import pytest

from ctxfold import Emulator, Message, ReplySpec, ToolCall, message_to_openai

summary_mod = pytest.importorskip("ctxfold.kernel.summary")
extractive = pytest.importorskip("ctxfold.plugins.summarizers.extractive")


def fold_region() -> list[Message]:
    return [
        Message(role="user", content="Fix the failing test in src/app/util.py; do not touch "
                                     "the public API."),
        Message(role="assistant", content="Running the tests first.",
                tool_calls=(ToolCall(id="call_1", name="bash",
                                     arguments='{"command": "pytest -q tests/test_util.py"}'),)),
        Message(role="tool", tool_call_id="call_1",
                content="FAILED tests/test_util.py::test_parse - ValueError: bad input"),
    ]


def test_summary_request_gets_extractive_summary_over_http(chars) -> None:
    request = summary_mod.build_summary_request(
        Message(role="system", content="You are a coding agent."), fold_region(), (),
        window=100_000)
    expected = extractive.ExtractiveSummarizer().summarize(request).text
    assert expected  # the extractive summary of this region is not empty
    # the script would answer "scripted"; the summary request must bypass it
    with Emulator("deepseek", counter=chars, script=[ReplySpec(text="scripted")]) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        body = {"messages": [message_to_openai(m, local_fields=False) for m in request.messages],
                "max_tokens": request.max_tokens, "thinking": {"type": "disabled"}}
        reply = client.post("/chat/completions", json=body).json()
        assert reply["choices"][0]["message"]["content"] == expected
        assert reply["choices"][0]["finish_reason"] == "stop"
        # an ordinary request still gets the scripted reply
        plain = client.post("/chat/completions", json={"messages": body["messages"][:-1]})
        assert plain.json()["choices"][0]["message"]["content"] == "scripted"
        assert len(emu.requests) == 2


def test_llm_summarizer_through_deepseek_provider(chars) -> None:
    deepseek = pytest.importorskip("ctxfold.plugins.providers.deepseek")
    llm = pytest.importorskip("ctxfold.plugins.summarizers.llm")
    from ctxfold import Config, ProviderOptions, Registry, StrategyContext
    from ctxfold.kernel.config import ProviderConfig

    request = summary_mod.build_summary_request(
        Message(role="system", content="You are a coding agent."), fold_region(), (),
        window=100_000)
    with Emulator("deepseek", counter=chars) as emu:
        config = Config(provider=ProviderConfig(name="deepseek", base_url=emu.base_url))
        context = StrategyContext(config=config, registry=Registry.from_config(),
                                  options=ProviderOptions(api_key="test-key", max_retries=0,
                                                          total_timeout=10.0))
        provider = deepseek.create(context)
        result = llm.LLMSummarizer(provider).summarize(request)
        assert result.text == extractive.ExtractiveSummarizer().summarize(request).text
        assert result.finish_reason == "stop"
        assert len(emu.requests) == 1
        sent = emu.requests[0].body
        assert sent["thinking"] == {"type": "disabled"}  # reasoning forced off (design §4.4)
        assert sent["messages"][-1]["content"].startswith("[ctxfold:summary-request]")


def test_the_emulator_writes_about_the_length_the_instruction_asks_for() -> None:
    from ctxfold.emulator.script import summary_reply

    region = [*fold_region(), *(Message(role="tool", tool_call_id="call_1",
                                        content=f"src/app/mod_{i}.py: error E{i} in parse_{i}")
                                for i in range(400))]
    asked = summary_mod.build_summary_request(None, region, (), window=100_000,
                                              target_tokens=512)
    body = {"max_tokens": asked.max_tokens}
    short = summary_reply(list(asked.messages), body)
    unasked = summary_mod.build_summary_request(None, region, (), window=100_000)
    long = summary_reply(list(unasked.messages), body)
    assert short is not None and long is not None
    assert len(short.text) <= 512 * extractive.CHARS_PER_TOKEN < len(long.text)
