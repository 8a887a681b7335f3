"""``ctxfold store migrate|copy``: sessions move between fs and postgres byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.conftest import TRANSCRIPTS, make_config
from tests.postgres import StoreSpec

import ctxfold
from ctxfold import Registry
from ctxfold.cli.main import main
from ctxfold.plugins.stores.fs import FsStore
from ctxfold.testing import RecordingSummarizer


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CTXFOLD_CONFIG_HOME", str(tmp_path / "home"))
    return tmp_path


def imported_sessions(root: Path) -> list[str]:
    """The shared transcripts replayed into an fs store as an agent writes them: one batch
    per turn (an assistant message with its tool results), then a checkpoint."""
    from ctxfold.importing import expand_paths

    registry = Registry.from_config(make_config(root))
    shared = expand_paths([str(TRANSCRIPTS)], registry, None)
    assert len(shared) >= 10  # every session of the shared transcripts
    names = []
    for i, path in enumerate(shared):
        session = ctxfold.import_session(path, registry)
        name = f"shared-{i}"
        config = make_config(root, window=400_000, ratio=0.5)
        cm = ctxfold.open_session(name, config=config, store_path=str(root),
                                  summarizer=RecordingSummarizer())
        batch: list[ctxfold.Message] = []
        for message in session.messages:
            if message.role != "tool" and batch:
                cm.append(*batch)
                batch = []
            batch.append(message)
        cm.append(*batch)
        cm.compact()
        names.append(name)
    return names


def files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())
            if p.suffix in (".jsonl", ".json")}


def test_copy_round_trips_imported_sessions_byte_for_byte_through_postgres(
        workdir: Path, postgres_spec: StoreSpec, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    source = workdir / "a"
    names = imported_sessions(source)
    assert all((source / f"{n}.context.json").exists() for n in names)
    monkeypatch.setenv("PG_UNDER_TEST", postgres_spec.where)
    assert main(["store", "copy", "--from", f"fs:{source}", "--to", "postgres:PG_UNDER_TEST"]) == 0
    out = capsys.readouterr().out
    assert f"{len(names)} sessions copied and verified" in out
    assert postgres_spec.where not in out
    assert main(["store", "copy", "--from", "postgres:PG_UNDER_TEST", "--to",
                 f"fs:{workdir / 'b'}", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert sorted(r["session"] for r in report) == names
    assert files(workdir / "b") == files(source)  # transcripts and sidecars, byte for byte
    assert FsStore(workdir / "b").load(names[0]) == FsStore(source).load(names[0])


def test_copy_refuses_a_session_the_target_has_and_changes_nothing(
        workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for side in ("a", "b"):
        store = FsStore(workdir / side)
        store.create("s")
        store.append("s", [ctxfold.Message(role="user", content=side)])
    before = files(workdir / "b")
    code = main(["store", "copy", "--from", f"fs:{workdir / 'a'}", "--to", f"fs:{workdir / 'b'}"])
    assert code == 1
    assert "already exists in the target store" in capsys.readouterr().err
    assert files(workdir / "b") == before


@pytest.mark.parametrize("spec", ["postgres:postgresql://u:hunter2@db/x", ":x"])
def test_a_store_spec_that_is_not_a_name_is_a_usage_error_that_echoes_nothing(
        workdir: Path, spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["store", "copy", "--from", spec, "--to", "fs:b"]) == 2
    err = capsys.readouterr().err
    assert "--from" in err and "hunter2" not in err


def test_a_missing_dsn_variable_names_the_variable(
        workdir: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("CTXFOLD_POSTGRES_DSN", raising=False)
    assert main(["store", "migrate", "--store", "postgres"]) == 1
    assert "CTXFOLD_POSTGRES_DSN" in capsys.readouterr().err


def test_migrate_creates_then_reports_an_up_to_date_schema(
        workdir: Path, postgres_spec: StoreSpec, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CTXFOLD_POSTGRES_DSN", postgres_spec.where)
    (workdir / "ctxfold.toml").write_text('[store]\nname = "postgres"\n')
    from ctxfold.plugins.stores.postgres_schema import SCHEMA_VERSION

    assert main(["store", "migrate"]) == 0
    assert f"schema version 0 -> {SCHEMA_VERSION}" in capsys.readouterr().out
    assert main(["store", "migrate"]) == 0
    assert f"schema version {SCHEMA_VERSION}: up to date" in capsys.readouterr().out
    assert main(["store", "migrate", "--store", f"fs:{workdir / 's'}"]) == 0
    assert "nothing to do" in capsys.readouterr().out


def test_a_dsn_pasted_into_dsn_env_is_masked_and_named_in_a_notice(
        workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (workdir / "ctxfold.toml").write_text(
        '[store]\nname = "postgres"\ndsn_env = "postgresql://u:hunter2@db/x"\n')
    assert main(["config", "show"]) == 0
    captured = capsys.readouterr()
    assert "hunter2" not in captured.out + captured.err
    assert "store.dsn_env holds something that is not an environment variable name" in (
        captured.out + captured.err)


def test_a_version_1_database_migrates_to_the_current_schema_keeping_its_sessions(
        workdir: Path, postgres_spec: StoreSpec, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import psycopg

    from ctxfold.plugins.stores.postgres import PostgresStore
    from ctxfold.plugins.stores.postgres_schema import MIGRATIONS, SCHEMA_VERSION

    with psycopg.connect(postgres_spec.where, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS ctxfold_appends, ctxfold_token_counts, "
                     "ctxfold_discarded_sidecars, "
                     "ctxfold_sidecars, ctxfold_messages, ctxfold_sessions, ctxfold_schema")
        conn.execute("CREATE TABLE ctxfold_schema (version integer NOT NULL)")
        conn.execute(MIGRATIONS[0])
        conn.execute("INSERT INTO ctxfold_schema (version) VALUES (1)")
        conn.execute("INSERT INTO ctxfold_sessions (id, length) VALUES ('old', 0)")
    monkeypatch.setenv("CTXFOLD_POSTGRES_DSN", postgres_spec.where)
    (workdir / "ctxfold.toml").write_text('[store]\nname = "postgres"\n')
    assert main(["store", "migrate"]) == 0
    assert f"schema version 1 -> {SCHEMA_VERSION}" in capsys.readouterr().out
    store = PostgresStore(postgres_spec.where)
    assert store.exists("old")
    store.append_counts("old", "k", b"x")
    assert store.read_counts("old", "k") == b"x"
    assert store.fork_point("old") is None  # created before forks were recorded
    store.fork("old", "new")
    assert store.fork_point("new").parent == "old"
