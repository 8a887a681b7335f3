"""``session:search`` and ``session:message``: the model finds and reads folded history through
the one stable ``use_capability`` tool, and nothing it does rewrites the transcript."""

from __future__ import annotations

import hashlib
import json
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxfold
from ctxfold import USE_CAPABILITY_TOOL, Message, ToolCall
from ctxfold.capabilities import session_search
from ctxfold.capabilities.tool import handle_use_capability
from ctxfold.kernel.summary import LOOKUP_MARKER, is_summary_message, unwrap_summary
from ctxfold.testing import RecordingSummarizer

NEEDLE = "NEEDLE-7f3a"


def call(capability: str, **arguments: object) -> dict:
    return {"action": "call", "capability_id": capability, "arguments": arguments}


def tool_round(cm, i: int, output: str) -> None:
    cm.append(Message(role="assistant", tool_calls=(
        ToolCall(id=f"c{i}", name="read", arguments=json.dumps({"path": f"f{i}.py"})),)))
    cm.append_tool_result(f"c{i}", output, tool_name="read")


def needle_output() -> str:
    # Large (so the visible content is bounded), multi-byte, the needle deep inside.
    return "".join(f"line {n} é→字 {'x' * 40}\n" for n in range(1500)) + NEEDLE + \
        " found here\n" + "tail ✓\n" * 2000


def search(cm, **arguments: object) -> dict:
    answer = cm.use_capability(call("session:search", **arguments))
    assert not answer.startswith("error:"), answer
    return json.loads(answer)


def read_all(cm, capability: str, size: int, **key: object) -> tuple[bytes, list[dict]]:
    data, headers, offset = b"", [], 0
    while True:
        text = cm.use_capability(call(capability, offset=offset, limit=size, **key))
        assert not text.startswith("error:"), text
        header_line, _, page = text.partition("\n")
        header = json.loads(header_line)
        headers.append(header)
        data += page.encode()
        if header["complete"]:
            return data, headers
        offset = header["next_offset"]


@pytest.fixture
def folded(open_session):
    """A session folded three times; the needle tool output was folded by the first."""
    cm = open_session(window=20_000, ratio=0.5, summarizer=RecordingSummarizer())
    cm.append(Message(role="system", content="You are a coding agent."),
              Message(role="user", content="Fix the bug."))
    tool_round(cm, 0, needle_output())
    needle = len(cm.canonical) - 1
    covered = []
    for checkpoint in range(3):
        for i in range(1 + 10 * checkpoint, 11 + 10 * checkpoint):
            tool_round(cm, i, f"output {i} " + "y" * 3000)
        cm.compact()
        covered.append(cm.state.projection.covered_count)
    assert covered[0] > needle and covered[0] < covered[1] < covered[2]  # three checkpoints
    assert all(NEEDLE not in m.content for m in cm.view())  # nothing of it is visible
    return cm, needle


def test_a_tool_output_folded_two_checkpoints_ago_is_found_and_paged_byte_exactly(folded):
    cm, needle = folded
    hits = search(cm, query=NEEDLE.lower() + " FOUND")["hits"]
    assert [h["ref"] for h in hits] == [f"#{needle}"]
    hit = hits[0]
    assert hit["role"] == "tool" and hit["tool_call_id"] == "c0"
    assert NEEDLE in hit["matches"][0]["excerpt"]
    raw = cm.canonical[needle].raw_content.encode()
    assert hit["total_bytes"] == len(raw)
    data, headers = read_all(cm, "session:message", 7_001, ref=hit["ref"])
    assert data == raw and len(headers) > 2
    assert headers[0]["sha256"] == hashlib.sha256(raw).hexdigest()
    # The match offset is a byte offset a page can start at.
    at = hit["matches"][0]["at"]
    page = cm.use_capability(call("session:message", ref=hit["ref"], offset=at, limit=64))
    assert page.partition("\n")[2].startswith(NEEDLE)
    # The same bytes through session:tool_result, with the ids the hit gave.
    same, _ = read_all(cm, "session:tool_result", 24_576, tool_call_id=hit["tool_call_id"],
                       result_ref=hit["result_ref"])
    assert same == raw


def test_the_summary_carries_lookup_hints_for_what_it_folds(folded):
    cm, needle = folded
    summaries = [m for m in cm.view() if is_summary_message(m)]
    assert len(summaries) == 1
    hint = summaries[0].content.split(LOOKUP_MARKER, 1)[1]
    start, end = map(int, re.search(r"#(\d+)–#(\d+)", hint).groups())
    assert start <= needle <= end and end == cm.state.projection.covered_count - 1
    assert "session:search" in hint and "session:message" in hint
    assert LOOKUP_MARKER not in unwrap_summary(summaries[0])  # never merged into the next one


