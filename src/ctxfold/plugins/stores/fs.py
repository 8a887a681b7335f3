"""The filesystem store ``fs``: one JSONL transcript and one sidecar per session (design §1.2).

Files of session ``<id>`` under the store root (see ``docs/formats.md``):

* ``<id>.jsonl`` — the canonical transcript, one message per line, append-only;
* ``<id>.context.json`` — the sidecar (written atomically, design §1.3);
* ``<id>.tokens-<estimator key>`` — the token-count cache (``ctxfold.engine.counts``);
* ``<id>.prefix`` — the vouched-prefix cache (``fs_prefix``: reopening without decoding);
* ``<id>.lock`` — the inter-process lock taken by every mutating operation;
* ``<id>.parent.json`` — where a forked session came from (:class:`~ctxfold.ForkPoint`);
* ``<id>.jsonl.corrupt`` — torn tails recovered from crashed appends (appended, never
  overwritten);
* ``<id>.context.json.invalid-<UTC timestamp>`` — discarded sidecars, kept for audit;
* ``.<id>.<kind>.<random>.tmp`` — temp files of writes in flight; those a killed writer left
  are removed, once older than a minute, by the first write to the session in a process.

No variable part of these names (the token-count key, the timestamp, the random part) holds a
dot, so every file belongs to exactly one session id: deleting ``a`` never touches a file of
``a.tokens-x`` (:func:`~ctxfold.plugins.stores.fs_files.side_files_pattern`).

Files are created 0600 and the root 0700. Readers take no lock: an append is one
``write`` call under the lock, so a lock-free reader sees complete lines or an unfinished
last line, and an unfinished last line is only ever repaired after taking the lock and
reading again (it may be another process's append in flight).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ctxfold.atomic import (
    STALE_TEMP_SECONDS,
    ensure_dir,
    fsync_dir,
)
from ctxfold.kernel.errors import SessionError, StoreError
from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import StoreOptions, StrategyContext, StrategySpec
from ctxfold.kernel.types import Appended, Message
from ctxfold.plugins.stores.fs_branches import BranchFiles
from ctxfold.plugins.stores.fs_files import (
    TranscriptCache,
    append_durably,
    create_empty,
    recover_torn,
    revision_of,
    session_ids,
    session_lock,
    side_files_pattern,
    stat_key,
    sweep_session_temps,
)
from ctxfold.plugins.stores.fs_lines import encode_lines, line_ends, parse_transcript
from ctxfold.plugins.stores.fs_prefix import PrefixFiles, PrefixMemos
from ctxfold.plugins.stores.fs_sidecar import CountFiles, SidecarFiles, StoreWarning, store_warning
from ctxfold.session_id import validate_session_id

log = logging.getLogger(__name__)

#: Seconds to wait for another process holding a session lock before giving up.
LOCK_TIMEOUT = 60.0


class FsStore(SidecarFiles, CountFiles, PrefixFiles, BranchFiles):
    """Durable transcripts and sidecars in one directory (implements ``Store``).

    Parsed transcripts are cached per session, keyed by the file's (inode, size, mtime_ns),
    so re-loading an unchanged session costs one ``stat``.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._cache = TranscriptCache()
        self._swept: set[str] = set()
        self._prefixes = PrefixMemos()

    def __repr__(self) -> str:
        return f"FsStore({str(self.root)!r})"

    # -- paths, locking, cache -----------------------------------------------------------------

    def transcript_path(self, session_id: str) -> Path:
        """``<root>/<id>.jsonl`` (the id is validated)."""
        return self.root / f"{validate_session_id(session_id)}.jsonl"

    def sidecar_path(self, session_id: str) -> Path:
        """``<root>/<id>.context.json`` (the id is validated)."""
        return self.root / f"{validate_session_id(session_id)}.context.json"

    @contextmanager
    def _locked(self, session_id: str) -> Iterator[None]:
        # Unknown sessions fail before a lock file is created, so none is left behind.
        self._stat(session_id)
        with session_lock(self.root / f"{session_id}.lock", f"session {session_id!r}",
                          LOCK_TIMEOUT):
            if session_id not in self._swept:  # the first write: temp files of killed ones
                sweep_session_temps(self.root, session_id, STALE_TEMP_SECONDS)
                self._swept.add(session_id)
            yield

    def _unknown(self, session_id: str) -> SessionError:
        return SessionError(
            f"session {session_id!r} does not exist in store {self.root}; "
            "check the id and the [store] path, or create the session first"
        )

    def _stat(self, session_id: str) -> os.stat_result:
        try:
            return self.transcript_path(session_id).stat()
        except FileNotFoundError:
            raise self._unknown(session_id) from None
        except OSError as exc:
            raise StoreError(f"cannot stat transcript of session {session_id!r}: {exc}") from exc

    # -- transcript ----------------------------------------------------------------------------

    def _read(self, path: Path) -> bytes:
        try:
            return path.read_bytes()
        except OSError as exc:
            raise StoreError(f"cannot read transcript {path}: {exc}; check permissions") from exc

    def _load_locked(self, session_id: str) -> tuple[tuple[Message, ...], list[int], bytes]:
        """Parse under the session lock, repairing a torn tail; (messages, line ends, data)."""
        path = self.transcript_path(session_id)
        self._stat(session_id)
        data = self._read(path)
        parsed = parse_transcript(data, path)
        if parsed.torn:
            store_warning(recover_torn(path, parsed.good_end, parsed.torn))
            data = data[: parsed.good_end]
        messages = tuple(parsed.messages)
        self._cache.put(session_id, stat_key(path.stat()), messages)
        return messages, line_ends(data), data

    def load(self, session_id: str, *, repair: bool = True) -> list[Message]:
        """The canonical transcript of ``session_id`` (a new list on every call).

        A torn last line is moved to ``<id>.jsonl.corrupt`` with a :class:`StoreWarning`
        (with ``repair=False`` it is left in place, not returned, and nothing is written);
        any other unreadable line raises :class:`StoreError` naming the file and line.
        """
        st = self._stat(session_id)
        cached = self._cache.get(session_id, stat_key(st))
        if cached is not None:
            return list(cached)
        path = self.transcript_path(session_id)
        parsed = parse_transcript(self._read(path), path)
        if not parsed.torn:
            messages = tuple(parsed.messages)
            # Key by the stat taken *before* reading: if the file grew meanwhile, the next
            # load sees a different key and parses again.
            self._cache.put(session_id, stat_key(st), messages)
            return list(messages)
        if not repair:
            return list(parsed.messages)
        # The unfinished tail may be an append in flight: decide only under the lock.
        with self._locked(session_id):
            return list(self._load_locked(session_id)[0])

    def batches(self, session_id: str) -> list[list[Message]]:
        """The transcript as the batches it was appended in (what ``store copy`` replays,
        so a copy's lines are byte-identical); reads only, a torn tail is left out."""
        path = self.transcript_path(session_id)
        self._stat(session_id)
        return parse_transcript(self._read(path), path).batches()

    def revision(self, session_id: str) -> str:
        """The transcript's ``inode:size:mtime`` (see :func:`_revision`)."""
        st = self._stat(session_id)
        return revision_of(st)

    def append(self, session_id: str, messages: Sequence[Message]) -> Appended:
        """Append ``messages`` durably: one ``write`` and one ``fsync`` for the batch; the
        revisions just before and after the write, taken under the lock."""
        payload = encode_lines(messages)
        with self._locked(session_id):
            path = self.transcript_path(session_id)
            st = self._stat(session_id)
            cached = self._cache.get(session_id, stat_key(st)) if st.st_size else ()
            if cached is None and not self.known_clean(session_id, st):
                # Never write after a torn tail — an unfinished line (the new line would merge
                # into it) or a batch that lost its last lines (it would become a partial
                # batch in the middle): parse, and repair, first.
                cached, _, _ = self._load_locked(session_id)
                st = path.stat()
            before = revision_of(st)
            if not payload:
                return Appended(before, before)
            after = append_durably(path, payload)
            self.known_clean(session_id, after, clean=True)
            if cached is not None:
                self._cache.put(session_id, stat_key(after), (*cached, *messages))
            return Appended(before, revision_of(after))

    def exists(self, session_id: str) -> bool:
        """Whether the transcript of ``session_id`` exists."""
        return self.transcript_path(session_id).is_file()

    def create(self, session_id: str) -> None:
        """Create an empty session; :class:`SessionError` if it already exists."""
        path = self.transcript_path(session_id)
        ensure_dir(self.root)
        try:
            create_empty(path)
        except FileExistsError:
            raise SessionError(
                f"session {session_id!r} already exists in store {self.root}; "
                "choose another id or delete the session first"
            ) from None

    def list_sessions(self) -> list[str]:
        """Ids of every session in the store, sorted."""
        return session_ids(self.root)

    def last_activity(self, session_id: str) -> float | None:
        """Modification time (epoch seconds) of the transcript; ``None`` if absent. Not the
        sidecar's: ``resume()`` writes telemetry there, which must not make a cold cache warm."""
        try:
            return self.transcript_path(session_id).stat().st_mtime
        except FileNotFoundError:
            return None

    def session_files(self, session_id: str) -> list[Path]:
        """Every file of the session, in the order :meth:`delete` removes them: side files
        (sidecar, discarded sidecars, caches, fork record, temp files), then the transcript,
        then the lock. Named exactly (:func:`side_files_pattern`): never a neighbour's."""
        self._stat(session_id)
        pattern = side_files_pattern(session_id)
        side = [self.root / name for name in sorted(os.listdir(self.root))
                if pattern.fullmatch(name)]
        lock = self.root / f"{session_id}.lock"
        return [*side, self.transcript_path(session_id), *([lock] if lock.exists() else [])]

    def delete(self, session_id: str) -> None:
        """Remove every file of the session (:meth:`session_files`) and nothing else.
        Sidecar first, transcript last: a crash midway leaves a session without a sidecar
        (rebuilt on load), never a sidecar without its session."""
        with self._locked(session_id):
            files = self.session_files(session_id)
            transcript = self.transcript_path(session_id)
            for path in files:
                if path != transcript and not path.name.endswith(".lock"):
                    path.unlink(missing_ok=True)
            transcript.unlink()
            self._cache.forget(session_id)
            (self.root / f"{session_id}.lock").unlink(missing_ok=True)
        fsync_dir(self.root)


def _create(context: StrategyContext[StoreOptions]) -> FsStore:
    # StoreOptions.path overrides [store] path; resolved once, so a later chdir moves nothing.
    path = context.options.path or context.config.store.path
    return FsStore(Path(path).expanduser().absolute())


@hookimpl
def ctxfold_stores() -> list[StrategySpec]:
    """Register the filesystem store ``fs``."""
    return [
        StrategySpec(
            name="fs",
            default=True,
            factory=_create,
            description="JSONL transcripts + JSON sidecars in [store] path (design §1.2)",
        )
    ]

__all__ = ["FsStore", "StoreWarning", "ctxfold_stores"]
