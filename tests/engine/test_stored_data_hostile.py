"""Stored data never raises a foreign exception (issue 29, item 6): a sidecar holding a lone
surrogate is discarded and rebuilt, a transcript line whose ``parts`` are not JSON is a
``StoreError`` naming the line, a summary with a lone surrogate is repaired — and a fuzz over
the stored formats finds nothing else that escapes as anything but a ``CtxfoldError``."""

from __future__ import annotations

import contextlib
import io
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.conftest import make_config

import ctxfold
from ctxfold import SummaryResult
from ctxfold.cli.main import main
from ctxfold.plugins.stores.fs_sidecar import StoreWarning
from ctxfold.testing import RecordingSummarizer


def session(tmp_path: Path, summarizer: Any = None) -> ctxfold.ContextManager:
    """A session with one installed checkpoint (a summary in its sidecar)."""
    cm = ctxfold.open_session("s", config=make_config(tmp_path, window=4000, ratio=0.5),
                              summarizer=summarizer or RecordingSummarizer())
    cm.append({"role": "system", "content": "You are a coding agent."},
              {"role": "user", "content": "Fix the bug."})
    for i in range(24):
        cm.append({"role": "assistant", "content": f"step {i} " + "x" * 300},
                  {"role": "user", "content": f"go on {i}"})
    cm.compact()
    assert cm.state.projection is not None
    return cm


def reopen(tmp_path: Path) -> ctxfold.ContextManager:
    return ctxfold.open_session("s", config=make_config(tmp_path, window=4000, ratio=0.5),
                                summarizer=RecordingSummarizer(), create=False)


def inspect(tmp_path: Path) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["inspect", "s", "--root", str(tmp_path / "sessions")])
    return code, out.getvalue() + err.getvalue()


def files(tmp_path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (tmp_path / "sessions").iterdir()}


def test_a_sidecar_holding_a_lone_surrogate_is_discarded_and_rebuilt(tmp_path: Path) -> None:
    session(tmp_path)
    sidecar = tmp_path / "sessions" / "s.context.json"
    raw = sidecar.read_bytes()
    broken = raw.replace(b"summary #1", b"summary \\ud800 #1", 1)
    assert broken != raw
    sidecar.write_bytes(broken)
    # The read-only inspect reads it without a crash and writes nothing.
    before = files(tmp_path)
    code, text = inspect(tmp_path)
    assert code == 0, text
    assert files(tmp_path) == before
    # prepare() sets it aside, rebuilds the view from the transcript and goes on.
    with pytest.warns(StoreWarning, match="lone surrogate"):
        cm = reopen(tmp_path)
    prepared = cm.prepare()
    json.dumps(prepared.to_openai()).encode("utf-8")  # valid text all the way out
    names = files(tmp_path)
    assert any(".context.json.invalid-" in name for name in names)
    assert inspect(tmp_path)[0] == 0


@pytest.mark.parametrize("where", ["projection", "telemetry"])
def test_a_sidecar_nested_too_deep_to_walk_keeps_what_reads_repaired(
        tmp_path: Path, where: str) -> None:
    # Nesting json.loads still accepts but a recursive walk does not (found by the
    # reliability fuzz), beside a receipt holding a lone surrogate: the salvage repairs what
    # it keeps, and the deep part costs only itself.
    session(tmp_path)
    sidecar = tmp_path / "sessions" / "s.context.json"
    data = json.loads(sidecar.read_bytes())
    data["last_receipt"]["reason"] = "SURROGATE"
    raw = json.dumps({**data, where: "DEEP"}).replace('"DEEP"', "[" * 900 + "]" * 900)
    sidecar.write_bytes(raw.replace("SURROGATE", "\\ud800").encode())
    with pytest.warns(StoreWarning, match="discarded"):
        cm = reopen(tmp_path)
        receipt, telemetry = cm.state.last_receipt, cm.state.telemetry
        prepared = cm.prepare()
    json.dumps(prepared.to_openai()).encode("utf-8")
    assert any("were kept" in notice for notice in cm.notices), cm.notices
    assert receipt is not None and receipt.reason == "\ufffd"
    assert bool(telemetry) == (where == "projection")


def test_a_transcript_line_whose_parts_are_not_json_is_a_store_error(tmp_path: Path) -> None:
    session(tmp_path)
    path = tmp_path / "sessions" / "s.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    line = json.loads(lines[5])
    line.pop("content", None)
    line["parts"] = ["not json"]
    lines[5] = json.dumps(line).encode() + b"\n"
    path.write_bytes(b"".join(lines))
    before = files(tmp_path)
    with pytest.raises(ctxfold.StoreError, match=r"line 6: .*parts\[0\] is not valid JSON"):
        reopen(tmp_path).prepare()
    code, text = inspect(tmp_path)
    assert code == 1 and "parts[0] is not valid JSON" in text and "Traceback" not in text
    assert files(tmp_path) == before  # nothing was modified


def test_a_summary_holding_a_lone_surrogate_is_repaired(tmp_path: Path) -> None:
    surrogate = SummaryResult(text="## Goal\n- fix the bug \ud83d and more")
    cm = session(tmp_path, RecordingSummarizer([surrogate]))
    summary = next(m.content for m in cm.view() if "fix the bug" in m.content)
    assert "\ufffd and more" in summary
    cm.prepare()
    reopened = reopen(tmp_path)
    reopened.prepare()
    assert summary in [m.content for m in reopened.view()]
    assert inspect(tmp_path)[0] == 0