def test_search_is_newest_first_and_pages(open_session):
    cm = open_session()
    cm.append(Message(role="user", content="start"))
    for i in range(7):
        tool_round(cm, i, f"result {i}: Widget ok")
    first = search(cm, query="widget", limit=3)
    refs = [h["ref"] for h in first["hits"]]
    assert refs == ["#14", "#12", "#10"] and not first["complete"]
    second = search(cm, query="widget", limit=3, **first["next"])
    assert [h["ref"] for h in second["hits"]] == ["#8", "#6", "#4"]
    skipped = search(cm, query="widget", offset=3, limit=3)
    assert skipped["hits"] == second["hits"]
    last = search(cm, query="widget", limit=10, **second["next"])
    assert [h["ref"] for h in last["hits"]] == ["#2"] and last["complete"] and not last["next"]
    # Terms must all occur; regex works; assistant tool calls are searchable too.
    assert [h["ref"] for h in search(cm, query="result 3: widget")["hits"]] == ["#8"]
    assert [h["ref"] for h in search(cm, query=r"result [25]:", regex=True)["hits"]] == [
        "#12", "#6"]
    assert [h["ref"] for h in search(cm, query="f4.py")["hits"]] == ["#9"]
    assert [h["ref"] for h in search(cm, query="widget", role="assistant")["hits"]] == []


def test_the_answer_fits_one_tool_output(open_session):
    cm = open_session()
    cm.append(Message(role="user", content="start"))
    for i in range(60):
        tool_round(cm, i, ("hit " + "字" * 300 + "\n") * 20)
    answer = cm.use_capability(call("session:search", query="hit", regex=True, limit=50))
    assert len(answer.encode()) <= session_search.OUTPUT_BUDGET
    decoded = json.loads(answer)
    assert 0 < len(decoded["hits"]) < 50 and decoded["next"]  # cut by size, resumable
    after = search(cm, query="hit", regex=True, limit=50, **decoded["next"])
    assert after["hits"][0]["ref"] != decoded["hits"][-1]["ref"]


def test_only_the_current_session_is_reachable(tmp_path):
    mine = ctxfold.open_session("mine", store_path=str(tmp_path), summarize=lambda r: "x")
    other = ctxfold.open_session("other", store_path=str(tmp_path), summarize=lambda r: "x")
    mine.append(Message(role="user", content="my secret apple"))
    other.append(Message(role="user", content="their secret banana"))
    assert search(mine, query="banana")["hits"] == []
    assert search(other, query="banana")["hits"][0]["ref"] == "#0"
    answer = mine.use_capability(call("session:search", query="banana", session_id="other"))
    assert answer.startswith("error: ") and "only this session" in answer
    assert mine.use_capability(call("session:message", ref="#1")).startswith("error: ")


def test_capability_calls_never_change_the_transcript(folded):
    cm, needle = folded
    canonical, view, state = cm.canonical, list(cm.view()), cm.state
    search(cm, query=NEEDLE)
    search(cm, query="line 1[0-9]+ ", regex=True)
    read_all(cm, "session:message", 24_576, ref=f"#{needle}")
    assert cm.canonical == canonical and cm.view() == view
    assert cm.state.projection == state.projection
    assert cm.state.transcript_version == state.transcript_version


def test_the_tool_schema_is_unchanged_and_lists_the_capabilities(tmp_path):
    schema = json.dumps([USE_CAPABILITY_TOOL.name, USE_CAPABILITY_TOOL.description,
                         USE_CAPABILITY_TOOL.parameters], sort_keys=True)
    assert hashlib.sha256(schema.encode()).hexdigest()[:12] == "13482fc74a48"
    listed = json.loads(handle_use_capability([], {"action": "list"}))["capabilities"]
    assert [c["id"] for c in listed] == ["session:tool_result", "session:search",
                                         "session:message", "session:budget", "session:fold"]


def test_message_refs_by_id_and_position(open_session):
    cm = open_session()
    cm.append(Message(role="user", content="héllo", id="m-1"),
              Message(role="assistant", content="world"))
    by_id = cm.use_capability(call("session:message", ref="m-1"))
    header, _, page = by_id.partition("\n")
    assert json.loads(header)["ref"] == "#0" and page == "héllo"
    assert cm.use_capability(call("session:message", ref="#1")).endswith("\nworld")


MESSAGE = [Message(role="user", content="héllo wörld"), Message(role="tool", tool_call_id="c",
                                                                 content="abc")]


