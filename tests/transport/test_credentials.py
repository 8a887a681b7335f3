"""Credentials never leave in errors, logs or `config show`: URL userinfo in `base_url`, and a
key pasted into `api_key_env` where its variable's name belongs."""

from __future__ import annotations

import json
import logging

import pytest

import ctxfold
from ctxfold import ChatRequest, Config, Emulator, Message
from ctxfold.cli.main import main
from ctxfold.kernel.config import ProviderConfig

PASSWORD = "hunter2-Pa55word"
KEY = "sk-live-abcdefghijklmnop1234"
ASK = ChatRequest(messages=(Message(role="user", content="hi"),), max_retries=0)


def test_url_credentials_stay_out_of_the_http_log_and_errors(caplog, monkeypatch) -> None:
    monkeypatch.setenv("CTXFOLD_TEST_KEY", "sk-test-0123456789abcdef")
    caplog.set_level(logging.DEBUG)
    with Emulator("deepseek") as emu:
        url = emu.base_url.replace("http://", f"http://alice:{PASSWORD}@")
        for base_url in (url, f"http://alice:{PASSWORD}@127.0.0.1:9"):
            provider = ctxfold.create_provider(Config(provider=ProviderConfig(
                name="deepseek", base_url=base_url, api_key_env="CTXFOLD_TEST_KEY")))
            try:
                provider.complete(ASK)
            except ctxfold.ProviderError as exc:
                assert PASSWORD not in str(exc)
            finally:
                provider.close()
    assert "HTTP Request: POST http://***@" in caplog.text  # the line is there, masked
    assert PASSWORD not in caplog.text and "sk-test-0123456789abcdef" not in caplog.text


def test_a_key_pasted_into_api_key_env_is_never_printed(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ctxfold.toml").write_text(
        f'[provider]\nname = "deepseek"\napi_key_env = "{KEY}"\n')
    assert main(["config", "show"]) == 0
    out = capsys.readouterr()
    assert KEY not in out.out + out.err
    assert "not an environment variable name" in out.err
    assert main(["config", "show", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["config"]["provider"]["api_key_env"]
    assert shown["value"] == "***"
    provider = ctxfold.create_provider(ctxfold.load_config().config)
    with pytest.raises(ctxfold.AuthenticationError) as info:
        provider.complete(ASK)
    provider.close()
    assert KEY not in str(info.value) and "not an environment variable name" in str(info.value)
