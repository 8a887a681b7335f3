"""What one maintenance run starts from and ends with: the typed context of a ``prepare()``
(:class:`MaintenanceContext`), its runtime-only guards (:class:`Latches`), its outcome
(:class:`Outcome`, :class:`PrepareAction`, :class:`FoldResult`) and the steps it yields to its
driver (a :class:`~ctxfold.kernel.types.SummaryRequest`, or :data:`RESYNC`)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Generator, Sequence

import attrs

from ctxfold.kernel import fold
from ctxfold.kernel.commit import Committer
from ctxfold.kernel.contracts import CheckpointReview, Estimator, Pruner
from ctxfold.kernel.errors import CtxfoldError
from ctxfold.kernel.types import Message, SummaryRequest, ToolSchema, Trigger


class Resync(enum.Enum):
    """The step that asks the driver to re-read the transcript after a lost CAS."""

    RESYNC = "resync"


RESYNC = Resync.RESYNC


class PrepareAction(enum.StrEnum):
    """What a ``prepare()`` did: nothing, the last install (prune/summary), or an attempt
    that left a receipt but installed nothing (blocked/failed/noop)."""

    NONE = "none"
    PRUNE = "prune"
    SUMMARY = "summary"
    BLOCKED = "blocked"
    FAILED = "failed"
    NOOP = "noop"


class FoldResult(enum.Enum):
    """How one summary fold ended."""

    INSTALLED = "installed"
    NOTHING = "nothing to fold"
    FAILED = "summary failed"
    REJECTED = "candidate rejected"
    STALE = "lost the compare-and-swap"


@attrs.frozen
class Latches:
    """Runtime-only guards (never persisted): the stuck latch and the per-turn guards."""

    stuck_hash: str = ""
    failed_turn: int = -1
    summary_turn: int = -1

    def cleared(self) -> Latches:
        """After maintenance got the request under the trigger (the summary turn stays)."""
        return Latches(summary_turn=self.summary_turn)


@attrs.frozen
class MaintenanceContext:
    """Everything one ``prepare()`` works from. ``canonical`` is read, never mutated."""

    session_id: str
    trigger: Trigger
    focus: str | None
    window: int
    trigger_tokens: int
    turn: int
    latches: Latches
    tools: tuple[ToolSchema, ...]
    canonical: Sequence[Message]
    estimator: Estimator
    pruner: Pruner
    committer: Committer
    count: Callable[[Message], int]
    #: Pins and the summary check (``None``: a checkpoint is head + summary + tail only).
    review: CheckpointReview | None = None
    #: ``[checkpoint] max_summaries_per_hour`` (0: no cap; ctxfold.kernel.thrash).
    max_summaries_per_hour: int = 0

    @property
    def hard_ceiling(self) -> int:
        """``window − 256``: the protocol reserve (design §2.4)."""
        return self.window - fold.PROTOCOL_RESERVE


@attrs.frozen
class Outcome:
    """What ``prepare()`` ends with. ``error`` is raised by the engine after it applied the
    rest (latches); a transcript re-read after a lost CAS is the engine's own (it answered
    the :data:`RESYNC`)."""

    view: list[Message]
    tokens: int
    action: PrepareAction
    summary_calls: int
    pruned: bool
    latches: Latches
    error: CtxfoldError | None = None


@attrs.frozen
class Pruned:
    """A pruned view not yet installed: its messages, how many results it cut, its size."""

    view: list[Message]
    affected: int
    tokens: int


Step = SummaryRequest | Resync
Maintenance = Generator[Step, object, Outcome]
