"""What each provider actually puts on the wire, read back from the emulator over TCP."""

from __future__ import annotations

import json

import attrs

from ctxfold import Action, ContextManager, Fault, Message, Registry, ToolCall, open_session
from ctxfold.kernel.kinds import PROVIDER


def open_with(config, session="wire", **kwargs):
    registry = Registry.from_config()
    provider = registry.create(PROVIDER, config.provider.name, config=config)
    cm = open_session(session, config=config, registry=registry, provider=provider,
                             **kwargs)
    return cm, provider


def tool_round(cm: ContextManager, reasoning: str | None = None) -> None:
    cm.append(Message(role="system", content="You are a coding agent."),
              Message(role="user", content="List the files."),
              Message(role="assistant", content="", reasoning_content=reasoning,
                      tool_calls=(ToolCall(id="call_1", name="bash",
                                           arguments='{"command": "ls"}'),)),
              Message(role="tool", content="a.py\nb.py", tool_call_id="call_1", name="bash"),
              Message(role="assistant", content="Two files.", reasoning_content="plain"),
              Message(role="user", content="Thanks, now stop."))


def test_deepseek_body(ctxfold_emulator, ctxfold_provider_config) -> None:
    emulator = ctxfold_emulator("deepseek")
    cm, provider = open_with(ctxfold_provider_config(emulator))
    tool_round(cm, reasoning="I should list files")
    cm.complete(provider)
    body = emulator.requests[-1].body
    assert "max_tokens" not in body  # max_output_tokens = 0 and the window has room
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["reasoning_effort"] == "high"
    messages = body["messages"]
    assert messages[2]["reasoning_content"] == "I should list files"  # tool-call turn
    assert "reasoning_content" not in messages[4]  # plain turn: not replayed
    assert messages[3] == {"role": "tool", "content": "a.py\nb.py", "tool_call_id": "call_1"} \
        or messages[3]["tool_call_id"] == "call_1"


def test_mimo_ladder(ctxfold_emulator, ctxfold_provider_config) -> None:
    emulator = ctxfold_emulator("mimo")
    for effort, expected in (("none", 16_384), ("low", 32_768), ("high", 65_536)):
        config = ctxfold_provider_config(emulator)
        config = attrs.evolve(config, agent=attrs.evolve(config.agent, effort=effort))
        cm, provider = open_with(config, session=f"mimo-{effort}")
        tool_round(cm)
        cm.complete(provider)
        assert emulator.requests[-1].body["max_completion_tokens"] == expected


def test_responses_items_and_cache_key(ctxfold_emulator, ctxfold_provider_config) -> None:
    emulator = ctxfold_emulator("responses")
    cm, provider = open_with(ctxfold_provider_config(emulator))
    tool_round(cm)
    cm.complete(provider)
    body = emulator.requests[-1].body
    assert body["prompt_cache_key"] == cm.state.prompt_cache_key
    kinds = [item.get("type") for item in body["input"]]
    assert "function_call" in kinds and "function_call_output" in kinds
    call = next(i for i in body["input"] if i.get("type") == "function_call")
    output = next(i for i in body["input"] if i.get("type") == "function_call_output")
    assert call["call_id"] == output["call_id"] == "call_1"
    assert json.loads(call["arguments"]) == {"command": "ls"}
    assert body["reasoning"] == {"effort": "high"}


def test_summary_request_is_exactly_one_call(ctxfold_emulator, ctxfold_provider_config) -> None:
    emulator = ctxfold_emulator("deepseek", window=20_000)
    config = ctxfold_provider_config(emulator)
    config = attrs.evolve(config, agent=attrs.evolve(config.agent, compact_ratio=0.5),
                          summarizer=attrs.evolve(config.summarizer, name="llm"))
    cm, _provider = open_with(config)
    cm.append(Message(role="system", content="sys"), Message(role="user", content="task"))
    for i in range(30):
        cm.append(Message(role="assistant", content=f"step {i}"),
                  Message(role="user", content=f"result {i} " * 240))
    emulator.inject(Fault("overloaded", count=5))
    cm.prepare()
    summaries = [r for r in emulator.requests if "[ctxfold:summary-request]" in str(r.body)]
    assert len(summaries) == 1 and summaries[0].status == 503
    assert cm.state.last_receipt is not None
    assert cm.state.last_receipt.status is Action.FAILED


def test_overflow_rescue_counts_on_the_emulator(ctxfold_emulator, ctxfold_provider_config) -> None:
    emulator = ctxfold_emulator("deepseek", window=6_000)
    config = ctxfold_provider_config(emulator, context_window=200_000)
    config = attrs.evolve(config, summarizer=attrs.evolve(config.summarizer, name="llm"))
    cm, provider = open_with(config)
    cm.append(Message(role="system", content="sys"), Message(role="user", content="task"))
    for i in range(12):
        cm.append(Message(role="assistant", content=f"step {i}"),
                  Message(role="user", content=f"result {i}: " + "data " * 120))
    cm.complete(provider)
    statuses = [r.status for r in emulator.requests]
    is_summary = ["[ctxfold:summary-request]" in str(r.body) for r in emulator.requests]
    assert statuses == [400, 200, 200]  # overflow, one summary, one retry
    assert is_summary == [False, True, False]
