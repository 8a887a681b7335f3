"""Working from the stored state when other processes share a session (design §1.4).

A :class:`~ctxfold.engine.manager.ContextManager` keeps the transcript and the sidecar state
in memory. Another process may append to the same session, install a checkpoint or rewind
it; its commits are never overwritten (every sidecar write is a compare-and-swap), but this
process would keep preparing from its own, older copy. :class:`Watch` notices that before a
prepare, an append or a capability call, at the price of one ``stat``:

* the store's transcript :meth:`~ctxfold.kernel.contracts.Store.revision` moved since this
  process last read or wrote it (an append reports the revision it found, so an append by
  another process in between is seen too);
* or the committer adopted another process's sidecar after losing a compare-and-swap.

Then the stored sidecar state is taken over, the transcript is re-read — in that order, so
the transcript holds every message the stored projection covers — and the projection is
validated against it (an adopted projection is never trusted as it is: one that no longer
matches is dropped, with a notice), and the caller rebuilds what it derives from the
transcript.
"""

from __future__ import annotations

from ctxfold.engine.committer import Committer
from ctxfold.engine.sidecar import validate_projection
from ctxfold.engine.transcript import Transcript, load_canonical
from ctxfold.kernel.contracts import Store
from ctxfold.kernel.errors import AppendError
from ctxfold.kernel.types import Appended, Message


class Watch:
    """What this process last saw of one session's stored transcript."""

    def __init__(self, store: Store, session_id: str, revision: str) -> None:
        self._store = store
        self._session_id = session_id
        self.revision = revision
        #: Set when this process's copy is known to be behind (a lost compare-and-swap
        #: re-read the transcript without the sidecar; an append found another one's lines).
        self.stale = False

    def appended(self, appended: Appended) -> None:
        """Record this process's append; another writer in between marks the copy stale."""
        if appended.before != self.revision:
            self.stale = True
        self.revision = appended.after

    def append(self, batch: list[Message]) -> bool:
        """Append ``batch`` to the store and record it; ``False`` when the store found it
        already stored (an earlier attempt, reported as failed, had landed): this copy must
        then be re-read, not extended. A failed append that may have landed
        (``AppendError.landed`` not ``False``) marks the copy stale too."""
        try:
            appended = self._store.append(self._session_id, batch)
        except AppendError as exc:
            self.stale = self.stale or exc.landed is not False
            raise
        if appended.replayed:
            self.stale = True
            return False
        self.appended(appended)
        return True

    def resync(self, committer: Committer) -> tuple[Transcript, list[str]] | None:
        """``None`` when the stored session did not move since this process last saw it
        (one revision read); else the current transcript and the notices of validating the
        stored projection against it (the committer now holds that state)."""
        # The revision is taken before reading: an append that lands in between is
        # simply seen as a move next time.
        revision = self._store.revision(self._session_id)
        if not (self.stale or committer.adopted or revision != self.revision):
            return None
        # The sidecar before the transcript: a projection covers only messages committed
        # before it was written, so the transcript read second holds all of them. The other
        # order let another process append and install in between, and its valid projection
        # was dropped here as covering more than this copy of the transcript (then written
        # back without it by this process's next receipt: every process stuck above the
        # hard ceiling).
        stored = committer.reload()
        canonical = load_canonical(self._store, self._session_id)
        state, notices = validate_projection(stored or committer.state, canonical,
                                             self._session_id)
        committer.state = state
        committer.adopted = False
        self.revision, self.stale = revision, False
        return canonical, notices


__all__ = ["Watch"]
