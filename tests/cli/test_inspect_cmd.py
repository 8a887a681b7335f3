"""``ctxfold inspect``: reports projection, receipt, cache, telemetry — and changes nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ctxfold import Message, open_session
from ctxfold.cli.main import main

CONFIG = """\
[provider]
context_window = 4000
[estimator]
name = "heuristic"
[summarizer]
name = "extractive"
[store]
path = "sessions"
"""
TELEMETRY_KEYS = {"kind", "trigger", "action", "tokens_before", "tokens_after", "saved_tokens",
                  "summary_calls", "cache_state", "cache_hit_tokens", "cache_miss_tokens",
                  "projection_version", "detail", "created_at", "ledger", "turn"}


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Session ``s`` with one manual checkpoint installed (projection v1, receipt, telemetry)."""
    from ctxfold import load_config

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CTXFOLD_CONFIG_HOME", str(tmp_path / "home"))
    (tmp_path / "ctxfold.toml").write_text(CONFIG)
    config = load_config(cwd=tmp_path).config
    cm = open_session("s", config=config)
    cm.append(Message(role="system", content="be brief"),
              Message(role="user", content="the task: " + "alpha " * 200))
    for i in range(6):
        cm.append(Message(role="assistant", content=f"step {i} " + "beta " * 150),
                  Message(role="user", content=f"next {i} " + "gamma " * 150))
    cm.resume()
    cm.compact()
    assert cm.state.projection is not None
    return tmp_path / "sessions"