# -- the fuzz ------------------------------------------------------------------------------

hostile_text = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["\ud800", "a\udfffb", "\ud83d", "not json", "{", "[]", "{}",
                     '{"type": 5}', '{"type": "text", "text": 7}', "null", "\x00"]),
)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
    | hostile_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(hostile_text, inner,
                                                                 max_size=3),
    max_leaves=8)
FIELDS = ["role", "content", "parts", "tool_calls", "tool_call_id", "name", "raw_content",
          "extra", "responses_items", "anthropic_blocks", "wire_role", "content_form", "id",
          "created_at", "local_only", "origin", "reasoning_content", "partial"]


def _fuzzed(data: bytes, field: str, value: Any, index: int) -> bytes:
    lines = data.splitlines(keepends=True)
    at = index % len(lines)
    line = json.loads(lines[at])
    if isinstance(value, list) and field in ("parts", "responses_items", "anthropic_blocks"):
        value = [v if isinstance(v, str) else json.dumps(v) for v in value]
    line[field] = value
    lines[at] = json.dumps(line).encode() + b"\n"
    return b"".join(lines)


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    base = tmp_path_factory.mktemp("stored")
    session(base)
    return base, files(base)


def _exercise(tmp_path: Path) -> None:
    """Everything a host and the read-only commands do with a stored session."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StoreWarning)
        _use(tmp_path)


def _use(tmp_path: Path) -> None:
    code, text = inspect(tmp_path)
    assert code in (0, 1) and "Traceback" not in text, text
    try:
        cm = reopen(tmp_path)
        cm.prepare().to_openai()
        cm.use_capability({"action": "call", "capability_id": "session:search",
                           "arguments": {"query": "step", "regex": True}})
        cm.view()
    except ctxfold.CtxfoldError:
        pass


def _restore(target: Path, content: dict[str, bytes]) -> None:
    for path in target.iterdir():
        path.unlink()
    for name, data in content.items():
        (target / name).write_bytes(data)


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(FIELDS), value=json_value, index=st.integers(0, 60))
def test_a_fuzzed_transcript_line_raises_only_ctxfold_errors(
        stored: tuple[Path, dict[str, bytes]], field: str, value: Any, index: int) -> None:
    base, content = stored
    _restore(base / "sessions", content)
    path = base / "sessions" / "s.jsonl"
    path.write_bytes(_fuzzed(content["s.jsonl"], field, value, index))
    _exercise(base)


def _mutate(node: Any, path: list[int], value: Any) -> Any:
    """``node`` with the container child chosen by ``path`` replaced by ``value``."""
    if not path or not isinstance(node, dict | list) or not node:
        return value
    keys = list(node) if isinstance(node, dict) else list(range(len(node)))
    key = keys[path[0] % len(keys)]
    copy = dict(node) if isinstance(node, dict) else list(node)
    copy[key] = _mutate(node[key], path[1:], value)
    return copy


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.lists(st.integers(0, 40), min_size=1, max_size=6), value=json_value)
def test_a_fuzzed_sidecar_raises_only_ctxfold_errors(
        stored: tuple[Path, dict[str, bytes]], path: list[int], value: Any) -> None:
    base, content = stored
    _restore(base / "sessions", content)
    sidecar = json.loads(content["s.context.json"])
    broken = json.dumps(_mutate(sidecar, path, value)).encode()
    (base / "sessions" / "s.context.json").write_bytes(broken)
    _exercise(base)


typed = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "input_text", "image_url", "input_image", "output_text",
                              "message", "function_call", "function_call_output", "reasoning",
                              "refusal", "file", "input_audio", "x"])},
    optional={"text": json_value, "image_url": json_value, "content": json_value,
              "call_id": json_value, "name": json_value, "arguments": json_value,
              "output": json_value, "summary": json_value, "role": json_value, "id": json_value,
              "status": json_value, "encrypted_content": json_value})
calls = st.lists(st.fixed_dictionaries({"id": json_value, "name": json_value,
                                        "arguments": json_value}), max_size=2)


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(["parts", "responses_items", "anthropic_blocks", "tool_calls"]),
       items=st.lists(typed, min_size=1, max_size=2), tcalls=calls, index=st.integers(0, 60))
def test_fuzzed_parts_items_and_calls_raise_only_ctxfold_errors(
        stored: tuple[Path, dict[str, bytes]], field: str, items: list[dict[str, Any]],
        tcalls: list[dict[str, Any]], index: int) -> None:
    base, content = stored
    _restore(base / "sessions", content)
    value = tcalls if field == "tool_calls" else [json.dumps(i) for i in items]
    path = base / "sessions" / "s.jsonl"
    data = _fuzzed(content["s.jsonl"], field, value, index)
    if field == "parts":
        lines = data.splitlines(keepends=True)
        at = index % len(lines)
        line = json.loads(lines[at])
        line["content"] = ""
        lines[at] = json.dumps(line).encode() + b"\n"
        data = b"".join(lines)
    path.write_bytes(data)
    _exercise(base)
