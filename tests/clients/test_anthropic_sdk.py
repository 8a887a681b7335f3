"""The official Anthropic Python SDK (PyPI ``anthropic``, pinned in ctxfold's dev extra) as
an agent would use it: a tool loop through ``ctxfold serve`` to the emulator's ``anthropic``
profile — each turn a user message, a ``tool_use`` of the app's own tool, its ``tool_result``
(numbered filler, so the history grows through several checkpoints) and the model's answer,
the whole history resent every request; streamed (``messages.stream``), every fourth turn
not. The app marks nothing for the cache: ctxfold places the breakpoints, and the SDK's
``usage`` must report cache reads. Forwarded-key mode (``x-api-key`` goes upstream).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
from tests.clients.harness import (
    TURN,
    Stack,
    check_run,
    reached_upstream,
    running,
    tool_rounds,
)

TURNS = 24
MODEL = "claude-sonnet-4-6"
SYSTEM = "You are a careful assistant. Print what the user asks for with the print_step tool."
PRINT_STEP = {
    "name": "print_step", "description": "Print step N of the numbered filler text.",
    "input_schema": {"type": "object", "properties": {"step": {"type": "string"}},
                     "required": ["step"]}}

#: The turn number from the client's message for the call; the answer's from the tool result
#: (the newest messages: once a checkpoint folds the turn's user message, only they hold it).
RULES = {"rules": [
    {"when": {"last": "tool"}, "reply": {"text": "Turn {{match:CTXFOLD-STEP-([0-9]+)}}: printed."}},
    {"when": {"last": "user", "tools": ["print_step"]},
     "reply": {"text": "Printing it.", "tool_calls": [{"name": "print_step",
                                                       "arguments": {"step": TURN}}]}},
]}


FILLER = "lorem ipsum dolor sit amet, consectetur adipiscing elit "


def print_step(step: str) -> str:
    """The app's tool: step ``step``'s numbered filler (what ``print_filler`` prints)."""
    return f"CTXFOLD-STEP-{step} " + FILLER * 120


def ask(client: anthropic.Anthropic, messages: list[dict[str, Any]], stream: bool) -> Any:
    """One request with the whole history; the final ``Message``."""
    request: dict[str, Any] = {"model": MODEL, "max_tokens": 1024, "system": SYSTEM,
                               "tools": [PRINT_STEP], "messages": messages}
    if not stream:
        return client.messages.create(**request)
    with client.messages.stream(**request) as events:
        kinds = [event.type for event in events]
        message = events.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop", kinds
    return message


def test_anthropic_sdk_tool_loop_through_checkpoints_with_cache_reads(tmp_path: Path) -> None:
    usages: list[Any] = []
    with running(Stack(tmp_path / "stack", profile="anthropic", window=8000, rules=RULES,
                       key_mode="forwarded")) as stack:
        client = anthropic.Anthropic(base_url=stack.root_url, api_key=stack.client_key,
                                     max_retries=0, timeout=60)
        messages: list[dict[str, Any]] = []
        for turn in range(1, TURNS + 1):
            stream = turn % 4 != 0
            messages.append({"role": "user", "content": f"Turn {turn}: print step {turn}."})
            message = ask(client, messages, stream)
            usages.append(message.usage)
            assert message.stop_reason == "tool_use", message
            calls = [b for b in message.content if b.type == "tool_use"]
            assert [(c.name, c.input) for c in calls] == [("print_step", {"step": str(turn)})]
            messages.append({"role": "assistant",
                             "content": [b.model_dump(exclude_none=True) for b in message.content]})
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": c.id, "content": print_step(c.input["step"])}
                for c in calls]})
            message = ask(client, messages, stream)
            usages.append(message.usage)
            assert message.stop_reason == "end_turn", message
            assert [b.text for b in message.content if b.type == "text"] == \
                [f"Turn {turn}: printed."]
            messages.append({"role": "assistant",
                             "content": [b.model_dump(exclude_none=True) for b in message.content]})
    check_run(stack, [])
    rounds = tool_rounds(stack.upstream_requests())
    assert {name for name, _ in rounds} == {"print_step"}
    steps = {out.split("CTXFOLD-STEP-")[1].split()[0] for _, out in rounds}
    assert steps == {str(i) for i in range(1, TURNS + 1)}, sorted(steps, key=int)
    assert reached_upstream(stack, f"Turn {TURNS}: print step {TURNS}.")
    # ctxfold marked the upstream bodies (at most 4 breakpoints; the app marked none; the
    # first request is below the model's cacheable minimum, so nothing there) ...
    marks = [json.dumps(r["body"]).count('"cache_control"') for r in stack.upstream_requests()
             if r["path"].startswith("/v1/messages")]
    assert len(marks) > 2 * TURNS and max(marks) <= 4 and min(marks[1:]) >= 1, marks
    # ... and the upstream read the previous request's prefix back: the SDK sees cache reads
    # on most requests (observed: all but the first and the one after each checkpoint, whose
    # new prefix is written anew).
    reads = [u.cache_read_input_tokens or 0 for u in usages]
    assert sum(1 for r in reads if r > 0) >= len(reads) * 2 // 3, reads
