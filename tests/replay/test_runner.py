"""The replay runner: cost arithmetic, overflow, invariants, JSON/HTML reports, the CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ctxfold import Config, ImportedSession, Message, Registry, ReplaySettings, RequestShape, Usage
from ctxfold.emulator.cache import PrefixCache
from ctxfold.emulator.tokens import ASSISTANT, BOS, EOS, USER, encode_segments, request_segments
from ctxfold.plugins.summarizers.extractive import ExtractiveSummarizer
from ctxfold.replay import DEFAULT_RESERVE_OUTPUT, replay_sessions
from ctxfold.replay.demo import DEMO_WINDOW, demo_session
from ctxfold.replay.pricing import Price
from ctxfold.replay.report_html import report_html
from ctxfold.replay.report_json import report_json
from ctxfold.replay.runner import replay_session

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMA = REPO_ROOT / "docs" / "replay.schema.json"


class CharTokens:
    """One token id per character."""

    def encode(self, text: str) -> tuple[int, ...]:
        return tuple(ord(c) for c in text)


class TemplateEstimator:
    """Counts exactly the emulator template's characters, so prompt tokens == cache ids."""

    name = "template"

    def estimate(self, shape: RequestShape) -> int:
        return len(encode_segments(CharTokens(), request_segments(shape.messages, shape.tools)))

    def calibrate(self, shape: RequestShape, usage: Usage) -> bool:
        return False

    def reset_calibration(self) -> None:
        pass


PRICE = Price(name="t", model="t", hit=1.0, miss=10.0, output=100.0, emulator_profile="deepseek",
              source="test", date="")


@pytest.fixture(scope="module")
def registry() -> Registry:
    return Registry.from_config(load_entry_points=False)


def tiny_replay(registry: Registry, messages: list[Message], window: int = 100_000,
                names: tuple[str, ...] = ("append-only",), reserve_output: int = 0) -> Any:
    session = ImportedSession(name="tiny", messages=tuple(messages),
                              reported_usage=(None,) * len(messages))
    return replay_session(
        session, names, registry=registry,
        config=Config(),
        estimator=TemplateEstimator(), summarizer=ExtractiveSummarizer(), price=PRICE,
        window=window, compact_ratio=0.8, tokens=CharTokens(), reserve_output=reserve_output,
        cache_factory=lambda _p: (PrefixCache(unit=1, clock=lambda: 0.0), False),
    )


def test_cost_arithmetic_on_a_tiny_session(registry: Registry) -> None:
    messages = [Message(role="system", content="sys"), Message(role="user", content="hello"),
                Message(role="assistant", content="ok1"), Message(role="user", content="more"),
                Message(role="assistant", content="ok2")]
    session = tiny_replay(registry, messages)
    result = session.policies["append-only"]
    b, u, a = len(BOS), len(USER), len(ASSISTANT)
    p1 = b + 3 + (u + 5) + a                 # BOS sys <User>hello <Assistant>
    out1 = len("ok1") + len(EOS)
    p2 = p1 + out1 + (u + 4) + a             # ... ok1<eos> <User>more <Assistant>
    out2 = len("ok2") + len(EOS)
    hit2 = p1 + out1                         # input + output of request 1 was persisted
    assert (result.requests, result.prompt_tokens) == (2, p1 + p2)
    assert result.cache_hit_tokens == hit2
    assert result.cache_miss_tokens == p1 + (p2 - hit2)
    assert result.output_tokens == out1 + out2
    expected = (hit2 * 1.0 + (p1 + p2 - hit2) * 10.0 + (out1 + out2) * 100.0) / 1e6
    assert result.cost_usd == pytest.approx(expected)
    assert result.prefix_stable_between_installs and result.canonical_intact
    assert not result.failed
    # The breakdown adds up: no summaries, so everything is main input and output.
    parts = result.breakdown
    assert parts.main_hit_usd == pytest.approx(hit2 * 1.0 / 1e6)
    assert parts.main_output_usd == pytest.approx((out1 + out2) * 100.0 / 1e6)
    assert parts.main_hit_usd + parts.main_miss_usd + parts.main_output_usd == \
        pytest.approx(expected)
    assert parts.summary_input_usd == parts.summary_output_usd == 0
    # Per-request records: numbered from 1, summing to the policy's totals.
    assert [r.number for r in result.records] == [1, 2]
    assert [r.message_index for r in result.records] == [2, 4]
    assert sum(r.cost_usd for r in result.records) == pytest.approx(expected)
    assert [r.prompt_tokens for r in result.records] == [p1, p2]
    # With a perfect (1-token unit) cache, resending everything costs exactly `unlimited`.
    assert session.unlimited_cost_usd == pytest.approx(expected)


