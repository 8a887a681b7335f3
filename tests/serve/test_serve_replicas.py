"""Two ``ctxfold serve`` replicas on one PostgreSQL store behind one address: a client
alternating between them keeps one session, loses nothing, never waits for a lock the other
replica holds, and each replica uses the checkpoints the other installed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.postgres import StoreSpec, postgres_spec  # noqa: F401  (the fixture)
from tests.serve.conftest import BASH, call, log_text, quarter

import ctxfold
from ctxfold import Config, Emulator, ProviderOptions
from ctxfold.interop.coerce import to_messages
from ctxfold.kernel.config import EstimatorConfig, ProviderConfig, StoreConfig, SummarizerConfig
from ctxfold.serve import ProxyServer, ServeSettings, build_proxy
from ctxfold.serve.sessions import reconcile

TURNS = 40


def test_two_replicas_on_one_postgres_store_serve_one_session_alternately(
        postgres_spec: StoreSpec, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.setenv("CTXFOLD_TEST_REPLICA_DSN", postgres_spec.where)
    emu = Emulator("deepseek", counter=quarter, script=[call(f"c{i}") for i in range(TURNS)])
    emu.start()
    config = Config(provider=ProviderConfig(name="deepseek"),
                    estimator=EstimatorConfig(name="heuristic"),
                    summarizer=SummarizerConfig(name="llm"),
                    store=StoreConfig(name="postgres", dsn_env="CTXFOLD_TEST_REPLICA_DSN"))
    servers, bodies = [], []
    for _ in range(2):
        provider = ctxfold.create_provider(config, options=ProviderOptions(
            base_url=emu.base_url, api_key="local-test-key", max_retries=0))
        proxy = build_proxy(config, provider=provider, on_request=bodies.append,
                            settings=ServeSettings(port=0, window=6000, lock_wait=5))
        servers.append(ProxyServer(proxy).start())
    try:
        import httpx

        history: list[dict[str, Any]] = [{"role": "system", "content": "You build things."},
                                         {"role": "user", "content": "Make the build green."}]
        names, actions = set(), []
        for turn in range(TURNS):
            server = servers[turn % 2]
            response = httpx.post(server.base_url + "/v1/chat/completions", json={
                "model": "m", "messages": history, "tools": [BASH]}, timeout=30)
            assert response.status_code == 200, (turn, response.text)
            names.add(response.headers["x-ctxfold-session"])
            actions.append(response.headers["x-ctxfold-action"])
            answer = response.json()["choices"][0]["message"]
            history += [answer, {"role": "tool", "tool_call_id": answer["tool_calls"][0]["id"],
                                 "content": log_text(1500, f"turn{turn}")}]
        assert len(names) == 1, names  # one session: no forks, no 409
        assert actions.count("summary") >= 3
        # Nothing lost: the stored transcript is the client's history (the last tool result
        # was never sent).
        name = names.pop()
        stored = ctxfold.open_session(name, config=config, create=False,
                                      summarize=lambda _request: "").canonical
        found = reconcile(stored, to_messages(history[:-1]))
        assert found.extends and found.matched == len(history) - 1
        # Shared checkpoints: after a replica installed one, the other's next request sent
        # the same summary (it did not fold again or send the whole history).
        shared = 0
        for i, action in enumerate(actions[:-1]):
            if action == "summary" and actions[i + 1] == "none":
                before, after = json.loads(bodies[i])["messages"], json.loads(bodies[i + 1])
                summary = next(m for m in before if "<compaction-summary>" in str(m["content"]))
                assert summary in after["messages"]
                shared += 1
        assert shared >= 2
    finally:
        for server in servers:
            server.stop()
        emu.stop()
