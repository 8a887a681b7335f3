"""Bounded tool content at creation (design §3.1)."""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxfold.capabilities.bounding import (
    TOOL_CONTENT_BOUND,
    bound_tool_content,
    make_tool_result,
    result_ref,
)
from ctxfold.capabilities.tool_result import read_tool_result

CAP = TOOL_CONTENT_BOUND
MARKER = re.compile(
    r"\n…\[(?P<kind>truncated|INCOMPLETE READ) tool=(?P<tool>\S+) call_id=(?P<call_id>\S+) "
    r"result_ref=(?P<ref>tr-[0-9a-f]{24}) original_bytes=(?P<original>\d+) "
    r"kept_bytes=(?P<kept>\d+) .*?arguments=(?P<arguments>\{.*?\})\)\. "
    r"If use_capability is unavailable, re-run the original tool with narrower arguments\]…\n",
    re.S,
)
TOOLS = ["bash", "shell", "read_file", "read", "web_fetch", "grep", "glob", "ls", "custom_tool"]


def split(content: str, text: str) -> tuple[str, re.Match[str], str]:
    """(head, marker match, tail) of a bounded content, checked against the source text."""
    match = MARKER.search(content)
    assert match is not None, content[-800:]
    head, tail = content[: match.start()], content[match.end():]
    assert text.startswith(head)
    assert text.endswith(tail)
    assert len(head) + len(tail) < len(text)
    return head, match, tail


def nbytes(s: str) -> int:
    return len(s.encode())


# -- the bound -----------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, CAP - 1, CAP])
def test_within_bound_is_unchanged(size: int) -> None:
    text = "a" * size
    assert bound_tool_content(text, tool_name="bash", call_id="c") == text


def test_exactly_bound_with_multibyte_is_unchanged() -> None:
    text = "字" * 10922 + "ab"  # 32766 + 2 bytes
    assert nbytes(text) == CAP
    assert bound_tool_content(text, tool_name="bash", call_id="c") == text


@pytest.mark.parametrize("tool", TOOLS)
def test_one_byte_over_is_bounded(tool: str) -> None:
    text = ("line of output\n" * 3000)[: CAP + 1]
    assert nbytes(text) == CAP + 1
    content = bound_tool_content(text, tool_name=tool, call_id="call_1")
    assert nbytes(content) <= CAP
    split(content, text)


def test_result_ref_formula() -> None:
    body = "héllo\n世界"
    expected = "tr-" + hashlib.sha256(b"call_9\x00" + body.encode()).digest()[:12].hex()
    assert result_ref("call_9", body) == expected
    assert re.fullmatch(r"tr-[0-9a-f]{24}", expected)
    assert result_ref("call_9", body + "x") != expected
    assert result_ref("call_8", body) != expected


def test_marker_fields_and_recovery_offset() -> None:
    text = "".join(f"{i:06d} some output line\n" for i in range(5000))
    content = bound_tool_content(text, tool_name="bash", call_id="call_42")
    head, m, tail = split(content, text)
    assert m["kind"] == "truncated"
    assert m["tool"] == "bash"
    assert m["call_id"] == "call_42"
    assert m["ref"] == result_ref("call_42", text)
    assert int(m["original"]) == nbytes(text)
    assert int(m["kept"]) == nbytes(head) + nbytes(tail)
    assert 'use_capability(action="call", capability_id="session:tool_result"' in m.group(0)
    args = json.loads(m["arguments"])
    assert args == {"tool_call_id": "call_42", "result_ref": m["ref"], "offset": nbytes(head)}
    # bash keeps 8000/8000 characters of ASCII output
    assert len(head) == 8000
    assert len(tail) == 8000
    # the recovery arguments lead exactly to the first omitted byte
    msg = make_tool_result("call_42", text, tool_name="bash")
    page = read_tool_result([msg], **args)
    header, body = page.split("\n", 1)
    assert text.encode()[nbytes(head):].startswith(body.encode())
    assert json.loads(header)["offset"] == nbytes(head)


