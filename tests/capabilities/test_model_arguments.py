"""``use_capability`` arguments are model-controlled: whatever they are, the answer is text
(an ``error:`` line the model can act on), never an exception."""

from __future__ import annotations

import json
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxfold

BIG = "9" * 5000


@pytest.fixture
def cm(tmp_path) -> ctxfold.ContextManager:
    cm = ctxfold.open_session("s", store_path=str(tmp_path), summarize=lambda r: "x")
    cm.append({"role": "user", "content": "hi"},
              {"role": "assistant", "content": None, "tool_calls": [
                  {"id": "c1", "type": "function", "function": {"name": "b", "arguments": "{}"}}]})
    cm.append_tool_result("c1", "x" * 100_000, tool_name="b")
    return cm


def call(**arguments: object) -> dict:
    return {"action": "call", "capability_id": "session:tool_result", "arguments": arguments}


def huge_int() -> int:
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        return int(BIG)
    finally:
        sys.set_int_max_str_digits(old)


@pytest.mark.parametrize(("arguments", "says"), [
    (call(tool_call_id="c1", offset=huge_int()), "out of range"),
    (json.dumps(call(tool_call_id="c1", offset=BIG)), "must be an integer"),
    ('{"action":"call","capability_id":"session:tool_result","arguments":'
     '{"tool_call_id":"c1","offset":' + BIG + "}}", "not valid JSON"),
    (call(tool_call_id="c1", offset=True), "must be an integer"),
    ("[1, 2]", "must be a JSON object, got list"),
    ([1, 2], "must be a JSON object, got list"),
    (5, "must be a JSON object, got int"),
    (None, "must be a JSON object, got NoneType"),
    ("[" * 100_000, "not valid JSON"),
    ({"action": "call", "capability_id": "session:tool_result", "arguments": 7},
     "must be a JSON object, got int"),
])
def test_bad_arguments_are_answered_with_an_error_text(cm, arguments, says) -> None:
    answer = cm.use_capability(arguments)
    assert answer.startswith("error: ") and says in answer, answer


def test_a_json_string_of_good_arguments_still_works(cm) -> None:
    text = cm.use_capability(json.dumps(call(tool_call_id="c1", offset="12")))
    answer, _end = json.JSONDecoder().raw_decode(text)  # the page header, then the page
    assert answer["offset"] == 12 and answer["total_bytes"] == 100_000


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(inner=st.dictionaries(st.sampled_from(["tool_call_id", "result_ref", "offset", "limit",
                                              "x"]), json_values, max_size=4),
       outer=st.sampled_from(["call", "list", None, 3]))
def test_any_arguments_give_text(tmp_path_factory, inner, outer) -> None:
    session = ctxfold.open_session("f", store_path=str(tmp_path_factory.mktemp("f")),
                                   summarize=lambda r: "x")
    answer = session.use_capability({"action": outer, "capability_id": "session:tool_result",
                                     "arguments": inner})
    assert isinstance(answer, str)
