"""Keeping secrets out of every text ctxfold writes (SPEC invariant 12).

One module for both kinds of masking: configuration values (which keys hold secrets, how
``ctxfold config show`` prints them) and free text that may echo a credential (error
messages, provider error bodies, log lines): API keys, key-like tokens, URL userinfo and
secret-looking query parameters.
"""

from __future__ import annotations

import re
from typing import Any

_SECRET_WORDS = ("key", "token", "secret", "password", "passwd", "credential")
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")
MASK = "***"


def is_secret_key(name: str) -> bool:
    """Whether values of key ``name`` are secret (``*key*``, ``*token*``, ``*secret*``, ...).

    ``*_env`` keys hold an environment variable NAME and ``*_tokens`` keys hold a token
    count, so neither is secret (``api_key_env``, ``max_output_tokens``).
    """
    low = name.rsplit(".", 1)[-1].lower()
    if low.endswith(("_env", "_tokens")):
        return False
    return any(word in low for word in _SECRET_WORDS)


_QUERY_SECRET = re.compile(r"(?P<name>[?&;][^=&;#\s]*=)(?P<value>[^&;#\s]*)")


def mask_url_credentials(text: str) -> str:
    """Replace ``user:password@`` in URLs inside ``text`` with ``***@``, and the value of
    any query parameter whose name looks secret (``?api_key=…``, ``&token=…``)."""
    text = _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{MASK}@", text)

    def query(m: re.Match[str]) -> str:
        name = m["name"][1:-1]
        return f"{m['name']}{MASK}" if is_secret_key(name) else m.group(0)

    return _QUERY_SECRET.sub(query, text)


# Keys echoed back by providers ("Incorrect API key provided: sk-ab***yz") are masked too.
_KEYLIKE = re.compile(r"\b(sk|tp|key)-[A-Za-z0-9_*\-]{4,}")


def redact_text(text: str, secret: str | None = None) -> str:
    """``text`` with ``secret``, anything that looks like an API key, URL credentials and
    secret query parameters masked."""
    if secret:
        text = text.replace(secret, MASK)
    text = _KEYLIKE.sub(lambda m: m.group(1) + "-" + MASK, text)
    return mask_url_credentials(text)


#: What an ``*_env`` setting must hold: the name of an environment variable.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def holds_a_secret_not_a_name(key: str, value: Any) -> bool:
    """Whether an ``*_env`` setting holds something other than a variable name — most likely
    the key itself, pasted where its variable's name belongs."""
    low = key.rsplit(".", 1)[-1].lower()
    return (low.endswith("_env") and isinstance(value, str) and value != ""
            and not ENV_NAME.fullmatch(value))


def redact_value(key: str, value: Any) -> Any:
    """A config ``value`` of ``key`` made safe to print: secrets masked (an ``*_env`` setting
    that holds a key instead of a variable name too), URL credentials removed."""
    if (is_secret_key(key) and value not in ("", None, ())) or holds_a_secret_not_a_name(
            key, value):
        return MASK
    if isinstance(value, str):
        return mask_url_credentials(value)
    if isinstance(value, tuple | list):
        return type(value)(redact_value(key, v) for v in value)
    return value


def show_value(key: str, value: Any) -> str:
    """``repr`` of a redacted config value, at most 80 characters."""
    text = repr(redact_value(key, value))
    return text if len(text) <= 80 else text[:77] + "..."
