"""A TOML lexer that knows where each top-level key/value pair starts and ends.

``config migrate`` deletes exactly the lines of retired pairs and leaves every other byte
alone, so it needs positions, which :mod:`tomllib` does not give. Text inside multi-line
strings, arrays or inline tables is never mistaken for a key: the lexer walks values the way a
TOML parser does. Text it cannot read raises :class:`~ctxfold.kernel.errors.ConfigSyntaxError`
with the line.
"""

from __future__ import annotations

from collections.abc import Collection

import attrs

from ctxfold.kernel.errors import ConfigSyntaxError


@attrs.frozen
class Pair:
    """One top-level ``key = value`` statement.

    ``path`` is the full key path (table header + dotted key); ``start``/``end`` are string
    offsets of its whole line(s), ``end`` including the line ending; ``line`` is 1-based.
    """

    path: tuple[str, ...]
    array_header: bool
    start: int
    end: int
    line: int


_BARE_KEY = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\",
            "e": "\x1b"}
_HEX_LEN = {"x": 2, "u": 4, "U": 8}


class _Lexer:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 1 if text.startswith("\ufeff") else 0

    def fail(self, message: str) -> ConfigSyntaxError:
        return ConfigSyntaxError(message, self.s.count("\n", 0, self.i) + 1)

    def peek(self, token: str) -> bool:
        return self.s.startswith(token, self.i)

    def expect(self, token: str) -> None:
        if not self.peek(token):
            raise self.fail(f"expected {token!r}")
        self.i += len(token)

    def spaces(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in " \t":
            self.i += 1

    def blanks(self) -> None:
        # Whitespace, newlines and comments: what may separate array/inline-table items.
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in " \t\r\n":
                self.i += 1
            elif c == "#":
                self.comment()
            else:
                return

    def comment(self) -> None:
        while self.i < len(self.s) and self.s[self.i] not in "\r\n":
            self.i += 1

    def end_of_line(self) -> None:
        self.spaces()
        if self.peek("#"):
            self.comment()
        if self.peek("\r\n"):
            self.i += 2
        elif self.peek("\n"):
            self.i += 1
        elif self.i < len(self.s):
            raise self.fail(f"unexpected {self.s[self.i]!r}")

    def pairs(self) -> list[Pair]:
        found: list[Pair] = []
        header: tuple[str, ...] = ()
        array = False
        while self.i < len(self.s):
            start = self.i  # always a line start here
            self.spaces()
            if self.i >= len(self.s) or self.s[self.i] in "\r\n#":
                self.end_of_line()
            elif self.peek("["):
                array = self.peek("[[")
                self.i += 2 if array else 1
                header = self.key()
                self.expect("]]" if array else "]")
                self.end_of_line()
            else:
                line = self.s.count("\n", 0, self.i) + 1
                key = self.key()
                self.expect("=")
                self.spaces()
                self.value()
                self.end_of_line()
                found.append(Pair((*header, *key), array, start, self.i, line))
        return found

    def key(self) -> tuple[str, ...]:
        parts = []
        while True:
            self.spaces()
            if self.peek('"'):
                parts.append(self.basic_string())
            elif self.peek("'"):
                begin = self.i + 1
                self.literal_string()
                parts.append(self.s[begin : self.i - 1])
            else:
                begin = self.i
                while self.i < len(self.s) and self.s[self.i] in _BARE_KEY:
                    self.i += 1
                if begin == self.i:
                    raise self.fail("expected a key")
                parts.append(self.s[begin : self.i])
            self.spaces()
            if not self.peek("."):
                return tuple(parts)
            self.i += 1

    def value(self) -> None:
        if self.peek('"""') or self.peek("'''"):
            self.multiline_string(self.s[self.i])
        elif self.peek('"'):
            self.basic_string()
        elif self.peek("'"):
            self.literal_string()
        elif self.peek("[") or self.peek("{"):
            self.container("]" if self.peek("[") else "}")
        else:
            # Numbers, booleans and date-times (which may contain one space) never contain
            # these characters, so they end the scalar.
            begin = self.i
            while self.i < len(self.s) and self.s[self.i] not in ",]}#\r\n":
                self.i += 1
            if begin == self.i:
                raise self.fail("expected a value")

    def container(self, close: str) -> None:
        self.i += 1
        while True:
            self.blanks()
            if self.peek(close):
                self.i += 1
                return
            if self.i >= len(self.s):
                raise self.fail(f"unterminated {'array' if close == ']' else 'inline table'}")
            if close == "}":
                self.key()
                self.expect("=")
                self.blanks()
            self.value()
            self.blanks()
            if self.peek(","):
                self.i += 1

    def basic_string(self) -> str:
        self.i += 1
        out: list[str] = []
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == '"':
                self.i += 1
                return "".join(out)
            if c in "\r\n":
                break
            if c == "\\" and self.i + 1 < len(self.s):
                code = self.s[self.i + 1]
                size = _HEX_LEN.get(code, 0)
                if size:
                    digits = self.s[self.i + 2 : self.i + 2 + size]
                    try:
                        out.append(chr(int(digits, 16)))
                    except ValueError:
                        raise self.fail("invalid escape") from None
                else:
                    out.append(_ESCAPES.get(code, code))
                self.i += 2 + size
                continue
            out.append(c)
            self.i += 1
        raise self.fail("unterminated string")

    def literal_string(self) -> None:
        end = self.s.find("'", self.i + 1)
        newline = self.s.find("\n", self.i + 1)
        if end < 0 or 0 <= newline < end:
            raise self.fail("unterminated literal string")
        self.i = end + 1

    def multiline_string(self, quote: str) -> None:
        self.i += 3
        while self.i < len(self.s):
            if quote == '"' and self.s[self.i] == "\\":
                self.i += 2  # an escaped character can never close the string
                continue
            if self.peek(quote * 3):
                self.i += 3
                # Up to two quotes right before the delimiter belong to the content.
                for _ in range(2):
                    if self.peek(quote):
                        self.i += 1
                return
            self.i += 1
        raise self.fail("unterminated multi-line string")


def scan_pairs(text: str) -> list[Pair]:
    """Every top-level key/value pair of the TOML ``text``, in order."""
    return _Lexer(text).pairs()


def strip_keys(
    text: str, targets: Collection[tuple[str, ...]]
) -> tuple[str, list[Pair]]:
    """Return ``text`` without the lines of the pairs whose full path is in ``targets``.

    Pairs under an array-of-tables header are never touched. Raises :class:`ConfigSyntaxError`
    when the text is not TOML the lexer understands.
    """
    removed = [
        p for p in scan_pairs(text) if not p.array_header and p.path in targets
    ]
    pieces: list[str] = []
    cursor = 0
    for pair in removed:
        pieces.append(text[cursor : pair.start])
        cursor = pair.end
    pieces.append(text[cursor:])
    return "".join(pieces), removed


