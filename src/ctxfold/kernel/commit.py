"""Compare-and-swap installs, receipts and telemetry (design §5.1, §5.2, §1.3).

Every install compares what it captured when the operation started (transcript version,
canonical length, projection version, generation) and loses cleanly if anything moved in
this process, or if another process installed a checkpoint meanwhile; receipts and telemetry
another process recorded are kept beneath it (were they to defeat installs, workers sharing
a session at the trigger would block each other for good). The write is a compare-and-swap on
the stored sidecar (``save`` returns ``False`` when another process wrote since this one
read it), so a check and its write cannot be split by another writer; a lost swap is
re-checked on the stored state. State is persisted first; if the write fails the previous
in-memory state is restored and no applied receipt exists anywhere.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ctxfold.kernel.errors import StaleContextError
from ctxfold.kernel.fingerprint import covered_prefix_hash
from ctxfold.kernel.ledger import LedgerEntry
from ctxfold.kernel.state import (
    CacheState,
    Projection,
    Receipt,
    ReceiptAction,
    ReceiptStatus,
    SidecarState,
    TelemetryRecord,
)
from ctxfold.kernel.types import Message, Trigger, Usage, utc_time

MAX_TELEMETRY = 256


@attrs.frozen
class Capture:
    """What an operation saw when it started."""

    transcript_version: int
    canonical_len: int
    projection_version: int
    generation: int


class Committer:
    """Owns the sidecar state of one session and every write to it."""

    def __init__(
        self,
        state: SidecarState,
        *,
        save: Callable[[SidecarState], bool],
        reload: Callable[[], SidecarState | None],
        hooks: Any = None,
        session_id: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.state = state
        self.transcript_version = state.transcript_version
        self._save = save
        #: Re-reads the stored state (``None``: none, or unreadable).
        self.reload = reload
        #: Set when this committer adopted another process's state: the engine re-reads the
        #: transcript before its next prepare (the adopted projection may cover more of it).
        self.adopted = False
        self.hooks = hooks
        self.session_id = session_id
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

    # -- capture and compare -----------------------------------------------------------------

    def capture(self, canonical_len: int) -> Capture:
        projection = self.state.projection
        return Capture(
            transcript_version=self.transcript_version,
            canonical_len=canonical_len,
            projection_version=projection.projection_version if projection else 0,
            generation=self.state.generation,
        )

    def _check(self, captured: Capture, canonical_len: int) -> None:
        now = self.capture(canonical_len)
        if now != captured:
            raise StaleContextError("context changed in this process during the operation")
        # Another process's commits are found by the write's compare-and-swap (``on`` below).

    # -- writes ------------------------------------------------------------------------------

    def _persist(self, new_state: SidecarState,
                 rebuild: Callable[[SidecarState], SidecarState] | None = None) -> None:
        """Write ``new_state`` by compare-and-swap. Lost: adopt the stored state, then raise
        :class:`StaleContextError` (an install) or apply ``rebuild`` to it and try again (a
        record)."""
        for _attempt in range(8):
            previous = self.state
            new_state = attrs.evolve(
                new_state, transcript_version=self.transcript_version, updated_at=self.stamp()
            )
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
            if rebuild is None:
                raise StaleContextError("another process committed the sidecar first")
            new_state = rebuild(self.state)
        raise StaleContextError("the sidecar kept changing under this process; try again")

    def adopt(self, disk: SidecarState | None) -> None:
        """Take over the stored state (another process's commit)."""
        if disk is not None:
            self.state = disk
            self.adopted = True

    def install(
        self,
        captured: Capture,
        canonical: Sequence[Message],
        *,
        body: Sequence[Message],
        covered_count: int,
        receipt: Receipt,
        telemetry: TelemetryRecord,
        source_tokens: int,
        projection_tokens: int,
        summary_hash: str = "",
        view_input_hash: str = "",
        view_output_hash: str = "",
    ) -> Receipt:
        """CAS-commit a new projection; raises StaleContextError if the context moved."""
        self._check(captured, len(canonical))
        version = captured.projection_version + 1
        projection = Projection(
            messages=tuple(body),
            transcript_version=self.transcript_version,
            projection_version=version,
            covered_count=covered_count,
            covered_prefix_hash=covered_prefix_hash(canonical, covered_count),
            summary_hash=summary_hash,
            source_tokens=source_tokens,
            projection_tokens=projection_tokens,
            view_input_hash=view_input_hash,
            view_output_hash=view_output_hash,
            created_at=self.stamp(),
        )
        receipt = attrs.evolve(
            receipt,
            operation_id=f"{receipt.action.value}-{version}-{view_output_hash[:12]}",
            status=ReceiptStatus.APPLIED,
            projection_version=version,
            covered_count=covered_count,
            covered_prefix_hash=projection.covered_prefix_hash,
            cache_break=True,
            created_at=self.stamp(),
        )
        telemetry = attrs.evolve(telemetry, projection_version=version)
        made: list[Receipt] = []

        def on(base: SidecarState) -> SidecarState:
            if _version(base) != captured.projection_version:
                raise StaleContextError("another process installed a checkpoint first")
            made.append(attrs.evolve(receipt, generation=base.generation + 1))
            return attrs.evolve(base, projection=projection, generation=base.generation + 1,
                                last_receipt=made[-1],
                                telemetry=self._with_telemetry(telemetry, base))

        self._persist(on(self.state), on)
        if self.hooks is not None:
            self.hooks.ctxfold_after_install(session_id=self.session_id, receipt=made[-1])
        return made[-1]

    def record(self, receipt: Receipt, telemetry: TelemetryRecord | None = None) -> Receipt:
        """Persist a blocked/failed/noop receipt; bumps the generation (not the version).

        A repeat of the same failure for the same input is not re-recorded.
        """
        last = self.state.last_receipt
        if (
            last is not None
            and last.status == receipt.status
            and last.input_hash == receipt.input_hash
            and last.reason == receipt.reason
            and last.generation == self.state.generation
        ):
            return last
        made: list[Receipt] = []

        def on(base: SidecarState) -> SidecarState:
            projection = base.projection
            generation = base.generation + 1
            stamped = attrs.evolve(
                receipt,
                operation_id=f"{receipt.status.value}-{generation}-{receipt.input_hash[:12]}",
                projection_version=projection.projection_version if projection else 0,
                covered_count=projection.covered_count if projection else 0,
                generation=generation,
                created_at=self.stamp(),
            )
            made.append(stamped)
            telemetries = (self._with_telemetry(telemetry, base) if telemetry
                           else base.telemetry)
            return attrs.evolve(base, generation=generation, last_receipt=stamped,
                                telemetry=telemetries)

        self._persist(on(self.state), on)
        return made[-1]

    def record_resume(self, label: CacheState) -> None:
        """Record the resume label in the sidecar telemetry (nothing else changes)."""
        record = TelemetryRecord(kind="resume", cache_state=label, created_at=self.stamp())

        def on(base: SidecarState) -> SidecarState:
            return attrs.evolve(base, last_cache_state=label,
                                telemetry=self._with_telemetry(record, base))

        self._persist(on(self.state), on)

    def note(self, record: TelemetryRecord) -> None:
        """Record ``record`` alone (the thrash guard's): no receipt, and neither the
        generation nor the projection changes, so no operation's compare-and-swap loses."""

        def on(base: SidecarState) -> SidecarState:
            return attrs.evolve(base, telemetry=self._with_telemetry(record, base))

        self._persist(on(self.state), on)

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

    def telemetry(self, **fields: Any) -> TelemetryRecord:
        """A telemetry record carrying the cache hits/misses observed since the previous
        record (so records add up instead of repeating a running total) and the state."""
        record = TelemetryRecord(
            cache_state=self.state.last_cache_state,
            cache_hit_tokens=self.cache_hit_tokens,
            cache_miss_tokens=self.cache_miss_tokens,
            created_at=self.stamp(),
            **fields,
        )
        self.cache_hit_tokens = self.cache_miss_tokens = 0
        return record

    def after_rewind(self, canonical: Sequence[Message]) -> None:
        """Drop a projection that covers more than the rewound transcript."""
        self.transcript_version += 1
        projection = self.state.projection
        if projection is not None and projection.covered_count > len(canonical):
            def on(base: SidecarState) -> SidecarState:
                kept = base.projection
                too_long = kept is not None and kept.covered_count > len(canonical)
                return attrs.evolve(base, projection=None) if too_long else base

            self._persist(on(self.state), on)

    @staticmethod
    def _with_telemetry(record: TelemetryRecord, base: SidecarState
                        ) -> tuple[TelemetryRecord, ...]:
        return (*base.telemetry, record)[-MAX_TELEMETRY:]


def _version(state: SidecarState) -> int:
    return state.projection.projection_version if state.projection else 0


def blocked_receipt(
    status: ReceiptStatus,
    trigger: Trigger,
    reason: str,
    *,
    input_hash: str,
    input_tokens: int,
    action: ReceiptAction = ReceiptAction.SUMMARY,
) -> Receipt:
    """A not-applied receipt (ids and versions filled in by :meth:`Committer.record`)."""
    return Receipt(
        operation_id="",
        status=status,
        action=action,
        trigger=trigger,
        input_hash=input_hash,
        input_tokens=input_tokens,
        reason=reason,
    )
