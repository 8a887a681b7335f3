"""The reliability harness (``benchmarks/reliability``, docs/reliability.md).

The checks themselves are tested first, on made-up evidence, so that a harness that can no
longer see a lost message, a torn batch, a stale view, a double commit, a wedged session, a
crash, a hung call, a proxy's unhandled exception or a leaked credential fails here (fast, in
the main suite). The bounded run is ``slow``: CI runs the harness in its own step
(``python -m benchmarks.reliability --kills 1000 --fuzz 1200 --jobs 2``).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from benchmarks.reliability import fuzz_proxy, fuzz_search, kill, leaks, processes
from benchmarks.reliability.common import API_KEY, KEY_ENV, PASSWORD, Figures
from benchmarks.reliability.fuzz_values import run_target
from benchmarks.reliability.run import main
from hypothesis import strategies as st

import ctxfold


def session(*tags: str) -> SimpleNamespace:
    """A stand-in for a reopened session whose canonical messages carry ``tags``."""
    return SimpleNamespace(session_id="s", canonical=[
        ctxfold.Message(role="user", content=f"#{t}# text") for t in tags])


def test_the_kill_check_sees_lost_torn_duplicated_and_phantom_messages() -> None:
    figures = Figures()
    ledger = kill.Ledger(batches=[["k0-1a", "k0-1b"], ["k0-2a"]], absent={"k0-9a"})
    assert kill.check(session("k0-1a", "k0-1b", "k0-2a"), ledger, [], figures) == 0
    assert not figures.bad()
    kill.check(session("k0-1a", "k0-2a", "k0-3a"), ledger, ["k0-3a", "k0-3b"], figures)
    assert figures.lost == 1 and figures.torn == 1
    figures = Figures()
    kill.check(session("k0-1a", "k0-1b", "k0-2a", "k0-2a", "k0-9a", "k0-7a"), ledger, [],
               figures)
    assert figures.dups == 1
    assert figures.failures == 2  # an append that raised landed; a message never written
    figures = Figures()
    kill.check(session("k0-1a", "k0-2a", "k0-1b"), kill.Ledger(batches=[["k0-1a", "k0-1b"]]),
               [], figures)
    assert figures.torn == 1  # an acknowledged batch split by another message


def test_an_unacknowledged_batch_that_landed_whole_is_expected_from_then_on() -> None:
    figures = Figures()
    ledger = kill.Ledger(batches=[["k0-1a"]])
    assert kill.check(session("k0-1a", "k0-2a", "k0-2b"), ledger, ["k0-2a", "k0-2b"],
                      figures) == 0
    assert ledger.batches[-1] == ["k0-2a", "k0-2b"]
    kill.check(session("k0-1a"), ledger, [], figures)
    assert figures.lost == 2


def test_the_process_checks_see_stale_views_losses_and_double_commits() -> None:
    figures = Figures()
    acks = [(5, ["p1-0a"]), (20, ["p2-0a"])]
    preps = [{"prep": 10, "tags": ["p1-0a"], "proc": 2},  # p2-0a came later: fine
             {"prep": 30, "tags": ["p1-0a"], "proc": 1}]  # p2-0a committed before: stale
    processes.check_views(acks, preps, figures)
    assert figures.stale_views == 1 and figures.views == 2
    processes.check_disk(["p1-0a", "p2-0b", "p2-0a", "p2-0a"],
                         [(1, ["p1-0a"]), (2, ["p2-0a", "p2-0b"]), (2, ["p2-1a"])], figures)
    assert figures.lost == 1 and figures.dups == 1
    assert figures.failures == 1  # process 2's messages out of its own order
    done = [{"action": "summary", "receipt": ["op1", "applied", 3]},
            {"action": "prune", "receipt": ["op2", "applied", 3]},
            {"action": "none", "receipt": ["op3", "applied", 4]}]
    processes.check_generations(done, figures)
    assert figures.double_commits == 1


def test_a_session_no_fresh_process_can_prepare_is_reported_wedged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    class Wedged:
        def append(self, *_messages: object) -> None:
            pass

        def prepare(self) -> None:
            raise ctxfold.CompactionRequiredError("request of 42990 tokens is at or above the "
                                                  "hard ceiling")

    monkeypatch.setattr(processes, "open_quiet", lambda *_a, **_k: Wedged())
    figures = Figures()
    processes.check_wedged(None, figures)
    assert figures.failures == 1
    assert "failures: the session is wedged after the run: CompactionRequiredError" in (
        figures.problems)


class Hanging:
    """A stand-in for the search fuzz child: answers from a script; ``None`` is a hang."""

    def __init__(self, *outcomes: dict[str, object] | None) -> None:
        self.outcomes = list(outcomes)

    def run(self, _args: object, _seconds: float) -> dict[str, object] | None:
        return self.outcomes.pop(0) if self.outcomes else {"text": True, "mutated": False}


def test_the_search_target_counts_hangs_crashes_and_mutations_and_stops_after_hangs() -> None:
    child = Hanging({"text": True, "mutated": True},
                    {"crash": "ValueError", "msg": "boom", "at": "session_search.py:9",
                     "mutated": False},
                    *[None] * fuzz_search.MAX_HANGS)
    _strategy, check = fuzz_search.search_target(child, 1.0)  # type: ignore[arg-type]
    figures = Figures()
    for n in range(2 + fuzz_search.MAX_HANGS + 4):
        check({"case": n}, figures)
    assert figures.mutations == 1 and figures.crashes == 1
    assert figures.failures == fuzz_search.MAX_HANGS
    assert "failures: use_capability did not answer within 1 s (the call hung)" in (
        figures.problems)
    assert check.skipped() == 4  # type: ignore[attr-defined]


class FakeProxy:
    """A stand-in for the proxy under fuzzing: answers from a script."""

    def __init__(self, *answers: tuple[int, str, bytes] | None, log: str = "") -> None:
        self.answers = list(answers)
        self.log = log
        self.restarts = 0

    def send(self, method: str, *_args: object) -> tuple[int, str, bytes] | None:
        if method == "GET":
            return 200, "application/json", b"{}"
        return self.answers.pop(0)

    def new_log(self) -> str:
        log, self.log = self.log, ""
        return log

    def alive(self) -> bool:
        return True

    def stop(self) -> None:
        self.restarts += 1

    def start(self) -> None:
        pass


def request() -> dict[str, object]:
    return {"path": "/v1/chat/completions", "content_type": "application/json", "headers": {},
            "body": b"[[[]]]"}


def test_the_proxy_target_sees_500s_tracebacks_bad_error_shapes_and_hangs() -> None:
    traceback = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
                 "RecursionError: maximum recursion depth exceeded\nINFO next line\n")
    proxy = FakeProxy((500, "text/plain", b"Internal Server Error"),
                      (200, "application/json", b"{}"),
                      (400, "text/plain", b"bad"),
                      (400, "application/json", b'{"error": {"message": "no"}}'),
                      None, log=traceback)
    _strategy, check = fuzz_proxy.proxy_target(proxy, 1.0)  # type: ignore[arg-type]
    figures = Figures()
    for _ in range(5):
        check(request(), figures)
    assert figures.crashes == 1  # the 500 is named by the traceback logged with it
    assert "crashes: fuzz proxy: RecursionError: maximum recursion depth exceeded" in (
        figures.problems)
    assert figures.failures == 2  # a plain-text error, and a request never answered
    assert proxy.restarts == 1
    assert fuzz_proxy.exception_of("INFO fine\n") == ""


def test_figures_read_back_from_a_json_record() -> None:
    figures = Figures(kills=3, lost=1)
    figures.problem("failures", "x", "e.g.")
    figures.note("n", 2)
    record = {"figures": {n: getattr(figures, n) for n in ("kills", "lost", "torn",
              "fuzz_cases", "crashes", "faults", "recovered", "secrets", "stale_views",
              "dups", "double_commits", "mutations", "failures", "torn_cases", "views",
              "scanned")}, "notes": figures.notes,
              "problems": {k: {"count": v[0], "examples": v[1]}
                           for k, v in figures.problems.items()}}
    again = Figures.of_record(json.loads(json.dumps(record)))
    assert again == figures


def test_a_fuzz_target_counts_only_non_ctxfold_exceptions_as_crashes() -> None:
    figures = Figures()

    def check(value: int, _figures: Figures) -> None:
        if value % 3 == 0:
            raise ValueError("boom")
        if value % 3 == 1:
            raise ctxfold.MessageError("refused")

    run_target("demo", st.integers(0, 10**6), check, 60, 0, figures)
    assert figures.fuzz_cases == 60
    assert 0 < figures.crashes < 60
    assert any(key.startswith("crashes: fuzz demo: ValueError") for key in figures.problems)
    assert figures.notes.get("fuzz_demo_MessageError", 0) > 0


def test_the_secrets_grep_finds_credentials_in_files_and_texts(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "ctxfold.toml").write_text(f'base_url = "http://u:{PASSWORD}@h"')
    (tmp_path / "a" / "clean.jsonl").write_text('{"content": "nothing here"}\n')
    assert leaks.scan(tmp_path, [("error", "http://***@host")]).secrets == 0
    (tmp_path / "a" / "s.context.json").write_text(json.dumps({"x": f"{API_KEY}"}))
    (tmp_path / "stderr-3.txt").write_bytes(f"GET http://u:{PASSWORD}@h\n".encode())
    found = leaks.scan(tmp_path, [("stderr", f"key {API_KEY}")])
    assert found.secrets == 3 and found.scanned == 4


def test_the_entry_point_exits_non_zero_and_prints_one_summary_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, API_KEY)  # main() sets it; restored after the test
    (tmp_path / "leak.log").write_text(f"Authorization: Bearer {API_KEY}\n")
    assert main(["--parts", "leaks", "--work", str(tmp_path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("reliability: kills=0 lost=0 torn=0 fuzz_cases=0 crashes=0 ")
    assert " secrets=1 " in out[-1]
    assert any(line.startswith("FAIL secrets: a credential") for line in out)
    (tmp_path / "leak.log").unlink()
    assert main(["--parts", "leaks", "--work", str(tmp_path)]) == 0


@pytest.mark.slow
def test_bounded_harness_run(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Every part at a small size (about two minutes on 2 cores): all bad figures 0."""
    monkeypatch.setenv(KEY_ENV, API_KEY)
    report = tmp_path / "figures.json"
    code = main(["--kills", "20", "--fuzz", "150", "--torn", "40", "--faults", "50",
                 "--rounds", "2", "--turns", "20", "--jobs", "2", "--seed", "1", "--work",
                 str(tmp_path / "work"), "--json", str(report)])
    out = capsys.readouterr().out
    figures = json.loads(report.read_text())["figures"]
    assert code == 0, out
    assert figures["kills"] >= 20 and figures["fuzz_cases"] >= 9 * 100
    assert figures["faults"] > 0 and figures["views"] > 0 and figures["scanned"] > 0
    assert out.splitlines()[-1].startswith("reliability: kills=")
