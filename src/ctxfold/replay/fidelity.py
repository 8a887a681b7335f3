"""A policy's fidelity over its requests, from the per-request scores of
:class:`ctxfold.engine.probes.FidelityScorer`."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ctxfold.engine.probes import LOW_FIDELITY, RequestFidelity


@attrs.define
class FidelitySummary:
    """A policy's fidelity over its requests: the mean weighted retention, the mean retention
    of user constraints, the retention at its last request and the share of requests below
    :data:`LOW_FIDELITY`. ``None`` where no request had anything to retain."""

    mean: float | None = None
    constraints: float | None = None
    last: float | None = None
    below_half: float | None = None

    @classmethod
    def of(cls, scores: Sequence[RequestFidelity]) -> FidelitySummary:
        weighted = [s.weighted for s in scores if s.weighted is not None]
        constraints = [s.constraints for s in scores if s.constraints is not None]
        if not weighted:
            return cls()
        return cls(
            mean=sum(weighted) / len(weighted),
            constraints=sum(constraints) / len(constraints) if constraints else None,
            last=weighted[-1],
            below_half=sum(1 for w in weighted if w < LOW_FIDELITY) / len(weighted),
        )
