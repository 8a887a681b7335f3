"""The sidecar codec ``v3``: every historic form, golden fixtures (design §5.5)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxfold import (
    Action,
    CacheState,
    Config,
    Message,
    Projection,
    Receipt,
    Registry,
    SidecarError,
    SidecarState,
    SidecarVersionError,
    ToolCall,
)
from ctxfold.engine.sidecar import dumps_state
from ctxfold.kernel.codec import message_from_dict
from ctxfold.kernel.compat import LEGACY_SIDECAR_FIELDS
from ctxfold.kernel.kinds import SIDECAR_FORMAT
from ctxfold.kernel.state import RECEIPT_ACTIONS, RECEIPT_STATUSES, TelemetryRecord
from ctxfold.plugins.sidecar_v3 import SidecarV3Codec

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sidecar"
BOUNDED_HASH = "cbf27bb5284b860074aa45bd88792d14"
PROMOTED_HASH = "17dd8c51986b0fc5b9dc52e0876ba80f"
SUMMARY_HASH = "ad824198f92cfd4511c6b640b46ce589"
SUMMARY = (
    "<compaction-summary>\nSummary of earlier conversation (older messages were compacted to "
    "save context):\n## Goal\nFix the failing test in src/app.py.\n## Files & code\n- "
    "src/app.py line 2: `return a - b` should be `a + b`.\n</compaction-summary>"
)
BODY = (
    Message(role="system", content="You are a coding agent. Work in /repo."),
    Message(role="user", origin="host", content=SUMMARY),
)


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    return data


@pytest.fixture
def codec() -> SidecarV3Codec:
    return SidecarV3Codec()


def test_registered_as_sidecar_format_v3() -> None:
    registry = Registry.from_config(load_entry_points=False)
    assert "v3" in registry.names("sidecar_format")
    built = registry.create(SIDECAR_FORMAT, "v3", config=Config())
    assert isinstance(built, SidecarV3Codec)


# -- golden fixtures ---------------------------------------------------------------------------


def test_v1(codec: SidecarV3Codec) -> None:
    state = codec.decode(fixture("v1.json"))
    assert state == SidecarState(
        schema_version=3,
        transcript_version=7,
        projection=Projection(
            messages=BODY,
            transcript_version=7,
            projection_version=1,
            covered_count=4,
            covered_prefix_hash=BOUNDED_HASH,
            summary_hash=SUMMARY_HASH,
            source_tokens=5120,
            projection_tokens=410,
            created_at="2026-06-02T08:00:00Z",
        ),
        prompt_cache_key="repo|s1|deepseek-v4-flash",
        last_cache_state=CacheState.COLD,
        generation=0,
        last_receipt=None,
        updated_at="2026-06-02T08:00:01Z",
    )


def test_v1_schema_zero_and_missing(codec: SidecarV3Codec) -> None:
    data = fixture("v1_schema0.json")
    expected = SidecarState(
        transcript_version=3,
        prompt_cache_key="repo|s1|deepseek-chat",
        last_cache_state=CacheState.WARM,
        updated_at="2026-05-20T12:00:00Z",
    )
    assert codec.decode(data) == expected
    # blocked_* mirrors are legacy: no receipt is invented from them.
    assert codec.decode(data).last_receipt is None
    del data["schema_version"]
    assert codec.decode(data) == expected
    data["schema_version"] = None
    assert codec.decode(data) == expected


def test_v2_with_legacy_snip_receipt(codec: SidecarV3Codec) -> None:
    state = codec.decode(fixture("v2.json"))
    assert state.generation == 4
    assert state.projection is not None
    assert state.projection.view_input_hash == "1" * 32
    assert state.projection.projection_version == 2
    assert state.last_receipt == Receipt(
        operation_id="op-legacy-7",
        status=Action.APPLIED,
        action=Action.PRUNE,  # the legacy "snip" reads as what it did
        trigger="snip",
        projection_version=2,
        covered_count=4,
        covered_prefix_hash=BOUNDED_HASH,
        input_hash="3" * 32,
        input_tokens=6000,
        result_tokens=5120,
        reason="stale tool results snipped",
        created_at="2026-07-01T09:30:00Z",
        generation=4,  # pre-v3 receipts are scoped to the state's generation
    )


def test_v3_is_byte_stable(codec: SidecarV3Codec) -> None:
    raw = (FIXTURES / "v3.json").read_bytes()
    state = codec.decode(json.loads(raw))
    assert dumps_state(codec, state) == raw
    assert state.generation == 3
    assert state.last_cache_state is CacheState.WARM
    assert state.projection is not None and state.projection.messages == BODY
    assert state.last_receipt is not None
    assert state.last_receipt.action is Action.SUMMARY
    assert state.last_receipt.saved_tokens == 4710 and state.last_receipt.cache_break is True
    assert state.last_receipt.probes_before == 0.5 and state.last_receipt.probes_after == 1.0
    assert state.last_receipt.repaired == ("- error: ValueError: limit 4096 exceeds maximum 1024",)
    assert [t.kind for t in state.telemetry] == ["install", "resume"]
    assert [t.turn for t in state.telemetry] == [7, None]
    assert state.telemetry[1] == TelemetryRecord(
        kind="resume", cache_state=CacheState.COLD, detail="idle 30h",
        created_at="2026-08-21T16:00:00.000000Z",
    )
    assert state.settings is not None
    assert (state.settings.window, state.settings.trigger_tokens) == (16000, 12800)


@pytest.mark.parametrize("settings", [None, "x", {"window": "big"}, {"window": 1, "extra": 2}])
def test_what_the_session_ran_with_never_costs_the_checkpoint(
        codec: SidecarV3Codec, settings: object) -> None:
    data = json.loads((FIXTURES / "v3.json").read_bytes())
    data["settings"] = settings
    state = codec.decode(data)
    assert state.projection is not None  # a damaged record reads as none, nothing more
    expected = 1 if isinstance(settings, dict) and "extra" in settings else None
    assert (state.settings.window if state.settings else None) == expected


def test_v3_with_legacy_fields(codec: SidecarV3Codec) -> None:
    state = codec.decode(fixture("v3_legacy_fields.json"))
    assert state.last_cache_state is CacheState.UNKNOWN  # "lukewarm" is not a label
    assert state.generation == 6
    receipt = state.last_receipt
    assert receipt is not None
    assert receipt.action is Action.PRUNE  # the legacy "native_tool_clear"
    assert receipt.status is Action.BLOCKED
    assert receipt.reason == "native context editing rejected by provider"
    assert receipt.generation == 6
    assert state.projection is not None and state.projection.projection_version == 5


def test_v3_promoted_decodes_verbatim(codec: SidecarV3Codec) -> None:
    # The codec does not judge hashes; engine.sidecar applies the promoted rule.
    state = codec.decode(fixture("v3_promoted.json"))
    assert state.projection is not None
    assert state.projection.covered_prefix_hash == PROMOTED_HASH
    assert state.last_receipt is not None and state.last_receipt.saved_tokens == 4890


def test_newer_schema_is_an_error_never_a_downgrade(codec: SidecarV3Codec) -> None:
    with pytest.raises(SidecarVersionError, match=r"newer ctxfold.*upgrade"):
        codec.decode(fixture("newer_v4.json"))


def test_invalid_fixture_is_not_json() -> None:
    with pytest.raises(ValueError):
        json.loads((FIXTURES / "invalid.json").read_bytes())


@pytest.mark.parametrize(
    "name",
    ["v1.json", "v1_schema0.json", "v2.json", "v3.json", "v3_legacy_fields.json",
     "v3_promoted.json"],
)
def test_reencoding_writes_schema_3_without_legacy_fields(
    codec: SidecarV3Codec, name: str
) -> None:
    document = codec.encode(codec.decode(fixture(name)))
    assert document["schema_version"] == 3
    assert not set(LEGACY_SIDECAR_FIELDS) & set(document)
    assert list(document) == [
        "schema_version", "transcript_version", "projection", "prompt_cache_key",
        "last_cache_state", "generation", "last_receipt", "telemetry", "updated_at", "settings",
    ]
    if document["last_receipt"] is not None:
        assert "blocked_input_hash" not in document["last_receipt"]
        assert "source_projection" not in document["last_receipt"]
    text = json.dumps(document)
    for legacy in ("last_mode", "native_context_editing", "context_editing_fallback"):
        assert legacy not in text
    assert codec.decode(json.loads(text)) == codec.decode(fixture(name))  # stable


# -- labels and shapes -------------------------------------------------------------------------


def test_unknown_receipt_labels_drop_only_the_receipt(codec: SidecarV3Codec) -> None:
    for field, label in (("status", "exploded"), ("action", "teleport")):
        data = fixture("v3.json")
        data["last_receipt"][field] = label
        state = codec.decode(data)
        assert state.last_receipt is None
        assert state.projection is not None and state.generation == 3


@pytest.mark.parametrize("value", [["applied"], {"a": 1}, 7, None, True])
def test_labels_of_the_wrong_type_are_unknown_labels(codec: SidecarV3Codec, value: Any) -> None:
    """A list or object where a label string belongs used to raise TypeError (unhashable)
    and keep the session from opening."""
    for field in ("status", "action"):
        data = fixture("v3.json")
        data["last_receipt"][field] = value
        state = codec.decode(data)
        assert state.last_receipt is None and state.generation == 3
    data = fixture("v3.json")
    data["telemetry"][0]["kind"] = value
    assert [t.kind for t in codec.decode(data).telemetry] == ["resume"]


def test_a_session_with_a_list_for_a_label_opens(tmp_path) -> None:
    import json

    import ctxfold

    cm = ctxfold.open_session("s", store_path=str(tmp_path), summarize=lambda r: "x")
    cm.append({"role": "user", "content": "hi"})
    data = fixture("v3.json")
    data["projection"] = None
    data["last_receipt"]["status"] = ["applied"]
    data["telemetry"][0]["kind"] = {"k": 1}
    (tmp_path / "s.context.json").write_text(json.dumps(data))
    again = ctxfold.open_session("s", store_path=str(tmp_path), summarize=lambda r: "x")
    assert again.state.last_receipt is None
    assert again.prepare().messages[-1].content == "hi"


def test_a_thrash_record_and_a_turn_round_trip_and_older_records_have_no_turn(
        codec: SidecarV3Codec) -> None:
    data = fixture("v3.json")
    thrash = TelemetryRecord(kind="thrash", trigger="pressure", action="refill",
                             tokens_before=13020, projection_version=2, turn=9,
                             detail="the checkpoint of turn 7 (projection v2) reached the "
                                    "trigger again at turn 9")
    state = codec.decode(data)
    with_thrash = attrs.evolve(state, telemetry=(*state.telemetry, thrash))
    assert codec.decode(json.loads(json.dumps(codec.encode(with_thrash)))) == with_thrash
    for record in data["telemetry"]:  # written before records had a turn
        del record["turn"]
    assert [t.turn for t in codec.decode(data).telemetry] == [None, None]


def test_unknown_telemetry_kind_is_dropped(codec: SidecarV3Codec) -> None:
    data = fixture("v3.json")
    data["telemetry"][0]["kind"] = "future-kind"
    data["telemetry"][1]["cache_state"] = "tepid"
    state = codec.decode(data)
    assert [t.kind for t in state.telemetry] == ["resume"]
    assert state.telemetry[0].cache_state is CacheState.UNKNOWN


@pytest.mark.parametrize(
    ("patch", "where"),
    [
        ({"generation": "3"}, "sidecar.generation"),
        ({"generation": True}, "sidecar.generation"),
        ({"transcript_version": 1.5}, "sidecar.transcript_version"),
        ({"prompt_cache_key": 7}, "sidecar.prompt_cache_key"),
        ({"projection": "body"}, "sidecar.projection"),
        ({"projection": {"messages": [{"role": "wizard"}]}}, "sidecar.projection.messages[0]"),
        ({"projection": {"messages": [], "covered_count": "4"}}, "covered_count"),
        ({"last_receipt": ["x"]}, "last_receipt"),
        ({"last_receipt": {"status": "applied", "action": "prune"}}, "operation_id"),
        ({"telemetry": {"kind": "resume"}}, "telemetry"),
        ({"telemetry": [{"kind": "resume", "tokens_before": "many"}]}, "telemetry[0]"),
        ({"schema_version": -1}, "schema_version"),
        ({"schema_version": "3"}, "schema_version"),
    ],
)
def test_invalid_shapes_raise_sidecar_error_naming_the_key(
    codec: SidecarV3Codec, patch: dict[str, Any], where: str
) -> None:
    data = fixture("v3.json")
    data.update(patch)
    with pytest.raises(SidecarError) as info:
        codec.decode(data)
    assert not isinstance(info.value, SidecarVersionError)
    assert where in str(info.value)


@pytest.mark.parametrize("document", [[], "text", 3, None])
def test_non_object_documents_are_invalid(codec: SidecarV3Codec, document: Any) -> None:
    with pytest.raises(SidecarError, match="JSON object"):
        codec.decode(document)


def test_legacy_receipt_actions_load_as_prune_and_are_written_so(
        codec: SidecarV3Codec) -> None:
    for label in ("snip", "native_tool_clear"):
        data = fixture("v3.json")
        data["last_receipt"]["action"] = label
        state = codec.decode(data)
        assert state.last_receipt is not None
        assert state.last_receipt.action is Action.PRUNE
        assert state.projection is not None and state.generation == 3
        assert codec.encode(state)["last_receipt"]["action"] == "prune"


def test_a_legacy_planned_receipt_loads_as_none_and_the_rest_stays(
        codec: SidecarV3Codec) -> None:
    # "planned" was an operation its writer had not carried out: nothing to report.
    data = fixture("v2.json")
    data["last_receipt"]["status"] = "planned"
    state = codec.decode(data)
    assert state.last_receipt is None
    assert state.projection is not None and state.generation == 4


# -- property: encode/decode round trip --------------------------------------------------------

_text = st.text(max_size=40)
_messages = st.builds(
    Message,
    role=st.sampled_from(["system", "user", "assistant", "tool"]),
    content=_text,
    raw_content=st.none() | _text,
    tool_calls=st.lists(
        st.builds(ToolCall, id=_text, name=_text, arguments=_text), max_size=2
    ).map(tuple),
    tool_call_id=st.none() | _text,
    origin=st.sampled_from(["user", "host"]),
    local_only=st.booleans(),
)
_states = st.builds(
    SidecarState,
    transcript_version=st.integers(0, 2**63),
    projection=st.none()
    | st.builds(
        Projection,
        messages=st.lists(_messages, max_size=3).map(tuple),
        covered_count=st.integers(0, 10**6),
        covered_prefix_hash=_text,
    ),
    prompt_cache_key=_text,
    last_cache_state=st.sampled_from(list(CacheState)),
    generation=st.integers(0, 2**63),
    last_receipt=st.none()
    | st.builds(
        Receipt,
        operation_id=_text,
        status=st.sampled_from(sorted(RECEIPT_STATUSES)),
        action=st.sampled_from(sorted(RECEIPT_ACTIONS)),
        cache_break=st.booleans(),
        generation=st.integers(0, 100),
    ),
    updated_at=_text,
)


@given(_states)
def test_round_trip_through_json(state: SidecarState) -> None:
    codec = SidecarV3Codec()
    raw = dumps_state(codec, state)
    assert raw.endswith(b"\n")
    assert codec.decode(json.loads(raw)) == state


def test_projection_messages_use_the_transcript_line_form(codec: SidecarV3Codec) -> None:
    document = codec.encode(codec.decode(fixture("v3.json")))
    assert document["projection"]["messages"][1] == {
        "role": "user", "content": SUMMARY, "origin": "host"
    }
    assert message_from_dict(document["projection"]["messages"][1]) == BODY[1]


def test_an_install_ledger_round_trips_and_a_bad_one_is_named(codec: SidecarV3Codec) -> None:
    from ctxfold.kernel.ledger import LedgerEntry

    entry = LedgerEntry(read=300, written=1_200, invalidated=9_000, saved_per_request=8_000,
                        requests=3, summary_input=9_500, summary_read=9_000,
                        summary_output=250, estimated=False)
    state = SidecarState(telemetry=(TelemetryRecord(kind="install", ledger=entry),
                                    TelemetryRecord(kind="resume")))
    data = json.loads(dumps_state(codec, state))
    assert "ledger" not in data["telemetry"][1]  # records without one keep their old bytes
    assert codec.decode(data) == state
    data["telemetry"][0]["ledger"]["read"] = "300"
    with pytest.raises(SidecarError, match=r"telemetry\[0\].*ledger.*read"):
        codec.decode(data)