class _Vandal:
    """A policy that rewrites history without declaring an install (and loses a message)."""

    name = "vandal"

    def __init__(self, prompt: int = 5000, briefing: str = "brief") -> None:
        self.seen: list[Message] = []
        self.prompt, self.briefing = prompt, briefing

    def observe(self, message: Message) -> None:
        self.seen.append(message)

    def request(self) -> Any:
        from ctxfold import PolicyRequest

        edited = [Message(role=m.role, content=m.content + "!") if m.role == "user" else m
                  for m in self.seen]
        return PolicyRequest(messages=tuple(edited[-3:]))

    def canonical(self) -> tuple[Message, ...]:
        return tuple(self.seen[1:])


def test_broken_invariants_are_detected() -> None:
    from ctxfold import StrategySpec, hookimpl

    class Plugin:
        @hookimpl
        def ctxfold_policies(self):
            return [StrategySpec(name="vandal", factory=lambda ctx: _Vandal())]

    registry = Registry.from_config(load_entry_points=False, extra_plugins=[Plugin()])
    messages = [Message(role="system", content="sys"), Message(role="user", content="a"),
                Message(role="assistant", content="1"), Message(role="user", content="b"),
                Message(role="assistant", content="2"), Message(role="user", content="c"),
                Message(role="assistant", content="3")]
    result = tiny_replay(registry, messages, names=("vandal",)).policies["vandal"]
    assert not result.canonical_intact
    assert not result.prefix_stable_between_installs


def test_unlimited_is_what_append_only_pays_with_a_perfect_cache(registry: Registry) -> None:
    settings = ReplaySettings(window=10_000_000, policies=("append-only",))
    [result] = replay_sessions([demo_session(rounds=40)], settings, registry=registry)
    cost = result.policies["append-only"].cost_usd
    assert result.unlimited_cost_usd <= cost <= result.unlimited_cost_usd * 1.10
    assert result.policies["append-only"].fidelity.mean == 1.0  # it keeps everything


def test_append_only_overflow_is_reported_as_failed(registry: Registry) -> None:
    messages = [Message(role="system", content="s"), Message(role="user", content="u" * 400),
                Message(role="assistant", content="a" * 10),
                Message(role="user", content="x" * 400), Message(role="assistant", content="b")]
    result = tiny_replay(registry, messages, window=600).policies["append-only"]
    assert result.failed and "above the input budget of 600" in result.failure
    assert result.requests == 1  # the run stopped at the overflowing request


def test_the_output_reservation_applies_to_every_request(registry: Registry) -> None:
    """A request that fits the window but not the window minus the reservation overflows."""
    messages = [Message(role="system", content="s"), Message(role="user", content="u" * 400),
                Message(role="assistant", content="a")]
    fits = tiny_replay(registry, messages, window=600).policies["append-only"]
    assert not fits.failed
    reserved = tiny_replay(registry, messages, window=600, reserve_output=300)
    result = reserved.policies["append-only"]
    assert result.failed
    assert "input budget of 300 (window 600 minus the 300-token output reservation)" in \
        result.failure


class _BigSummary:
    """A policy whose one summary request is larger than the budget."""

    name = "big-summary"

    def __init__(self, prompt: int = 5000, briefing: str = "brief") -> None:
        self.seen: list[Message] = []
        self.prompt, self.briefing = prompt, briefing

    def observe(self, message: Message) -> None:
        self.seen.append(message)

    def request(self) -> Any:
        from ctxfold import PolicyRequest, SummaryCall, SummaryRequest

        huge = SummaryRequest(messages=(Message(role="user", content="z" * self.prompt),),
                              tools=(), max_tokens=100)
        return PolicyRequest(messages=tuple(self.seen[-1:]),
                             summaries=(SummaryCall(request=huge, text=self.briefing),),
                             installed=True)

    def canonical(self) -> None:
        return None


