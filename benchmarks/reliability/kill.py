"""Part ``kill``: SIGKILL a worker process at random points of append / prepare / install and
check, after each kill, what it had acknowledged.

After every kill the session is reopened here (which repairs a torn tail) and checked:
every acknowledged message is present, in order, exactly once; the batch in flight landed
whole or not at all; an append that raised left nothing; no message appears that was never
written; the sidecar on disk is whole (atomic writes) or was discarded cleanly; and
``prepare()`` works. A session lives for ``lives`` kills, then a new one starts.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.reliability.common import (
    BAD,
    Figures,
    load,
    open_quiet,
    tag_summary,
    tags_of,
    temp_files,
    worker_env,
    write_config,
)

import ctxfold

#: Operations a targeted kill waits for (the ``kind`` of an append, or prepare/compact).
TARGETS = ("batch", "big", "multi", "single", "prepare", "compact")
WINDOW = 40_000


@dataclass
class Ledger:
    """What one session's workers acknowledged, across lives."""

    batches: list[list[str]] = field(default_factory=list)
    absent: set[str] = field(default_factory=set)  # appends that raised: must not land


def read_records(path: Path) -> list[dict[str, Any]]:
    """The complete records of an acknowledgement file (a torn last line is no record)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    records = []
    for line in data.split(b"\n")[:-1]:
        try:
            records.append(json.loads(line))
        except ValueError:
            break
    return records


class Child:
    """One worker life, started ahead of use (``go`` releases it)."""

    def __init__(self, work: Path, config: Path, session: str, life: int, seed: int,
                 max_tool_bytes: int) -> None:
        self.acks = work / f"ack-{life}.jsonl"
        self.session = session
        self.life = life
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.reliability.worker", "kill", "--config",
             str(config), "--session", session, "--out", str(self.acks), "--life", str(life),
             "--seed", str(seed), "--window", str(WINDOW),
             "--max-tool-bytes", str(max_tool_bytes)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=open(work / f"stderr-{life}.txt", "wb"), env=worker_env())  # noqa: SIM115

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.close()

    def wait_for(self, target: str, nth: int, timeout: float) -> None:
        """Return when the ``nth`` begin record of ``target`` is written (or on timeout)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            begun = [r for r in read_records(self.acks) if r.get("b") == target
                     or (r.get("b") == "append" and r.get("kind") == target)]
            if len(begun) >= nth:
                return
            time.sleep(0.001)

    def kill(self) -> bool:
        """SIGKILL; True when the process was still running (a real kill)."""
        alive = self.proc.poll() is None
        if alive:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        return alive and self.proc.returncode == -signal.SIGKILL


def replay(records: list[dict[str, Any]], ledger: Ledger, figures: Figures) -> list[str]:
    """Fold one life's records into ``ledger``; the tags of the append in flight at the kill."""
    pending: list[str] = []
    for record in records:
        if record.get("b") == "append":
            pending = record["tags"]
        elif record.get("a") == "append":
            ledger.batches.append(record["tags"])
            pending = []
        elif "e" in record:
            ledger.absent.update(pending)
            pending = []
            figures.note(f"ctxfold_error_{record['type']}")
        elif record.get("a") in ("prepare", "compact") and record["action"] in (
                "prune", "summary"):
            figures.note("installs")
        elif "crash" in record:
            figures.problem("crashes", f"kill worker: {record['crash']} at {record['at']}",
                            record["msg"])
        elif "fatal" in record:
            figures.problem("failures", f"kill worker could not run: {record['fatal']}",
                            record["msg"])
    return pending


