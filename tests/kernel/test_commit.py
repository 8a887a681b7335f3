"""Compare-and-swap installs (design §5.1) and receipts (design §5.2): the fold path's state
changes (``installed``, ``recorded``) performed by the engine's ``Committer``."""

from __future__ import annotations

import attrs
import pytest
from tests.kernel.test_maintenance import context, performer, session

from ctxfold import (
    Action,
    CacheState,
    Message,
    Projection,
    Receipt,
    SidecarState,
    StaleContextError,
    Usage,
)
from ctxfold.engine import driving
from ctxfold.engine.committer import Committer
from ctxfold.kernel import maintenance
from ctxfold.kernel.fingerprint import covered_prefix_hash
from ctxfold.kernel.maintenance import Capture, Commit, installed, recorded
from ctxfold.kernel.state import TelemetryRecord

CANONICAL = [Message(role="system", content="s"), Message(role="user", content="task"),
             Message(role="assistant", content="a")]


class Disk:
    """An in-memory sidecar file with the store's compare-and-swap: ``save`` wins only if
    the file is still what this committer last read or wrote. Setting ``state`` directly is
    another process's write."""

    def __init__(self) -> None:
        self.state: SidecarState | None = None
        self.seen: SidecarState | None = None
        self.saves = 0
        self.fail = False
        #: Another process's commit that lands just before this one's next write, which
        #: then loses its compare-and-swap.
        self.race: SidecarState | None = None

    def save(self, state: SidecarState) -> bool:
        if self.fail:
            raise OSError("disk full")
        if self.race is not None:
            self.state, self.race = self.race, None
        if self.state is not self.seen:
            return False
        self.saves += 1
        self.state = self.seen = state
        return True

    def reload(self) -> SidecarState | None:
        self.seen = self.state
        return self.state


def committer(disk: Disk) -> Committer:
    return Committer(SidecarState(), save=disk.save, reload=disk.reload)


def capture(c: Committer) -> Capture:
    projection = c.state.projection
    return Capture(len(CANONICAL),
                   projection.projection_version if projection else 0, c.state.generation)


def install(c: Committer, captured: Capture, covered: int = 2) -> Receipt:
    version = captured.projection_version + 1
    projection = Projection(
        messages=(CANONICAL[0], Message(role="user", content="sum")), projection_version=version,
        covered_count=covered, covered_prefix_hash=covered_prefix_hash(CANONICAL, covered))
    receipt = Receipt(operation_id="", status=Action.APPLIED, projection_version=version,
                      action=Action.SUMMARY, input_hash="in", cache_break=True)
    state = c.commit(Commit(installed(captured, projection, receipt),
                            record=TelemetryRecord(kind="install"), captured=captured))
    assert state.last_receipt is not None
    return state.last_receipt


def record(c: Committer, input_hash: str = "h",
           telemetry: TelemetryRecord | None = None) -> Receipt:
    receipt = Receipt(operation_id="", status=Action.BLOCKED,
                      action=Action.SUMMARY, input_hash=input_hash, reason="why")
    state = c.commit(Commit(recorded(receipt, c.stamp()), record=telemetry))
    assert state.last_receipt is not None
    return state.last_receipt


def test_a_clean_install_bumps_version_and_generation_and_persists() -> None:
    disk = Disk()
    c = committer(disk)
    receipt = install(c, capture(c))
    assert receipt.status is Action.APPLIED and receipt.cache_break
    assert (receipt.projection_version, receipt.generation) == (1, 1)
    projection = c.state.projection
    assert projection is not None and projection.covered_count == 2
    assert projection.covered_prefix_hash == covered_prefix_hash(CANONICAL, 2)
    assert disk.state == c.state and disk.saves == 1


@pytest.mark.parametrize("moved", ["receipt", "install"])
def test_an_install_loses_when_anything_moved_in_this_process(moved: str) -> None:
    disk = Disk()
    c = committer(disk)
    captured = capture(c)
    if moved == "receipt":
        record(c)
    else:
        install(c, capture(c))
    saves, before = disk.saves, c.state.projection
    with pytest.raises(StaleContextError):
        install(c, captured)
    assert disk.saves == saves and c.state.projection == before


def theirs_with_checkpoint(generation: int) -> SidecarState:
    """Another process's state after it installed a checkpoint (projection version 1)."""
    other = Committer(SidecarState(), save=lambda _s: True, reload=lambda: None)
    install(other, capture(other))
    return attrs.evolve(other.state, generation=generation, prompt_cache_key="other")


def test_an_install_loses_when_another_process_installed_and_adopts_its_state() -> None:
    disk = Disk()
    c = committer(disk)
    captured = capture(c)
    theirs = theirs_with_checkpoint(7)
    disk.state = theirs
    with pytest.raises(StaleContextError):
        install(c, captured)
    assert c.state == theirs and disk.state == theirs  # never overwritten