@pytest.mark.parametrize(
    ("tool", "head_chars", "tail_chars"),
    [("bash", 8000, 8000), ("shell", 8000, 8000), ("web_fetch", 12000, 2000),
     ("grep", 10000, 1000), ("glob", 10000, 1000), ("ls", 10000, 1000),
     ("something_else", 12000, 4000)],
)
def test_tool_class_budgets(tool: str, head_chars: int, tail_chars: int) -> None:
    text = "x" * 50000
    content = bound_tool_content(text, tool_name=tool, call_id="c")
    head, _, tail = split(content, text)
    assert (len(head), len(tail)) == (head_chars, tail_chars)


def test_head_gets_two_thirds_when_head_and_tail_do_not_fit() -> None:
    text = "漢" * 40000  # bash's 8000+8000 chars are 48000 bytes > cap - 512
    content = bound_tool_content(text, tool_name="bash", call_id="c")
    head, _, tail = split(content, text)
    assert nbytes(content) <= CAP
    assert 2 * CAP // 3 - 1500 <= nbytes(head) <= 2 * CAP // 3
    assert nbytes(tail) >= CAP - 512 - 2 * CAP // 3 - 3


@pytest.mark.parametrize("word", ["error:", "panic:", "fatal:", "Error:", "FATAL:"])
def test_error_tail_kept(word: str) -> None:
    text = "build step ok\n" * 4000 + f"{word} the real cause is here\n" + "trace\n" * 1500
    content = bound_tool_content(text, tool_name="bash", call_id="c")
    _head, _, tail = split(content, text)
    assert nbytes(content) <= CAP
    assert nbytes(tail) >= CAP // 3 - 3
    assert f"{word} the real cause is here" in tail
    plain = bound_tool_content(text.replace(word, "note"), tool_name="bash", call_id="c")
    assert nbytes(split(plain, text.replace(word, "note"))[2]) == 8000


def test_read_file_keeps_contiguous_prefix_cut_at_newline() -> None:
    text = "".join(f"{i}: {'内容' * (i % 7)} line\n" for i in range(6000))
    content = bound_tool_content(text, tool_name="read_file", call_id="rf")
    head, m, tail = split(content, text)
    assert m["kind"] == "INCOMPLETE READ"
    assert tail == ""
    assert head.endswith("\n")
    assert f"next_offset={nbytes(head)}" in m.group(0)
    assert int(m["kept"]) == nbytes(head)
    assert nbytes(head) <= CAP - 1024
    assert json.loads(m["arguments"])["offset"] == nbytes(head)


