"""The JSONL transcript codec of the ``fs`` store: one canonical message per line.

Encoding writes compact JSON lines (defaults omitted). The lines of a batch of several
messages (one ``append()``) start with ``"batch":"k/n"``, so a crash that tore the write
exactly at a line boundary is still seen: a transcript whose last batch is incomplete has a
torn tail like an unfinished line, and the batch lands whole or not at all. Parsing tells a
torn tail (a crash mid-append: recoverable) from corruption in the middle (fatal, naming the
line).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from ctxfold.kernel.codec import dumps_message, message_from_dict, message_to_dict
from ctxfold.kernel.errors import MessageError, StoreError
from ctxfold.kernel.types import Message
from ctxfold.message_checks import SURROGATE_ESCAPE, check_stored, repaired_message


def encode_message(message: Message) -> str:
    """One message as its transcript line (no newline, no batch marker): compact JSON, valid
    UTF-8 (a lone surrogate is escaped), what a database store keeps per row."""
    return encode_lines([message])[:-1].decode("utf-8")


def decode_message(text: str, where: str) -> Message:
    """A message from :func:`encode_message`'s text; :class:`StoreError` naming ``where``."""
    try:
        line = text.encode("utf-8") + b"\n"
    except UnicodeEncodeError as bad:
        raise StoreError(f"{where}: {bad}") from None
    return decode_line(line, where)


def decode_line(line: bytes, where: str) -> Message:
    """The message of one transcript line (newline included, batch marker allowed);
    :class:`StoreError` naming ``where``."""
    try:
        messages, _places = _parse_body(line)
    except _BadLine as bad:
        raise StoreError(f"{where}: {bad.why}") from None
    if len(messages) != 1:
        raise StoreError(f"{where}: expected one message, found {len(messages)}")
    return messages[0]


def encode_lines(messages: Sequence[Message]) -> bytes:
    """The transcript lines of ``messages``: compact JSON, UTF-8, one per line; with more
    than one message each line starts with its place in the batch (``"batch":"k/n"``)."""
    out = []
    n = len(messages)
    for k, message in enumerate(messages, start=1):
        try:
            line = dumps_message(message).encode("utf-8")
        except UnicodeEncodeError:
            # A lone surrogate cannot be UTF-8: escape it (\udXXX) so the line stays valid
            # and json.loads gives the same string back.
            line = json.dumps(message_to_dict(message), separators=(",", ":")).encode()
        if n > 1:
            line = b'{"batch":"%d/%d",' % (k, n) + line[1:]
        out.append(line)
        out.append(b"\n")
    return b"".join(out)


BATCH_KEY = "batch"


def _batch_place(value: object) -> tuple[int, int] | None:
    """``(k, n)`` of a line's ``"batch":"k/n"`` marker (``None``: a single-message append)."""
    if not isinstance(value, dict):
        return None
    marker = value.pop(BATCH_KEY, None)
    if not isinstance(marker, str):
        return None
    k, _, n = marker.partition("/")
    return (int(k), int(n)) if k.isdigit() and n.isdigit() else None


class _BadLine(StoreError):
    def __init__(self, lineno: int, start: int, stop: int, why: str, *, fatal: bool) -> None:
        super().__init__(why)
        self.lineno, self.start, self.stop, self.why, self.fatal = lineno, start, stop, why, fatal


class ParsedTranscript(NamedTuple):
    """Result of :func:`parse_transcript`: messages, end of the good part, torn tail bytes."""

    messages: list[Message]
    good_end: int
    torn: bytes
    #: How many messages each append wrote, in order (sums to ``len(messages)``).
    sizes: tuple[int, ...] = ()

    def batches(self) -> list[list[Message]]:
        """The messages as the batches they were appended in (one each when unknown)."""
        sizes = self.sizes if sum(self.sizes) == len(self.messages) else ()
        out, start = [], 0
        for size in sizes or (1,) * len(self.messages):
            out.append(self.messages[start:start + size])
            start += size
        return out


def _structure(values: list[object], linenos: Sequence[int] | None
               ) -> tuple[list[Message], list[tuple[int, int] | None]]:
    places = [_batch_place(value) for value in values]
    messages = []
    for i, value in enumerate(values):
        try:
            if type(value) is not dict:
                raise TypeError(f"expected a JSON object, got {type(value).__name__}")
            messages.append(check_stored(message_from_dict(value)))
        except MessageError as exc:  # valid JSON, so fatal even when last (below)
            n = linenos[i] if linenos is not None else i + 1
            raise _BadLine(n, 0, 0, f"not a transcript message: {exc}", fatal=True) from None
        except Exception as exc:
            from cattrs import transform_error

            # Valid JSON is never a crash artifact, so a bad message is fatal even when last.
            n = linenos[i] if linenos is not None else i + 1
            why = "; ".join(transform_error(exc, path="message"))
            raise _BadLine(n, 0, 0, f"not a transcript message: {why}", fatal=True) from None
    return messages, places


def _parse_body(body: bytes) -> tuple[list[Message], list[tuple[int, int] | None]]:
    """Parse complete lines (``body`` ends with a newline): the messages and each line's
    batch place; raises :class:`_BadLine`. A text holding an escaped lone surrogate (written
    before they were refused) is repaired in memory
    (:func:`~ctxfold.message_checks.repaired_message`); the file is not changed."""
    messages, places = _parse_lines(body)
    if SURROGATE_ESCAPE.search(body):
        messages = [repaired_message(m) for m in messages]
    return messages, places


