"""Session id validation (design §1.2)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxfold import SessionError
from ctxfold.session_id import SESSION_ID_RULE, validate_session_id

VALID = ["a", "A", "0", "abc-DEF_123.x", "a..b", "x" * 128, "2026-01-01T10.00", "a-", "a."]

HOSTILE = [
    "",
    ".",
    "..",
    "../x",
    "../../etc/passwd",
    "/abs/path",
    "/",
    "a/b",
    "a\\b",
    ".hidden",
    "-rf",
    "_x",
    "a b",
    "a\x00b",
    "\x00",
    "abc\n",
    "a\tb",
    "x" * 129,
    "é",
    "aé",
    "a:b",
    "a*",
    "~user",
    "$(rm)",
    "会话",
    "a\u200bb",
]


@pytest.mark.parametrize("session_id", VALID)
def test_valid_ids_are_returned_unchanged(session_id: str) -> None:
    assert validate_session_id(session_id) == session_id


@pytest.mark.parametrize("session_id", HOSTILE)
def test_hostile_ids_are_rejected_with_id_and_rule(session_id: str) -> None:
    with pytest.raises(SessionError) as info:
        validate_session_id(session_id)
    message = str(info.value)
    assert SESSION_ID_RULE in message
    shown = repr(session_id)
    assert shown[:30] in message  # the id is named (repr, possibly truncated)
    assert "\x00" not in message and "\n" not in message


@pytest.mark.parametrize("value", [None, 1, b"abc", ["a"], 1.5])
def test_non_strings_are_rejected(value: object) -> None:
    with pytest.raises(SessionError, match="expected a string"):
        validate_session_id(value)  # type: ignore[arg-type]


def test_overlong_id_message_is_truncated_and_says_why() -> None:
    with pytest.raises(SessionError) as info:
        validate_session_id("y" * 5000)
    message = str(info.value)
    assert len(message) < 300
    assert "5000 characters" in message


def test_reason_is_specific() -> None:
    with pytest.raises(SessionError, match="empty"):
        validate_session_id("")
    with pytest.raises(SessionError, match="start with"):
        validate_session_id("../x")
    with pytest.raises(SessionError, match="character outside"):
        validate_session_id("a/b")


@given(st.text(max_size=140))
def test_accepted_ids_are_always_safe_file_names(text: str) -> None:
    try:
        session_id = validate_session_id(text)
    except SessionError:
        return
    assert "/" not in session_id and "\\" not in session_id and "\x00" not in session_id
    assert not session_id.startswith((".", "-"))
    assert 1 <= len(session_id) <= 128
    assert session_id.isascii() and session_id.isprintable() and " " not in session_id
