"""The examples of docs/testing-plugins.md, run as written."""

from __future__ import annotations

import attrs

from ctxfold import ChatRequest, Fault, Message, ReplySpec, open_session
from ctxfold.testing import CharEstimator, RecordingSummarizer


def test_retries_on_429(ctxfold_emulator, ctxfold_provider_config, ctxfold_registry):
    emulator = ctxfold_emulator("deepseek", script=[ReplySpec(text="hi")],
                                faults=[Fault("rate_limit", at=0, retry_after=0.01)])
    config = ctxfold_provider_config(emulator)
    provider = ctxfold_registry.create("provider", "deepseek", config=config)
    reply = provider.complete(ChatRequest(messages=(Message(role="user", content="hey"),)))
    assert reply.message.content == "hi"
    assert [r.status for r in emulator.requests] == [429, 200]


def test_offline_config_opens_a_session(ctxfold_registry, ctxfold_config):
    config = attrs.evolve(ctxfold_config,
                          estimator=attrs.evolve(ctxfold_config.estimator, name="heuristic"))
    cm = open_session("t", config=config, registry=ctxfold_registry)
    cm.append(Message(role="user", content="hello"))
    assert cm.prepare().tokens > 0


def test_a_checkpoint_is_made_above_the_trigger(ctxfold_config):
    config = attrs.evolve(
        ctxfold_config, provider=attrs.evolve(ctxfold_config.provider, context_window=8000))
    summarizer = RecordingSummarizer()
    cm = open_session("t", config=config, summarizer=summarizer, estimator=CharEstimator())
    cm.append(Message(role="user", content="Tidy the logs."))
    for i in range(20):
        cm.append(Message(role="assistant", content=f"step {i}: " + "x" * 400))
        cm.append(Message(role="user", content="go on"))
    before = sum(len(m.content) for m in cm.canonical)  # one token per character
    prepared = cm.prepare()
    assert prepared.action == "summary" and len(summarizer.requests) == 1
    assert prepared.tokens < before