#: Lines longer than this (a huge tool output) are parsed on their own, not copied into the
#: joined document of the fast path.
BIG_LINE = 1 << 20


def _fast_values(lines: list[str]) -> list[object]:
    """The JSON value of each line: runs of ordinary lines with one ``json.loads`` (~4x
    faster than one per line), a big line alone. ``ValueError`` when any line is not
    exactly one JSON value (the joined count changes, or it fails to parse)."""
    values: list[object] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            parsed = json.loads("[" + ",".join(run) + "]")
            if len(parsed) != len(run):
                raise ValueError("a line holds more or less than one JSON value")
            values.extend(parsed)
            run.clear()

    for line in lines:
        if len(line) > BIG_LINE:
            flush()
            values.append(json.loads(line))
        else:
            run.append(line)
    flush()
    return values


def _parse_lines(body: bytes) -> tuple[list[Message], list[tuple[int, int] | None]]:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = body.rfind(b"\n", 0, exc.start) + 1
        n = body.count(b"\n", 0, start) + 1
        stop = body.find(b"\n", exc.start) + 1
        raise _BadLine(n, start, stop, "invalid UTF-8", fatal=False) from None
    lines = text.split("\n")
    lines.pop()
    try:
        return _structure(_fast_values(lines), None)
    except (ValueError, RecursionError):
        pass  # some line is not exactly one JSON value: find it, line by line
    values, linenos, start = [], [], 0
    for n, raw in enumerate(body.split(b"\n")[:-1], start=1):
        stop = start + len(raw) + 1
        if raw.strip():  # blank lines carry no data and are skipped
            try:
                values.append(json.loads(raw))
            except (ValueError, RecursionError) as exc:
                raise _BadLine(n, start, stop, f"invalid JSON ({exc})", fatal=False) from None
            linenos.append(n)
        start = stop
    return _structure(values, linenos)


def parse_transcript(data: bytes, path: Path, first_line: int = 1) -> ParsedTranscript:
    """Parse a whole transcript file (or its part from line ``first_line`` on).

    An unfinished last line (no newline, or a last line that is not valid UTF-8/JSON) is
    reported as ``torn``; anything wrong before it raises :class:`StoreError` with the line.
    """
    body = data[: data.rfind(b"\n") + 1]
    while True:
        try:
            messages, places = _parse_body(body)
        except _BadLine as bad:
            if bad.fatal or len(body) < len(data) or bad.stop != len(body):
                line = bad.lineno + first_line - 1
                raise StoreError(
                    f"transcript {path} line {line}: {bad.why}. The damage is not a torn "
                    "last line, so ctxfold will not guess: restore the file from a backup or "
                    "remove that line by hand (after copying the file)."
                ) from None
            body = body[: bad.start]  # the last line itself is torn
            continue
        unfinished = _unfinished_batch(places)
        if unfinished:  # the last batch lost its end: torn too, the batch goes whole
            body = body[: line_ends(body)[-unfinished - 1]] if unfinished < len(places) else b""
            messages = messages[:-unfinished]
            places = places[:-unfinished]
        # A batch's size counts once, at its last line; a single-message append is 1.
        sizes = tuple(place[1] if place else 1 for place in places
                      if place is None or place[0] == place[1])
        return ParsedTranscript(messages, len(body), data[len(body) :], sizes)


def _unfinished_batch(places: Sequence[tuple[int, int] | None]) -> int:
    """How many trailing lines belong to a batch whose last lines are missing (0: none)."""
    if not places or places[-1] is None:
        return 0
    k, n = places[-1]
    return k if k < n else 0


_MARKER = re.compile(rb'\{"batch":"(\d+)/(\d+)",')


def cut_prefix(data: bytes, ends: Sequence[int], messages: Sequence[Message], count: int
               ) -> bytes:
    """The transcript bytes of the first ``count`` messages (for fork and rewind). The lines
    are kept byte for byte, except when the cut falls inside a batch: the batch's kept lines
    are re-encoded as a batch of their own, so the prefix does not end in an unfinished
    batch (which the next load would set aside as torn)."""
    if count == 0:
        return b""
    start = ends[count - 2] if count > 1 else 0
    while data[start:start + 1] in (b"\n", b"\r", b" ", b"\t"):  # blank lines between
        start += 1
    place = _MARKER.match(data, start)
    k, n = (int(place[1]), int(place[2])) if place else (0, 0)
    if not place or k == n:
        return data[: ends[count - 1]]
    first = count - k  # the batch's first message
    head = data[: ends[first - 1]] if first else b""
    return head + encode_lines(messages[first:count])


def line_ends(body: bytes, end: int | None = None, count: int | None = None) -> list[int]:
    """Byte offset just past each message line of ``body[:end]`` (blank lines skipped, as
    the parser skips them; an unfinished last line has none), the first ``count`` only."""
    ends: list[int] = []
    stop_at = len(body) if end is None else end
    limit = -1 if count is None else count
    find, at = body.find, 0
    while at < stop_at and len(ends) != limit:
        stop = find(b"\n", at, stop_at)
        if stop < 0:
            break
        if body[at:stop].strip():
            ends.append(stop + 1)
        at = stop + 1
    return ends


