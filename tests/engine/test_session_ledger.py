"""The cache ledger of a session: one entry per install, measured by the first request's
usage, and a session total."""

from __future__ import annotations

from typing import Any

from tests.engine.test_manager import rounds, seed

from ctxfold import ChatRequest, ChatResponse, Message, SummaryResult, Usage
from ctxfold import open_session as reopen
from ctxfold.kernel.ledger import LedgerTotal
from ctxfold.testing import RecordingSummarizer


class UsageProvider:
    """Reports each request's prompt as the session estimates it (so calibration keeps the
    estimator as it is) and the next scripted number of cache hits."""

    name = "scripted"
    context_window = 1_000_000
    cache_ttl_minutes = 1440
    def __init__(self, cm: Any, hits: list[int]) -> None:
        self.cm, self.hits = cm, hits
        self.usages: list[Usage] = []

    def complete(self, request: ChatRequest) -> ChatResponse:
        prompt, hit = self.cm.estimate(list(request.messages)), self.hits.pop(0)
        self.usages.append(Usage(prompt_tokens=prompt, completion_tokens=50,
                                 cache_hit_tokens=hit, cache_miss_tokens=prompt - hit))
        return ChatResponse(message=Message(role="assistant", content="ok"),
                            usage=self.usages[-1])


def summary(n: int) -> SummaryResult:
    return SummaryResult(text=f"## Goal\n- summary #{n}",
                         usage=Usage(prompt_tokens=9_000, completion_tokens=200 + n,
                                     cache_hit_tokens=8_000, cache_miss_tokens=1_000))


def test_two_checkpoints_record_two_entries_and_their_total(open_session) -> None:
    summarizer = RecordingSummarizer([summary(1), summary(2)])
    cm = open_session(window=30_000, ratio=0.5, summarizer=summarizer)
    seed(cm)
    rounds(cm, 40, 1_500)
    # Cache hits of: the first request after checkpoint 1, the second on its view, the
    # first after checkpoint 2.
    provider = UsageProvider(cm, [300, 1_000, 400])
    cm.complete(provider)
    rounds(cm, 1, 100, start=40)
    cm.complete(provider)
    rounds(cm, 40, 1_500, start=41)
    cm.complete(provider)
    installs = [t for t in cm.state.telemetry if t.kind == "install"]
    assert [t.action for t in installs] == ["summary", "summary"]
    first, second = (t.ledger for t in installs)
    assert first is not None and second is not None
    # Measured by the first request on each view; the second's invalidated prefix is the
    # request before it (its prompt + 50 reply tokens) less what the first request read.
    one, two, three = provider.usages
    assert (first.read, first.written, first.estimated) == (300, one.prompt_tokens - 300, False)
    assert (second.read, second.written) == (400, three.prompt_tokens - 400)
    assert second.invalidated == two.prompt_tokens + 50 - 400
    assert (first.requests, second.requests) == (2, 1)
    assert (first.summary_input, first.summary_read, first.summary_output) == \
        (9_000, 8_000, 201)
    assert second.summary_output == 202 and not second.summary_estimated
    assert first.saved_per_request == installs[0].saved_tokens > 0
    total = LedgerTotal.of([first, second])
    assert (total.folds, total.requests, total.read) == (2, 3, 700)
    assert total.written == first.written + second.written
    assert total.summary_input == 18_000
    # The first entry (with its two requests) was written with the second install.
    stored = reopen(cm.session_id, config=cm.config)
    kept = [t.ledger for t in stored.state.telemetry if t.kind == "install"]
    assert kept[0] == first


def test_without_observed_usage_the_entry_is_the_estimate(open_session) -> None:
    cm = open_session(window=30_000, ratio=0.5, summarizer=RecordingSummarizer())
    seed(cm)
    rounds(cm, 40, 1_500)
    before = cm.estimate()
    cm.prepare()
    install = cm.state.telemetry[-1]
    entry = install.ledger
    assert entry is not None and entry.estimated and entry.summary_estimated
    assert entry.requests == 1
    # No usage: the cached prefix is taken to be the whole view before the fold, and the
    # first request reads the prefix both views share and writes the rest.
    assert entry.read + entry.invalidated == before == install.tokens_before
    assert entry.read + entry.written == install.tokens_after
    assert entry.saved_per_request == before - install.tokens_after
    assert entry.summary_input > 0 and entry.summary_output > 0
