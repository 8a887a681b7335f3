"""Part ``torn``: torn writes, corrupt sidecars and leftover temp files made directly on disk.

A template store holds session ``t`` (its last append a multi-message batch with a tool call
and its result) and a healthy session ``ok``. Each case copies it and damages ``t``: the
transcript cut at a random byte of the last batch (inside a line or on a line boundary), a
garbage tail, or a damaged earlier line; the sidecar truncated, garbled or of the wrong
shape; temp files of "killed" writes (two minutes old) left beside them. Then:

* read-only commands (``sessions list``/``show``, ``tool-result``, ``inspect``) change no byte
  and ``sessions list`` still lists ``ok``;
* opening ``t`` gives a consistent session — the last batch whole or absent, the removed tail
  kept in ``.corrupt``, a bad sidecar discarded — or, for damage before the last line, a
  :class:`ctxfold.CtxfoldError` that changed nothing;
* a second open changes nothing; ``prepare()`` and a new append work and read back, and that
  first write removed the old temp files.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

from benchmarks.reliability.common import (
    BAD,
    Figures,
    cli_in_process,
    load,
    open_quiet,
    snapshot,
    tag_summary,
    tags_of,
    temp_files,
    write_config,
)
from benchmarks.reliability.worker import call, filler, result, user

import ctxfold

WINDOW = 40_000
SIDECAR_DAMAGE = ("none", "none", "truncate", "garble", "shape", "utf8", "empty")
TAIL_DAMAGE = ("cut", "cut", "boundary", "boundary", "garbage", "whole", "middle")


def build_template(root: Path) -> dict[str, Any]:
    """The template store; returns the byte range and message counts of ``t``'s last batch."""
    store = root / "sessions"
    config = load(write_config(root, store))
    rng = random.Random(5)
    for sid in ("ok", "t"):
        cm = ctxfold.open_session(sid, config=config, window=WINDOW, summarize=tag_summary)
        cm.append({"role": "system", "content": "#t0-0a# You are a test agent."},
                  user("t0-0b", "start"))
        cm.append(call("t0-1a", "call_big"), result("t0-1b", "call_big", filler(rng, 120_000)))
        for n in range(2, 40):
            cm.append(call(f"t0-{n}a", f"c{n}"), result(f"t0-{n}b", f"c{n}", filler(rng, 3000)))
        cm.compact()  # a sidecar with a checkpoint
    path = store / "t.jsonl"
    start = path.stat().st_size
    before = len(cm.canonical)
    cm.append(user("t0-90a", "last batch"), call("t0-90b", "c90"),
              result("t0-90c", "c90", filler(rng, 2000)), {"role": "assistant",
                                                           "content": "#t0-90d# done"})
    return {"store": store, "start": start, "end": path.stat().st_size,
            "before": before, "after": len(cm.canonical), "config": config,
            "registry": ctxfold.Registry.from_config(config.config)}