def test_an_install_goes_on_top_of_receipts_another_process_recorded() -> None:
    # Receipts and telemetry never defeat a checkpoint: workers at the trigger together would
    # otherwise block each other's installs for good.
    disk = Disk()
    c = committer(disk)
    captured = capture(c)
    disk.state = SidecarState(generation=7, prompt_cache_key="other",
                              telemetry=(TelemetryRecord(kind="blocked"),))
    receipt = install(c, captured)
    assert receipt.generation == 8 and disk.state is not None
    assert disk.state.generation == 8 and disk.state.projection is not None
    assert disk.state.prompt_cache_key == "other"
    assert [t.kind for t in disk.state.telemetry] == ["blocked", "install"]


@pytest.mark.parametrize("checkpoint", [True, False])
def test_an_install_whose_write_loses_the_swap_is_rechecked_on_the_winners_state(
        checkpoint: bool) -> None:
    disk = Disk()
    c = committer(disk)
    captured = capture(c)
    # The other process writes between this one's check and its write.
    theirs = theirs_with_checkpoint(1) if checkpoint else SidecarState(
        generation=1, prompt_cache_key="other")
    disk.race = theirs
    if checkpoint:
        with pytest.raises(StaleContextError, match="installed a checkpoint first"):
            install(c, captured)
        assert disk.state == theirs and c.state == theirs and c.adopted
        assert disk.saves == 0
    else:
        receipt = install(c, captured)
        assert receipt.generation == 2 and disk.saves == 1
        assert disk.state is not None and disk.state.prompt_cache_key == "other"


def test_a_record_that_loses_the_swap_is_reapplied_on_the_winners_state() -> None:
    disk = Disk()
    c = committer(disk)
    theirs = SidecarState(generation=4, prompt_cache_key="other",
                          telemetry=(TelemetryRecord(kind="install"),))
    disk.race = theirs
    receipt = record(c, telemetry=TelemetryRecord(kind="blocked"))
    assert receipt.generation == 5  # numbered after the winner's generation 4
    assert disk.state is not None and disk.state.generation == 5
    assert disk.state.prompt_cache_key == "other"
    assert [t.kind for t in disk.state.telemetry] == ["install", "blocked"]  # both kept


def test_a_failed_sidecar_write_rolls_back_and_leaves_no_applied_receipt() -> None:
    disk = Disk()
    c = committer(disk)
    disk.fail = True
    with pytest.raises(OSError, match="disk full"):
        install(c, capture(c))
    assert c.state == SidecarState() and disk.state is None


def test_a_repeated_failure_for_the_same_view_is_recorded_once() -> None:
    disk = Disk()
    c = committer(disk)
    case = context(session(2, 10), c)
    run = maintenance.Run(case.ctx, list(case.ctx.canonical), 10)

    def receipt() -> None:
        driving.drive(run.receipt(Action.BLOCKED, "why", Action.SUMMARY),
                      performer(case, None))  # type: ignore[arg-type]

    receipt()
    first = c.state.last_receipt
    receipt()
    assert c.state.last_receipt == first and disk.saves == 1 and c.state.generation == 1
    run.view = run.view[:-1]  # another view, another input hash
    receipt()
    assert c.state.generation == 2 and disk.saves == 2


def test_resume_records_only_the_label() -> None:
    disk = Disk()
    c = committer(disk)
    c.record_resume(CacheState.COLD)
    assert c.state.last_cache_state is CacheState.COLD and c.state.projection is None
    assert [t.kind for t in c.state.telemetry] == ["resume"]


def test_rewind_drops_a_projection_that_covers_more_than_is_left() -> None:
    disk = Disk()
    c = committer(disk)
    install(c, capture(c), covered=2)
    c.after_rewind(CANONICAL[:1])
    assert c.state.projection is None


def test_cache_figures_go_on_the_next_record_that_lands() -> None:
    """Observed cache hits and misses are written once, on the next record that lands: a
    failed write gives them back, and the record after carries none of them again."""
    disk = Disk()
    c = committer(disk)
    c.observe_cache(Usage(prompt_tokens=10, cache_hit_tokens=7, cache_miss_tokens=3))
    disk.fail = True
    with pytest.raises(OSError):
        record(c, telemetry=TelemetryRecord(kind="prepare"))
    disk.fail = False
    record(c, input_hash="h2", telemetry=TelemetryRecord(kind="prepare"))
    last = c.state.telemetry[-1]
    assert (last.cache_hit_tokens, last.cache_miss_tokens) == (7, 3)
    record(c, input_hash="h3", telemetry=TelemetryRecord(kind="prepare"))
    last = c.state.telemetry[-1]
    assert (last.cache_hit_tokens, last.cache_miss_tokens) == (0, 0)
