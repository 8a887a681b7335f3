"""What the parts share: the figures they count, an offline session, tags, the CLI."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
import traceback
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ctxfold

#: Figures that must be 0 for a run to pass.
BAD = ("lost", "torn", "dups", "crashes", "stale_views", "double_commits", "mutations",
       "secrets", "failures")
#: The summary line, in this order: the issue's figures, the other bad ones, then the sizes
#: of the parts that have no figure of their own (torn-write cases, multi-process views
#: checked, files and texts scanned for secrets).
ORDER = ("kills", "lost", "torn", "fuzz_cases", "crashes", "faults", "recovered", "secrets",
         "stale_views", "dups", "double_commits", "mutations", "failures", "torn_cases",
         "views", "scanned")
#: The fake credentials the ``faults`` and ``fuzz_files`` parts put where ctxfold must mask
#: them (a ``base_url`` password, an API key in the environment or pasted into
#: ``api_key_env``); ``leaks`` greps for them.
KEY_ENV = "CTXFOLD_RELIABILITY_KEY"
API_KEY = "sk-reliability-3f9c1e7a55d04b2e8a61"
PASSWORD = "Pa55-reliability-7c1d90"
SECRETS = (API_KEY, PASSWORD)
#: Examples kept per problem signature (the rest are only counted).
EXAMPLES = 2
REPO = Path(__file__).resolve().parents[2]

#: A tag names one message the harness wrote: ``#k3-17a#`` (part letter, life or process,
#: sequence number, letter within the batch). It stays at the start of the content, so a
#: bounded or pruned tool result still shows it.
TAG = re.compile(r"#([a-z]\d+-\d+[a-z])#")
SUMMARY_HEAD = "## Goal\n- continue the harness workload\n## Commands & outcomes\n- seen:"


@dataclass
class Figures:
    """Counts of one run (or one part); ``problems`` maps a signature to its count and the
    first examples, ``notes`` are informational counts (never fail a run)."""

    kills: int = 0
    lost: int = 0
    torn: int = 0
    fuzz_cases: int = 0
    crashes: int = 0
    faults: int = 0
    recovered: int = 0
    secrets: int = 0
    stale_views: int = 0
    dups: int = 0
    double_commits: int = 0
    mutations: int = 0
    failures: int = 0
    torn_cases: int = 0
    views: int = 0
    scanned: int = 0
    notes: dict[str, int] = field(default_factory=dict)
    problems: dict[str, list[Any]] = field(default_factory=dict)

    def problem(self, kind: str, signature: str, example: str = "", count: int = 1) -> None:
        """Count ``count`` of bad figure ``kind`` under ``signature``."""
        setattr(self, kind, getattr(self, kind) + count)
        entry = self.problems.setdefault(f"{kind}: {signature}", [0, []])
        entry[0] += count
        if example and len(entry[1]) < EXAMPLES:
            entry[1].append(example)

    def crash(self, where: str, exc: BaseException, example: Any = None) -> None:
        """Count an exception that is not a :class:`ctxfold.CtxfoldError`."""
        frames = traceback.extract_tb(exc.__traceback__)
        inner = [f for f in frames if "ctxfold" in f.filename] or frames
        at = f" at {Path(inner[-1].filename).name}:{inner[-1].lineno}" if inner else ""
        text = f"{short(exc)}" + ("" if example is None else f" <- input {short(example, 300)}")
        self.problem("crashes", f"{where}: {type(exc).__name__}{at}", text)

    def note(self, name: str, count: int = 1) -> None:
        self.notes[name] = self.notes.get(name, 0) + count

    def merge(self, other: Figures) -> None:
        for name in ORDER:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name, count in other.notes.items():
            self.note(name, count)
        for signature, (count, examples) in other.problems.items():
            entry = self.problems.setdefault(signature, [0, []])
            entry[0] += count
            entry[1].extend(examples[: EXAMPLES - len(entry[1])])

    @classmethod
    def of_record(cls, record: dict[str, Any]) -> Figures:
        """The figures of a run's JSON record (``--json``)."""
        figures = cls(notes=dict(record["notes"]))
        for name in ORDER:
            setattr(figures, name, int(record["figures"][name]))
        figures.problems = {signature: [entry["count"], list(entry["examples"])]
                            for signature, entry in record["problems"].items()}
        return figures

    def bad(self) -> bool:
        return any(getattr(self, name) for name in BAD)

    def summary_line(self) -> str:
        return "reliability: " + " ".join(f"{n}={getattr(self, n)}" for n in ORDER)

    def report(self) -> list[str]:
        """One line per problem signature (with its examples), then the notes."""
        lines = []
        for signature, (count, examples) in sorted(self.problems.items()):
            lines.append(f"FAIL {signature} (x{count})")
            lines.extend(f"     e.g. {e}" for e in examples)
        if self.notes:
            lines.append("notes: " + " ".join(f"{k}={v}" for k, v in sorted(self.notes.items())))
        return lines


