"""The maintenance engine: trigger, prune first, folds, receipts, CAS, resume.

The rules: design §2.4, §2.5, §3.3, §4, §5.1, §5.2, §6.3.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxfold import (
    Action,
    CacheState,
    CompactionRequiredError,
    ContextManager,
    Message,
    ProviderError,
    StoreError,
    SummaryResult,
    ToolCall,
    message_to_openai,
)
from ctxfold.testing import RecordingSummarizer

MARKER = "[... tool result middle pruned ...]"


def call(i: int, name: str = "bash") -> Message:
    return Message(
        role="assistant",
        content=f"step {i}",
        tool_calls=(ToolCall(id=f"c{i}", name=name, arguments=json.dumps({"command": f"ls {i}"})),),
    )


def result(i: int, size: int, name: str = "bash") -> Message:
    body = (f"line {i} " * (size // 7 + 1))[:size]
    return Message(role="tool", content=body, tool_call_id=f"c{i}", name=name)


def rounds(cm: ContextManager, n: int, size: int, start: int = 0) -> None:
    for i in range(start, start + n):
        cm.append(call(i), result(i, size))


def seed(cm: ContextManager, task: str = "Fix the bug. You must never touch setup.py.") -> None:
    cm.append(Message(role="system", content="You are a coding agent."),
              Message(role="user", content=task))


def canonical_bytes(cm: ContextManager) -> list[str]:
    return [json.dumps(message_to_openai(m), sort_keys=True) for m in cm.canonical]


def sidecar_path(cm: ContextManager) -> Path:
    return Path(cm.config.store.path) / f"{cm.session_id}.context.json"


def test_public_prune_and_snip_are_noops(open_session) -> None:
    cm = open_session()
    seed(cm)
    rounds(cm, 8, 10_000)
    before = canonical_bytes(cm)
    assert cm.prune_stale_tool_results() == 0
    assert cm.snip_stale_tool_results() == 0
    assert canonical_bytes(cm) == before
    assert cm.state.projection is None
    assert not sidecar_path(cm).exists()


def test_below_trigger_writes_nothing_and_keeps_bounded_content(open_session) -> None:
    summarizer = RecordingSummarizer()
    cm = open_session(window=1_000_000, summarizer=summarizer)
    seed(cm)
    big = "é" * 40_000  # 80,000 bytes: bounded at creation
    cm.append(call(0), Message(role="tool", content=big, tool_call_id="c0", name="bash"))
    stored = cm.canonical[-1]
    assert len(stored.content.encode()) <= 32768 and stored.raw_content == big
    prepared = cm.prepare()
    assert prepared.tokens < prepared.trigger_tokens
    assert prepared.projection_version == 0 and prepared.action == "none"
    assert all(big not in m.content for m in prepared.messages)
    assert prepared.messages[-1].content == stored.content
    assert summarizer.requests == []
    assert not sidecar_path(cm).exists()


def test_pressure_prune_clears_pressure_without_summary(open_session) -> None:
    summarizer = RecordingSummarizer()
    cm = open_session(window=30_000, ratio=0.5, summarizer=summarizer)
    seed(cm)
    rounds(cm, 8, 10_000)
    assert cm.estimate() >= cm.trigger_tokens
    prepared = cm.prepare()
    assert summarizer.requests == []
    assert prepared.projection_version == 1 and prepared.action == "prune"
    assert prepared.tokens < cm.trigger_tokens
    assert sum(MARKER in m.content for m in prepared.messages) == 8
    receipt = cm.state.last_receipt
    assert receipt is not None and receipt.action is Action.PRUNE
    assert receipt.status is Action.APPLIED and receipt.affected_tool_results == 8
    assert receipt.cache_break
    # Canonical untouched: the full bounded content is still there.
    assert all(MARKER not in m.content for m in cm.canonical)


def test_summary_checkpoint_keeps_head_tail_and_one_summary(open_session) -> None:
    summarizer = RecordingSummarizer()
    cm = open_session(window=20_000, ratio=0.5, summarizer=summarizer)
    seed(cm)
    rounds(cm, 30, 1_500)
    prepared = cm.prepare()
    assert len(summarizer.requests) == 1
    assert prepared.action == "summary" and prepared.tokens < cm.trigger_tokens
    msgs = prepared.messages
    assert msgs[0].role == "system" and msgs[1].content.startswith("Fix the bug")
    summaries = [m for m in msgs if m.content.startswith("<compaction-summary>")]
    assert len(summaries) == 1 and summaries[0].origin == "host"
    # The tail never starts with an orphan tool result.
    after = msgs[msgs.index(summaries[0]) + 1]
    assert after.role != "tool"
    request = summarizer.requests[0]
    assert request.messages[0].role == "system"
    assert request.max_tokens == min(8192, max(20_000 // 4, 512))
    # Rolling: the next fold merges the older summary, never two visible.
    rounds(cm, 30, 1_500, start=100)
    cm.append(Message(role="user", content="continue"))
    prepared = cm.prepare()
    assert len(summarizer.requests) >= 2
    visible = [m for m in prepared.messages if m.content.startswith("<compaction-summary>")]
    assert len(visible) == 1
    assert any("<compaction-summary>" in m.content for m in summarizer.requests[-1].messages)


def test_prune_survives_failed_summary_and_restart(open_session) -> None:
    summarizer = RecordingSummarizer([ProviderError("boom", status=500)])
    cm = open_session(window=30_000, ratio=0.5, summarizer=summarizer)
    seed(cm)
    rounds(cm, 14, 10_000)  # still above the trigger after pruning
    cm.prepare()
    assert len(summarizer.requests) == 1
    assert cm.state.projection is not None and cm.state.projection.projection_version == 1
    # The summary failed, so the prune (above the prune-alone target) was installed alone
    # after it: the failure stays in the telemetry, the last receipt is the prune's.
    receipt = cm.state.last_receipt
    assert receipt is not None and receipt.status is Action.APPLIED
    assert receipt.action is Action.PRUNE
    assert any(t.action == "summary:failed" for t in cm.state.telemetry)
    again = open_session(window=30_000, ratio=0.5, summarizer=RecordingSummarizer())
    assert again.state.projection is not None
    assert again.state.projection.projection_version == 1
    assert sum(MARKER in m.content for m in again.view()) == 14


def test_failed_view_not_retried_in_same_turn(open_session) -> None:
    summarizer = RecordingSummarizer([SummaryResult(text="", finish_reason="stop")])
    cm = open_session(window=20_000, ratio=0.5, summarizer=summarizer)
    seed(cm)
    rounds(cm, 30, 1_500)
    first = cm.prepare()
    assert len(summarizer.requests) == 1 and first.projection_version == 0
    cm.prepare()
    assert len(summarizer.requests) == 1  # same view, same generation: not retried
    cm.append(Message(role="tool", content="late output", tool_call_id="c29", name="bash"))
    cm.prepare()
    assert len(summarizer.requests) == 1  # changed view, same turn: still not retried


def test_truncated_summary_one_call_installs_nothing(open_session) -> None:
    truncated = SummaryResult(text="## Goal\n- half", finish_reason="length")
    summarizer = RecordingSummarizer([truncated])
    cm = open_session(window=20_000, ratio=0.5, summarizer=summarizer)
    seed(cm)
    rounds(cm, 30, 1_500)
    before = canonical_bytes(cm)
    cm.prepare()
    assert len(summarizer.requests) == 1
    assert cm.state.projection is None
    assert cm.state.last_receipt is not None
    assert cm.state.last_receipt.status is Action.BLOCKED
    assert canonical_bytes(cm) == before


def test_sidecar_write_failure_rolls_back(open_session) -> None:
    summarizer = RecordingSummarizer()
    cm = open_session(window=30_000, ratio=0.5, summarizer=summarizer)
    seed(cm)
    rounds(cm, 8, 10_000)
    sidecar_path(cm).mkdir()  # a directory where the sidecar file must go
    before = canonical_bytes(cm)
    with pytest.raises((OSError, StoreError)):
        cm.prepare()
    assert cm.state.projection is None
    last = cm.state.last_receipt
    assert last is None or last.status is not Action.APPLIED
    assert canonical_bytes(cm) == before


def test_cas_loss_records_blocked_and_keeps_newer_state(open_session) -> None:
    summarizer = RecordingSummarizer()
    cm = open_session(window=20_000, ratio=0.5, summarizer=summarizer)
    seed(cm)
    rounds(cm, 30, 1_500)

    def race(_request) -> None:
        other = open_session(window=20_000, ratio=0.5, summarizer=RecordingSummarizer())
        other.append(Message(role="user", content="appended by the other process"))
        other.compact()
        assert other.state.projection is not None

    summarizer.before = race
    cm.prepare()
    receipt = cm.state.last_receipt
    assert receipt is not None and receipt.status is Action.BLOCKED
    assert "context changed" in receipt.reason
    # The winner's append reaches this process's next request too.
    assert cm.canonical[-1].content == "appended by the other process"
    assert cm.view()[-1].content == "appended by the other process"
    reopened = open_session(window=20_000, ratio=0.5, summarizer=RecordingSummarizer())
    assert reopened.state.projection is not None
    assert reopened.state.projection.projection_version == 1  # the winner's install survives


def test_overflow_summarizes_largest_admissible_prefix_once(open_session) -> None:
    summarizer = RecordingSummarizer()
    cm = open_session(window=8_000, ratio=0.9, summarizer=summarizer)
    seed(cm)
    rounds(cm, 40, 600)
    prepared = cm.prepare("overflow")
    assert len(summarizer.requests) == 1
    assert prepared.projection_version >= 1
    request = summarizer.requests[0]
    estimate = cm.estimator.estimate(
        __import__("ctxfold.kernel.types", fromlist=["RequestShape"]).RequestShape(
            list(request.messages), request.tools
        )
    )
    assert estimate <= cm.window - request.max_tokens - 256
    assert prepared.tokens < cm.hard_ceiling


def test_compaction_required_when_nothing_folds(open_session) -> None:
    cm = open_session(window=2_000, ratio=0.5, summarizer=RecordingSummarizer())
    cm.append(Message(role="system", content="s" * 9_000))
    with pytest.raises(CompactionRequiredError):
        cm.prepare()


def test_refreshed_system_prompt_keeps_projection(open_session, tmp_path) -> None:
    """A host that rewrites its system prompt in place keeps the checkpoint it paid for."""
    import attrs as _attrs

    from ctxfold.plugins.stores.fs_lines import encode_lines, parse_transcript

    cm = open_session(window=20_000, ratio=0.5, summarizer=RecordingSummarizer())
    seed(cm)
    rounds(cm, 30, 1_500)
    cm.prepare()
    assert cm.state.projection is not None
    path = Path(cm.config.store.path) / "s.jsonl"
    messages = list(parse_transcript(path.read_bytes(), path).messages)
    messages[0] = _attrs.evolve(messages[0], content="You are a coding agent. Today is Monday.")
    path.write_bytes(encode_lines(messages))
    reopened = open_session(window=20_000, ratio=0.5, summarizer=RecordingSummarizer())
    assert reopened.state.projection is not None
    assert reopened.state.projection.projection_version == cm.state.projection.projection_version
    assert reopened.view()[0].content.endswith("Today is Monday.")


def test_cold_resume_is_read_only(open_session) -> None:
    cm = open_session(window=20_000, ratio=0.5)
    seed(cm)
    rounds(cm, 30, 1_500)
    transcript = Path(cm.config.store.path) / "s.jsonl"
    raw = transcript.read_bytes()

    class NoProvider:
        def complete(self, request):  # pragma: no cover - must never be called
            raise AssertionError("resume called the provider")

    from tests.conftest import make_config

    config = make_config(Path(cm.config.store.path).parent, window=20_000, ratio=0.5)
    config = __import__("attrs").evolve(
        config, summarizer=__import__("attrs").evolve(config.summarizer, name="llm")
    )
    reopened = open_session(config=config, provider=NoProvider())
    result = reopened.resume(now=transcript.stat().st_mtime + 25 * 3600)
    assert result.cache_state is CacheState.COLD
    assert "compaction deferred" in result.notice
    assert transcript.read_bytes() == raw
    assert reopened.state.projection is None
    warm = reopened.resume(now=transcript.stat().st_mtime + 60)
    assert warm.cache_state is CacheState.WARM


def test_resume_without_activity_is_unknown(open_session) -> None:
    real = open_session().store

    class Store:
        def __getattr__(self, name):
            return getattr(real, name)

        def last_activity(self, session_id):
            return None

    cm = open_session(store=Store())
    assert cm.resume().cache_state is CacheState.UNKNOWN


def test_rewind_drops_projection_covering_more(open_session) -> None:
    cm = open_session(window=20_000, ratio=0.5, summarizer=RecordingSummarizer())
    seed(cm)
    rounds(cm, 30, 1_500)
    cm.prepare()
    assert cm.state.projection is not None
    cm.rewind(3)
    assert len(cm.canonical) == 3
    assert cm.state.projection is None
    assert [m.role for m in cm.view()] == ["system", "user", "assistant"]


def test_observe_usage_only_calibrates(open_session) -> None:
    from ctxfold import Usage

    cm = open_session()
    seed(cm)
    rounds(cm, 2, 2_000)
    cm.prepare()
    before = cm.estimate()
    assert cm.observe_usage(Usage(prompt_tokens=before * 2, cache_hit_tokens=10))
    assert not sidecar_path(cm).exists()
    assert cm.estimate() > before


def test_oversized_message_is_clipped_in_the_summary_request(open_session) -> None:
    """A single message larger than any summary request can hold still folds (clipped)."""
    summarizer = RecordingSummarizer()
    cm = open_session(window=8_000, ratio=0.8, summarizer=summarizer)
    seed(cm)
    cm.append(Message(role="assistant", content="Reading the code first."),
              Message(role="user", content="ok"))
    cm.append(Message(role="assistant", content="plan: " + "reasoning step. " * 1_700))
    cm.append(Message(role="user", content="go on"))
    rounds(cm, 3, 300)
    assert cm.estimate() >= cm.trigger_tokens
    prepared = cm.prepare()
    assert len(summarizer.requests) == 1
    sent = summarizer.requests[0].messages
    assert any("[... middle omitted from the summary request ...]" in m.content for m in sent)
    assert prepared.tokens < cm.hard_ceiling and prepared.projection_version == 1
    # Canonical keeps the full message.
    assert any(m.content.startswith("plan: ") and len(m.content) > 20_000 for m in cm.canonical)


def test_a_huge_answer_the_user_already_replied_to_folds_instead_of_failing(open_session) -> None:
    """The newest answer is larger than the window and a user turn follows it: the answer
    is a finished round, so it folds (clipped in the summary request) and the request gets
    below the hard ceiling in one prepare instead of raising CompactionRequiredError."""
    summarizer = RecordingSummarizer()
    cm = open_session(window=8_000, ratio=0.8, summarizer=summarizer)
    seed(cm)
    rounds(cm, 4, 300)
    cm.append(Message(role="assistant", content="THOUGHT: " + "degenerate output. " * 2_500))
    cm.append(Message(role="user", content="Please always provide EXACTLY ONE action."))
    assert cm.estimate() >= cm.hard_ceiling
    prepared = cm.prepare()
    assert prepared.tokens < cm.trigger_tokens and len(summarizer.requests) <= 2
    assert prepared.messages[-1].content.startswith("Please always provide")
    assert not any(m.content.startswith("THOUGHT: ") for m in prepared.messages)
    assert any(m.content.startswith("THOUGHT: ") and len(m.content) > 40_000
               for m in cm.canonical)  # canonical keeps it


def test_append_refuses_what_the_transcript_could_not_load(open_session) -> None:
    from ctxfold import MessageError, message_from_openai

    cm = open_session()
    with pytest.raises(MessageError, match="tool_call_id must be a string"):
        message_from_openai({"role": "tool", "content": "ok", "tool_call_id": 7})
    with pytest.raises(MessageError, match="local_only: must be true or false"):
        message_from_openai({"role": "user", "content": "x", "local_only": "false"})
    with pytest.raises(MessageError, match="nothing was appended"):
        cm.append(Message(role="user", content="fine"),
                  Message(role="tool", content="ok", tool_call_id=7))  # type: ignore[arg-type]
    assert cm.canonical == ()
    cm.append(Message(role="user", content="fine"))
    assert len(open_session().canonical) == 1  # the session still opens


def test_tool_result_with_raw_content_is_still_bounded(open_session) -> None:
    cm = open_session()
    full = "x" * 100_000
    cm.append(Message(role="assistant", tool_calls=(ToolCall(id="c1", name="bash"),)),
              Message(role="tool", content=full, raw_content=full, tool_call_id="c1",
                      name="bash"))
    stored = cm.canonical[-1]
    assert len(stored.content.encode()) <= 32_768 and stored.raw_content == full


def test_manual_compact_with_nothing_to_fold_is_a_noop_receipt(open_session) -> None:
    cm = open_session(window=1_000_000)
    seed(cm)
    rounds(cm, 2, 200)
    prepared = cm.compact()
    receipt = cm.state.last_receipt
    assert receipt is not None and receipt.status is Action.NOOP
    assert "nothing to fold" in receipt.reason and prepared.projection_version == 0


def test_manual_compact_does_not_spend_the_turns_automatic_summary(open_session) -> None:
    summarizer = RecordingSummarizer()
    cm = open_session(window=20_000, ratio=0.5, summarizer=summarizer)
    seed(cm)
    rounds(cm, 30, 1_500)
    cm.compact()
    assert len(summarizer.requests) == 1
    turn = cm.turn
    cm.append(*[Message(role="user", content=f"paste {i} " * 1_000) for i in range(6)])
    assert cm.turn == turn and cm.estimate() >= cm.trigger_tokens
    cm.prepare()
    assert len(summarizer.requests) >= 2  # pressure may still summarize in this turn


def test_resume_uses_the_providers_own_ttl(open_session) -> None:
    class FiveMinuteCache:
        cache_ttl_minutes = 5

    cm = open_session(provider=FiveMinuteCache())
    seed(cm)
    last = cm.store.last_activity(cm.session_id)
    assert cm.resume(now=last + 6 * 60).cache_state is CacheState.COLD
    assert cm.resume(now=last + 4 * 60).cache_state is CacheState.WARM


def test_telemetry_cache_counts_are_per_record(open_session) -> None:
    from ctxfold import Usage

    cm = open_session(window=20_000, ratio=0.5, summarizer=RecordingSummarizer())
    seed(cm)
    rounds(cm, 30, 1_500)
    cm.observe_usage(Usage(prompt_tokens=1000, cache_hit_tokens=900, cache_miss_tokens=100))
    cm.prepare()
    cm.observe_usage(Usage(prompt_tokens=1000, cache_hit_tokens=10, cache_miss_tokens=990))
    cm.compact()
    counts = [(t.cache_hit_tokens, t.cache_miss_tokens) for t in cm.state.telemetry]
    assert counts[0] == (900, 100)  # observed before the first record
    assert counts[-1] == (10, 990)  # only what was observed since the previous record
    assert sum(h for h, _m in counts) == 910


def test_a_transcript_many_windows_long_is_folded_chunk_by_chunk(open_session) -> None:
    """A fork of a long session, a rewind into a folded span or an imported history arrives
    with no checkpoint and many windows of messages: it was 'no checkpoint could be
    installed' (two folds at most, each required to land below the ceiling at once)."""
    summarizer = RecordingSummarizer()
    cm = open_session(window=8_000, ratio=0.8, summarizer=summarizer)
    seed(cm)
    rounds(cm, 120, 2_400)
    before = cm.view_estimate()[1]
    assert before > 9 * cm.window
    prepared = cm.prepare()
    assert prepared.tokens < cm.trigger_tokens and prepared.action == "summary"
    assert 3 <= len(summarizer.requests) <= 32
    # Each fold merged the one before: one summary is visible, and every later summary
    # request carried the previous summary.
    assert sum(m.content.startswith("<compaction-summary>") for m in prepared.messages) == 1
    for request in summarizer.requests[1:]:
        assert any("<compaction-summary>" in m.content for m in request.messages)
    # The canonical transcript is untouched.
    assert len(cm.canonical) == 2 + 240


def test_tools_set_on_an_open_session_are_what_its_requests_carry(open_session) -> None:
    """A proxy keeps one session open across requests whose tools change; the new tools
    must be what the request carries and what the estimate counts."""
    from ctxfold import ToolSchema

    cm = open_session(window=20_000, ratio=0.5, summarizer=RecordingSummarizer())
    seed(cm)
    before = cm.prepare().tokens
    tool = ToolSchema(name="grep", description="search files " * 40,
                      parameters={"type": "object", "properties": {"q": {"type": "string"}}})
    getattr(cm, "_cm", cm).tools = (tool,)  # (the async face wraps the manager)
    prepared = cm.prepare()
    assert [t.name for t in prepared.tools] == ["grep"]
    assert prepared.tokens > before
