"""A deterministic, realistic coding-agent session for ``ctxfold replay --demo``.

One task statement, then ~150 tool rounds of a repair job on a made-up Python package:
reading files, searching, editing, running tests (with fat outputs: whole files, long test
logs, grep listings), and a few user interjections. Everything comes from a seeded
``random.Random``, so the session — and therefore the demo report — is identical on every
machine. No files, network or keys are needed.
"""

from __future__ import annotations

import json
import random

from ctxfold.kernel.sessions import ImportedSession
from ctxfold.kernel.types import Message, ToolCall, ToolSchema

#: The window the demo replays with: small enough that every policy has to maintain.
DEMO_WINDOW = 64_000
DEMO_ROUNDS = 150
_SEED = 20261130

_MODULES = ("parser", "scheduler", "cache", "storage", "http_client", "config", "cli", "events")
_WORDS = ("value", "item", "entry", "record", "node", "token", "frame", "chunk", "batch", "key",
          "state", "result", "buffer", "limit", "offset", "window", "retry", "timeout")

SYSTEM_PROMPT = (
    "You are a careful software engineer working in a Python repository at /repo. "
    "Use the tools to inspect and change files and to run commands. Keep changes minimal, "
    "run the tests after every edit, and explain briefly what you are doing before each "
    "tool call. Never modify files under /repo/vendor. " * 6
).strip()

TASK = (
    "The scheduler drops jobs when the cache is evicted under load. Reproduce the bug with a "
    "test in tests/test_scheduler.py, fix it in src/taskq/scheduler.py without changing the "
    "public API, and make sure the whole test suite passes. Constraint: do not add new "
    "dependencies; Python 3.11 must keep working."
)

_USER_TURNS = {
    40: "Also keep the retry counter in the job record; operations relies on it.",
    85: "The CI run on 3.11 failed with a flaky timeout in test_cache_eviction. Please check.",
    120: "Looks good so far. Please also add a changelog entry and run the full suite again.",
}

TOOLS = (
    ToolSchema("bash", "Run a shell command in /repo and return its output.",
               {"type": "object", "properties": {"command": {"type": "string"}},
                "required": ["command"]}),
    ToolSchema("read_file", "Read a file (optionally a line range).",
               {"type": "object", "properties": {"path": {"type": "string"},
                                                 "start": {"type": "integer"},
                                                 "end": {"type": "integer"}},
                "required": ["path"]}),
    ToolSchema("edit_file", "Replace one exact string in a file.",
               {"type": "object", "properties": {"path": {"type": "string"},
                                                 "old": {"type": "string"},
                                                 "new": {"type": "string"}},
                "required": ["path", "old", "new"]}),
)


def _code(rng: random.Random, module: str, functions: int) -> str:
    lines = [f'"""The {module} module of taskq."""', "", "from __future__ import annotations",
             "", "import logging", "", "log = logging.getLogger(__name__)", ""]
    for n in range(functions):
        a, b = rng.sample(_WORDS, 2)
        name = f"{a}_{b}_{n}"
        lines += [f"def {name}({a}: int, {b}: dict[str, int] | None = None) -> int:",
                  f'    """Return the {a} of the {b} (see {module}.{name})."""',
                  f"    {b} = {b} or {{}}",
                  f"    total = {a}"]
        for k in range(rng.randint(3, 9)):
            key = rng.choice(_WORDS)
            lines.append(f"    if {b}.get('{key}', 0) > {rng.randint(1, 500)}:")
            lines.append(f"        total += {b}['{key}'] * {rng.randint(2, 9)}  # step {k}")
        lines += [f"    log.debug('{name} -> %s', total)", "    return total", "", ""]
    return "\n".join(lines)


