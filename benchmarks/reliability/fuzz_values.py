"""Hypothesis strategies of hostile values and the runner every fuzz target shares.

Values include lone surrogates (``\\ud800``), 5,000-digit numbers (written as JSON text:
Python refuses to ``str()`` such an int), NaN/Infinity, lists and objects where strings
belong, and nesting 100 to 100,000 levels deep (also only as text).
"""

from __future__ import annotations

import contextlib
import copy
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import hypothesis
from benchmarks.reliability.common import Figures
from hypothesis import HealthCheck, Phase
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir, storage_directory

import ctxfold

#: Placeholders replaced after ``json.dumps`` by text Python could not build as values.
HUGE = "\x00huge-number\x00"
DEEP = "\x00deep-nesting\x00"
DELETE = object()

SURROGATES = st.sampled_from(["\ud800", "\udfff", "\ud83d", "\ude00", "\ud83d\ude00"])
TEXT = st.one_of(
    st.text(max_size=30),
    st.lists(st.one_of(st.text(max_size=6), SURROGATES), max_size=5).map("".join),
    st.sampled_from(["", " ", "null", "0", "-1", "9" * 400, "session:tool_result", "list",
                     "call", "applied", "summary", "prune", "install", "\x00"]),
)
INTS = st.one_of(st.integers(-3, 300), st.integers(), st.integers(-(2**80), 2**80),
                 st.just(HUGE), st.just(2**63), st.just(-(2**63) - 1))
SCALARS = st.one_of(st.none(), st.booleans(), INTS, st.floats(), TEXT, st.just(DEEP))
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=10,
)
DEPTHS = st.sampled_from([100, 1000, 5000, 100_000])


def dumps(value: Any, depth: int = 1000) -> str:
    """JSON text of ``value`` with the placeholders expanded (NaN/Infinity kept as Python
    writes them: what a non-strict writer produces)."""
    text = json.dumps(value)
    text = text.replace(json.dumps(HUGE), "1" + "7" * 4999)
    return text.replace(json.dumps(DEEP), "[" * depth + "]" * depth)


def paths(doc: Any, prefix: tuple[Any, ...] = (), limit: int = 4000) -> list[tuple[Any, ...]]:
    """Every path into a JSON document (keys and list indexes), root excluded."""
    found: list[tuple[Any, ...]] = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) \
        if isinstance(doc, list) else ()
    for key, value in items:
        if len(found) >= limit:
            break
        found.append((*prefix, key))
        found.extend(paths(value, (*prefix, key), limit - len(found)))
    return found


def mutate(doc: Any, edits: list[tuple[tuple[Any, ...], Any]]) -> Any:
    """A copy of ``doc`` with each path set to its value (or deleted); stale paths skipped."""
    doc = copy.deepcopy(doc)
    for path, value in edits:
        node = doc
        try:
            for key in path[:-1]:
                node = node[key]
            if value is DELETE:
                del node[path[-1]]
            else:
                node[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue
    return doc


def edits_of(doc: Any, values: st.SearchStrategy[Any] = VALUES) -> st.SearchStrategy[Any]:
    """1–3 edits of ``doc``: a path and a hostile value (or a deletion)."""
    return st.lists(st.tuples(st.sampled_from(paths(doc)),
                              st.one_of(values, st.just(DELETE))), min_size=1, max_size=3)


@contextlib.contextmanager
def private_hypothesis_home() -> Iterator[None]:
    """Hypothesis caches constants of the source code under ``.hypothesis`` in the current
    directory even without a database: point it at a temporary directory (outside the run's
    work directory: the cache holds the fake credentials of ``common``), then back."""
    previous = storage_directory(intent_to_write=False).home_directory
    home = tempfile.mkdtemp(prefix="ctxfold-reliability-hypothesis-")
    set_hypothesis_home_dir(home)
    try:
        yield
    finally:
        set_hypothesis_home_dir(previous)
        shutil.rmtree(home, ignore_errors=True)


def run_targets(table: Mapping[str, Callable[[Any], tuple[st.SearchStrategy[Any],
                                                           Callable[[Any, Figures], None]]]],
                bench: Any, examples: int, seed: int, targets: Sequence[str],
                log: Any = None) -> Figures:
    """:func:`run_target` for each of ``targets`` (names of ``table``, each building its
    strategy and check from ``bench``), one line per target on ``log``."""
    figures = Figures()
    for name in targets:
        strategy, check = table[name](bench)
        run_target(name, strategy, check, examples, seed, figures)
        if log:
            print(f"fuzz {name}: {figures.summary_line()}", file=log, flush=True)
    return figures


def run_target(name: str, strategy: st.SearchStrategy[Any],
               check: Callable[[Any, Figures], None], examples: int, seed: int,
               figures: Figures) -> None:
    """Run ``check`` on ``examples`` values of ``strategy`` (seeded, no shrinking, no
    database: nothing is written outside the temp dirs). A ``CtxfoldError`` escaping
    ``check`` is allowed; any other exception is a crash, counted and never raised."""
    count = 0

    @hypothesis.seed(seed)
    @hypothesis.settings(max_examples=examples, deadline=None, database=None,
                         phases=[Phase.generate], suppress_health_check=list(HealthCheck),
                         print_blob=False)
    @hypothesis.given(strategy)
    def body(value: Any) -> None:
        nonlocal count
        count += 1
        try:
            check(value, figures)
        except ctxfold.CtxfoldError as exc:
            figures.note(f"fuzz_{name}_{type(exc).__name__}")
        except Exception as exc:
            figures.crash(f"fuzz {name}", exc, value)

    started = time.monotonic()
    with private_hypothesis_home():
        body()
    figures.fuzz_cases += count
    figures.note(f"fuzz_cases_{name}", count)
    figures.note(f"fuzz_seconds_{name}", round(time.monotonic() - started))
