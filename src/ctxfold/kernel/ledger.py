"""The cache ledger: what one fold (a prune or a checkpoint install) cost and saved.

A fold breaks the provider's prompt cache: the first request after it reads the prefix the
new view shares with the old one and writes the rest, and the cached prefix it no longer
shares is *invalidated*. A checkpoint also pays for its summary request(s). What it buys is
``saved_per_request`` fewer tokens in every request sent on its view — tokens that, unfolded,
would mostly have been cache reads. :class:`LedgerEntry` holds those facts in tokens;
:meth:`LedgerEntry.net_saving` prices them (docs/checkpoints.md, "The cache ledger")::

    rewritten = max(invalidated - saved_per_request, 0)
    net = requests × saved_per_request × hit
          - rewritten × (miss - hit)
          - (summary_read × hit + (summary_input - summary_read) × miss
             + summary_output × output)

``rewritten`` is what the first request had to write that an unfolded request would have
read (its new messages are a miss either way): the unfolded request would have sent the
cached prefix plus the new messages, so ``saved = invalidated - rewritten``.

A fold is credited only while its view is the one sent (``requests``): the next fold takes
over from a view that already carries this one's saving, so a session's total is a lower
bound on the saving against never folding (which a long session could not do at all).
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

PER_MILLION = 1_000_000


@attrs.frozen
class LedgerEntry:
    """One fold's cache ledger, in tokens.

    ``read``/``written``: the cache hits and misses of the first request on the new view;
    ``invalidated``: tokens of the cached prefix before the fold (the last request's prompt
    plus its reply) the new view no longer shares; ``saved_per_request``: tokens each request
    on the new view no longer sends; ``requests``: requests sent on this view so far;
    ``summary_input``/``summary_read``/``summary_output``: the summary request(s)' prompt,
    its cached part, and output (0 for a prune). ``estimated``: ``read``, ``written`` and
    ``invalidated`` are the estimator's figures (no provider usage was observed for the
    first request); ``summary_estimated``: likewise for the summary figures.
    """

    read: int = 0
    written: int = 0
    invalidated: int = 0
    saved_per_request: int = 0
    requests: int = 0
    summary_input: int = 0
    summary_read: int = 0
    summary_output: int = 0
    estimated: bool = True
    summary_estimated: bool = False

    @property
    def rewritten(self) -> int:
        """Tokens the first request wrote that an unfolded request would have read."""
        return max(self.invalidated - self.saved_per_request, 0)

    @property
    def not_sent(self) -> int:
        """Tokens the requests on this view did not send: ``requests × saved_per_request``."""
        return self.requests * self.saved_per_request

    def summary_cost(self, hit: float, miss: float, output: float) -> float:
        """The summary request(s) at these prices (per 1M tokens)."""
        return summary_cost(self, hit, miss, output)

    def net_saving(self, hit: float, miss: float, output: float) -> float:
        """The saving against not folding at these prices (per 1M tokens; negative: the
        fold cost more than it saved so far)."""
        return net_saving(self, hit, miss, output)


@attrs.frozen
class LedgerTotal:
    """The sum of a session's ledger entries (``folds`` of them, ``estimated`` of which
    hold estimated cache figures)."""

    folds: int = 0
    estimated: int = 0
    requests: int = 0
    read: int = 0
    written: int = 0
    invalidated: int = 0
    rewritten: int = 0
    not_sent: int = 0
    summary_input: int = 0
    summary_read: int = 0
    summary_output: int = 0

    @classmethod
    def of(cls, entries: Iterable[LedgerEntry]) -> LedgerTotal:
        total = cls()
        for e in entries:
            total = LedgerTotal(
                folds=total.folds + 1, estimated=total.estimated + e.estimated,
                requests=total.requests + e.requests, read=total.read + e.read,
                written=total.written + e.written,
                invalidated=total.invalidated + e.invalidated,
                rewritten=total.rewritten + e.rewritten, not_sent=total.not_sent + e.not_sent,
                summary_input=total.summary_input + e.summary_input,
                summary_read=total.summary_read + e.summary_read,
                summary_output=total.summary_output + e.summary_output,
            )
        return total

    def summary_cost(self, hit: float, miss: float, output: float) -> float:
        """Every summary request at these prices (per 1M tokens)."""
        return summary_cost(self, hit, miss, output)

    def net_saving(self, hit: float, miss: float, output: float) -> float:
        """The sum of the entries' :meth:`LedgerEntry.net_saving` (it is linear)."""
        return net_saving(self, hit, miss, output)


def summary_cost(tokens: LedgerEntry | LedgerTotal, hit: float, miss: float,
                 output: float) -> float:
    """Summary tokens at these prices (USD per 1M tokens): the read part at ``hit``, the rest
    of the input at ``miss``, the output at ``output``."""
    return (tokens.summary_read * hit + (tokens.summary_input - tokens.summary_read) * miss
            + tokens.summary_output * output) / PER_MILLION


def net_saving(tokens: LedgerEntry | LedgerTotal, hit: float, miss: float,
               output: float) -> float:
    """The module docstring's formula: tokens not sent at ``hit``, less the rewritten prefix
    at ``miss − hit``, less the summaries."""
    return ((tokens.not_sent * hit - tokens.rewritten * (miss - hit)) / PER_MILLION
            - summary_cost(tokens, hit, miss, output))
