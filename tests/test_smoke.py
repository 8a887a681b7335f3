"""The offline seed → resume → continue smoke (design §9) through ``ctxfold smoke``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxfold import ChatRequest, ChatResponse, Message, SmokeError, Usage
from ctxfold.cli.main import main
from ctxfold.smoke.fixtures import (
    PRICE_HIT,
    PRICE_MISS,
    PRICE_OUTPUT,
    SESSION,
    CostMeter,
    cost,
    seed_messages,
)


@pytest.fixture(autouse=True)
def offline_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Never reach the real API from a test, whatever the developer's environment holds.
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    monkeypatch.setenv("CTXFOLD_CONFIG_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)


def step(capsys: pytest.CaptureFixture[str], name: str, directory: Path, *extra: str
         ) -> tuple[int, str, str]:
    code = main(["smoke", name, "--dir", str(directory), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def fields(line: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in line.split()[2:])


def test_seed_resume_continue(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "run"
    code, out, err = step(capsys, "seed", d, "--offline")
    assert (code, err) == (0, ""), err
    assert out.startswith("seed ok ")
    seeded = fields(out)
    assert int(seeded["projected"]) < int(seeded["trigger"]) == 400_000
    assert (seeded["version"], seeded["summary_calls"], seeded["spent"]) == ("0", "0", "$0.0000")
    meta = json.loads((d / "meta.json").read_text())
    assert meta["messages"] == 164 and meta["projection_version"] == 0
    assert not (d / "sessions" / f"{SESSION}.context.json").exists()
    transcript = (d / "sessions" / f"{SESSION}.jsonl").read_bytes()

    code, out, err = step(capsys, "resume", d)  # offline automatically: no API key
    assert (code, err) == (0, ""), err
    assert out.startswith("resume ok idle=") and " version=0 summary_calls=0" in out
    assert (d / "sessions" / f"{SESSION}.jsonl").read_bytes() == transcript

    code, out, err = step(capsys, "continue", d, "--offline")
    assert (code, err) == (0, ""), err
    assert out.startswith("continue ok ")
    done = fields(out)
    assert done["version"] == "1" and int(done["summary_calls"]) <= 1
    assert int(done["projected"]) < 400_000
    spent = float(done["spent"].lstrip("$"))
    assert 0 < spent <= 0.50
    meta = json.loads((d / "meta.json").read_text())
    assert meta["projection_version"] == 1 and meta["spent_usd"] == pytest.approx(spent, abs=1e-4)
    assert meta["messages"] == 164 + 1 + 80 + 2
    # Maintenance never rewrote the canonical prefix (design §1.1).
    assert (d / "sessions" / f"{SESSION}.jsonl").read_bytes().startswith(transcript)

    # A resume after the checkpoint sees the new state and changes nothing.
    code, out, _ = step(capsys, "resume", d)
    assert code == 0 and " version=1 summary_calls=0" in out


def test_resume_before_seed_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = step(capsys, "resume", tmp_path / "empty")
    assert code == 1 and out == ""
    assert "meta.json not found" in err and "ctxfold smoke seed" in err


def test_failed_assertion_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "run"
    assert step(capsys, "seed", d)[0] == 0
    meta = json.loads((d / "meta.json").read_text())
    (d / "meta.json").write_text(json.dumps({**meta, "messages": 999}))
    code, _, err = step(capsys, "resume", d)
    assert code == 1
    assert "smoke resume: expected 999 messages kept (got 164), which did not hold" in err


def test_cost_cap_stops_before_sending(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "run"
    assert step(capsys, "seed", d)[0] == 0
    code, out, err = step(capsys, "continue", d, "--max-usd", "0.001")
    assert code == 1 and out == ""
    assert "cost cap" in err and "not sent" in err and "--max-usd 0.00" in err


def test_cost_prices() -> None:
    usage = Usage(prompt_tokens=1_000_000, cache_hit_tokens=600_000, cache_miss_tokens=400_000,
                  completion_tokens=1_000_000)
    assert cost(usage) == pytest.approx(0.6 * PRICE_HIT + 0.4 * PRICE_MISS + PRICE_OUTPUT)
    # Without a hit/miss split every prompt token is billed as a miss.
    assert cost(Usage(prompt_tokens=2_000_000)) == pytest.approx(2 * PRICE_MISS)


class _Fixed:
    name, context_window, cache_ttl_minutes = "x", 1, 1

    def __init__(self) -> None:
        self.sent = 0

    def complete(self, request: ChatRequest) -> ChatResponse:
        self.sent += 1
        return ChatResponse(message=Message(role="assistant", content="ok"),
                            usage=Usage(prompt_tokens=100_000, cache_miss_tokens=100_000))


def test_meter_accumulates_and_refuses() -> None:
    inner = _Fixed()
    meter = CostMeter(inner, max_usd=0.07)
    meter.estimate = lambda request: 100_000
    request = ChatRequest(messages=(Message(role="user", content="hi"),), max_output_tokens=10)
    meter.complete(request)
    meter.complete(request)
    assert meter.spent == pytest.approx(2 * 0.1 * PRICE_MISS)
    with pytest.raises(SmokeError, match="cost cap"):
        meter.complete(request)
    assert inner.sent == 2


def test_seed_fixture_shape() -> None:
    messages = seed_messages(3)
    assert [m.role for m in messages] == ["system", "user"] + ["assistant", "tool"] * 3 + [
        "user", "assistant"]
    assert messages[3].content == "x" * 32768
    assert messages[3].tool_call_id == messages[2].tool_calls[0].id
    assert (messages[-2].content, messages[-1].content) == (
        "summarize status when asked", "standing by")
