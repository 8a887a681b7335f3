"""Kernel sidecar loading: discard-and-rebuild, projection validation, promoted rule,
system refresh rule, saving (design §5.4–§5.7, §2.1)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import attrs
import pytest

from ctxfold import Config, Message, Registry, SidecarCodec, SidecarState, SidecarVersionError
from ctxfold.engine.sidecar import fresh_state, load_sidecar, save_sidecar
from ctxfold.kernel.codec import message_from_dict
from ctxfold.kernel.fingerprint import chain_hash, covered_prefix_hash, fingerprint
from ctxfold.kernel.kinds import SIDECAR_FORMAT
from ctxfold.plugins.stores.fs import FsStore, StoreWarning

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sidecar"
#: The flat fingerprint of the fixtures' 4 covered messages (what ctxfold 0.1.0's sidecars
#: held before the covered-prefix hash became a chain) and the chain those load as.
BOUNDED_HASH = "cbf27bb5284b860074aa45bd88792d14"
CHAIN_HASH = "b3b03dd557b1b88c1ff8c375f9cef83e"


@pytest.fixture
def codec() -> SidecarCodec:
    # The kernel's way: from the registry, never by importing the plugin.
    return Registry.from_config(load_entry_points=False).create(SIDECAR_FORMAT, "v3",
                                                                config=Config())


@pytest.fixture
def canonical() -> list[Message]:
    data = json.loads((FIXTURES / "canonical.json").read_text(encoding="utf-8"))
    return [message_from_dict(item) for item in data]


@pytest.fixture
def store(tmp_path: Path, canonical: list[Message]) -> FsStore:
    store = FsStore(tmp_path / "sessions")
    store.create("s")
    store.append("s", canonical)
    return store


def install(store: FsStore, name: str) -> Path:
    target = store.root / "s.context.json"
    shutil.copyfile(FIXTURES / name, target)
    return target


def test_fixture_hashes_match_the_fingerprint(canonical: list[Message]) -> None:
    # If this fails, fingerprint.py changed and every stored projection would be invalid.
    assert fingerprint(canonical[:4]) == BOUNDED_HASH
    assert covered_prefix_hash(canonical, 4) == chain_hash(canonical[:4]) == CHAIN_HASH


def test_missing_sidecar_is_a_fresh_state(store: FsStore, codec: SidecarCodec,
                                          canonical: list[Message]) -> None:
    assert load_sidecar(store, codec, "s", canonical) == (fresh_state(), [])
    assert fresh_state() == SidecarState()
    assert not list(store.root.glob("s.context.json*"))  # loading wrote nothing


@pytest.mark.parametrize("name", ["v1.json", "v2.json", "v3.json", "v3_legacy_fields.json"])
def test_valid_projection_is_kept_without_notice(
    store: FsStore, codec: SidecarCodec, canonical: list[Message], name: str
) -> None:
    before = install(store, name).read_bytes()
    state, notices = load_sidecar(store, codec, "s", canonical)
    assert notices == []
    assert state.projection is not None and state.projection.covered_count == 4
    # a 0.1.0 sidecar's flat hash is re-normalised to the chain (persisted by the next save)
    assert state.projection.covered_prefix_hash == CHAIN_HASH
    assert (store.root / "s.context.json").read_bytes() == before  # load never writes


@pytest.mark.parametrize(
    "content",
    [
        (FIXTURES / "invalid.json").read_bytes(),
        b"\xff\xfe not utf-8",
        b"[]",
        b'{"schema_version": 3, "generation": "three"}',
        b"",
    ],
)
def test_invalid_sidecar_is_set_aside_and_rebuilt(
    store: FsStore, codec: SidecarCodec, canonical: list[Message], content: bytes
) -> None:
    (store.root / "s.context.json").write_bytes(content)
    with pytest.warns(StoreWarning, match="discarded"):
        state, notices = load_sidecar(store, codec, "s", canonical)
    assert state == fresh_state()
    assert len(notices) == 1 and "'s'" in notices[0] and "rebuilt" in notices[0]
    assert not (store.root / "s.context.json").exists()
    kept = list(store.root.glob("s.context.json.invalid-*"))
    assert [p.read_bytes() for p in kept] == [content]
    assert store.load("s") == canonical  # the transcript is never touched
    save_sidecar(store, codec, "s", state)  # and the session carries on
    assert load_sidecar(store, codec, "s", canonical) == (
        attrs.evolve(state, updated_at=_updated_at(store)), []
    )


def test_unreadable_sidecar_is_set_aside(
    store: FsStore, codec: SidecarCodec, canonical: list[Message]
) -> None:
    (store.root / "s.context.json").mkdir()
    with pytest.warns(StoreWarning):
        state, notices = load_sidecar(store, codec, "s", canonical)
    assert state == fresh_state() and len(notices) == 1


def test_newer_schema_raises_and_keeps_the_file(
    store: FsStore, codec: SidecarCodec, canonical: list[Message]
) -> None:
    path = install(store, "newer_v4.json")
    before = path.read_bytes()
    with pytest.raises(SidecarVersionError, match="upgrade"):
        load_sidecar(store, codec, "s", canonical)
    assert path.read_bytes() == before
    assert not list(store.root.glob("*.invalid-*"))


# -- projection validation ---------------------------------------------------------------------


def test_promoted_hash_is_renormalised(
    store: FsStore, codec: SidecarCodec, canonical: list[Message]
) -> None:
    install(store, "v3_promoted.json")
    state, notices = load_sidecar(store, codec, "s", canonical)
    assert state.projection is not None
    assert state.projection.covered_prefix_hash == CHAIN_HASH
    assert state.projection.covered_count == 4
    assert len(state.projection.messages) == 2
    assert len(notices) == 1 and "re-normalised" in notices[0]
    assert state.last_receipt is not None and state.last_receipt.operation_id == "op-0031"
    # Once saved, it is an ordinary bounded projection.
    save_sidecar(store, codec, "s", state)
    again, notices = load_sidecar(store, codec, "s", canonical)
    assert notices == [] and again.projection == state.projection


def test_promoted_rule_needs_an_exact_match(
    store: FsStore, codec: SidecarCodec, canonical: list[Message]
) -> None:
    install(store, "v3_promoted.json")
    # The local raw text differs from what was promoted: the hash cannot be proven.
    canonical[3] = attrs.evolve(canonical[3], raw_content="something else entirely")
    state, notices = load_sidecar(store, codec, "s", canonical)
    assert state.projection is None
    assert len(notices) == 1 and "dropped" in notices[0]
    # Only the body goes: receipt, generation, cache key, telemetry stay.
    assert state.last_receipt is not None and state.last_receipt.operation_id == "op-0031"
    assert state.generation == 5
    assert state.prompt_cache_key == "repo|s1|deepseek-v4-flash"


def test_raw_content_does_not_affect_a_bounded_projection(
    store: FsStore, codec: SidecarCodec, canonical: list[Message]
) -> None:
    install(store, "v3.json")
    canonical[3] = attrs.evolve(canonical[3], raw_content="edited locally")
    state, notices = load_sidecar(store, codec, "s", canonical)
    assert notices == [] and state.projection is not None


def test_refreshed_system_prompt_keeps_the_projection(
    store: FsStore, codec: SidecarCodec, canonical: list[Message]
) -> None:
    install(store, "v3.json")
    refreshed = Message(role="system", content="You are a coding agent. Work in /repo. Today: Mon")
    canonical[0] = refreshed
    state, notices = load_sidecar(store, codec, "s", canonical)
    assert state.projection is not None
    assert state.projection.messages[0] == refreshed  # the view gets the new prompt
    assert state.projection.messages[1].content.startswith("<compaction-summary>")
    assert state.projection.covered_prefix_hash == covered_prefix_hash(canonical, 4)
    assert len(notices) == 1 and "system prompt refreshed" in notices[0]
    save_sidecar(store, codec, "s", state)
    assert load_sidecar(store, codec, "s", canonical)[1] == []


def test_system_refresh_does_not_excuse_other_changes(
    store: FsStore, codec: SidecarCodec, canonical: list[Message]
) -> None:
    install(store, "v3.json")
    canonical[0] = Message(role="system", content="new prompt")
    canonical[1] = Message(role="user", content="a different task")
    state, notices = load_sidecar(store, codec, "s", canonical)
    assert state.projection is None and "dropped" in notices[0]


@pytest.mark.parametrize("index", [1, 2, 3])
def test_changed_covered_message_drops_only_the_body(
    store: FsStore, codec: SidecarCodec, canonical: list[Message], index: int
) -> None:
    install(store, "v3.json")
    canonical[index] = attrs.evolve(canonical[index], content=canonical[index].content + "!")
    state, notices = load_sidecar(store, codec, "s", canonical)
    assert state.projection is None
    assert "'s'" in notices[0] and "first 4 transcript messages" in notices[0]
    assert state.last_receipt is not None and state.generation == 3
    assert len(state.telemetry) == 2
    assert (store.root / "s.context.json").exists()  # the file is not discarded


def test_changes_after_the_covered_prefix_do_not_matter(
    store: FsStore, codec: SidecarCodec, canonical: list[Message]
) -> None:
    install(store, "v3.json")
    canonical[5] = Message(role="user", content="anything")
    canonical.append(Message(role="assistant", content="more"))
    assert load_sidecar(store, codec, "s", canonical)[1] == []


def test_projection_longer_than_the_transcript_is_dropped(
    store: FsStore, codec: SidecarCodec, canonical: list[Message]
) -> None:
    install(store, "v3.json")
    state, notices = load_sidecar(store, codec, "s", canonical[:3])
    assert state.projection is None
    assert "covers 4 messages but the transcript has 3" in notices[0]


@pytest.mark.parametrize(
    "change", [{"messages": ()}, {"covered_prefix_hash": ""}, {"covered_count": 0}]
)
def test_degenerate_projection_is_dropped(
    store: FsStore, codec: SidecarCodec, canonical: list[Message], change: dict[str, Any]
) -> None:
    base = codec.decode(json.loads((FIXTURES / "v3.json").read_bytes()))
    assert base.projection is not None
    save_sidecar(store, codec, "s", attrs.evolve(
        base, projection=attrs.evolve(base.projection, **change)))
    state, notices = load_sidecar(store, codec, "s", canonical)
    assert state.projection is None and len(notices) == 1


# -- saving ------------------------------------------------------------------------------------


def _updated_at(store: FsStore) -> str:
    value: str = json.loads((store.root / "s.context.json").read_bytes())["updated_at"]
    return value


def test_save_upgrades_legacy_files_to_schema_3(
    store: FsStore, codec: SidecarCodec, canonical: list[Message]
) -> None:
    install(store, "v2.json")
    state, _ = load_sidecar(store, codec, "s", canonical)
    save_sidecar(store, codec, "s", state)
    raw = (store.root / "s.context.json").read_bytes()
    assert raw.endswith(b"}\n") and raw.startswith(b'{\n  "schema_version": 3,')
    document = json.loads(raw)
    assert "last_trigger" not in document and "blocked_input_hash" not in document
    assert document["updated_at"] > "2026-07-01T09:30:01Z"
    reloaded, notices = load_sidecar(store, codec, "s", canonical)
    assert notices == []
    assert reloaded == attrs.evolve(state, updated_at=document["updated_at"])
    assert (store.root / "s.context.json").stat().st_mode & 0o777 == 0o600


def test_promoted_and_refreshed_system_together(
    store: FsStore, codec: SidecarCodec, canonical: list[Message]
) -> None:
    install(store, "v3_promoted.json")
    canonical[0] = Message(role="system", content="refreshed prompt")
    state, notices = load_sidecar(store, codec, "s", canonical)
    assert state.projection is not None
    assert state.projection.messages[0] == canonical[0]
    assert state.projection.covered_prefix_hash == covered_prefix_hash(canonical, 4)
    assert len(notices) == 1 and "promoted" in notices[0] and "system prompt" in notices[0]


def test_invalid_projection_keeps_readable_receipt_and_telemetry(
    store: FsStore, codec: SidecarCodec, canonical: list[Message]
) -> None:
    import json as _json

    data = _json.loads((FIXTURES / "v3.json").read_text())
    assert data.get("last_receipt")
    data["projection"]["covered_count"] = "four"
    data["telemetry"] = [{"kind": "install", "trigger": "pressure", "action": "summary",
                          "tokens_before": 900, "tokens_after": 300}]
    (store.root / "s.context.json").write_text(_json.dumps(data))
    with pytest.warns(StoreWarning, match="discarded"):
        state, notices = load_sidecar(store, codec, "s", canonical)
    assert state.projection is None
    assert state.last_receipt is not None
    assert state.last_receipt.operation_id == data["last_receipt"]["operation_id"]
    assert state.generation == data["generation"]
    assert [t.tokens_before for t in state.telemetry] == [900]
    assert "receipt and telemetry were kept" in notices[0]
