"""The replay runner: cost arithmetic, overflow, invariants, JSON/HTML reports, the CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ctxfold.emulator.cache import PrefixCache
from ctxfold.emulator.tokens import ASSISTANT, BOS, EOS, USER, encode_segments, request_segments
from ctxfold.kernel.config import Config
from ctxfold.kernel.registry import Registry
from ctxfold.kernel.types import ImportedSession, Message, RequestShape, Usage
from ctxfold.plugins.summarizers.extractive import ExtractiveSummarizer
from ctxfold.replay import ReplaySettings, replay_sessions
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
                names: tuple[str, ...] = ("append-only",)) -> Any:
    session = ImportedSession(name="tiny", messages=tuple(messages),
                              reported_usage=(None,) * len(messages))
    return replay_session(
        session, names, registry=registry,
        config=Config(),
        estimator=TemplateEstimator(), summarizer=ExtractiveSummarizer(), price=PRICE,
        window=window, compact_ratio=0.8, tokens=CharTokens(),
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
    # With a perfect (1-token unit) cache, resending the whole history costs exactly the floor.
    assert session.floor_cost_usd == pytest.approx(expected)


class _Vandal:
    """A policy that rewrites history without declaring an install (and loses a message)."""

    name = "vandal"

    def __init__(self) -> None:
        self.seen: list[Message] = []

    def observe(self, message: Message) -> None:
        self.seen.append(message)

    def request(self) -> Any:
        from ctxfold.kernel.types import PolicyRequest

        edited = [Message(role=m.role, content=m.content + "!") if m.role == "user" else m
                  for m in self.seen]
        return PolicyRequest(messages=tuple(edited[-3:]))

    def canonical(self) -> tuple[Message, ...]:
        return tuple(self.seen[1:])


def test_broken_invariants_are_detected() -> None:
    from ctxfold.kernel.hookspecs import hookimpl
    from ctxfold.kernel.kinds import StrategySpec

    class Plugin:
        @hookimpl
        def ctxfold_policies(self):
            return [StrategySpec(kind="policy", name="vandal", factory=lambda ctx: _Vandal())]

    registry = Registry.from_config(load_entry_points=False, extra_plugins=[Plugin()])
    messages = [Message(role="system", content="sys"), Message(role="user", content="a"),
                Message(role="assistant", content="1"), Message(role="user", content="b"),
                Message(role="assistant", content="2"), Message(role="user", content="c"),
                Message(role="assistant", content="3")]
    result = tiny_replay(registry, messages, names=("vandal",)).policies["vandal"]
    assert not result.canonical_intact
    assert not result.prefix_stable_between_installs


def test_floor_is_a_lower_bound_for_resending_everything(registry: Registry) -> None:
    settings = ReplaySettings(window=10_000_000, policies=("append-only",))
    [result] = replay_sessions([demo_session(rounds=40)], settings, registry=registry)
    cost = result.policies["append-only"].cost_usd
    assert result.floor_cost_usd <= cost <= result.floor_cost_usd * 1.10


def test_append_only_overflow_is_reported_as_failed(registry: Registry) -> None:
    messages = [Message(role="system", content="s"), Message(role="user", content="u" * 400),
                Message(role="assistant", content="a" * 10),
                Message(role="user", content="x" * 400), Message(role="assistant", content="b")]
    result = tiny_replay(registry, messages, window=600).policies["append-only"]
    assert result.failed and "above the window of 600" in result.failure
    assert result.requests == 1  # the run stopped at the overflowing request


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
        for turn in result.turns:
            assert turn.hit_tokens + turn.miss_tokens == turn.prompt_tokens


def test_json_report_matches_the_schema(demo_results: list[Any]) -> None:
    schema = json.loads(SCHEMA.read_text())
    report = json.loads(json.dumps(report_json(demo_results, profile="deepseek-flash",
                                               window=DEMO_WINDOW)))
    jsonschema = pytest.importorskip("jsonschema")  # a dev dependency: always there in CI
    jsonschema.validate(report, schema)
    assert set(report["totals"]) == set(report["sessions"][0]["policies"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**report, "extra": 1}, schema)
    broken = json.loads(json.dumps(report))
    first = next(iter(broken["totals"]))
    broken["totals"][first]["cost_usd"] = "cheap"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_html_report_is_self_contained(demo_results: list[Any], tmp_path: Path) -> None:
    page = report_html(demo_results, profile="deepseek-flash", window=DEMO_WINDOW)
    assert "<svg" in page and "ctxfold" in page
    for attr in ("src=", "href="):
        for scheme in ("http://", "https://", "//"):
            assert f'{attr}"{scheme}' not in page and f"{attr}'{scheme}" not in page
    assert "<script src" not in page and "<link" not in page
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed: the offline screenshot check was not run "
                    "(the self-containment assertions above did run)")
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
    policies = len(demo_results[0].policies)
    assert dom.count("<svg") >= 2 + policies  # size, cost, and hits/misses per policy
    assert dom.count("<polyline") >= 2 * policies  # one line per policy in two line charts
    assert "request size" in dom and "cumulative cost" in dom


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
