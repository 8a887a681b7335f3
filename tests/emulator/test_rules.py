"""Rule scripts (replies chosen by the request) and the emulator's key check."""

from __future__ import annotations

import json

import httpx
import pytest

from ctxfold import ConfigError, Emulator
from ctxfold.emulator import load_script
from ctxfold.emulator.rules import RuleScript, rules_from_dict, tool_names

RULES = {"rules": [
    {"when": {"no_tools": True}, "reply": {"text": "A title"}},
    {"when": {"last": "user", "tools": ["bash"]},
     "replies": [{"tool_calls": [{"name": "bash", "arguments": {"command": "seq {{turn}}"}}]},
                 {"tool_calls": [{"name": "bash", "arguments": "{\"command\": \"ls\"}"}]}]},
    {"when": {"last": "tool", "contains": "secret"}, "reply": {"text": "found it ({{n}})"}},
    {"when": {"last": "tool", "results_at_least": 2}, "reply": {"text": "{{results}} results"}},
    {"when": {"last": "tool"}, "reply": {"text": "turn {{turn}} done, answer {{n}}"}},
]}

TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


def _chat(client: httpx.Client, messages: list[dict], tools: list | None = None) -> dict:
    body: dict = {"model": "m", "messages": messages}
    if tools is not None:
        body["tools"] = tools
    answer = client.post("/v1/chat/completions", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()["choices"][0]["message"]


def test_first_matching_rule_answers_with_placeholders_filled(tmp_path, chars) -> None:
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(RULES))
    script = load_script(path)
    assert isinstance(script, RuleScript)
    with Emulator("deepseek", counter=chars, script=script) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        assert _chat(client, [{"role": "user", "content": "name this"}])["content"] == "A title"
        history = [{"role": "system", "content": "sys"}, {"role": "user", "content": "one"},
                   {"role": "assistant", "content": "ok"}, {"role": "user", "content": "two"}]
        call = _chat(client, history, TOOLS)["tool_calls"][0]["function"]
        assert call == {"name": "bash", "arguments": '{"command":"seq 2"}'}
        # the rule's second reply, arguments kept exactly as written (spaced)
        again = _chat(client, history, TOOLS)["tool_calls"][0]["function"]
        assert again["arguments"] == '{"command": "ls"}'
        result = [*history, {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": call}]},
            {"role": "tool", "tool_call_id": "c1", "content": "1\n2"}]
        assert _chat(client, result, TOOLS)["content"] == "turn 2 done, answer 1"
        result[-1] = {**result[-1], "content": "a secret"}
        assert _chat(client, result, TOOLS)["content"] == "found it (1)"
        # nothing matches (the last message is the assistant's): the default reply
        assert _chat(client, result[:-1], TOOLS)["content"] == "OK."
        more = [*result, {"role": "tool", "tool_call_id": "c1", "content": "again"}]
        assert _chat(client, more, TOOLS)["content"] == "2 results"


def test_rule_matches_responses_items_and_namespaced_tools(chars) -> None:
    script = rules_from_dict({"rules": [
        {"when": {"last": "tool", "tools": ["spawn"], "system_contains": "coding agent",
                  "first_user_contains": "<env>", "turn_at_least": 2},
         "reply": {"text": "namespaced"}}]}, "rules")
    tools = [{"type": "namespace", "name": "agents",
              "tools": [{"type": "function", "name": "spawn", "parameters": {}}]},
             {"type": "web_search"}, {"type": "custom", "name": "apply_patch"}]
    assert tool_names({"tools": tools}) == {"spawn", "apply_patch"}
    body = {"model": "m", "stream": False, "tools": tools, "store": False, "input": [
        {"type": "message", "role": "developer", "content": "You are a coding agent"},
        {"type": "message", "role": "user", "content": [{"type": "input_text",
                                                         "text": "<env>cwd</env>"}]},
        {"type": "message", "role": "user", "content": "list"},
        {"type": "function_call", "call_id": "c1", "name": "spawn", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "done"}]}
    with Emulator("responses", counter=chars, script=script) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        answer = client.post("/v1/responses", json=body)
        assert answer.status_code == 200, answer.text
        assert answer.json()["output"][-1]["content"][0]["text"] == "namespaced"
        body["input"] = body["input"][1:]  # no developer message: the rule does not hold
        assert client.post("/v1/responses", json=body).json()["output"][-1][
            "content"][0]["text"] == "OK."


@pytest.mark.parametrize(("data", "message"), [
    ({"rules": []}, r"rules\.rules: must be a non-empty list"),
    ({"rule": []}, r"unknown key.*'rule'"),
    ({"rules": [{"reply": {"text": "a"}, "replies": []}]}, "exactly one of 'reply' or"),
    ({"rules": [{"when": {"last": "bot"}, "reply": {}}]}, r"rules\[0\]\.when\.last: 'bot'"),
    ({"rules": [{"when": {"tool": ["x"]}, "reply": {}}]}, r"unknown condition.*'tool'"),
    ({"rules": [{"when": {"tools": "x"}, "reply": {}}]}, "must be a list of tool names"),
    ({"rules": [{"when": {}, "reply": {"txt": "a"}}]}, r"replies\[0\]: unknown key"),
])
def test_bad_rule_scripts_name_what_and_where(data, message) -> None:
    with pytest.raises(ConfigError, match=message):
        rules_from_dict(data, "rules")


def test_require_key_refuses_a_missing_or_wrong_key(chars) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with Emulator("deepseek", counter=chars, require_key="sk-right") as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        for headers in ({}, {"Authorization": "Bearer sk-wrong"}):
            refused = client.post("/v1/chat/completions", json=body, headers=headers)
            assert refused.status_code == 401
            assert refused.json()["error"]["code"] == "invalid_api_key"
        ok = client.post("/v1/chat/completions", json=body,
                         headers={"Authorization": "Bearer sk-right"})
        assert ok.status_code == 200
        assert [r.status for r in emu.requests] == [401, 401, 200]


def test_numbers_found_in_the_newest_messages_survive_folding() -> None:
    """``{{turn}}`` and ``{{results}}`` count the request's messages, which a proxy's fold
    makes fewer; ``{{match:…}}``/``{{next:…}}``/``found_at_least`` read the newest
    messages, which every request keeps."""
    from ctxfold import Message, ToolCall

    script = rules_from_dict({"rules": [
        {"when": {"found_at_least": ["STEP-([0-9]+)", 3]}, "reply": {"text": "done"}},
        {"when": {}, "reply": {"text": "turn {{match:Turn ([0-9]+)}}", "tool_calls": [
            {"name": "bash", "arguments": {"command": "echo STEP-{{next:STEP-([0-9]+)}}"}}]}},
    ]}, "rules")
    folded = [Message(role="user", content="<compaction-summary>STEP-0 was long ago"),
              Message(role="user", content="Turn 7: go on")]
    reply = script.reply({}, folded)
    assert reply.text == "turn 7"
    assert json.loads(reply.tool_calls[0].arguments) == {"command": "echo STEP-1"}
    after = [*folded, Message(role="assistant", content="", tool_calls=(
        ToolCall(id="c1", name="bash", arguments='{"command": "echo STEP-2"}'),)),
        Message(role="tool", tool_call_id="c1", content="STEP-2")]
    assert json.loads(script.reply({}, after).tool_calls[0].arguments)["command"] == (
        "echo STEP-3")
    done = [*after, Message(role="tool", tool_call_id="c1", content="STEP-3")]
    assert script.reply({}, done).text == "done"
    with pytest.raises(ConfigError, match="found_at_least"):
        rules_from_dict({"rules": [{"when": {"found_at_least": ["(", 1]},
                                    "reply": {"text": "x"}}]}, "rules")
