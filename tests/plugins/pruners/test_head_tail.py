"""The head-tail pressure pruner (design §3.3), the first step under pressure (design §2.5)."""

from __future__ import annotations

import tracemalloc

import attrs
import pytest

from ctxfold import Config, Message, Pruner, Registry, ToolCall
from ctxfold.kernel.kinds import PRUNER
from ctxfold.plugins.pruners.head_tail import (
    PRUNE_HEAD,
    PRUNE_MARKER,
    PRUNE_TAIL,
    PRUNE_THRESHOLD,
    HeadTailPruner,
    prune_tool_content,
)


def _tool(content: str, **kw: object) -> Message:
    fields: dict[str, object] = {"role": "tool", "content": content, "tool_call_id": "c1"}
    fields.update(kw)
    return Message(**fields)  # type: ignore[arg-type]


def test_constants_match_spec() -> None:
    assert (PRUNE_THRESHOLD, PRUNE_HEAD, PRUNE_TAIL) == (8192, 4096, 1024)
    assert PRUNE_MARKER == "[... tool result middle pruned ...]"


@pytest.mark.parametrize("unit", ["a", "中", "😀", "é"])
def test_exact_head_marker_tail_in_code_points(unit: str) -> None:
    # Distinct head/middle/tail units prove which code points were kept.
    text = "H" * PRUNE_HEAD + unit * 5000 + "T" * PRUNE_TAIL
    pruned = prune_tool_content(text)
    assert pruned == "H" * PRUNE_HEAD + PRUNE_MARKER + "T" * PRUNE_TAIL

    mixed = (unit + "x") * 6000  # 12000 code points
    pruned = prune_tool_content(mixed)
    assert len(pruned) == PRUNE_HEAD + len(PRUNE_MARKER) + PRUNE_TAIL
    assert pruned[:PRUNE_HEAD] == mixed[:PRUNE_HEAD]
    assert pruned[PRUNE_HEAD : PRUNE_HEAD + len(PRUNE_MARKER)] == PRUNE_MARKER
    assert pruned[-PRUNE_TAIL:] == mixed[-PRUNE_TAIL:]
    pruned.encode("utf-8")  # never a split surrogate or partial character


@pytest.mark.parametrize("unit", ["a", "中", "😀"])
def test_threshold_boundary(unit: str) -> None:
    exact = unit * PRUNE_THRESHOLD
    assert prune_tool_content(exact) is exact
    assert HeadTailPruner().prune([_tool(exact)]) is None
    over = unit * (PRUNE_THRESHOLD + 1)
    assert prune_tool_content(over) == unit * PRUNE_HEAD + PRUNE_MARKER + unit * PRUNE_TAIL


def test_prunes_every_tool_message_and_counts() -> None:
    big = "x" * 10_000
    view = [
        Message(role="system", content="s" * 20_000),
        Message(role="user", content="u" * 20_000),
        Message(role="assistant", tool_calls=(ToolCall(id="c1", name="shell"),)),
        _tool(big),
        _tool("small"),
        _tool(big, tool_call_id="c2"),  # the newest result is eligible too (Rev. B)
    ]
    result = HeadTailPruner().prune(view)
    assert result is not None
    new_view, count = result
    assert count == 2
    assert new_view[:3] == view[:3]  # non-tool messages untouched, whatever their size
    assert new_view[4] is view[4]
    assert PRUNE_MARKER in new_view[3].content and PRUNE_MARKER in new_view[5].content
    assert view[3].content == big  # input view not mutated


def test_source_is_content_never_raw_content_and_envelope_kept() -> None:
    sentinel = "RAW-ONLY-SENTINEL"
    content = "c" * 9000
    message = _tool(
        content,
        raw_content=sentinel + "r" * 50_000,
        name="shell",
        tool_call_id="call-7",
        created_at="2025-01-01T00:00:00.000000Z",
        id="m-42",
        origin="host",
    )
    result = HeadTailPruner().prune([message])
    assert result is not None
    (pruned,), _ = result
    assert sentinel not in pruned.content
    assert pruned.content == prune_tool_content(content)
    assert pruned.raw_content is None
    assert attrs.evolve(pruned, content=content, raw_content=message.raw_content) == message


def test_small_content_with_huge_raw_content_is_not_pruned() -> None:
    message = _tool("bounded", raw_content="r" * 100_000)
    assert HeadTailPruner().prune([message]) is None


def test_allocation_bounded_by_retained_content() -> None:
    # Emoji force 4-byte code points: a list of chars or an encode would cost megabytes.
    text = "😀" * (256 * 1024)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        out = prune_tool_content(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    output_size = len(out) * 4
    assert peak - before - output_size <= 64 * 1024


def test_registered_and_satisfies_protocol() -> None:
    registry = Registry.from_config(load_entry_points=False)
    assert "head-tail" in registry.names("pruner")
    spec = registry.get("pruner", "head-tail")
    assert spec.source == "builtin:ctxfold.plugins.pruners.head_tail"
    pruner = registry.create(PRUNER, "head-tail", config=Config())
    assert isinstance(pruner, Pruner)
