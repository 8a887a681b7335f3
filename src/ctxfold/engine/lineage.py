"""Where sessions come from, and a rewind that deletes nothing.

A fork records its :class:`~ctxfold.ForkPoint` (parent, fork point, reason) in a store that
offers the :class:`~ctxfold.kernel.contracts.ForkPoints` extension (both built-in stores do),
so ``ctxfold sessions list`` shows how sessions relate.

A rewind is a branch: before the transcript is cut back to ``upto`` messages, the whole
history as it was — transcript and sidecar, so its checkpoint stays valid — is kept as a new
session ``<id>-rewound-<k>``, recorded as a fork of the rewound session at ``upto`` with reason
``"rewind"``. The built-in stores do both under one lock (``rewind(..., keep_as=ID)``), so an
append by another process can neither slip in between nor be lost. A store whose ``rewind``
does not take ``keep_as`` gets a fork and then a rewind: still nothing is deleted, but an
append that lands between the two is only in the rewound session, not in the kept copy.
"""

from __future__ import annotations

import inspect

from ctxfold.kernel.contracts import ForkPoints, Store
from ctxfold.kernel.errors import SessionError
from ctxfold.kernel.types import ForkPoint
from ctxfold.session_id import validate_session_id

#: The infix of the sessions that keep a rewind's history: ``<id>-rewound-<k>``.
REWOUND = "-rewound-"
#: The longest part of the rewound id the kept session's id repeats (ids are ≤ 128).
_BASE_CHARS = 100
_ATTEMPTS = 5


def fork_point(store: Store, session_id: str) -> ForkPoint | None:
    """Where ``session_id`` was forked from; ``None`` when it was created, or when the store
    records no fork points."""
    if isinstance(store, ForkPoints):
        return store.fork_point(session_id)
    return None


def rewound_id(store: Store, session_id: str) -> str:
    """The id the next rewind of ``session_id`` keeps its history under: the first free
    ``<id>-rewound-<k>``, ``k`` from 1."""
    base = validate_session_id(session_id)[:_BASE_CHARS]
    k = 1
    while store.exists(f"{base}{REWOUND}{k}"):
        k += 1
    return f"{base}{REWOUND}{k}"


def _takes_keep_as(store: Store) -> bool:
    try:
        return "keep_as" in inspect.signature(store.rewind).parameters
    except (TypeError, ValueError):  # a builtin or otherwise unintrospectable method
        return False


def rewind(store: Store, session_id: str, upto: int) -> str:
    """Cut ``session_id`` back to its first ``upto`` messages, keeping the history as it was
    as a new session; that session's id, or ``""`` when nothing was dropped (``upto`` is the
    current length). A bad ``upto`` is a :class:`~ctxfold.SessionError` and changes nothing."""
    keeps = _takes_keep_as(store)
    for _ in range(_ATTEMPTS):
        kept = rewound_id(store, session_id)
        try:
            if keeps:
                store.rewind(session_id, upto, keep_as=kept)  # type: ignore[call-arg]
                return kept if store.exists(kept) else ""
            length = len(store.load(session_id, repair=False))
            if (isinstance(upto, bool) or not isinstance(upto, int)
                    or not 0 <= upto < length):
                store.rewind(session_id, upto)  # nothing to drop (or a bad upto: the error)
                return ""
            store.fork(session_id, kept)
        except SessionError:
            if store.exists(kept):
                continue  # another process took the name meanwhile: the next one
            raise
        store.rewind(session_id, upto)
        return kept
    raise SessionError(f"session {session_id!r}: could not find a free id to keep the "
                       "rewound history under; try again")


__all__ = ["REWOUND", "ForkPoint", "ForkPoints", "fork_point", "rewind", "rewound_id"]