def test_a_summary_request_over_the_budget_is_an_overflow() -> None:
    from ctxfold import StrategySpec, hookimpl

    class Plugin:
        @hookimpl
        def ctxfold_policies(self):
            return [StrategySpec(name="big-summary",
                                 factory=lambda ctx: _BigSummary())]

    registry = Registry.from_config(load_entry_points=False, extra_plugins=[Plugin()])
    messages = [Message(role="user", content="go"), Message(role="assistant", content="ok")]
    result = tiny_replay(registry, messages, window=3000,
                         names=("big-summary",)).policies["big-summary"]
    assert result.failed and result.failure.startswith("the summary request before request 1")


def test_a_summary_whose_briefing_does_not_fit_the_reservation_is_an_overflow() -> None:
    from ctxfold import StrategySpec, hookimpl

    def run(briefing: str) -> Any:
        class Plugin:
            @hookimpl
            def ctxfold_policies(self):
                return [StrategySpec(name="big-summary",
                                     factory=lambda ctx: _BigSummary(2500, briefing))]

        registry = Registry.from_config(load_entry_points=False, extra_plugins=[Plugin()])
        messages = [Message(role="user", content="go"), Message(role="assistant", content="ok")]
        return tiny_replay(registry, messages, window=3000, reserve_output=300,
                           names=("big-summary",)).policies["big-summary"]

    # The prompt fits the input budget (2,700) either way; the briefing must fit what is left.
    assert not run("b" * 100).failed
    long = run("b" * 800)
    assert long.failed and "exceed the 3,000-token window" in long.failure


@pytest.fixture(scope="module")
def demo_results(registry: Registry) -> list[Any]:
    settings = ReplaySettings(window=DEMO_WINDOW)
    return replay_sessions([demo_session()], settings, registry=registry)


def test_ctxfold_keeps_all_invariants_on_the_demo(demo_results: list[Any]) -> None:
    result = demo_results[0].policies["ctxfold"]
    assert not result.failed, result.failure
    assert result.summaries > 0  # the demo window forces maintenance
    assert result.canonical_intact
    assert result.max_visible_summaries <= 1
    assert result.prefix_stable_between_installs
    assert result.max_request_tokens < DEMO_WINDOW


def test_every_request_is_billed_consistently(demo_results: list[Any]) -> None:
    for name, result in demo_results[0].policies.items():
        assert result.cache_hit_tokens + result.cache_miss_tokens == result.prompt_tokens, name
        for record in result.records:
            assert record.hit_tokens + record.miss_tokens == record.prompt_tokens
        assert sum(r.cost_usd for r in result.records) == pytest.approx(result.cost_usd)
        parts = result.breakdown
        assert sum(parts.as_dict().values()) == pytest.approx(result.cost_usd, abs=1e-7)
        if not result.failed:  # every request of a completing policy fits the input budget
            assert result.max_request_tokens <= DEMO_WINDOW - DEFAULT_RESERVE_OUTPUT, name


def test_json_report_matches_the_schema(demo_results: list[Any]) -> None:
    schema = json.loads(SCHEMA.read_text())
    report = json.loads(json.dumps(report_json(
        demo_results, profile="deepseek-flash", window=DEMO_WINDOW, reserve_output=4096,
        summary_tokens=2048, per_request=True, missing={"x": "needs y"})))
    jsonschema = pytest.importorskip("jsonschema")  # a dev dependency: always there in CI
    jsonschema.validate(report, schema)
    assert set(report["totals"]) == set(report["sessions"][0]["policies"])
    ctxfold = report["sessions"][0]["policies"]["ctxfold"]
    assert len(ctxfold["per_request"]) == ctxfold["requests"] - ctxfold["summaries"]
    assert 0 < ctxfold["fidelity"]["mean"] <= 1
    assert report["references"]["unlimited"]["cost_usd"] > 0
    assert report["sessions"][0]["policies"]["append-only"]["failure"].startswith("request ")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**report, "extra": 1}, schema)
    broken = json.loads(json.dumps(report))
    first = next(iter(broken["totals"]))
    broken["totals"][first]["cost_usd"] = "cheap"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)
    without = report_json(demo_results, profile="deepseek-flash", window=DEMO_WINDOW)
    assert "per_request" not in without["sessions"][0]["policies"]["ctxfold"]


