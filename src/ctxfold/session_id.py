"""Session ids (design §1.2).

A session id becomes part of file names (``<root>/<id>.jsonl``), so it is validated before
any path is built: ``^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$``. The first character cannot be a
dot or a dash, so ``..``, hidden files and option-like names are impossible, and no
separator, NUL or other control character can reach the filesystem.
"""

from __future__ import annotations

import re

from ctxfold.kernel.errors import SessionError, StoreError

#: The rule of design §1.2, as shown in error messages.
SESSION_ID_RULE = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
MAX_SESSION_ID_LENGTH = 128

# ``fullmatch`` (not ``match`` with ``$``) because ``$`` also matches before a trailing
# newline, which would let "abc\n" through.
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_SHOWN_CHARS = 40


def describe_session_id(value: object) -> str:
    """A short, safe rendering of a (possibly hostile) id for error messages."""
    text = repr(value)
    if len(text) > _SHOWN_CHARS:
        text = text[:_SHOWN_CHARS] + "…"
    return text


def validate_session_id(session_id: str) -> str:
    """Return ``session_id`` unchanged if it is a valid id, else raise :class:`SessionError`.

    Rejected: non-strings, the empty string, ids longer than 128 characters, path
    separators (``../x``, ``/abs``), a leading dot or dash, whitespace, NUL and every
    character outside ``A-Z a-z 0-9 . _ -``. The message names the id (``repr``, truncated)
    and the rule.
    """
    if not isinstance(session_id, str):
        raise SessionError(
            f"invalid session id {describe_session_id(session_id)}: expected a string, got "
            f"{type(session_id).__name__}; session ids must match {SESSION_ID_RULE}"
        )
    if _SESSION_ID.fullmatch(session_id) is None:
        if not session_id:
            why = "it is empty"
        elif len(session_id) > MAX_SESSION_ID_LENGTH:
            why = f"it is {len(session_id)} characters long (max {MAX_SESSION_ID_LENGTH})"
        elif not (session_id[0].isascii() and session_id[0].isalnum()):
            why = "it must start with an ASCII letter or digit"
        else:
            why = "it contains a character outside A-Z a-z 0-9 . _ -"
        raise SessionError(
            f"invalid session id {describe_session_id(session_id)}: {why}; "
            f"session ids must match {SESSION_ID_RULE} (no paths, no spaces)"
        )
    return session_id


_COUNT_KEY = re.compile(r"[A-Za-z0-9_-]{1,100}")


def validate_count_key(key: str) -> str:
    """Return ``key`` unchanged if it may name a token-count record (a file or a row:
    ``[A-Za-z0-9_-]``, 1-100 characters), else raise :class:`StoreError`. No dot: the ``fs``
    store names the record ``<id>.tokens-<key>``, and a dot would let that name end like a
    file of another session (``<id>.tokens-x`` + ``.jsonl`` is session ``<id>.tokens-x``'s
    transcript)."""
    if not isinstance(key, str) or not _COUNT_KEY.fullmatch(key):
        raise StoreError(f"invalid token-count key {str(key)[:40]!r}: [A-Za-z0-9_-] (no "
                         "dot), 1-100 characters")
    return key
