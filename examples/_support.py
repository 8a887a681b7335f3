"""What every example shares: a scripted model on 127.0.0.1, a tool with big outputs, and a
report of what ctxfold did. Nothing here is part of the integration itself.

The model is ctxfold's loopback emulator (``ctxfold.Emulator``): it speaks the real
DeepSeek and OpenAI Responses wire formats over HTTP, answers from a script (a fixed number
of tool calls, then a text answer, per user task — and, once ctxfold offers its
``use_capability`` tool, one search of the folded history with it, as a model that misses an
early detail would) and bills each request against an emulated prompt cache. It answers
ctxfold's summary requests itself, with an extractive summary, so a host's summarize
callable works against it unchanged. Point the same code at a real provider by changing the
client's ``base_url`` and key.
"""

from __future__ import annotations

import json
from typing import Any

import ctxfold
from ctxfold import Emulator, ReplySpec

#: The window ctxfold maintains (the trigger is 0.80 of it): small, so that a few tool
#: outputs force a checkpoint. The emulated model keeps its real window.
WINDOW = 12_000
#: The user turns of the demo task; the model answers each after TOOL_CALLS tool calls.
TASKS = ("Find why test_parse fails in this repository.", "Now fix it and rerun the tests.")
TOOL_CALLS = 5
SYSTEM = "You are a careful coding agent. Use the bash tool; answer briefly when done."
MODEL = "deepseek-flash"


def scripted_replies() -> list[ReplySpec]:
    """TOOL_CALLS ``bash`` calls, then a short answer, for each task."""
    replies: list[ReplySpec] = []
    for t, _task in enumerate(TASKS):
        for k in range(TOOL_CALLS):
            command = ["ls -R", "cat src/parse.py", "pytest -x", "git log -5", "grep -rn parse"][k]
            replies.append(ReplySpec(text="", tool_calls=(ctxfold.ToolCall(
                id=f"call_{t}{k}", name="bash", arguments=json.dumps({"command": command})),)))
        replies.append(ReplySpec(text=f"Done with task {t + 1}: the parser drops the last "
                                      "token; fixed in src/parse.py and the tests pass."))
    return replies


#: What the model looks up once ``use_capability`` is offered (a fact of the first task).
SEARCH = {"action": "call", "capability_id": "session:search",
          "arguments": {"query": "cat src/parse.py"}}


class ScriptedModel:
    """The emulated model (``Emulator(script=...)`` calls it for every request but ctxfold's
    summary requests): :func:`scripted_replies` in order, and the first time a request both
    offers ``use_capability`` — ctxfold adds it once there is something to look up — and
    holds a checkpoint summary, one call of it (a search of what was folded) before going
    on."""

    def __init__(self) -> None:
        self.replies = scripted_replies()
        self.searched = False

    def __call__(self, body: dict[str, Any], _profile: Any) -> ReplySpec:
        names = {t.get("name") or t.get("function", {}).get("name")
                 for t in body.get("tools") or ()}
        folded = "<compaction-summary>" in json.dumps(body)
        if "use_capability" in names and folded and not self.searched:
            self.searched = True
            return ReplySpec(text="", tool_calls=(ctxfold.ToolCall(
                id="call_lookup", name="use_capability", arguments=json.dumps(SEARCH)),))
        return self.replies.pop(0) if self.replies else ReplySpec()


def model(profile: str = "deepseek") -> Emulator:
    """The emulated model: ``with model() as emu: ... emu.base_url``."""
    return Emulator(profile, script=ScriptedModel())


def bash(command: str) -> str:
    """A stand-in shell tool whose outputs are big, like real build and test logs."""
    lines = [f"{command}: line {i:04d} " + "lorem ipsum dolor sit amet " * 3 for i in range(60)]
    return "\n".join(lines)


#: The bash tool as an OpenAI chat tool dict.
BASH_TOOL: dict[str, Any] = {"type": "function", "function": {
    "name": "bash", "description": "Run a shell command in the repository.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                   "required": ["command"]}}}


#: What each described prepare() did, for the totals.
ACTIONS: list[str] = []


def describe(call: int, prepared: ctxfold.PreparedRequest) -> None:
    """One line per model call: what the model is sent and what ctxfold did to get there."""
    ACTIONS.append(prepared.action.value)
    did = {"none": "", "prune": "  <- pruned old tool results",
           "summary": "  <- checkpoint installed (summary + recent messages)"}
    note = did.get(prepared.action.value, f"  <- {prepared.action.value}")
    print(f"  call {call:2d}: {len(prepared.messages):2d} messages, {prepared.tokens:6,} tokens "
          f"(trigger {prepared.trigger_tokens:,}){note}")


def finish(cm: ctxfold.ContextManager, emu: Emulator, *, host_messages: int) -> None:
    """Print the totals; exit 1 unless a checkpoint was installed and ctxfold's canonical
    transcript holds every message the host produced."""
    records = [r for r in emu.requests if r.status == 200]
    prompt = sum(r.prompt_tokens for r in records)
    hits = sum(r.cache_hit_tokens for r in records)
    checkpoints = ACTIONS.count("summary")
    print(f"canonical transcript: {len(cm.canonical)} messages (the host produced "
          f"{host_messages}); the model now sees {len(cm.view())}")
    print(f"checkpoints installed: {checkpoints}; provider requests: {len(records)} "
          f"(summaries included); prompt tokens {prompt:,}, cache hits {hits:,} "
          f"({hits / max(prompt, 1):.0%})")
    if checkpoints < 1:
        raise SystemExit("expected at least one checkpoint with this window")
    if len(cm.canonical) != host_messages:
        raise SystemExit("the canonical transcript lost or gained messages")
    lookups = answered_lookups(cm)
    print(f"use_capability: {len(lookups)} call(s) by the model, answered from the session: "
          + "; ".join(lookups))
    if not lookups:
        raise SystemExit("the model's use_capability call was not made or not answered")


def answered_lookups(cm: ctxfold.ContextManager) -> list[str]:
    """What each ``use_capability`` call of the model got back (the hits' refs); exit 1 when
    one is unanswered or answered with an error."""
    calls = [c.id for m in cm.canonical if m.role == "assistant" for c in m.tool_calls
             if c.name == "use_capability"]
    answers = {m.tool_call_id: m.content for m in cm.canonical if m.role == "tool"}
    found = []
    for call_id in calls:
        answer = answers.get(call_id)
        if answer is None or answer.startswith("error:"):
            raise SystemExit(f"use_capability call {call_id} was answered with {answer!r}")
        found.append(", ".join(hit["ref"] for hit in json.loads(answer)["hits"]) or "no hit")
    return found