def _chromium() -> str:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        if os.environ.get("CTXFOLD_REQUIRE_BROWSER"):
            pytest.fail("chromium is required here (CTXFOLD_REQUIRE_BROWSER) but not installed")
        pytest.skip("chromium is not installed: the browser check was not run (CI installs "
                    "it and sets CTXFOLD_REQUIRE_BROWSER, so there it runs)")
    return chromium


def test_html_report_is_self_contained_and_renders(demo_results: list[Any],
                                                  tmp_path: Path) -> None:
    page = report_html(demo_results, profile="deepseek-flash", window=DEMO_WINDOW,
                       reserve_output=4096)
    assert "<svg" in page and "ctxfold" in page
    for attr in ("src=", "href="):
        for scheme in ("http://", "https://", "//"):
            assert f'{attr}"{scheme}' not in page and f"{attr}'{scheme}" not in page
    assert "<script" not in page and "<link" not in page
    names = list(demo_results[0].policies)
    chromium = _chromium()
    path = tmp_path / "report.html"
    path.write_text(page)
    shot = tmp_path / "shot.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--no-first-run"]
    subprocess.run([chromium, *flags, f"--screenshot={shot}", "--window-size=1200,2000",
                    path.as_uri()], check=True, timeout=120, capture_output=True)
    assert shot.stat().st_size > 10_000
    # What the browser actually built: every chart is there and has drawn data in it.
    dom = subprocess.run([chromium, *flags, "--dump-dom", path.as_uri()], check=True,
                         timeout=120, capture_output=True, text=True).stdout
    # totals: breakdown + cost x fidelity; per session: size, fidelity, cost, one per policy
    assert dom.count("<svg") == 2 + 3 + len(names)
    assert dom.count('class="line reactive nofill"') >= 3 * (len(names) - 1)
    assert dom.count('class="rect reactive') > len(names)  # bars were drawn
    for title in ("Cost breakdown per policy", "Cost × continuation facts",
                  "Request size (tokens)", "Continuation facts per request", "Cumulative cost"):
        assert f"<h3>{title}" in dom, title
    for name in names:  # every policy is named in a legend, outside the charts
        assert '<span class="key">' in dom and f"</span>{name}</span>" in dom, name
    assert "…" not in dom  # no axis label truncated by the chart library


def test_hit_miss_chart_labels_round_request_numbers_untruncated() -> None:
    import re

    from ctxfold.replay.report_html import hit_miss_chart
    from ctxfold.replay.results import PolicyResult, RequestRecord

    r = PolicyResult()
    r.records.extend(RequestRecord(
        number=i, message_index=i, prompt_tokens=1000, hit_tokens=600, output_tokens=10,
        summary_calls=0, summary_prompt_tokens=0, summary_hit_tokens=0,
        summary_output_tokens=0, view_messages=3, fidelity=None, cost_usd=0.0)
        for i in range(1, 189))
    svg = hit_miss_chart(r, 60_000)
    labels = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    assert "…" not in svg
    ticks = [t for t in labels if t.isdigit() and 0 < int(t) < 1000]
    assert ticks == ["25", "50", "75", "100", "125", "150", "175"]


def test_the_pareto_front_holds_only_policies_that_completed() -> None:
    from ctxfold.replay.fidelity import FidelitySummary
    from ctxfold.replay.report_text import cost_points, pareto_front
    from ctxfold.replay.results import PolicyResult
    from ctxfold.replay.retention import Counts, RetentionSummary

    def result(cost: float, kept: float, failed: bool = False) -> PolicyResult:
        # The front is drawn on continuation facts, not on the probe score (inverted here).
        return PolicyResult(cost_usd=cost, failed=failed,
                            fidelity=FidelitySummary(mean=1 - kept),
                            retention=RetentionSummary(Counts(facts_due=100,
                                                              facts_kept=int(kept * 100))))

    results = {"ctxfold": result(1.0, 0.9), "cheap-partial": result(0.5, 0.95, failed=True),
               "peer": result(0.8, 0.7)}
    costs = {"ctxfold": 1.0, "cheap-partial": 0.5, "peer": 0.8}
    assert set(cost_points(results, costs)) == set(results)  # plotted, all of them
    # A partial run "beats" both on cost and fidelity, but its figures cover other sessions.
    assert pareto_front(results, costs) == {"ctxfold", "peer"}