def damage_transcript(path: Path, kind: str, info: dict[str, Any], rng: random.Random) -> None:
    data = path.read_bytes()
    start, end = info["start"], info["end"]
    if kind == "cut":
        path.write_bytes(data[: rng.randint(start + 1, end - 1)])
    elif kind == "boundary":  # a torn write that ends exactly after one of the batch's lines
        ends = [i + 1 for i in range(start, end - 1) if data[i] == ord("\n")]
        path.write_bytes(data[: rng.choice(ends)] if ends else data)
    elif kind == "garbage":
        # What a power loss can leave: a NUL-filled block or bytes of no line (no newline).
        tail = rng.choice([b"\0" * rng.randint(1, 4096),
                           bytes(rng.choice(range(11, 256)) for _ in range(rng.randint(1, 40)))])
        path.write_bytes(data[: rng.randint(start, end)] + tail)
    elif kind == "middle":  # damage before the last line: an error, nothing modified
        lines = data.split(b"\n")
        i = rng.randrange(1, len(lines) - 3)
        lines[i] = lines[i][: len(lines[i]) // 2]
        path.write_bytes(b"\n".join(lines))


def damage_sidecar(path: Path, kind: str, rng: random.Random) -> None:
    data = path.read_bytes()
    if kind == "truncate":
        path.write_bytes(data[: rng.randrange(len(data))])
    elif kind == "garble":
        i = rng.randrange(len(data))
        path.write_bytes(data[:i] + bytes(rng.randrange(256) for _ in range(8)) + data[i + 8:])
    elif kind == "shape":
        path.write_bytes(json.dumps(rng.choice([[], 3, "x", {"schema_version": 3,
                                                            "projection": []}])).encode())
    elif kind == "utf8":
        path.write_bytes(data[:20] + b"\xff\xfe" + data[20:])
    elif kind == "empty":
        path.write_bytes(b"")


def read_only_commands(root: Path, config: Path, kind: str, rng: random.Random,
                       figures: Figures) -> None:
    """Read-only CLI commands on the damaged store: no byte changes, ``ok`` still listed."""
    files = {p.name: p.read_bytes() for p in root.iterdir()}
    commands = [["sessions", "list"], ["sessions", "show", "t"], ["tool-result", "t", "call_big"],
                ["inspect", "t"]]
    # Each command builds its registries (~0.15 s): one random command per case, and always
    # ``sessions list`` when the damage is before the last line.
    chosen = [commands[0]] if kind == "middle" else []
    for command in chosen or [rng.choice(commands)]:
        try:
            code, out = cli_in_process([*command, "--root", str(root), "--config", str(config)])
        except Exception as exc:
            figures.crash(f"torn: ctxfold {' '.join(command)}", exc)
            continue
        if command[1] == "list" and "ok" not in out.split():
            figures.problem("failures", "sessions list hides the healthy sessions when one is "
                            "damaged", f"exit {code}: {out[:120]!r}")
    after = {p.name: p.read_bytes() for p in root.iterdir()}
    if after != files:
        changed = sorted(n for n in set(files) | set(after) if files.get(n) != after.get(n))
        figures.problem("mutations", "a read-only command changed the store", str(changed))


def check_open(root: Path, case: dict[str, Any], info: dict[str, Any], figures: Figures) -> bool:
    """Open the damaged session and check it; False when it (rightly) refused to open."""
    path = root / "t.jsonl"
    damaged = path.read_bytes()
    corrupt_before = snapshot(root / "t.jsonl.corrupt") or b""
    try:
        cm = open_quiet("t", config=info["config"], window=WINDOW, summarize=tag_summary,
                        create=False, store_path=str(root), registry=info["registry"])
    except ctxfold.CtxfoldError as exc:
        if case["tail"] != "middle":
            figures.problem("failures", f"session does not open after a torn tail "
                            f"({case['tail']}): {type(exc).__name__}", str(exc)[:160])
        elif path.read_bytes() != damaged:
            figures.problem("mutations", "a refused open changed the transcript")
        return False
    if case["tail"] == "middle":
        figures.problem("failures", "damage before the last line went unnoticed")
    count = len(cm.canonical)
    if count not in (info["before"], info["after"]):
        figures.problem("torn", "last batch present in part after a torn write",
                        f"{case['tail']}: {count - info['before']} of "
                        f"{info['after'] - info['before']} messages")
    kept = path.read_bytes()
    removed = damaged[len(kept):] if damaged.startswith(kept) else None
    if removed is None:
        figures.problem("failures", "recovery rewrote the transcript instead of cutting it")
    elif removed.strip(b"\n") and removed.strip(b"\n") not in (
            snapshot(root / "t.jsonl.corrupt") or b"")[len(corrupt_before):]:
        figures.problem("lost", "torn tail not kept in .corrupt", case["tail"])
    if removed:
        figures.note("tails_moved")
    sidecar = snapshot(root / "t.context.json")
    if sidecar is not None:
        try:
            if json.loads(sidecar).get("schema_version") != 3:
                raise ValueError("schema")
        except (ValueError, AttributeError):
            figures.problem("failures", "an invalid sidecar was not discarded on open",
                            case["sidecar"])
    canonical = cm.canonical
    again = open_quiet("t", config=info["config"], window=WINDOW, summarize=tag_summary,
                       create=False, store_path=str(root), registry=info["registry"])
    if again.canonical != canonical or path.read_bytes() != kept:
        figures.problem("mutations", "a second open changed the session")
    cm.prepare()
    cm.append(user("t9-1a", "after recovery"))
    reread = open_quiet("t", config=info["config"], window=WINDOW, summarize=tag_summary,
                        create=False, store_path=str(root), registry=info["registry"])
    if tags_of(reread.canonical) != [*tags_of(canonical), "t9-1a"]:
        figures.problem("failures", "append after recovery did not read back as one message")
    return True


def run(cases: int, work: Path, *, seed: int = 0) -> Figures:
    figures = Figures()
    rng = random.Random(seed)
    template = work / "template"
    info = build_template(template)
    config_path = template / "ctxfold.toml"
    for n in range(cases):
        root = work / f"case-{n % 4}"
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(info["store"], root)
        case = {"tail": rng.choice(TAIL_DAMAGE), "sidecar": rng.choice(SIDECAR_DAMAGE)}
        damage_transcript(root / "t.jsonl", case["tail"], info, rng)
        damage_sidecar(root / "t.context.json", case["sidecar"], rng)
        for name in rng.sample(["t.jsonl", "t.context.json"], rng.randint(0, 2)):
            temp = root / f".{name}.{rng.randrange(16**8):08x}.tmp"
            temp.write_bytes(b"half a write")
            os.utime(temp, (time.time() - 120, time.time() - 120))  # a kill 2 minutes ago
        figures.note(f"torn_case_{case['tail']}")
        bad = sum(getattr(figures, name) for name in BAD)
        read_only_commands(root, config_path, case["tail"], rng, figures)
        opened = False
        try:
            opened = check_open(root, case, info, figures)
            if opened and sum(getattr(figures, name) for name in BAD) == bad:
                figures.recovered += 1
        except ctxfold.CtxfoldError as exc:
            figures.problem("failures", f"recovered session unusable: {type(exc).__name__}",
                            f"{case}: {str(exc)[:160]}")
        except Exception as exc:
            figures.crash("torn: open/prepare/append", exc, case)
        left = temp_files(root)
        if left and opened:  # the append after recovery was this process's first write
            figures.problem("failures", "temp files of a killed write survived a write",
                            str(left))
    figures.torn_cases += cases
    return figures
