"""Fuzz target ``search``: ``use_capability`` calls of ``session:search`` and
``session:message`` as a model could write them — hostile regular expressions included
(bounded repeats side by side, nested quantifiers, alternations under a star, huge counts,
look-arounds, back-references) — over a session built to make a backtracking engine suffer
(200 KB of one letter, long lines of near-misses).

A pattern can make a regex engine run for minutes while holding the GIL, so every call runs
in a child process and is timed by the parent: a call that has not answered within
``case_seconds`` is a failure (the child is killed and a new one started). Only a
:class:`ctxfold.CtxfoldError` may escape a call; the answer is text; the transcript's bytes
never change. After :data:`MAX_HANGS` calls that hung, the target stops (the rest of its
cases would only hang too) and says how many it skipped.
"""

from __future__ import annotations

import multiprocessing
import random
import time
import traceback
from pathlib import Path
from typing import Any

from benchmarks.reliability.common import Figures, load, open_quiet, short, tag_summary
from benchmarks.reliability.common import write_config as offline_config
from benchmarks.reliability.fuzz_values import INTS, TEXT, VALUES, run_target
from benchmarks.reliability.worker import call, filler, result, user
from hypothesis import strategies as st

import ctxfold

WINDOW = 40_000
SESSION = "search"
#: A call that has not answered after this long hangs (the documented deadline of a search
#: is a few seconds; this leaves room for a loaded machine).
CASE_SECONDS = 10.0
MAX_HANGS = 3

#: Patterns that backtrack for minutes in Python's ``re`` on the texts below.
HOSTILE = [
    "a{0,2000}a{0,2000}b", "a{0,5000}a{0,5000}a{0,5000}c", "(a+)+$", "(a|aa)*c", "(a|a?)+b",
    "(.*a){25}", "(?:a*)*b", "((a{1,100}){1,100}){1,100}x", "(x+x+)+y", "(a*)*b",
    "[\\s\\S]{0,5000}z", "(?:\\S+\\s+){0,1000}end", "(.{0,500}){0,500}q", "a{1000000}",
    "(?=(a*))\\1b", "(a)\\1*z", "(\\w+\\s?)+$", "^(([a-z])+.)+[A-Z]([a-z])+$",
    "(?:a|b|ab|ba)*c", "(a{2,}){2,}b", ".*.*.*.*.*.*.*.*=", "(?i)(?:a|A)*[^a]",
    "a" * 255 + "b", "(" * 100 + "a" + ")*" * 100 + "b",
]
ATOMS = ["a", "b", ".", "\\w", "\\s", "\\S", "[a-z]", "[^b]", "x", "(?:a|aa)", "(a)", "\\d",
         "(?=a)", "\\1", "[\\s\\S]"]
QUANTIFIERS = ["", "*", "+", "?", "*?", "{0,2000}", "{1,100}", "{2,}", "{1000}", "{0,50000}"]


def regexes() -> st.SearchStrategy[str]:
    """Hostile patterns, and patterns composed of atoms, quantifiers, groups and
    alternations (nested at random)."""
    piece = st.tuples(st.sampled_from(ATOMS), st.sampled_from(QUANTIFIERS)).map("".join)
    composed = st.recursive(
        st.lists(piece, min_size=1, max_size=4).map("".join),
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from(QUANTIFIERS)).map(lambda t: f"({t[0]}){t[1]}"),
            st.lists(inner, min_size=2, max_size=3).map("|".join),
            st.lists(inner, min_size=2, max_size=3).map("".join)),
        max_leaves=6)
    return st.one_of(st.sampled_from(HOSTILE), composed, TEXT)


def arguments() -> st.SearchStrategy[Any]:
    refs = st.one_of(st.sampled_from(["#0", "#3", "#5", "#999", "#-1", "c1", "", "#"]), TEXT,
                     VALUES)
    numbers = st.one_of(INTS, st.sampled_from([0, 1, 50, 51, 10**6, -1]), VALUES)
    search = st.fixed_dictionaries(
        {"query": st.one_of(regexes(), TEXT, VALUES)},
        optional={"regex": st.one_of(st.just(True), st.booleans(), VALUES),
                  "role": st.one_of(st.sampled_from(["tool", "user", "assistant", "x"]),
                                    VALUES),
                  "before": refs, "offset": numbers, "limit": numbers})
    regex_search = st.fixed_dictionaries({"query": regexes(), "regex": st.just(True)},
                                         optional={"role": st.just("tool"),
                                                   "limit": numbers})
    message = st.fixed_dictionaries({"ref": refs},
                                    optional={"offset": numbers, "limit": numbers})
    return st.one_of(
        st.fixed_dictionaries({"action": st.just("call"),
                               "capability_id": st.just("session:search"),
                               "arguments": st.one_of(regex_search, regex_search, search)}),
        st.fixed_dictionaries({"action": st.just("call"),
                               "capability_id": st.just("session:message"),
                               "arguments": message}),
        VALUES)