def test_cli_demo_on_a_pipe_prints_only_the_report(tmp_path: Path) -> None:
    out_json = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "ctxfold.cli.main", "replay", "--demo", "--policy",
         "ctxfold,append-only", "--json", str(out_json)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("demo — ")
    assert "\x1b[" not in proc.stdout  # no colour codes on a pipe
    assert any(line.lstrip("│| ").startswith("ctxfold") for line in lines)
    assert "totals" in proc.stdout
    data = json.loads(out_json.read_text())
    assert set(data["totals"]) == {"ctxfold", "append-only"}
    assert data["sessions"][0]["policies"]["append-only"]["failed"] is True


def test_cli_rejects_an_unknown_policy(tmp_path: Path) -> None:
    from ctxfold.cli.main import main

    assert main(["replay", "--demo", "--policy", "nope"]) == 2  # a usage error


def test_fidelity_sees_what_a_sliding_window_forgets(demo_results: list[Any]) -> None:
    policies = demo_results[0].policies
    assert policies["ctxfold"].fidelity.constraints == 1.0  # the pinned head keeps the task
    assert policies["truncate-oldest"].fidelity.constraints < 0.5
    assert policies["truncate-oldest"].fidelity.mean < policies["ctxfold"].fidelity.mean


def test_costs_are_compared_with_ctxfold_only_where_both_completed() -> None:
    from ctxfold.replay.results import PolicyResult, SessionResult, paired

    def session(name: str, ctxfold: float, other: float, other_failed: bool) -> SessionResult:
        return SessionResult(name=name, messages=1, requests=1, unlimited_cost_usd=1.0,
                             trigger=1, policies={
                                 "ctxfold": PolicyResult(cost_usd=ctxfold),
                                 "peer": PolicyResult(cost_usd=other, failed=other_failed)})

    result = paired([session("a", 2.0, 1.0, False), session("b", 4.0, 6.0, False),
                     session("c", 5.0, 0.1, True)])
    assert result["peer"].sessions == 2
    assert result["peer"].cost_ratio == pytest.approx(7.0 / 6.0)  # c is left out
    assert result["ctxfold"].cost_ratio == pytest.approx(1.0)


def test_totals_of_several_sessions_compare_with_ctxfold(demo_results: list[Any]) -> None:
    import io

    from ctxfold.replay.report_text import cheapest_note, paired_costs, print_report
    from ctxfold.replay.results import paired, totals

    sessions = demo_results * 2
    costs = paired_costs(sessions)
    assert costs is not None and costs["ctxfold"] == pytest.approx(1.0)
    assert "append-only" not in costs  # it completed no session with ctxfold
    out = io.StringIO()
    print_report(sessions, profile="deepseek-flash", window=DEMO_WINDOW, file=out,
                 reserve_output=DEFAULT_RESERVE_OUTPUT)
    text = out.getvalue()
    assert "vs ctxfold" in text and "(2)" in text
    note = cheapest_note(totals(sessions), paired(sessions))
    assert note and note in " ".join(text.split())
    # The note compares on the sessions both completed: cost and fidelity on one basis.
    closest = paired(sessions)["truncate-oldest"]
    assert closest.policy is not None and closest.baseline is not None
    assert closest.policy.cost_usd / closest.baseline.cost_usd == pytest.approx(
        closest.cost_ratio)
    page = report_html(sessions, profile="deepseek-flash", window=DEMO_WINDOW)
    assert "cost ÷ ctxfold" in page and "<th>vs ctxfold</th>" in page


