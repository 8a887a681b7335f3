"""Summaries from a model the host chose: the ``summarize`` callable, and no silent emulator."""

from __future__ import annotations

import asyncio
from pathlib import Path

import attrs
import pytest
from tests.conftest import make_config

import ctxfold
from ctxfold import Action, ConfigError, SummaryRequest, SummaryResult


def seed(cm: ctxfold.ContextManager, rounds: int = 30, size: int = 1500) -> None:
    cm.append({"role": "system", "content": "You are a coding agent."},
              {"role": "user", "content": "Fix the failing test in src/app.py."})
    for i in range(rounds):
        cm.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": "bash", "arguments": "{\"cmd\":\"pytest\"}"}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"run {i}: " + "x" * size})


def llm_config(tmp_path: Path) -> ctxfold.Config:
    config = make_config(tmp_path, window=20_000, ratio=0.5)
    return attrs.evolve(config, summarizer=attrs.evolve(config.summarizer, name="llm"),
                        provider=attrs.evolve(config.provider, name="emulator"))


def test_a_host_callable_receives_the_request_and_its_text_is_installed(tmp_path) -> None:
    seen: list[SummaryRequest] = []

    def summarize(request: SummaryRequest) -> str:
        seen.append(request)
        return "## Goal\n- fix the failing test"

    cm = ctxfold.open_session("s", config=llm_config(tmp_path), summarize=summarize)
    seed(cm)
    prepared = cm.prepare()
    assert prepared.action == "summary" and len(seen) == 1
    assert seen[0].messages[-1].content.startswith("[ctxfold:summary-request]")
    assert seen[0].max_tokens == 5000  # the summary cap of a 20K window
    assert any("fix the failing test" in m.content for m in prepared.messages)


def test_an_async_callable_works_from_both_faces(tmp_path) -> None:
    async def summarize(request: SummaryRequest) -> SummaryResult:
        await asyncio.sleep(0)
        return SummaryResult(text="## Goal\n- async")

    sync_cm = ctxfold.open_session("a", config=llm_config(tmp_path), summarize=summarize)
    seed(sync_cm)
    assert sync_cm.prepare().action == "summary"  # no loop running: it is run to completion
    async_cm = ctxfold.open_session("b", config=llm_config(tmp_path), summarize=summarize)
    seed(async_cm)
    prepared = asyncio.run(async_cm.aprepare())
    assert prepared.action == "summary"
    assert [m.content for m in prepared.messages] == [
        m.content for m in sync_cm.prepare().messages]


def test_an_async_callable_under_a_running_loop_asks_for_aprepare(tmp_path) -> None:
    async def summarize(request: SummaryRequest) -> str:
        return "## Goal\n- g"

    cm = ctxfold.open_session("s", config=llm_config(tmp_path), summarize=summarize)
    seed(cm)

    async def inside_a_loop() -> ctxfold.PreparedRequest:
        return cm.prepare()

    prepared = asyncio.run(inside_a_loop())
    receipt = cm.state.last_receipt
    assert prepared.action == "failed" and receipt is not None
    assert receipt.status is Action.FAILED and "await cm.aprepare()" in receipt.reason


def test_a_raising_callable_installs_nothing_and_the_receipt_says_why(tmp_path) -> None:
    def summarize(request: SummaryRequest) -> str:
        raise RuntimeError("quota exhausted for key sk-abcdef123456")

    cm = ctxfold.open_session("s", config=llm_config(tmp_path), summarize=summarize)
    seed(cm)
    prepared = cm.prepare()
    receipt = cm.state.last_receipt
    assert prepared.action == "failed" and cm.state.projection is None
    assert receipt is not None and "RuntimeError: quota exhausted" in receipt.reason
    assert "sk-abcdef123456" not in receipt.reason  # masked


def test_a_library_host_never_gets_emulator_summaries_silently(tmp_path) -> None:
    with pytest.raises(ConfigError, match="summaries would come from the loopback provider"):
        ctxfold.open_session("s", config=llm_config(tmp_path))
    # Opting in is explicit: the emulator provider passed on purpose.
    with ctxfold.create_provider(llm_config(tmp_path)) as provider:
        cm = ctxfold.open_session("s", config=llm_config(tmp_path), provider=provider)
        seed(cm)
        assert cm.prepare().action == "summary"


def test_summarizer_and_summarize_together_are_refused(tmp_path) -> None:
    with pytest.raises(ConfigError, match="either summarizer= or summarize="):
        ctxfold.open_session("s", config=llm_config(tmp_path), summarize=lambda r: "x",
                             summarizer=ctxfold.Registry.from_config().create(
                                 "summarizer", "extractive", config=ctxfold.Config()))


def test_the_summary_request_goes_out_through_the_host_sdk_in_wire_form(tmp_path) -> None:
    """``ctxfold.to_openai(request)`` gives the summary request as chat dicts, tools included
    (cache-aligned with the normal requests), and no local fields."""
    import ctxfold

    seen: list[dict] = []

    def summarize(request: ctxfold.SummaryRequest) -> str:
        wire = ctxfold.to_openai(request)
        seen.append(wire)
        return "## Goal\nship it"

    tool = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
    cm = ctxfold.open_session("wire", store_path=str(tmp_path), summarize=summarize,
                              tools=[tool], window=8_000)
    cm.append({"role": "system", "content": "sys"}, {"role": "user", "content": "go " * 200})
    for i in range(12):
        cm.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": "bash", "arguments": "{}"}}]})
        cm.append_tool_result(f"c{i}", "y " * 900, tool_name="bash")
    cm.compact()
    assert len(seen) == 1
    wire = seen[0]
    assert wire["tools"] == [tool]
    assert wire["messages"][0] == {"role": "system", "content": "sys"}
    assert all("created_at" not in m and "local_only" not in m for m in wire["messages"])
    assert ctxfold.to_openai(cm.prepare())["messages"] == cm.prepare().to_openai()["messages"]