def test_read_file_without_newlines_still_cuts_at_character() -> None:
    text = "é" * 40000
    content = bound_tool_content(text, tool_name="read_file", call_id="rf")
    head, _, _ = split(content, text)
    assert nbytes(content) <= CAP
    assert set(head) == {"é"}


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("unit", ["字", "😀", "e\u0301", "👩\u200d💻", "a"])
@pytest.mark.parametrize("shift", range(4))
def test_cuts_at_every_boundary_never_split_characters(tool: str, unit: str, shift: int) -> None:
    text = "x" * shift + unit * (100000 // nbytes(unit)) + "error: tail\n" * (shift % 2)
    content = bound_tool_content(text, tool_name=tool, call_id="c")
    assert nbytes(content) <= CAP
    content.encode("utf-8", errors="strict")
    head, _, tail = split(content, text)
    # a base character keeps its combining mark / joiner: none dangles at either cut
    first_omitted = text[len(head)]
    assert unicodedata.combining(first_omitted) == 0
    assert first_omitted != "\u200d"
    if tail:
        assert unicodedata.combining(tail[0]) == 0
        assert tail[0] != "\u200d"


def test_long_tool_name_and_call_id_are_clipped_to_128_bytes() -> None:
    tool = "t" * 300
    call_id = "é" * 200
    content = bound_tool_content("z" * 40000, tool_name=tool, call_id=call_id)
    m = MARKER.search(content)
    assert m is not None
    assert nbytes(m["tool"]) <= 128
    assert nbytes(m["call_id"]) <= 128
    assert m["ref"] == result_ref(call_id, "z" * 40000)
    assert nbytes(content) <= CAP


def test_marker_field_sanitized() -> None:
    content = bound_tool_content("z" * 40000, tool_name="my tool]", call_id="id with\nspace")
    m = MARKER.search(content)
    assert m is not None
    assert m["tool"] == "my_tool_"
    assert m["call_id"] == "id_with_space"
    assert json.loads(m["arguments"])["tool_call_id"] == "id with\nspace"


# -- properties ----------------------------------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    unit=st.text(min_size=1, max_size=40),
    size=st.integers(min_value=0, max_value=120_000),
    tool=st.sampled_from(TOOLS),
    call_id=st.text(min_size=1, max_size=60),
)
def test_content_always_valid_utf8_and_bounded(
    unit: str, size: int, tool: str, call_id: str
) -> None:
    text = (unit * (size // nbytes(unit) + 1))[: max(1, size // 2)]
    content = bound_tool_content(text, tool_name=tool, call_id=call_id)
    data = content.encode("utf-8", errors="strict")
    assert len(data) <= CAP
    if nbytes(text) <= CAP:
        assert content == text
    else:
        assert result_ref(call_id, text) in content
        assert text.startswith(content[: content.index("\n…[")])


@settings(max_examples=60, deadline=None)
@given(raw=st.binary(min_size=0, max_size=70_000), tool=st.sampled_from(TOOLS))
def test_invalid_utf8_bytes_are_replaced(raw: bytes, tool: str) -> None:
    content = bound_tool_content(raw, tool_name=tool, call_id="b")
    assert nbytes(content) <= CAP
    msg = make_tool_result("b", raw, tool_name=tool)
    full = raw.decode("utf-8", errors="replace")
    assert (msg.raw_content or msg.content) == full


# -- make_tool_result ----------------------------------------------------------------------


def test_make_tool_result_small_has_no_raw_content() -> None:
    msg = make_tool_result("c1", "ok\n", tool_name="bash")
    assert msg.role == "tool"
    assert msg.content == "ok\n"
    assert msg.raw_content is None
    assert msg.name == "bash"
    assert msg.tool_call_id == "c1"
    assert msg.created_at.endswith("Z")


def test_make_tool_result_large_keeps_raw_content() -> None:
    text = "数据 " * 20000
    msg = make_tool_result("c2", text, tool_name="grep", id="m7", created_at="2026-01-01T00:00:00Z")
    assert msg.raw_content == text
    assert nbytes(msg.content) <= CAP
    assert msg.content == bound_tool_content(text, tool_name="grep", call_id="c2")
    assert (msg.id, msg.created_at) == ("m7", "2026-01-01T00:00:00Z")


def test_make_tool_result_invalid_bytes_and_surrogates() -> None:
    msg = make_tool_result("c3", b"ok \xff\xfe done", tool_name="bash")
    assert msg.content == "ok \ufffd\ufffd done"
    assert msg.raw_content is None
    msg = make_tool_result("c4", "lone \ud800 surrogate", tool_name="bash")
    assert msg.content == "lone \ufffd surrogate"


def test_make_tool_result_rejects_reserved_fields() -> None:
    with pytest.raises(TypeError, match="raw_content"):
        make_tool_result("c", "x", tool_name="bash", raw_content="y")


def test_page_as_tool_result_is_not_bounded_again() -> None:
    text = "ü" * 60000
    msg = make_tool_result("c5", text, tool_name="bash")
    page = read_tool_result([msg], tool_call_id="c5", result_ref=result_ref("c5", text),
                            limit=24576)
    page_msg = make_tool_result("c6", page, tool_name="use_capability")
    assert page_msg.content == page
    assert page_msg.raw_content is None