def test_the_headline_compares_ctxfold_with_other_systems_not_its_own_variant() -> None:
    """With --demo the headline read "ctxfold-plain is the cheapest (…, 0% under ctxfold)"."""
    from ctxfold.replay.fidelity import FidelitySummary
    from ctxfold.replay.report_text import cheapest_note
    from ctxfold.replay.results import PolicyResult, SessionResult, paired, totals

    def result(cost: float) -> PolicyResult:
        return PolicyResult(cost_usd=cost, fidelity=FidelitySummary(mean=0.8))

    results = {"ctxfold": result(1.0), "ctxfold-plain": result(0.99), "codex-like": result(1.1)}
    note = cheapest_note(results)
    assert note.startswith("ctxfold is the cheapest") and "under codex-like" in note
    assert "ctxfold-plain" not in note
    results["codex-like"] = result(0.5)
    assert cheapest_note(results).startswith("codex-like is the cheapest ($0.5000, 50% under "
                                             "ctxfold)")
    sessions = [SessionResult(name=n, messages=1, requests=1, unlimited_cost_usd=1.0,
                              trigger=1, policies=dict(results)) for n in "ab"]
    assert "ctxfold-plain" not in cheapest_note(totals(sessions), paired(sessions))


def test_json_sessions_say_where_they_came_from(tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in (
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"})) + "\n")
    report = tmp_path / "r.json"
    from ctxfold.cli.main import main

    assert main(["replay", str(path), "--policy", "ctxfold", "--json", str(report)]) == 0
    assert json.loads(report.read_text())["sessions"][0]["source"] == str(path)


def test_each_fold_has_a_cache_ledger_that_adds_up(demo_results: list[Any]) -> None:
    from ctxfold.replay.pricing import get_price

    p = get_price("deepseek-flash")  # the demo's profile
    schema = json.loads(SCHEMA.read_text())
    report = json.loads(json.dumps(report_json(demo_results, profile="deepseek-flash",
                                               window=DEMO_WINDOW, per_request=True)))
    ctxfold = report["sessions"][0]["policies"]["ctxfold"]
    records = ctxfold["per_request"]
    folds = [i for i, r in enumerate(records) if r["ledger"] is not None]
    ledger = ctxfold["ledger"]
    assert ledger["folds"] == len(folds) > 0
    # Each fold's view is sent until the next fold (or the end): its share of the net saving.
    net = summary = 0.0
    for k, i in enumerate(folds):
        r, f = records[i], records[i]["ledger"]
        assert f["read_tokens"] == r["cache_hit_tokens"]
        assert f["written_tokens"] == r["cache_miss_tokens"]
        before = records[i - 1] if i else None
        cached = before["prompt_tokens"] + before["output_tokens"] if before else 0
        assert f["invalidated_tokens"] == max(cached - r["cache_hit_tokens"], 0)
        assert f["summary_usd"] == pytest.approx(
            (r["summary_cache_hit_tokens"] * p.hit + r["summary_output_tokens"] * p.output
             + (r["summary_prompt_tokens"] - r["summary_cache_hit_tokens"]) * p.miss) / 1e6,
            abs=1e-8)
        requests = (folds[k + 1] if k + 1 < len(folds) else len(records)) - i
        rewritten = max(f["invalidated_tokens"] - f["saved_per_request"], 0)
        net += (requests * f["saved_per_request"] * p.hit
                - rewritten * (p.miss - p.hit)) / 1e6 - f["summary_usd"]
        summary += f["summary_usd"]
    assert ledger["net_saving_usd"] == pytest.approx(net, abs=1e-7)
    assert ledger["summary_usd"] == pytest.approx(summary, abs=1e-7)
    assert ledger["read_tokens"] == sum(records[i]["cache_hit_tokens"] for i in folds)
    assert report["totals"]["ctxfold"]["ledger"] == ledger  # one session: the same sums
    jsonschema = pytest.importorskip("jsonschema")
    broken = json.loads(json.dumps(report))
    del broken["sessions"][0]["policies"]["ctxfold"]["per_request"][folds[0]]["ledger"][
        "summary_usd"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_under_a_write_fee_the_ledger_prices_summaries_as_they_are_billed(
        registry: Registry) -> None:
    """Anthropic bills uncached input as a cache write: the ledger's summary cost must be the
    biller's (its cost breakdown), not the base-price figure."""
    settings = ReplaySettings(window=DEMO_WINDOW, profile="anthropic-sonnet",
                              policies=("ctxfold",))
    (session,) = replay_sessions([demo_session()], settings, registry=registry)
    result = session.policies["ctxfold"]
    billed = result.breakdown.summary_input_usd + result.breakdown.summary_output_usd
    assert result.ledger.folds > 0 and billed > 0
    assert result.ledger.summary_usd == pytest.approx(billed, rel=1e-6)
