"""The examples of docs/testing-plugins.md, run as written."""

from __future__ import annotations

import attrs

from ctxfold import ChatRequest, Fault, Message, ReplySpec, open_session


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
