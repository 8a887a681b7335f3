"""Where ctxfold puts Anthropic's cache breakpoints, and what each choice reads and writes.

Run from the repository root::

    python -m benchmarks.bench_anthropic_cache [--turns 80] [--windows 32000,64000]
        [--sessions DIR] [--no-replay] [--no-write]

**Emulator.** One agent session per window and placement: a 1,700-token system prompt, two
host tools, then ``--turns`` rounds of a reply and an observation of 150 to 3,000 tokens (a
fixed random sequence), through ctxfold's ``anthropic`` provider and the emulator's
``anthropic`` profile, which accounts the cache as Anthropic documents it (explicit
``cache_control`` breakpoints, the 20-block lookback, the minimum cacheable prefix, per-TTL
writes; docs/emulator.md). Checkpoint summaries go over the wire too (the ``llm``
summarizer), so their reads and writes count. Each row is one placement:

* ``ctxfold`` — what the provider sends (docs/providers.md): the end of tools + system and the
  checkpoint's summary with the configured TTL, the newest message with ``5m``, a bridge when
  the newest message is more than 20 blocks past the previous breakpoint;
* ``ctxfold 1h`` — the same with ``[provider] cache_ttl_minutes = 60`` (tools + system and the
  summary written at 2× instead of 1.25×);
* ``newest only`` — one moving breakpoint on the newest message (what a host that marks only
  its last message sends);
* ``stable only`` — tools + system only (what a host that marks only its system prompt sends);
* ``none`` — no ``cache_control`` at all: nothing is read from the cache.

Cost at Claude Sonnet 4.6's list prices (https://platform.claude.com/docs/en/about-claude/pricing:
$3 input, $3.75 5-minute write, $6 1-hour write, $0.30 read, $15 output per 1M tokens). The
session runs twice: *back to back* (a turn every 20 s: no entry expires, so the TTL changes
only the write price) and *paused* (the same, with a 10-minute pause every 10 turns: 5-minute
entries expire, 1-hour ones survive), on a clock the session moves.

**Replay.** The same question on the team's real sessions: ``ctxfold replay`` under the
``anthropic-sonnet`` price profile (whose prefix cache keeps the end of tools + system and the
newest message, as ctxfold's placement does; the checkpoint's breakpoint is a prefix of the
newest, so in a replay without expiry it changes nothing), per policy: the share of input read
from the cache and what uncached input costs at the write price. ``--no-replay`` skips it.

Writes the "## Anthropic cache breakpoints" section of docs/performance.md (``--no-write``
to skip).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks._report import REPO, machine_line, write_section

SECTION = "## Anthropic cache breakpoints"

def _price() -> dict[str, float]:
    """USD per 1M tokens, Claude Sonnet 4.6: the replay's ``anthropic-sonnet`` prices (one
    source for both halves of the report); a 1-hour cache write is twice the base input."""
    from ctxfold.replay.pricing import PRICES

    p = PRICES["anthropic-sonnet"]
    return {"input": p.miss, "write_5m": p.write, "write_1h": 2 * p.miss, "read": p.hit,
            "output": p.output}


PRICE = _price()
PLACEMENTS = ("ctxfold", "ctxfold 1h", "newest only", "stable only", "none")
SYSTEM = ("You are a coding agent working in a large Python repository. Read before you edit, "
          "run the tests after every change, keep the public API stable. ") * 60
TOOLS = ({"name": "bash", "description": "Run a shell command and return its output.",
          "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                         "required": ["command"]}},
         {"name": "edit", "description": "Replace text in a file.",
          "parameters": {"type": "object", "properties": {
              "path": {"type": "string"}, "old": {"type": "string"},
              "new": {"type": "string"}}, "required": ["path", "old", "new"]}})
TASK = "Fix the failing test in src/app/util.py without changing the public API."


def _strip(body: dict[str, Any], keep: Callable[[str, int, int], bool]) -> dict[str, Any]:
    """``body`` with the ``cache_control`` marks ``keep(part, index, count)`` refuses removed
    (``part``: ``tools``, ``system`` or ``messages``; ``index`` of ``count`` in that part)."""
    out = dict(body)
    for part in ("tools", "system", "messages"):
        items = out.get(part)
        if not isinstance(items, list):
            continue
        fresh = []
        for i, item in enumerate(items):
            if part == "messages" and isinstance(item.get("content"), list):
                content = [b if keep(part, i, len(items)) else _unmarked(b)
                           for b in item["content"]]
                fresh.append({**item, "content": content})
            else:
                fresh.append(item if keep(part, i, len(items)) else _unmarked(item))
        out[part] = fresh
    return out


def _unmarked(block: Any) -> Any:
    if isinstance(block, Mapping) and "cache_control" in block:
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


#: How each placement changes what ctxfold's provider would send.
RULES: dict[str, Callable[[str, int, int], bool]] = {
    "newest only": lambda part, i, n: part == "messages" and i == n - 1,
    "stable only": lambda part, i, n: part != "messages",
    "none": lambda part, i, n: False,
}


def observations(turns: int, seed: int = 7) -> list[int]:
    """The observation sizes, in words (about a token each): a fixed sequence."""
    rng = random.Random(seed)
    return [rng.choice((150, 300, 600, 1_200, 3_000)) for _ in range(turns)]


#: The session's pace: seconds between turns, and a pause of ``PAUSE`` seconds every
#: ``PAUSE_EVERY`` turns in the ``paused`` scenario (a person reading, a long build).
TURN_SECONDS = 20.0
PAUSE = 10 * 60.0
PAUSE_EVERY = 10
SCENARIOS = ("back to back", "paused")


class Clock:
    """The emulator's clock, moved by the session instead of by real time."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def emulate(window: int, placement: str, turns: int, scenario: str = "back to back",
            ) -> dict[str, Any]:
    """One session through the emulator's anthropic profile; totals of its requests."""
    import attrs

    from ctxfold import Message, ToolSchema, open_session
    from ctxfold.emulator.plugin import EmulatorOptions
    from ctxfold.kernel.config import Config, ProviderConfig
    from ctxfold.kernel.kinds import PROVIDER, ProviderOptions
    from ctxfold.kernel.registry import Registry
    from ctxfold.plugins.providers import anthropic

    with tempfile.TemporaryDirectory() as tmp:
        config = Config()
        config = attrs.evolve(
            config,
            store=attrs.evolve(config.store, path=str(Path(tmp) / "sessions")),
            summarizer=attrs.evolve(config.summarizer, name="llm"),
            provider=ProviderConfig(name="emulator", profile="anthropic", context_window=window,
                                    cache_ttl_minutes=60 if placement == "ctxfold 1h" else 0))
        registry = Registry.from_config(config)
        clock = Clock()
        provider = registry.create(PROVIDER, "emulator", config=config, options=ProviderOptions(
            clock=clock, plugin=EmulatorOptions(counter=lambda text: len(text) // 4)))
        original = anthropic.place_breakpoints
        rule = RULES.get(placement)
        if rule is not None:
            def placed(body: dict[str, Any], **kw: Any) -> dict[str, Any]:
                return _strip(original(body, **kw), rule)
            anthropic.place_breakpoints = placed  # type: ignore[assignment]
        try:
            tools = [ToolSchema(name=t["name"], description=str(t["description"]),
                                parameters=t["parameters"]) for t in TOOLS]  # type: ignore[arg-type]
            cm = open_session("anthropic-" + placement.replace(" ", "-"), config=config,
                              registry=registry, provider=provider, tools=tools)
            cm.append(Message(role="system", content=SYSTEM), Message(role="user", content=TASK))
            for i, words in enumerate(observations(turns)):
                clock.now += TURN_SECONDS
                if scenario == "paused" and i and i % PAUSE_EVERY == 0:
                    clock.now += PAUSE
                cm.complete(provider)
                cm.append(Message(role="user", content=f"observation {i}: " + " ".join(
                    f"line{j % 97}" for j in range(words))))
            records = [r for r in provider.emulator.requests if r.status == 200 and r.usage]
            checkpoints = cm.summary_calls
        finally:
            anthropic.place_breakpoints = original  # type: ignore[assignment]
            provider.close()
    totals = {"requests": len(records), "checkpoints": checkpoints, "prompt": 0, "read": 0,
              "write_5m": 0, "write_1h": 0, "uncached": 0, "output": 0}
    for r in records:
        usage = r.usage or {}
        split = usage.get("cache_creation") or {}
        totals["prompt"] += r.prompt_tokens
        totals["read"] += int(usage.get("cache_read_input_tokens") or 0)
        totals["write_5m"] += int(split.get("ephemeral_5m_input_tokens") or 0)
        totals["write_1h"] += int(split.get("ephemeral_1h_input_tokens") or 0)
        totals["uncached"] += int(usage.get("input_tokens") or 0)
        totals["output"] += int(usage.get("output_tokens") or 0)
    totals["input_usd"] = sum(totals[k] * PRICE[p] for k, p in (
        ("uncached", "input"), ("write_5m", "write_5m"), ("write_1h", "write_1h"),
        ("read", "read"))) / 1e6
    totals["write_usd"] = (totals["write_5m"] * PRICE["write_5m"]
                           + totals["write_1h"] * PRICE["write_1h"]) / 1e6
    return totals


def load(sessions: Path) -> list[Any]:
    """The recorded sessions under ``sessions``, imported once for every window."""
    from ctxfold.importing import expand_paths, import_session
    from ctxfold.kernel.config import Config
    from ctxfold.kernel.registry import Registry

    config = Config()
    registry = Registry.from_config(config)
    return [import_session(p, registry, None, config=config)
            for p in expand_paths([sessions], registry)]


def replay(loaded: list[Any], window: int) -> dict[str, dict[str, float]]:
    """The replay under ``anthropic-sonnet``: per policy, the share of input read from the
    cache and the cost of uncached input (billed at the write price)."""
    from ctxfold.kernel.config import Config
    from ctxfold.kernel.registry import Registry
    from ctxfold.replay import ReplaySettings, replay_sessions

    config = Config()
    registry = Registry.from_config(config)
    results = replay_sessions(loaded, ReplaySettings(
        window=window, profile="anthropic-sonnet",
        policies=("ctxfold", "codex-like", "opencode-like", "truncate-oldest")),
        registry=registry, config=config)
    out: dict[str, dict[str, float]] = {}
    for s in results:
        for name, r in s.policies.items():
            if r.failed:
                continue
            row = out.setdefault(name, {"sessions": 0, "prompt": 0, "read": 0, "write_usd": 0.0,
                                        "input_usd": 0.0})
            row["sessions"] += 1
            row["prompt"] += r.prompt_tokens
            row["read"] += r.cache_hit_tokens
            row["write_usd"] += r.breakdown.main_miss_usd
            row["input_usd"] += r.breakdown.main_miss_usd + r.breakdown.main_hit_usd
    return out


def render(emulated: Mapping[tuple[int, str], Mapping[str, Mapping[str, Any]]],
           replayed: Mapping[int, Mapping[str, Mapping[str, float]]], turns: int,
           sessions: str) -> str:
    lines = [SECTION, "", machine_line("benchmarks/bench_anthropic_cache.py"), "",
             f"`python -m benchmarks.bench_anthropic_cache --turns {turns}` (module docstring: "
             "the session, the placements, the prices).", "",
             "Emulator (`anthropic` profile), one session per row; *read* is the share of all "
             "input tokens read from the cache, *written* the tokens written (5m + 1h), *input "
             "cost* uncached + writes + reads:", "",
             "| window | pace | placement | requests | checkpoints | read | written (5m / 1h) | "
             "input cost | of which writes |",
             "|---|---|---|---:|---:|---:|---|---:|---:|"]
    for (window, scenario), rows in emulated.items():
        for name, t in rows.items():
            share = t["read"] / t["prompt"] if t["prompt"] else 0.0
            lines.append(
                f"| {window:,} | {scenario} | {name} | {t['requests']} | {t['checkpoints']} | "
                f"{share:.1%} | "
                f"{t['write_5m']:,} / {t['write_1h']:,} | ${t['input_usd']:.4f} | "
                f"${t['write_usd']:.4f} |")
    if replayed:
        lines += ["", f"Replay (`anthropic-sonnet`, main requests, sessions each policy "
                  f"completed; {sessions}):", "",
                  "| window | policy | sessions | read | input cost | of which uncached "
                  "(at the write price) |", "|---|---|---:|---:|---:|---:|"]
        for window, rows in replayed.items():
            for name, t in rows.items():
                share = t["read"] / t["prompt"] if t["prompt"] else 0.0
                lines.append(f"| {window:,} | `{name}` | {int(t['sessions'])} | {share:.1%} | "
                             f"${t['input_usd']:.4f} | ${t['write_usd']:.4f} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--turns", type=int, default=80)
    parser.add_argument("--windows", default="32000,64000")
    parser.add_argument("--sessions", type=Path,
                        default=REPO.parent / "shared" / "data" / "transcripts")
    parser.add_argument("--no-replay", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    windows = [int(w) for w in args.windows.split(",")]
    emulated = {(w, sc): {p: emulate(w, p, args.turns, sc) for p in PLACEMENTS}
                for w in windows for sc in SCENARIOS}
    replayed: dict[int, dict[str, dict[str, float]]] = {}
    if not args.no_replay:
        if not args.sessions.is_dir():
            print(f"no sessions at {args.sessions}: pass --sessions DIR or --no-replay",
                  file=sys.stderr)
            return 2
        loaded = load(args.sessions)
        replayed = {w: replay(loaded, w) for w in windows}
    text = render(emulated, replayed, args.turns, "the team's sample of real agent sessions")
    print(text)
    if not args.no_write:
        write_section(SECTION, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