def _test_log(rng: random.Random, failing: bool) -> str:
    lines = ["============================= test session starts =============================="]
    count = rng.randint(60, 140)
    for i in range(count):
        module = rng.choice(_MODULES)
        status = "PASSED"
        if failing and i == count - 3:
            status = "FAILED"
        lines.append(f"tests/test_{module}.py::test_{rng.choice(_WORDS)}_{i} {status} "
                     f"[{100 * (i + 1) // count:3d}%]")
    if failing:
        lines += ["", "=" * 35 + " FAILURES " + "=" * 35,
                  "_" * 30 + " test_eviction_drop " + "_" * 30,
                  "    def test_eviction_drop(scheduler):",
                  ">       assert scheduler.pending() == 3",
                  "E       AssertionError: assert 2 == 3",
                  "src/taskq/scheduler.py:214: AssertionError"]
    bar = "=" * 23
    lines.append(f"{bar} {count - int(failing)} passed"
                 f"{', 1 failed' if failing else ''} in {rng.uniform(2, 40):.2f}s {bar}")
    return "\n".join(lines)


def _grep(rng: random.Random, word: str) -> str:
    return "\n".join(
        f"src/taskq/{rng.choice(_MODULES)}.py:{rng.randint(1, 900)}:    "
        f"{word} = {rng.choice(_WORDS)}_{rng.randint(0, 40)}({word})"
        for _ in range(rng.randint(10, 60))
    )


def _round(rng: random.Random, i: int) -> tuple[str, str, dict[str, object], str]:
    """(thought, tool name, arguments, result) of round ``i``."""
    module = rng.choice(_MODULES)
    kind = rng.choices(("read", "grep", "test", "edit", "bash"), weights=(4, 2, 3, 2, 1))[0]
    if kind == "read":
        path = f"src/taskq/{module}.py"
        return (f"Let me read {path} to see how the {module} handles eviction.", "read_file",
                {"path": path}, _code(rng, module, rng.randint(6, 22)))
    if kind == "grep":
        word = rng.choice(_WORDS)
        return (f"I'll search for uses of `{word}` across the package.", "bash",
                {"command": f"grep -rn '{word}' src/taskq"}, _grep(rng, word))
    if kind == "test":
        failing = i < 110 and rng.random() < 0.6
        return ("Running the test suite to check the current state.", "bash",
                {"command": "python -m pytest -q tests"}, _test_log(rng, failing))
    if kind == "edit":
        word = rng.choice(_WORDS)
        return (f"I decided to guard the {word} update so evicted entries are re-queued.",
                "edit_file",
                {"path": f"src/taskq/{module}.py", "old": f"total += {word}",
                 "new": f"total += requeue({word})"},
                f"Edited src/taskq/{module}.py: 1 replacement.")
    return ("Checking the git status before continuing.", "bash", {"command": "git status"},
            "On branch fix-eviction\nChanges not staged for commit:\n"
            + "\n".join(f"\tmodified:   src/taskq/{m}.py" for m in rng.sample(_MODULES, 3)))


def demo_session(rounds: int = DEMO_ROUNDS, seed: int = _SEED) -> ImportedSession:
    """The demo session: system, task, ``rounds`` tool rounds, a few user turns, a final
    answer. Deterministic for a given ``rounds`` and ``seed``."""
    rng = random.Random(seed)
    messages = [Message(role="system", content=SYSTEM_PROMPT), Message(role="user", content=TASK)]
    for i in range(rounds):
        if i in _USER_TURNS:
            messages.append(Message(role="assistant", content="Understood, continuing."))
            messages.append(Message(role="user", content=_USER_TURNS[i]))
        thought, tool, args, result = _round(rng, i)
        call_id = f"call_{i:04d}"
        messages.append(Message(role="assistant", content=thought, tool_calls=(
            ToolCall(id=call_id, name=tool, arguments=json.dumps(args)),)))
        messages.append(Message(role="tool", content=result, tool_call_id=call_id, name=tool))
    messages.append(Message(role="assistant", content=(
        "The scheduler now re-queues jobs whose cache entry was evicted; a regression test "
        "covers it, the retry counter is kept, and the full suite passes.")))
    return ImportedSession(name="demo", messages=tuple(messages), tools=TOOLS,
                           reported_usage=(None,) * len(messages), format="demo",
                           source="<demo>")
