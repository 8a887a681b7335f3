"""``use_capability`` and ``session:tool_result`` paging (design §3.2)."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxfold import USE_CAPABILITY_TOOL, Message, ToolResultError
from ctxfold.capabilities.bounding import make_tool_result, result_ref
from ctxfold.capabilities.tool import PAGE_DEFAULT, PAGE_MAX, handle_use_capability
from ctxfold.capabilities.tool_result import read_tool_result
from ctxfold.interop.chat import tool_schema_to_openai
from ctxfold.kernel.codec import converter


def parse(page: str) -> tuple[dict[str, Any], str]:
    header, body = page.split("\n", 1)
    return json.loads(header), body


def schema_bytes() -> bytes:
    return json.dumps(tool_schema_to_openai(USE_CAPABILITY_TOOL), sort_keys=False).encode()


def big(call_id: str, text: str, tool: str = "bash") -> Message:
    msg = make_tool_result(call_id, text, tool_name=tool)
    assert msg.raw_content == text
    return msg


# -- paging --------------------------------------------------------------------------------


def test_pages_reconstruct_complete_utf8_output() -> None:
    text = "".join(f"{i} 日本語 😀 e\u0301\n" for i in range(6000))
    msgs = [Message(role="user", content="go"), big("c1", text)]
    ref = result_ref("c1", text)
    offset, pieces, headers = 0, [], []
    while True:
        header, body = parse(read_tool_result(msgs, tool_call_id="c1", result_ref=ref,
                                              offset=offset))
        headers.append(header)
        pieces.append(body.encode())
        assert len(body.encode()) <= PAGE_DEFAULT
        if header["complete"]:
            break
        offset = int(header["next_offset"])
    assert b"".join(pieces) == text.encode()
    assert len(headers) > 2
    assert list(headers[0]) == ["result_ref", "offset", "next_offset", "total_bytes", "sha256",
                                "complete"]
    assert all(h["sha256"] == hashlib.sha256(text.encode()).hexdigest() for h in headers)
    assert all(h["result_ref"] == ref for h in headers)


def test_unbounded_result_pages_content_without_ref() -> None:
    msgs = [make_tool_result("c1", "small output", tool_name="bash")]
    header, body = parse(read_tool_result(msgs, tool_call_id="c1"))
    assert body == "small output"
    assert header == {
        "result_ref": result_ref("c1", "small output"),
        "offset": 0,
        "next_offset": 12,
        "total_bytes": 12,
        "sha256": hashlib.sha256(b"small output").hexdigest(),
        "complete": True,
    }


def test_offset_at_end_gives_empty_complete_page() -> None:
    msgs = [make_tool_result("c1", "abc", tool_name="bash")]
    header, body = parse(read_tool_result(msgs, tool_call_id="c1", offset=3))
    assert body == ""
    assert header["complete"] is True
    assert header["next_offset"] == 3


def test_page_end_moves_back_to_character_start() -> None:
    msgs = [make_tool_result("c1", "ab日本", tool_name="bash")]  # 2 + 3 + 3 bytes
    header, body = parse(read_tool_result(msgs, tool_call_id="c1", limit=4))
    assert body == "ab"
    assert header["next_offset"] == 2
    assert header["complete"] is False


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.text(max_size=3000),
    repeat=st.integers(min_value=1, max_value=40),
    limit=st.integers(min_value=4, max_value=PAGE_MAX),
    tool=st.sampled_from(["bash", "read_file", "grep", "other"]),
)
def test_paging_property(text: str, repeat: int, limit: int, tool: str) -> None:
    body = text * repeat
    msg = make_tool_result("call", body, tool_name=tool)
    data = body.encode()
    ref = result_ref("call", body)
    offset, chunks, last = 0, [], None
    for _ in range(len(data) + 2):
        header, page = parse(read_tool_result([msg], tool_call_id="call", result_ref=ref,
                                              offset=offset, limit=limit))
        page.encode("utf-8", errors="strict")
        assert header["offset"] == offset
        assert header["total_bytes"] == len(data)
        assert header["sha256"] == hashlib.sha256(data).hexdigest()
        assert len(page.encode()) <= limit
        assert header["next_offset"] == offset + len(page.encode())
        chunks.append(page.encode())
        last = header
        if header["complete"]:
            break
        assert header["next_offset"] > offset
        offset = int(header["next_offset"])
    assert last is not None and last["complete"] is True
    assert last["next_offset"] == len(data)
    assert b"".join(chunks) == data


# -- lookup --------------------------------------------------------------------------------


def test_newest_of_same_content_is_used_and_other_sessions_are_invisible() -> None:
    msgs = [make_tool_result("c1", "same", tool_name="bash"),
            make_tool_result("c1", "same", tool_name="bash")]
    assert parse(read_tool_result(msgs, tool_call_id="c1"))[1] == "same"
    with pytest.raises(ToolResultError, match="no tool result with tool_call_id='c1'"):
        read_tool_result([make_tool_result("c2", "x", tool_name="bash")], tool_call_id="c1")


def test_unknown_call_id() -> None:
    msgs = [Message(role="user", content="c9"), make_tool_result("c2", "x", tool_name="bash")]
    with pytest.raises(ToolResultError, match=r"no tool result with tool_call_id='c9'.*c2"):
        read_tool_result(msgs, tool_call_id="c9")
    with pytest.raises(ToolResultError, match="tool_call_id is required"):
        read_tool_result(msgs, tool_call_id="")


def test_duplicate_call_id_requires_exact_ref() -> None:
    a, b = "first " * 9000, "second " * 9000
    msgs = [big("dup", a), big("dup", b)]
    ref_a, ref_b = result_ref("dup", a), result_ref("dup", b)
    with pytest.raises(ToolResultError, match="ambiguous") as info:
        read_tool_result(msgs, tool_call_id="dup")
    assert f"result_ref={ref_b}, {ref_a}" in str(info.value)
    assert parse(read_tool_result(msgs, tool_call_id="dup", result_ref=ref_a))[1].startswith(
        "first ")
    assert parse(read_tool_result(msgs, tool_call_id="dup", result_ref=ref_b))[1].startswith(
        "second ")


def test_the_only_truncated_result_of_a_call_is_picked_without_a_ref() -> None:
    text = "big " * 10000
    msgs = [big("c1", text), make_tool_result("c1", "small", tool_name="bash")]
    # Two results for the id, but only one was truncated: the one a marker pointed at.
    header, body = parse(read_tool_result(msgs, tool_call_id="c1"))
    assert header["result_ref"] == result_ref("c1", text) and body.startswith("big ")
    # Two truncated ones stay ambiguous.
    with pytest.raises(ToolResultError, match="ambiguous"):
        read_tool_result([*msgs, big("c1", "other " * 9000)], tool_call_id="c1")


def test_the_only_bounded_result_of_a_call_needs_no_ref_but_a_wrong_ref_fails() -> None:
    text = "x" * 40000
    msg = big("c1", text)
    ref = result_ref("c1", text)
    assert f"result_ref={ref}" in msg.content
    # result_ref is required when ambiguous (design §3.2); one result for the id is not.
    header = json.loads(read_tool_result([msg], tool_call_id="c1").split("\n", 1)[0])
    assert header["result_ref"] == ref and header["total_bytes"] == 40000
    with pytest.raises(ToolResultError, match=f"result_ref='tr-000'.*result_ref={ref}"):
        read_tool_result([msg], tool_call_id="c1", result_ref="tr-000")


@pytest.mark.parametrize(
    "content",
    [
        "head\n…[truncated tool=bash call_id=c1 result_ref=tr-0 original_bytes=9 ...]…\ntail",
        "aaaa[... tool result middle pruned ...]zzzz",
        "aaaa\n…[INCOMPLETE READ tool=read_file ...]…\n",
    ],
)
def test_legacy_truncated_record_without_raw_content(content: str) -> None:
    msg = Message(role="tool", content=content, tool_call_id="c1", name="bash")
    with pytest.raises(ToolResultError, match="full result is unavailable for this legacy "
                       "truncated record; re-run the tool with narrower arguments"):
        read_tool_result([msg], tool_call_id="c1")


@pytest.mark.parametrize("offset", [-1, 4])
def test_offset_out_of_range(offset: int) -> None:
    msgs = [make_tool_result("c1", "abc", tool_name="bash")]
    with pytest.raises(ToolResultError, match=f"offset={offset} is outside.*total_bytes=3"):
        read_tool_result(msgs, tool_call_id="c1", offset=offset)


def test_offset_inside_character() -> None:
    msgs = [make_tool_result("c1", "a😀b", tool_name="bash")]
    for offset in (2, 3, 4):
        with pytest.raises(ToolResultError, match=r"inside a UTF-8 character.*such as 1"):
            read_tool_result(msgs, tool_call_id="c1", offset=offset)
    assert parse(read_tool_result(msgs, tool_call_id="c1", offset=5))[1] == "b"


@pytest.mark.parametrize("limit", [0, -5, PAGE_MAX + 1])
def test_limit_out_of_range(limit: int) -> None:
    msgs = [make_tool_result("c1", "abc", tool_name="bash")]
    with pytest.raises(ToolResultError, match=f"limit={limit} is out of range.*1..{PAGE_MAX}"):
        read_tool_result(msgs, tool_call_id="c1", limit=limit)


def test_limit_max_is_accepted() -> None:
    text = "y" * 50000
    header, body = parse(read_tool_result([big("c1", text)], tool_call_id="c1",
                                          result_ref=result_ref("c1", text), limit=PAGE_MAX))
    assert len(body) == PAGE_MAX
    assert header["next_offset"] == PAGE_MAX


def test_limit_inside_next_character() -> None:
    msgs = [make_tool_result("c1", "😀", tool_name="bash")]
    with pytest.raises(ToolResultError, match="limit ends inside the next UTF-8 character; "
                       "increase limit"):
        read_tool_result(msgs, tool_call_id="c1", limit=3)
    assert parse(read_tool_result(msgs, tool_call_id="c1", limit=4))[1] == "😀"


# -- use_capability ------------------------------------------------------------------------


def test_schema_is_stable_and_unaffected_by_listing_and_calls() -> None:
    before = schema_bytes()
    snapshot = copy.deepcopy(converter.unstructure(USE_CAPABILITY_TOOL))
    msgs = [make_tool_result("c1", "abc", tool_name="bash")]
    listing = json.loads(handle_use_capability(msgs, {"action": "list"}))
    listing["capabilities"].append({"id": "x"})  # mutating an answer must not leak
    listing["capabilities"][0]["arguments"]["properties"].clear()
    handle_use_capability(msgs, {"action": "call", "capability_id": "session:tool_result",
                                 "arguments": {"tool_call_id": "c1"}})
    handle_use_capability(msgs, {"action": "call", "capability_id": "nope"})
    assert schema_bytes() == before
    assert converter.unstructure(USE_CAPABILITY_TOOL) == snapshot
    assert json.loads(handle_use_capability(msgs, {"action": "list"}))["capabilities"][0][
        "arguments"]["properties"]
    params = USE_CAPABILITY_TOOL.parameters
    assert USE_CAPABILITY_TOOL.name == "use_capability"
    assert set(params["properties"]) == {"action", "capability_id", "arguments"}
    assert params["properties"]["action"]["enum"] == ["list", "call"]


def test_list_advertises_tool_result_with_limit_max() -> None:
    listing = json.loads(handle_use_capability([], {"action": "list"}))
    cap = listing["capabilities"][0]  # session:search and session:message follow it
    assert cap["id"] == "session:tool_result"
    assert cap["limit_max"] == 24576
    assert cap["limit_default"] == 16384
    assert set(cap["arguments"]["properties"]) == {"tool_call_id", "result_ref", "offset",
                                                   "limit"}


def test_call_pages_and_accepts_json_string_arguments() -> None:
    text = "z" * 40000
    msgs = [big("c1", text)]
    ref = result_ref("c1", text)
    out = handle_use_capability(msgs, {
        "action": "call", "capability_id": "session:tool_result",
        "arguments": json.dumps({"tool_call_id": "c1", "result_ref": ref, "offset": "100",
                                 "limit": 10}),
    })
    header, body = parse(out)
    assert body == "z" * 10
    assert (header["offset"], header["next_offset"]) == (100, 110)


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"action": "call", "capability_id": "fs:read"}, "unknown capability_id 'fs:read'"),
        ({"action": "run"}, "unknown action 'run'"),
        ({}, "unknown action None"),
        ({"action": "call", "capability_id": "session:tool_result", "arguments": {}},
         "needs arguments.tool_call_id"),
        ({"action": "call", "capability_id": "session:tool_result",
          "arguments": {"tool_call_id": "c1", "offset": True}}, "offset=True must be an integer"),
        ({"action": "call", "capability_id": "session:tool_result",
          "arguments": {"tool_call_id": "c1", "page": 2}}, "unknown argument(s) page"),
        ({"action": "call", "capability_id": "session:tool_result", "arguments": "{bad"},
         "not valid JSON"),
        ({"action": "call", "capability_id": "session:tool_result",
          "arguments": {"tool_call_id": "c1", "limit": 99999}}, "limit=99999 is out of range"),
        ({"action": "call", "capability_id": "session:tool_result",
          "arguments": {"tool_call_id": "zz"}}, "no tool result with tool_call_id='zz'"),
    ],
)
def test_call_errors_are_returned_as_text(arguments: dict[str, object], expected: str) -> None:
    msgs = [make_tool_result("c1", "abc", tool_name="bash")]
    out = handle_use_capability(msgs, arguments)
    assert out.startswith("error: ")
    assert expected in out
