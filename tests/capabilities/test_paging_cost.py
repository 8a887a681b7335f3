"""Issue 14 item 10: a page of ``session:tool_result`` costs O(page), not O(body).

Not timed: the tests count what touches the whole body — bytes fed to SHA-256 (the body's
``sha256`` and its ``result_ref``) and full-text scans at creation — so they fail on code that
re-encodes and re-hashes the body for every page."""

from __future__ import annotations

import gc
import hashlib
import json
import re
from typing import Any

import pytest

from ctxfold import Message
from ctxfold.capabilities import bounding as tool_results
from ctxfold.capabilities import tool_result as paging
from ctxfold.capabilities.bounding import make_tool_result, result_ref
from ctxfold.capabilities.tool_result import read_tool_result

ASCII = "".join(f"line {i}: compiled ok\n" for i in range(12_000))
MIXED = "".join(f"{i} 日本語 😀 e\u0301\n" for i in range(12_000))


class HashedBytes:
    """Replaces ``hashlib.sha256``: counts every byte hashed."""

    real = hashlib.sha256

    def __init__(self, counted: list[int]) -> None:
        self.counted = counted

    def __call__(self, data: bytes = b"", **kwargs: Any) -> Any:
        counted, inner = self.counted, self.real(data, **kwargs)
        counted.append(len(data))

        class Hash:
            def update(self, more: bytes) -> None:
                counted.append(len(more))
                inner.update(more)

            def digest(self) -> bytes:
                return inner.digest()

            def hexdigest(self) -> str:
                return inner.hexdigest()

        return Hash()


def read_all(messages: list[Message], call_id: str) -> tuple[bytes, list[dict[str, Any]]]:
    offset, pieces, headers = 0, [], []
    while True:
        header, page = read_tool_result(messages, tool_call_id=call_id, offset=offset).split(
            "\n", 1)
        headers.append(json.loads(header))
        pieces.append(page.encode())
        if headers[-1]["complete"]:
            return b"".join(pieces), headers
        offset = headers[-1]["next_offset"]


@pytest.mark.parametrize("text", [ASCII, MIXED], ids=["ascii", "utf8"])
def test_paging_hashes_the_body_once_not_once_per_page(text, monkeypatch) -> None:
    messages = [Message(role="user", content="go"), make_tool_result("c1", text,
                                                                     tool_name="bash")]
    size = len(text.encode())
    counted: list[int] = []
    monkeypatch.setattr(hashlib, "sha256", HashedBytes(counted))
    body, headers = read_all(messages, "c1")
    monkeypatch.undo()
    assert body == text.encode() and len(headers) > 10
    assert {h["sha256"] for h in headers} == {hashlib.sha256(text.encode()).hexdigest()}
    assert {h["result_ref"] for h in headers} == {result_ref("c1", text)}
    # the body's sha256 and its result_ref: each over the body once, for all the pages
    assert sum(counted) <= 2 * size + 64, f"{sum(counted) / size:.1f}× the body was hashed"


def test_the_cache_lives_with_the_message_and_a_new_message_is_hashed_afresh() -> None:
    message = make_tool_result("c1", ASCII, tool_name="bash")
    read_tool_result([message], tool_call_id="c1")
    assert message in paging._CACHE
    # an equal message (the session reopened) gives the same pages and digests
    again = make_tool_result("c1", ASCII, tool_name="bash")
    assert read_tool_result([again], tool_call_id="c1") == read_tool_result([message],
                                                                            tool_call_id="c1")
    before = len(paging._CACHE)
    del message, again
    gc.collect()
    assert len(paging._CACHE) < before  # entries go with their messages: nothing leaks


class CountingPattern:
    """Wraps a compiled pattern and counts full-text substitutions."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern, self.calls = pattern, 0

    def sub(self, repl: str, text: str) -> str:
        self.calls += 1
        return self.pattern.sub(repl, text)


def test_bounding_an_ascii_result_does_not_scan_it_for_surrogates(monkeypatch) -> None:
    counting = CountingPattern(tool_results._SURROGATES)
    monkeypatch.setattr(tool_results, "_SURROGATES", counting)
    message = make_tool_result("c1", ASCII, tool_name="bash")
    assert message.raw_content == ASCII and len(message.content.encode()) <= 32768
    assert counting.calls == 0  # ASCII cannot hold a lone surrogate (and costs O(1) to know)
    # non-ASCII text is still repaired
    broken = make_tool_result("c2", "x\ud800y" * 20_000, tool_name="bash")
    assert broken.raw_content == "x\ufffdy" * 20_000 and counting.calls >= 1