def check(cm: Any, ledger: Ledger, pending: list[str], figures: Figures) -> int:
    """Compare the reopened transcript with the ledger; the number of problems found."""
    before = sum(getattr(figures, n) for n in ("lost", "torn", "dups", "failures"))
    canonical = tags_of(cm.canonical)
    present = Counter(canonical)
    expected = [t for batch in ledger.batches for t in batch]
    dups = sum(c - 1 for c in present.values() if c > 1)
    if dups:
        figures.problem("dups", "message twice in the transcript after a kill", "", dups)
    lost = [t for t in expected if t not in present]
    if lost:
        figures.problem("lost", "acknowledged message missing after a kill",
                        f"session {cm.session_id}: {lost[:5]}", len(lost))
    if pending:
        landed = sum(t in present for t in pending)
        if 0 < landed < len(pending):
            figures.problem("torn", "batch in flight at the kill landed in part",
                            f"{pending} -> {landed} of {len(pending)}")
        elif landed:
            ledger.batches.append(pending)
            figures.note("landed_unacknowledged")
    for batch in ledger.batches:
        where = [i for i, t in enumerate(canonical) if t in batch]
        if len(where) == len(batch) and where != list(range(where[0], where[0] + len(batch))):
            figures.problem("torn", "an acknowledged batch is not contiguous", str(batch))
    raised = ledger.absent & set(present)
    if raised:
        figures.problem("failures", "append raised a CtxfoldError but landed", str(raised))
    position = {t: i for i, t in enumerate(canonical)}
    order = [position[t] for t in expected if t in position]
    if not dups and order != sorted(order):
        figures.problem("failures", "acknowledged messages out of order after a kill")
    strangers = set(present) - set(expected) - set(pending)
    if strangers:
        figures.problem("failures", "message never written appeared", str(sorted(strangers)[:5]))
    return sum(getattr(figures, n) for n in ("lost", "torn", "dups", "failures")) - before


def sidecar_whole(path: Path) -> bool:
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return True
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("schema_version") == 3


def one_kill(child: Child, rng: random.Random, store: Path, config: Any, ledger: Ledger,
             figures: Figures) -> None:
    bad = sum(getattr(figures, name) for name in BAD)
    child.go()
    if rng.random() < 0.4:
        time.sleep(rng.uniform(0.02, 0.9))
    else:
        child.wait_for(rng.choice(TARGETS), rng.randint(1, 4), timeout=4.0)
        time.sleep(rng.uniform(0.0, 0.004))
    killed = child.kill()
    records = read_records(child.acks)
    pending = replay(records, ledger, figures)
    if not (store / f"{child.session}.jsonl").exists() and not ledger.batches:
        figures.note("killed_before_the_session_existed")  # tests nothing: not counted
        return
    if killed:
        figures.kills += 1
    else:
        figures.note("worker_exited_before_kill")
    if records and "b" in records[-1]:
        figures.note(f"killed_in_{records[-1].get('kind', records[-1]['b'])}")
    sidecar = store / f"{child.session}.context.json"
    if not sidecar_whole(sidecar):
        figures.problem("failures", "sidecar not whole after a kill (atomic write broken)")
    try:
        cm = open_quiet(child.session, config=config, window=WINDOW, summarize=tag_summary,
                        create=False)
        check(cm, ledger, pending, figures)
        cm.prepare()
    except ctxfold.CtxfoldError as exc:
        figures.problem("failures", f"session unusable after a kill: {type(exc).__name__}",
                        str(exc)[:200])
        return
    except Exception as exc:
        figures.crash("kill: reopen/prepare", exc)
        return
    if cm.notices:  # a whole sidecar written before the kill must still validate
        figures.problem("failures", "a kill left a sidecar that reopening discarded or "
                        "dropped", cm.notices[0][:200])
    if not sidecar_whole(sidecar):
        figures.problem("failures", "sidecar invalid after reopen + prepare")
        return
    if sum(getattr(figures, name) for name in BAD) == bad:
        figures.recovered += 1


def run(kills: int, work: Path, *, seed: int = 0, lives: int = 10,
        max_tool_bytes: int = 2_000_000, log: Any = None) -> Figures:
    """``kills`` SIGKILLs; a new session every ``lives`` kills."""
    figures = Figures()
    rng = random.Random(seed)
    work.mkdir(parents=True, exist_ok=True)
    store = work / "sessions"
    config_path = write_config(work, store)
    config = load(config_path)
    ledgers: dict[str, Ledger] = {}

    def spawn(life: int) -> Child:
        return Child(work, config_path, f"kill-{life // lives}", life, seed * 100_003 + life,
                     max_tool_bytes)

    child = spawn(0)
    life = 0
    while figures.kills < kills and life < kills * 3:
        successor = spawn(life + 1)  # imports while this life runs and is checked
        ledger = ledgers.setdefault(child.session, Ledger())
        one_kill(child, rng, store, config, ledger, figures)
        if log and (figures.kills % 50 == 0 or figures.kills == kills):
            print(f"kill: {figures.kills}/{kills} {figures.summary_line()}", file=log,
                  flush=True)
        child, life = successor, life + 1
    child.kill()
    # Sidecar writes a kill interrupted (removed by a later write once a minute old; the
    # ``torn`` part checks that).
    figures.note("kill_interrupted_sidecar_writes", len(temp_files(store)))
    return figures
