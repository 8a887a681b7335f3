"""Keeping secrets out of every text ctxfold writes (design §1.5).

One module for both kinds of masking: configuration values (which keys hold secrets, how
``ctxfold config show`` prints them) and free text that may echo a credential (error
messages, provider error bodies, log lines): API keys, key-like tokens, URL userinfo and
secret-looking query parameters.

**Keys are masked by value, not by shape.** Every key ctxfold sends (the configured provider
key, a client's key ``ctxfold serve`` forwards, the proxy key) is remembered for the life of
the process (:func:`remember_secret`, the :data:`REMEMBERED_MAX` most recent), and
:func:`redact_text` masks each of them whatever its format. The rule (:func:`mask_secret`):
a key of at least :data:`SUBSTRING_MIN` characters is replaced wherever it occurs (no word
contains a random 16-character string by chance, and a key glued to other text is still
the key); a shorter key is replaced only where it stands alone — not inside a longer run of
letters, digits, ``_`` or ``-`` — so a short key such as ``tok`` never turns ``tokens`` into
``***ens``. Its JSON-escaped form is masked too. Only the key is replaced, by ``***``.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
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


#: Keys this long or longer are masked wherever they occur; shorter ones only standing alone.
SUBSTRING_MIN = 16
#: How many keys are remembered (a proxy forwarding many clients' keys keeps the newest).
REMEMBERED_MAX = 64
_REMEMBERED: OrderedDict[str, None] = OrderedDict()
_LOCK = threading.Lock()
_WORD = "A-Za-z0-9_\\-"


def remember_secret(value: str | None) -> None:
    """Mask ``value`` in every text :func:`redact_text` masks from now on (a key that is
    about to be sent, read or forwarded)."""
    if not value or not value.strip():
        return
    with _LOCK:
        _REMEMBERED[value] = None
        _REMEMBERED.move_to_end(value)
        while len(_REMEMBERED) > REMEMBERED_MAX:
            _REMEMBERED.popitem(last=False)


def remembered_secrets() -> tuple[str, ...]:
    """The keys :func:`redact_text` masks, newest last."""
    with _LOCK:
        return tuple(_REMEMBERED)


def forget_secrets() -> None:
    """Forget every remembered key (tests)."""
    with _LOCK:
        _REMEMBERED.clear()


def mask_secret(text: str, secret: str) -> str:
    """``text`` with ``secret`` replaced by ``***`` by the rule in the module docstring."""
    forms = {secret, secret.strip(), json.dumps(secret)[1:-1]} - {""}
    for form in sorted(forms, key=len, reverse=True):
        if form not in text:
            continue
        if len(form) >= SUBSTRING_MIN:
            text = text.replace(form, MASK)
        else:
            text = re.sub(f"(?<![{_WORD}]){re.escape(form)}(?![{_WORD}])", MASK, text)
    return text


def redact_text(text: str, secret: str | None = None) -> str:
    """``text`` with ``secret`` and every remembered key masked (by value), then anything
    that looks like an API key, URL credentials and secret query parameters."""
    for known in (secret, *remembered_secrets()):
        if known:
            text = mask_secret(text, known)
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
