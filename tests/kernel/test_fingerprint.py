"""Fingerprints (design §5.3): every provider-visible field changes the covered-prefix hash;
raw_content and local fields never do."""

from __future__ import annotations

import attrs
import pytest

from ctxfold import Message, ToolCall
from ctxfold.kernel.fingerprint import chain_hash, covered_prefix_hash, fingerprint

BASE = [
    Message(role="system", content="sys"),
    Message(role="user", content="task"),
    Message(role="assistant", content="calling", reasoning_content="think",
            tool_calls=(ToolCall(id="c1", name="bash", arguments='{"command":"ls"}'),)),
    Message(role="tool", content="bounded", raw_content="bounded and much more",
            tool_call_id="c1", name="bash"),
]

VISIBLE_CHANGES = [
    (0, {"content": "sys!"}),
    (1, {"role": "assistant"}),
    (2, {"reasoning_content": "think!"}),
    (2, {"tool_calls": (ToolCall(id="c2", name="bash", arguments='{"command":"ls"}'),)}),
    (2, {"tool_calls": (ToolCall(id="c1", name="sh", arguments='{"command":"ls"}'),)}),
    (2, {"tool_calls": (ToolCall(id="c1", name="bash", arguments='{"command":"pwd"}'),)}),
    (3, {"tool_call_id": "c9"}),
    (3, {"name": "shell"}),
    (3, {"content": "bounded!"}),
]

LOCAL_CHANGES = [
    (3, {"raw_content": "a completely different full output"}),
    (3, {"raw_content": None}),
    (1, {"origin": "host"}),
    (1, {"created_at": "2020-01-01T00:00:00Z"}),
    (1, {"id": "m-42"}),
    (2, {"partial": True}),
]


@pytest.mark.parametrize(("index", "change"), VISIBLE_CHANGES)
def test_every_visible_field_changes_the_hash(index: int, change: dict) -> None:
    changed = list(BASE)
    changed[index] = attrs.evolve(BASE[index], **change)
    assert covered_prefix_hash(changed, 4) != covered_prefix_hash(BASE, 4)


@pytest.mark.parametrize(("index", "change"), LOCAL_CHANGES)
def test_local_fields_never_change_the_hash(index: int, change: dict) -> None:
    changed = list(BASE)
    changed[index] = attrs.evolve(BASE[index], **change)
    assert covered_prefix_hash(changed, 4) == covered_prefix_hash(BASE, 4)


def test_local_only_messages_are_not_fingerprinted() -> None:
    with_local = [*BASE[:2], Message(role="user", content="note", local_only=True), *BASE[2:]]
    assert fingerprint(with_local) == fingerprint(BASE)


def test_hash_is_16_bytes_hex_and_out_of_range_is_empty() -> None:
    assert len(covered_prefix_hash(BASE, 2)) == 32
    assert covered_prefix_hash(BASE, 0) == "" and covered_prefix_hash(BASE, 5) == ""


def test_a_new_list_at_a_freed_list_s_address_is_hashed_from_its_own_messages() -> None:
    # CPython reuses a freed list's address at once: the prefix memo must not take a new list
    # ending in the same message object for the old one.
    other = attrs.evolve(BASE[1], content="another task")
    expected = {False: chain_hash(BASE), True: chain_hash([BASE[0], other, *BASE[2:]])}
    for i in range(200):
        swap = i % 2 == 1
        messages = [BASE[0], other if swap else BASE[1], *BASE[2:]]
        assert covered_prefix_hash(messages, 4) == expected[swap]
        del messages
