"""Copying sessions between stores (``ctxfold store copy``), verified by fingerprints.

A session is copied through the store contract alone, so any two stores work: the target
session is created (never overwritten: one that exists is refused), the source's batches
are appended in order (a store that knows its batches, as ``fs`` and ``postgres`` do,
offers ``batches()``; otherwise each message is its own batch), and the sidecar bytes are
written as they are. Then both sides are read back and compared: the fingerprint of every
message's full stored form (what the ``fs`` store writes as a line, ``raw_content`` and
times included) and the sidecar bytes must be equal. A copy that fails anywhere is deleted
from the target, so a target session is whole or absent. Discarded sidecars (kept for
audit) are not copied.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterable, Sequence

import attrs

from ctxfold.kernel.contracts import Store
from ctxfold.kernel.errors import CtxfoldError, SessionError, StoreError
from ctxfold.kernel.types import Message
from ctxfold.plugins.stores.fs_lines import encode_message


@attrs.frozen
class CopiedSession:
    """One session copied and verified."""

    session_id: str
    messages: int
    batches: int
    sidecar: bool
    fingerprint: str


def transcript_fingerprint(messages: Iterable[Message]) -> str:
    """SHA-256 over every message's full stored form, in order."""
    digest = hashlib.sha256()
    for message in messages:
        digest.update(encode_message(message).encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


def _batches(store: Store, session_id: str) -> list[list[Message]]:
    batches = getattr(store, "batches", None)
    if callable(batches):
        return [list(batch) for batch in batches(session_id)]
    return [[message] for message in store.load(session_id)]


def copy_session(source: Store, target: Store, session_id: str) -> CopiedSession:
    """Copy one session; :class:`SessionError` if the target has it already."""
    if target.exists(session_id):
        raise SessionError(f"session {session_id!r} already exists in the target store; "
                           "nothing was copied (delete it there first to copy it again)")
    batches = _batches(source, session_id)
    data = source.read_sidecar(session_id)
    target.create(session_id)
    try:
        for batch in batches:
            target.append(session_id, batch)
        if data is not None:
            target.write_sidecar(session_id, data)
        expected = transcript_fingerprint(m for batch in batches for m in batch)
        copied = transcript_fingerprint(target.load(session_id, repair=False))
        if copied != expected or target.read_sidecar(session_id) != data:
            raise StoreError(f"session {session_id!r}: the copy does not match its source "
                             f"(fingerprint {copied[:12]} != {expected[:12]}, or the sidecar "
                             "differs); the copy was removed")
    except BaseException:
        with contextlib.suppress(CtxfoldError):  # the error being raised says what failed
            target.delete(session_id)
        raise
    return CopiedSession(session_id=session_id, messages=sum(len(b) for b in batches),
                         batches=len(batches), sidecar=data is not None,
                         fingerprint=expected)


def copy_sessions(source: Store, target: Store, session_ids: Sequence[str] = ()
                  ) -> list[CopiedSession]:
    """Copy ``session_ids`` (default: every session of ``source``), one after another."""
    return [copy_session(source, target, sid)
            for sid in (session_ids or source.list_sessions())]


__all__ = ["CopiedSession", "copy_session", "copy_sessions", "transcript_fingerprint"]