@pytest.mark.parametrize(("capability", "arguments", "says"), [
    ("session:search", {}, "needs arguments.query"),
    ("session:search", {"query": ""}, "needs arguments.query"),
    ("session:search", {"query": 5}, "needs arguments.query"),
    ("session:search", {"query": "x" * 300}, "at most 256"),
    ("session:search", {"query": "(", "regex": True}, "invalid regex"),
    ("session:search", {"query": r"(a)\1", "regex": True}, "back-references are not"),
    ("session:search", {"query": "(?=a)b", "regex": True}, "look-arounds"),
    ("session:search", {"query": "a{0,2000}a{0,2000}b", "regex": True},
     "invalid repetition size"),
    ("session:search", {"query": "a{0,1000}a{0,1000}b", "regex": True},
     "instructions (at most 2000)"),
    ("session:search", {"query": "x", "regex": "yes"}, "true or false"),
    ("session:search", {"query": "x", "role": "robot"}, "must be one of"),
    ("session:search", {"query": "x", "limit": 0}, "out of range"),
    ("session:search", {"query": "x", "limit": 51}, "out of range"),
    ("session:search", {"query": "x", "offset": -1}, "0 or more"),
    ("session:search", {"query": "x", "offset": "9" * 40}, "must be an integer"),
    ("session:search", {"query": "x", "before": "#99"}, "past the end"),
    ("session:search", {"query": " ".join("abcdefghijklmnopq")}, "at most 16"),
    ("session:message", {}, "needs arguments.ref"),
    ("session:message", {"ref": 3}, "message reference"),
    ("session:message", {"ref": "#2"}, "past the end"),
    ("session:message", {"ref": "nope"}, "no message 'nope'"),
    ("session:message", {"ref": "#0", "offset": 2}, "inside a UTF-8 character"),
    ("session:message", {"ref": "#0", "offset": 99}, "outside message #0"),
    ("session:message", {"ref": "#0", "limit": 0}, "out of range"),
    ("session:message", {"ref": "#0", "path": "/etc"}, "unknown argument"),
])
def test_bad_arguments_are_answered_with_an_error_text(capability, arguments, says):
    answer = handle_use_capability(MESSAGE, call(capability, **arguments))
    assert answer.startswith("error: ") and says in answer, answer


#: Patterns that backtrack for ever in Python's ``re`` (the issue's and the classics).
HOSTILE = ["a{0,2000}a{0,2000}b", "a{0,1000}a{0,1000}b", "a{0,999}a{0,999}a{0,999}b",
           "(a+)+b", "(a|aa)+b", "(a|a)*b", r"(\w+\s?)*$", "(.*a){20}", "(.*a){40}",
           "(x+x+)+y", r"^(a?){25}a{25}$", "(.*)*x", r"(a)\1+b", r"(?=a+)+b",
           r"(.*,){11}P", "a.*b.*c.*d.*e.*f", r"(?:a|b|c|d){50,100}z",
           # the slowest for RE2 found (its DFA gives up, the NFA runs ~50 ns/instruction/byte)
           "(?:a{1,10}){1,90}c", ".*a.{300}q"]


@pytest.mark.parametrize("pattern", HOSTILE)
def test_a_hostile_pattern_answers_within_the_deadline(pattern):
    # One 200 KB tool result that makes each of them backtrack (today: > 25 s for 5 of them),
    # and 20 more messages of the same, so the deadline is met across messages too.
    hostile = "a" * 200_000
    messages = [Message(role="tool", tool_call_id=f"c{i}", content=hostile)
                for i in range(20)]
    began = time.monotonic()
    answer = handle_use_capability(messages, call("session:search", query=pattern, regex=True))
    took = time.monotonic() - began
    assert took < session_search.SEARCH_SECONDS + 1.5, (pattern, took)
    if not answer.startswith("error: "):
        decoded = json.loads(answer)
        assert decoded["complete"] or decoded["next"] or decoded.get("partial")


def test_a_slow_search_says_where_to_resume():
    messages = [Message(role="tool", tool_call_id=f"c{i}", content="a" * 200_000)
                for i in range(60)]
    decoded = json.loads(handle_use_capability(messages, call(
        "session:search", query="(?:a{1,10}){1,90}c", regex=True)))
    assert decoded["hits"] == [] and not decoded["complete"] and decoded["next"]["before"]
    # A single message too slow to finish is skipped and named, so paging always moves on.
    huge = [Message(role="tool", tool_call_id="h", content="a" * 20_000_000)]
    one = json.loads(handle_use_capability(huge, call("session:search", query="(?:a{1,10}){1,90}c",
                                                       regex=True)))
    assert one["partial"] == ["#0"]


def test_regex_offsets_are_utf8_bytes_and_matches_span_lines():
    text = "é→字 first line\nsecond NEEDLE-1 here\nthird"
    messages = [Message(role="tool", tool_call_id="c", content=text)]
    hit = json.loads(handle_use_capability(messages, call(
        "session:search", query=r"line\nsecond needle-\d", regex=True)))["hits"][0]
    at = hit["matches"][0]["at"]
    assert text.encode()[at:].startswith(b"line\nsecond")
    assert hit["matches"][0]["excerpt"].startswith("é→字 first line")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(capability=st.sampled_from(["session:search", "session:message"]),
       inner=st.dictionaries(st.sampled_from(["query", "regex", "role", "before", "offset",
                                              "limit", "ref", "x"]),
                             json_values | st.from_regex(r"[#a-z()*+|\\.\[\]?{}0-9,^$]{0,12}",
                                                         fullmatch=True), max_size=5))
def test_any_arguments_give_text(capability, inner):
    answer = handle_use_capability(MESSAGE, {"action": "call", "capability_id": capability,
                                             "arguments": inner})
    assert isinstance(answer, str)
