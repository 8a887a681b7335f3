"""The session's sidecar state and every write to it (design §5.1, §5.2, §1.3).

The fold path (:mod:`ctxfold.kernel.maintenance`) decides what to write and yields it as a
:class:`~ctxfold.kernel.maintenance.Commit`: a pure change of the state, the telemetry
record it adds and, for an install, what the operation captured when it started.
:meth:`Committer.commit` performs it: an install loses when anything it captured moved in
this process; the write is a compare-and-swap on the stored sidecar (``save`` returns
``False`` when another process wrote since this one read it), so a check and its write
cannot be split by another writer, and a lost swap re-applies the change to the stored
state (an install's change raises when another process installed first). State is
persisted first; if the write fails the previous in-memory state is restored and no applied
receipt exists anywhere.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import attrs

from ctxfold.kernel.errors import StaleContextError
from ctxfold.kernel.ledger import LedgerEntry
from ctxfold.kernel.maintenance import Commit
from ctxfold.kernel.state import CacheState, SidecarState, TelemetryRecord
from ctxfold.kernel.types import Message, Usage, utc_time

MAX_TELEMETRY = 256


class Committer:
    """Owns the sidecar state of one session and every write to it."""

    def __init__(
        self,
        state: SidecarState,
        *,
        save: Callable[[SidecarState], bool],
        reload: Callable[[], SidecarState | None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.state = state
        self._save = save
        #: Re-reads the stored state (``None``: none, or unreadable).
        self.reload = reload
        #: Set when this committer adopted another process's state: the engine re-reads the
        #: transcript before its next prepare (the adopted projection may cover more of it).
        self.adopted = False
        self.cache_hit_tokens = 0
        self.cache_miss_tokens = 0
        #: The last observed request's prompt plus its reply: the prefix the provider caches
        #: (``None``: no usage observed yet; a fold's ledger then estimates it).
        self.cached_tokens: int | None = None
        #: The session's clock (seconds since the epoch): every timestamp this committer
        #: writes is read from it, so the thrash guard's hour is the session's hour.
        self.clock = clock

    def stamp(self) -> str:
        """Now, by the session's clock, as the ISO-8601 UTC string every record carries."""
        return utc_time(self.clock())

    def commit(self, step: Commit) -> SidecarState:
        """Perform the fold path's :class:`~ctxfold.kernel.maintenance.Commit`; raises
        :class:`StaleContextError` when an install lost (nothing is written then): another
        install or receipt of this process since it captured, or (``change``) another
        process's install."""
        captured = step.captured
        if captured is not None:
            projection = self.state.projection
            now = (projection.projection_version if projection else 0, self.state.generation)
            if now != (captured.projection_version, captured.generation):
                raise StaleContextError("context changed in this process during the operation")
        record = step.record
        # The cache figures observed since the previous record go on this one (records add
        # up instead of repeating a running total); taken now, given back if nothing lands.
        hits, misses = (self.cache_hit_tokens, self.cache_miss_tokens) if record else (0, 0)
        self.cache_hit_tokens -= hits
        self.cache_miss_tokens -= misses

        def on(base: SidecarState) -> SidecarState:
            new = step.change(base)
            if record is None:
                return new
            counted = attrs.evolve(record, cache_state=base.last_cache_state,
                                   cache_hit_tokens=hits, cache_miss_tokens=misses)
            return attrs.evolve(new, telemetry=self._with_telemetry(counted, base))

        try:
            self._persist(on)
        except BaseException:
            self.cache_hit_tokens += hits
            self.cache_miss_tokens += misses
            raise
        return self.state

    # -- writes ------------------------------------------------------------------------------

    def _persist(self, change: Callable[[SidecarState], SidecarState]) -> None:
        """Write ``change`` of the state by compare-and-swap. Lost: adopt the stored state
        and apply ``change`` to it again (an install's change raises
        :class:`StaleContextError` when another process installed first)."""
        for _attempt in range(8):
            previous = self.state
            new_state = attrs.evolve(change(previous), updated_at=self.stamp())
            self.state = new_state
            try:
                won = self._save(new_state)
            except BaseException:
                self.state = previous
                raise
            if won:
                return
            self.state = previous
            self.adopt(self.reload())
        raise StaleContextError("the sidecar kept changing under this process; try again")

    def adopt(self, disk: SidecarState | None) -> None:
        """Take over the stored state (another process's commit)."""
        if disk is not None:
            self.state = disk
            self.adopted = True

    def record_resume(self, label: CacheState) -> None:
        """Record the resume label in the sidecar telemetry (nothing else changes)."""
        record = TelemetryRecord(kind="resume", cache_state=label, created_at=self.stamp())

        def on(base: SidecarState) -> SidecarState:
            return attrs.evolve(base, last_cache_state=label,
                                telemetry=self._with_telemetry(record, base))

        self._persist(on)

    def observe_cache(self, usage: Usage) -> None:
        """Accumulate observed cache hits/misses (in memory; written with the next record);
        the first request on a fold's view measures that fold's ledger entry."""
        self.cache_hit_tokens += usage.cache_hit_tokens
        self.cache_miss_tokens += usage.cache_miss_tokens
        if usage.aggregated or usage.estimated:  # not one request the provider reported
            self.cached_tokens = None
            return
        self.cached_tokens = usage.prompt_tokens + usage.completion_tokens

        def measured(entry: LedgerEntry) -> LedgerEntry | None:
            if not entry.estimated or entry.requests != 1:  # measured by its first request
                return None
            cached = entry.read + entry.invalidated  # as estimated at the install
            return attrs.evolve(entry, read=usage.cache_hit_tokens,
                                written=usage.cache_miss_tokens,
                                invalidated=max(cached - usage.cache_hit_tokens, 0),
                                estimated=False)

        self._update_ledger(measured)

    def count_request(self) -> None:
        """One more request sent on the current view (in memory; written with the next
        record)."""
        self._update_ledger(lambda entry: attrs.evolve(entry, requests=entry.requests + 1))

    def _update_ledger(self, change: Callable[[LedgerEntry], LedgerEntry | None]) -> None:
        """Apply ``change`` to the ledger entry of the install that made the current view,
        if the telemetry still holds it (``None`` from ``change``: leave it). In memory
        only, like the settings: observing usage never writes the sidecar."""
        projection = self.state.projection
        if projection is None:
            return
        records = self.state.telemetry
        i = next((k for k in range(len(records) - 1, -1, -1)
                  if records[k].kind == "install"), None)
        if i is None or records[i].projection_version != projection.projection_version:
            return
        entry = records[i].ledger
        changed = None if entry is None else change(entry)
        if changed is not None:
            self.state = attrs.evolve(self.state, telemetry=(
                *records[:i], attrs.evolve(records[i], ledger=changed), *records[i + 1:]))

    def after_rewind(self, canonical: Sequence[Message]) -> None:
        """Drop a projection that covers more than the rewound transcript."""
        projection = self.state.projection
        if projection is not None and projection.covered_count > len(canonical):
            def on(base: SidecarState) -> SidecarState:
                kept = base.projection
                too_long = kept is not None and kept.covered_count > len(canonical)
                return attrs.evolve(base, projection=None) if too_long else base

            self._persist(on)

    @staticmethod
    def _with_telemetry(record: TelemetryRecord, base: SidecarState
                        ) -> tuple[TelemetryRecord, ...]:
        return (*base.telemetry, record)[-MAX_TELEMETRY:]