def short(value: Any, limit: int = 160) -> str:
    """``repr`` cut to ``limit`` characters (inputs can be megabytes)."""
    try:
        text = repr(value)
    except Exception as exc:  # a repr that fails is itself worth seeing
        text = f"<repr failed: {type(exc).__name__}>"
    return text if len(text) <= limit else text[: limit - 12] + f"…({len(text)} chars)"


def tag_summary(request: Any) -> str:
    """An offline summarizer that keeps every tag of the folded region, so a message a
    checkpoint covers is still findable in the view (its tag is in the summary)."""
    seen = dict.fromkeys(t for m in request.messages for t in TAG.findall(m.content or ""))
    return SUMMARY_HEAD + " " + " ".join(f"#{t}#" for t in seen)


def tags_of(messages: Iterable[Any]) -> list[str]:
    """The first tag of each message that has one (canonical messages carry one each)."""
    found = []
    for message in messages:
        match = TAG.search(message.content or "")
        if match:
            found.append(match.group(1))
    return found


def all_tags(messages: Iterable[Any]) -> set[str]:
    """Every tag anywhere in ``messages`` (a summary carries the tags it covers)."""
    return {t for m in messages for t in TAG.findall(m.content or "")}


def write_config(directory: Path, store: Path, extra: str = "") -> Path:
    """An offline config file: heuristic estimator, extractive summarizer, ``store``, and no
    summary cap — the harnesses fold in seconds what an agent folds in hours, and the thrash
    guard's cap would stop them (``extra`` goes on in ``[store]``)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "ctxfold.toml"
    path.write_text(
        '[estimator]\nname = "heuristic"\n[summarizer]\nname = "extractive"\n'
        "[checkpoint]\nmax_summaries_per_hour = 0\n"
        f"[store]\npath = {str(store)!r}\n{extra}"
    )
    return path


def load(path: Path) -> Any:
    """``ctxfold.load_config`` of ``path`` alone (no user file, no environment)."""
    return ctxfold.load_config(config_path=path, env={}, cwd=path.parent,
                               user_config_path=path.parent / "no-user-config.toml")


def open_quiet(session_id: str, **kwargs: Any) -> Any:
    """``ctxfold.open_session`` with its repair warnings silenced (they are expected)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ctxfold.open_session(session_id, **kwargs)


def snapshot(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def temp_files(root: Path) -> list[str]:
    """Leftover temp files of interrupted atomic writes (``.<name>.<random>.tmp``)."""
    try:
        return sorted(n for n in os.listdir(root) if n.startswith(".") and n.endswith(".tmp"))
    except FileNotFoundError:
        return []


def worker_env() -> dict[str, str]:
    """The environment of a child process: this checkout's ``benchmarks`` importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


#: The console script's target (``[project.scripts]``): the CLI has no other entry point.
CLI = "import sys; from ctxfold.cli.main import main; sys.exit(main())"


def run_cli(args: Sequence[str], *, cwd: Path, env: dict[str, str] | None = None,
            stdin: str = "", timeout: float = 120.0) -> tuple[int, str, str]:
    """``ctxfold ARGS`` in a child process; (exit code, stdout, stderr)."""
    done = subprocess.run([sys.executable, "-c", CLI, *args], cwd=cwd, env=env,
                          input=stdin, capture_output=True, text=True, timeout=timeout,
                          check=False)
    return done.returncode, done.stdout, done.stderr


def cli_in_process(args: Sequence[str]) -> tuple[int, str]:
    """``ctxfold ARGS`` in this process (fast, for many read-only calls): (exit code, output).
    An exception that escapes ``main`` is re-raised: the command would print a traceback."""
    from ctxfold.cli.main import main  # the console script's target, see CLI

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue()
