"""Injected faults end to end (provider plugin → kernel HTTP → emulator over TCP → engine)
and design §1.5: the API key never lands in a file or an error message."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxfold import (
    Fault,
    Message,
    ProviderConnectionError,
    ProviderError,
    ProviderOptions,
    ProviderResponseError,
    ProviderTimeoutError,
    Registry,
    ReplySpec,
    ServerError,
    open_session,
)
from ctxfold.kernel.kinds import PROVIDER
from ctxfold.testing import EMULATOR_KEY_ENV

SECRET = "sk-ctxfold-test-SECRET-7f3a9c"
LONG_REPLY = ReplySpec(text="word " * 400)


def session(config, emulator_faults=None, **options):
    registry = Registry.from_config()
    provider = registry.create(PROVIDER, config.provider.name, config=config,
                               options=ProviderOptions(**options))
    cm = open_session("faults", config=config, registry=registry)
    cm.append(Message(role="system", content="You are a coding agent."),
              Message(role="user", content="Summarize the repository."))
    return cm, provider


def transcript(config) -> bytes:
    return (Path(config.store.path) / "faults.jsonl").read_bytes()


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EMULATOR_KEY_ENV, SECRET)


def test_rate_limit_retry_after_is_honoured(
    ctxfold_emulator, ctxfold_provider_config, secret_env
) -> None:
    emulator = ctxfold_emulator("deepseek", faults=[Fault("rate_limit", at=0, retry_after=0.3)])
    config = ctxfold_provider_config(emulator)
    slept: list[float] = []
    cm, provider = session(config, sleep=slept.append)
    cm.complete(provider)
    assert [r.status for r in emulator.requests] == [429, 200]
    assert slept and slept[0] >= 0.3


def test_overloaded_then_success_and_exhausted_retries(
    ctxfold_emulator, ctxfold_provider_config, secret_env
) -> None:
    emulator = ctxfold_emulator("mimo", faults=[Fault("overloaded", at=0)])
    config = ctxfold_provider_config(emulator)
    cm, provider = session(config, sleep=lambda _s: None)
    cm.complete(provider)
    assert [r.status for r in emulator.requests] == [503, 200]

    emulator.inject(Fault("overloaded", count=10))
    before = transcript(config)
    with pytest.raises(ServerError) as info:
        cm.complete(provider)
    assert SECRET not in str(info.value) and SECRET not in repr(info.value)
    assert transcript(config) == before


@pytest.mark.parametrize("profile", ["deepseek", "responses"])
def test_dropped_stream_records_nothing_half_written(
    profile, ctxfold_emulator, ctxfold_provider_config, secret_env
) -> None:
    emulator = ctxfold_emulator(profile, script=[LONG_REPLY],
                                faults=[Fault("drop", at=0, after_events=6)])
    config = ctxfold_provider_config(emulator, max_retries=0)
    cm, provider = session(config)
    before = transcript(config)
    with pytest.raises(ProviderConnectionError) as info:
        cm.complete(provider)
    partial = getattr(info.value, "partial_message", None)
    assert partial is not None and partial.partial and partial.content
    assert transcript(config) == before
    assert [m.role for m in cm.canonical] == ["system", "user"]


def test_stalled_stream_is_cut_by_the_stream_timeouts(
    ctxfold_emulator, ctxfold_provider_config, secret_env
) -> None:
    emulator = ctxfold_emulator("deepseek", faults=[Fault("stall", at=0, stall_cap=5,
                                                          interval=0.05)])
    config = ctxfold_provider_config(emulator, max_retries=0)
    # Keep-alive comments must not keep the stream open: the idle timer ignores them.
    cm, provider = session(config, idle_timeout=0.5, total_timeout=30.0)
    with pytest.raises(ProviderTimeoutError):
        cm.complete(provider)
    assert [m.role for m in cm.canonical] == ["system", "user"]


def test_malformed_chunk_is_a_response_error(
    ctxfold_emulator, ctxfold_provider_config, secret_env
) -> None:
    emulator = ctxfold_emulator("deepseek", faults=[Fault("malformed", at=0)])
    config = ctxfold_provider_config(emulator, max_retries=0)
    cm, provider = session(config)
    with pytest.raises(ProviderResponseError):
        cm.complete(provider)
    assert [m.role for m in cm.canonical] == ["system", "user"]


def test_api_key_never_lands_in_files_or_errors(
    ctxfold_emulator, ctxfold_provider_config, secret_env, tmp_path: Path
) -> None:
    emulator = ctxfold_emulator("deepseek", window=12_000)
    config = ctxfold_provider_config(emulator)
    cm, provider = session(config)
    import attrs

    cm.config = attrs.evolve(cm.config, agent=attrs.evolve(cm.config.agent, compact_ratio=0.5))
    errors: list[str] = []
    for i in range(8):
        try:
            cm.complete(provider)
        except ProviderError as exc:  # pragma: no cover - reported below
            errors.append(f"{exc!s} {exc!r}")
        cm.append(Message(role="user", content=f"result {i}: " + "ok " * 1500))
    emulator.inject(Fault("overloaded", count=10))
    with pytest.raises(ProviderError) as info:
        cm.complete(provider)
    errors.append(f"{info.value!s} {info.value!r}")
    # The key appears in no file ctxfold wrote and in no error message.
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    assert all(SECRET not in e for e in errors)
    assert cm.state.projection is not None  # maintenance ran and wrote its sidecar