def test_a_thrash_record_shows_what_the_guard_saw(
        root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sidecar = root / "s.context.json"
    data = json.loads(sidecar.read_text())
    data["telemetry"].append({"kind": "thrash", "trigger": "pressure", "action": "refill",
                              "projection_version": 1, "turn": 6,
                              "detail": "the checkpoint of turn 5 (projection v1) reached the "
                                        "trigger again at turn 6"})
    sidecar.write_text(json.dumps(data))
    code, out, _err = run(capsys, "inspect", "s")
    assert code == 0
    lines = out.splitlines()
    row = next(i for i, line in enumerate(lines) if line.lstrip().startswith("thrash"))
    assert "refill" in lines[row]
    assert lines[row + 1].strip() == ("the checkpoint of turn 5 (projection v1) reached the "
                                      "trigger again at turn 6")


def snapshot(root: Path) -> dict[str, tuple[bytes, int, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_mode)
            for p in sorted(root.iterdir())}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_report(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "inspect", "s", "--json")
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert set(report) == {"session", "root", "messages", "projection", "view", "settings",
                           "receipt", "cache", "telemetry", "ledger", "rules", "sidecar",
                           "notices"}
    assert report["session"] == "s" and report["messages"] == 14
    p = report["projection"]
    assert p["version"] == 1 and 0 < p["covered_count"] <= 14 and p["body_messages"] >= 2
    assert p["tokens"] < p["source_tokens"]
    v = report["view"]
    assert (v["window"], v["trigger"], v["hard_ceiling"]) == (4000, 3200, 3744)
    assert v["messages"] == p["body_messages"] + 14 - p["covered_count"]
    assert v["tokens"] > 0 and v["above_trigger"] is (v["tokens"] >= v["trigger"])
    assert v["trigger_used"] == round(v["tokens"] / 3200, 4)
    r = report["receipt"]
    assert (r["status"], r["action"], r["trigger"], r["projection_version"]) == (
        "applied", "summary", "manual", 1)
    assert r["saved_tokens"] == r["input_tokens"] - r["result_tokens"] > 0
    assert report["cache"]["state"] == "warm" and report["cache"]["state_now"] == "warm"
    assert report["cache"]["ttl_minutes"] == 1440
    kinds = [t["kind"] for t in report["telemetry"]]
    assert kinds == ["resume", "install"]
    assert all(set(t) == TELEMETRY_KEYS for t in report["telemetry"])
    install = report["telemetry"][1]
    assert (install["action"], install["summary_calls"], install["projection_version"]) == (
        "summary", 1, 1)
    assert report["sidecar"]["present"] and report["sidecar"]["error"] == ""
    assert report["notices"] == []


def test_text_report(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "inspect", "s", "--window", "8000")
    assert code == 0
    assert "projection: version 1" in out
    assert "trigger 6400" in out and "window 8000" in out
    assert "last receipt: applied summary (manual) version 1" in out
    assert "telemetry: 2 records" in out and "install  manual" in out


def test_inspect_is_read_only(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(root)
    for argv in (["inspect", "s"], ["inspect", "s", "--json"], ["inspect", "s", "--root",
                                                                  str(root)]):
        assert run(capsys, *argv)[0] == 0
    assert snapshot(root) == before


def test_read_only_even_when_damaged(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A torn tail and an invalid sidecar are reported, not repaired or discarded."""
    with open(root / "s.jsonl", "ab") as f:
        f.write(b'{"role":"user","conte')
    (root / "s.context.json").write_text("{not json")
    os.utime(root / "s.jsonl", ns=(1_000_000_000, 1_000_000_000))
    before = snapshot(root)
    code, out, _ = run(capsys, "inspect", "s", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["messages"] == 14 and report["projection"] is None
    assert report["sidecar"]["present"] and "invalid" in report["sidecar"]["error"]
    assert any("unfinished last line" in n for n in report["notices"])
    assert report["cache"]["state_now"] == "cold"  # last activity in 2001
    assert snapshot(root) == before


def test_without_sidecar(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (root / "s.context.json").unlink()
    code, out, _ = run(capsys, "inspect", "s", "--json")
    report = json.loads(out)
    assert code == 0 and report["projection"] is None and report["receipt"] is None
    assert report["telemetry"] == [] and report["sidecar"]["present"] is False
    assert report["view"]["messages"] == 14
    assert not (root / "s.context.json").exists()


@pytest.mark.parametrize("session", ["nope", "../s", "a/b"])
def test_unknown_or_hostile(root: Path, capsys: pytest.CaptureFixture[str], session: str
                            ) -> None:
    code, out, err = run(capsys, "inspect", session)
    assert code == 1 and out == "" and err.startswith("ctxfold: error: ")


def test_view_prints_what_the_model_sees_now(root: Path, capsys: pytest.CaptureFixture[str]
                                             ) -> None:
    assert main(["inspect", "s", "--view"]) == 0
    out = capsys.readouterr().out
    view = out[out.index("--- view: "):]
    assert "[0] system:\nbe brief" in view
    assert "(checkpoint summary):\n<compaction-summary>" in view  # the summary, in full
    assert "more characters; --full shows all" in view
    assert main(["inspect", "s", "--view", "--full"]) == 0
    assert "more characters" not in capsys.readouterr().out
    assert main(["inspect", "s", "--view", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    content = report["view"]["content"]
    assert len(content) == report["view"]["messages"]
    assert content[0] == {"role": "system", "content": "be brief"}
    assert any(m["content"].startswith("<compaction-summary>") for m in content)


def test_rules_show_pins_the_last_fold_check_and_the_facts_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ctxfold import ToolCall, load_config

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CTXFOLD_CONFIG_HOME", str(tmp_path / "home"))
    (tmp_path / "ctxfold.toml").write_text(CONFIG.replace("4000", "8000"))
    cm = open_session("r", config=load_config(cwd=tmp_path).config,
                      summarize=lambda request: "## Goal\n- fix it")  # loses the error
    cm.append(Message(role="system", content="be brief"), Message(role="user", content="fix it"))
    cm.pin("Never commit generated files.", reason="repo rule")
    cm.append(Message(role="assistant", tool_calls=(ToolCall(id="c1", name="sh"),)),
              Message(role="tool", tool_call_id="c1", name="sh",
                      content="KeyError: 'limits' in conf/loader.py"))
    for i in range(6):
        cm.append(Message(role="assistant", content=f"step {i} " + "beta " * 150),
                  Message(role="user", content=f"next {i} " + "gamma " * 150))
    cm.compact()
    receipt = cm.state.last_receipt
    assert receipt is not None and receipt.probes_after is not None
    code, out, _ = run(capsys, "inspect", "r", "--json")
    rules = json.loads(out)["rules"]
    assert code == 0 and [p["text"] for p in rules["explicit"]] == ["Never commit generated files."]
    assert rules["checkpoint_rules"] == [
        "- (#2; pinned: repo rule) Never commit generated files."]
    assert rules["last_check"]["probes_after"] == receipt.probes_after
    assert receipt.probes_before < receipt.probes_after
    assert list(receipt.repaired) == rules["repaired"]
    assert any("KeyError: 'limits' in conf/loader.py" in line for line in rules["repaired"])
    code, text, _ = run(capsys, "inspect", "r")
    assert "last fold check: probes " in text and "facts kept verbatim in the summary" in text
    code, view, _ = run(capsys, "inspect", "r", "--view")
    assert "user (standing rules):" in view


def test_inspect_shows_what_the_session_ran_with_not_todays_config(
        root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A session run at a 4,000 window was reported with the config's 1M window."""
    (root.parent / "ctxfold.toml").write_text(CONFIG.replace("4000", "1048576").replace(
        '"heuristic"', '"deepseek"'))
    code, out, _ = run(capsys, "inspect", "s", "--json")
    report = json.loads(out)
    assert code == 0 and report["settings"]["from"] == "session"
    assert (report["view"]["window"], report["view"]["trigger"]) == (4000, 3200)
    assert report["view"]["estimator"] == "heuristic" == report["settings"]["estimator"]
    assert report["settings"]["model"] == "deepseek-flash"
    _, text, _ = run(capsys, "inspect", "s")
    assert "ran with: window 4000, trigger 3200" in text and "recorded by the session" in text
    _, out, _ = run(capsys, "inspect", "s", "--json", "--window", "8000")
    assert json.loads(out)["view"]["window"] == 8000  # an explicit flag still wins
    (root / "s.context.json").unlink()  # no record: the config's values, said so
    _, text, _ = run(capsys, "inspect", "s")
    assert "window 1048576" in text and "the session recorded none yet" in text


def test_the_cache_ledger_in_tokens_and_priced(root: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "inspect", "s", "--json")
    ledger = json.loads(out)["ledger"]
    assert code == 0 and ledger["profile"] is None
    (entry,) = ledger["entries"]
    # A manual checkpoint by the extractive summarizer (no model: no summary tokens), no
    # provider usage observed (estimated), no request sent on it yet (a manual compaction's
    # own prepared request is not counted: the host need not send it).
    assert (entry["projection_version"], entry["action"], entry["trigger"]) == (
        1, "summary", "manual")
    assert (entry["estimated"], entry["requests"], entry["summary_input"]) == (True, 0, 0)
    assert entry["rewritten"] == max(entry["invalidated"] - entry["saved_per_request"], 0)
    assert entry["net_saving_usd"] is None and ledger["total"]["net_saving_usd"] is None
    total = ledger["total"]
    assert (total["folds"], total["estimated"], total["requests"]) == (1, 1, 0)
    assert total["not_sent"] == 0 < entry["saved_per_request"]

    code, out, _ = run(capsys, "inspect", "s", "--json", "--profile", "deepseek-flash")
    priced = json.loads(out)["ledger"]
    # hit 0.003, miss 0.15 USD per 1M: the requests' saving at the hit price (none sent yet),
    # less the re-written tokens at the miss-minus-hit premium.
    expected = (entry["not_sent"] * 0.003 - entry["rewritten"] * 0.147) / 1e6
    assert priced["total"]["net_saving_usd"] == pytest.approx(expected, abs=1e-8)
    assert priced["entries"][0]["net_saving_usd"] == priced["total"]["net_saving_usd"]
    assert priced["total"]["summary_usd"] == 0

    code, text, _ = run(capsys, "inspect", "s", "--profile", "deepseek-flash")
    assert "cache ledger: 1 folds (1 estimated), 0 requests" in text
    assert "net saving vs not folding at deepseek-flash prices: $" in text
    code, _, err = run(capsys, "inspect", "s", "--profile", "nope")
    assert code != 0 and "unknown replay profile 'nope'" in err and "deepseek-flash" in err