def texts(rng: random.Random) -> list[dict[str, Any]]:
    """The session: texts on which backtracking explodes, and ordinary ones."""
    near = ("a" * 60 + " ") * 3000  # long runs of the letter, never the 'b' they ask for
    return [
        {"role": "system", "content": "#s0-0a# You are a test agent."},
        user("s0-0b", "search the history"),
        call("s0-1a", "c1"), result("s0-1b", "c1", "a" * 200_000),
        call("s0-2a", "c2"), result("s0-2b", "c2", near),
        call("s0-3a", "c3"), result("s0-3b", "c3", filler(rng, 100_000) + " end"),
        {"role": "assistant", "content": "#s0-4a# " + "x" * 5000 + " xy " + "ab" * 2000},
    ]


def serve(connection: Any, work: str) -> None:
    """The child: answer each case sent on ``connection`` with what the call did."""
    config = load(offline_config(Path(work), Path(work) / "sessions"))
    cm = open_quiet(SESSION, config=config, window=WINDOW, summarize=tag_summary,
                    create=True)
    if not cm.canonical:
        for message in texts(random.Random(7)):
            cm.append(message)
    transcript = Path(work) / "sessions" / f"{SESSION}.jsonl"
    before = transcript.read_bytes()
    connection.send({"ready": True})
    while True:
        args = connection.recv()
        started = time.monotonic()
        outcome: dict[str, Any] = {}
        try:
            answer = cm.use_capability(args)
            outcome["text"] = isinstance(answer, str)
        except ctxfold.CtxfoldError as exc:
            outcome["ctxfold"] = type(exc).__name__
        except Exception as exc:  # reported to the parent, which counts it
            frames = traceback.extract_tb(exc.__traceback__)
            inner = [f for f in frames if "ctxfold" in f.filename] or frames
            outcome["crash"] = type(exc).__name__
            outcome["msg"] = str(exc)[:200]
            outcome["at"] = f"{Path(inner[-1].filename).name}:{inner[-1].lineno}" if inner \
                else ""
        outcome["seconds"] = time.monotonic() - started
        outcome["mutated"] = transcript.read_bytes() != before
        connection.send(outcome)


class Child:
    """The child process that runs the calls; restarted after a hang."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.context = multiprocessing.get_context("spawn")
        self.process: Any = None
        self.connection: Any = None
        self.start()

    def start(self) -> None:
        parent, child = self.context.Pipe()
        self.process = self.context.Process(target=serve, args=(child, str(self.work)),
                                            daemon=True)
        self.process.start()
        self.connection = parent
        if not parent.poll(120):
            raise RuntimeError("the search fuzz child did not start within 120 s")
        parent.recv()

    def run(self, args: Any, seconds: float) -> dict[str, Any] | None:
        """What the call did, or ``None`` when it had not answered after ``seconds``."""
        self.connection.send(args)
        if self.connection.poll(seconds):
            outcome: dict[str, Any] = self.connection.recv()
            return outcome
        self.stop()
        self.start()
        return None

    def stop(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.process.kill()
        if self.process is not None:
            self.process.join(10)


def search_target(child: Child, case_seconds: float) -> tuple[Any, Any]:
    hangs = 0
    skipped = 0

    def check(args: Any, figures: Figures) -> None:
        nonlocal hangs, skipped
        if hangs >= MAX_HANGS:
            skipped += 1
            return
        started = time.monotonic()
        outcome = child.run(args, case_seconds)
        if outcome is None:
            hangs += 1
            figures.problem("failures", f"use_capability did not answer within "
                            f"{case_seconds:g} s (the call hung)", short(args, 300))
            if hangs == MAX_HANGS:
                figures.note("fuzz_search_stopped_after_hangs")
            return
        if time.monotonic() - started > 1.0:
            figures.note("fuzz_search_calls_over_1s")
        if "crash" in outcome:
            figures.problem("crashes", f"fuzz search: {outcome['crash']} at {outcome['at']}",
                            f"{outcome['msg']} <- input {short(args, 300)}")
        elif "ctxfold" in outcome:
            figures.note(f"fuzz_search_{outcome['ctxfold']}")
        elif not outcome.get("text"):
            figures.problem("failures", "use_capability answered with a non-string",
                            short(args))
        if outcome.get("mutated"):
            figures.problem("mutations", "use_capability changed the transcript",
                            short(args))

    def skipped_cases() -> int:
        return skipped

    check.skipped = skipped_cases  # type: ignore[attr-defined]
    return arguments(), check


def run(examples: int, work: Path, *, seed: int = 0, case_seconds: float = CASE_SECONDS,
        log: Any = None) -> Figures:
    figures = Figures()
    work.mkdir(parents=True, exist_ok=True)
    child = Child(work)
    try:
        strategy, check = search_target(child, case_seconds)
        run_target("search", strategy, check, examples, seed, figures)
        skipped = check.skipped()
        if skipped:
            figures.problem("failures", f"fuzz search stopped after {MAX_HANGS} hung calls",
                            f"{skipped} of {examples} cases not run")
            figures.fuzz_cases -= skipped
            figures.notes["fuzz_cases_search"] -= skipped
    finally:
        child.stop()
    if log:
        print(f"fuzz search: {figures.summary_line()}", file=log, flush=True)
    return figures
