"""``ctxfold emulate --log-requests FILE``: one JSON line per request the emulator received
— its method, path, size in bytes, headers and body as the client sent them, with every
secret masked —
so what an agent (or ``ctxfold serve``) really puts on the wire can be read afterwards.

Masked: the values of credential headers (``Authorization``, ``api-key``, ``Cookie``, any
header whose name says key, token or secret), body values under secret-looking keys, and
anything in any string that looks like a key or carries URL credentials
(:mod:`ctxfold.secrets`). Lines are appended and flushed one by one, so a crash loses at most
the line being written.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ctxfold.kernel.errors import ConfigError
from ctxfold.secrets import MASK, is_secret_key, redact_text

#: Headers whose values are credentials whatever their name says.
_CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "api-key",
                                 "x-api-key", "cookie", "set-cookie"})
#: Body fields named like secrets that are not: wire fields every client sends.
_NOT_SECRET = frozenset({"prompt_cache_key", "max_tokens", "max_completion_tokens",
                         "max_output_tokens", "top_logprobs"})


def mask_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` with credential values replaced by ``***``."""
    out: dict[str, str] = {}
    for name, value in headers.items():
        low = name.lower()
        secret = low in _CREDENTIAL_HEADERS or is_secret_key(low.replace("-", "_"))
        out[name] = MASK if secret else redact_text(value)
    return out


def mask_body(value: Any, key: str = "") -> Any:
    """A JSON value with secrets masked (see the module docstring)."""
    if key and key not in _NOT_SECRET and is_secret_key(key) and isinstance(value, str) \
            and value:
        return MASK
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {k: mask_body(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_body(v) for v in value]
    return value


class RequestLog:
    """Appends the masked requests to ``path`` (created with its directory)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.touch()
        except OSError as exc:
            raise ConfigError(f"--log-requests {self.path}: cannot write there "
                              f"({exc.strerror}); choose a writable file") from None
        self._lock = threading.Lock()

    def write(self, *, index: int, method: str, path: str, status: int,
              headers: Mapping[str, str], raw: bytes) -> None:
        """Append one request (a body that is not JSON is logged as masked text)."""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        line = {"index": index, "method": method, "path": path, "status": status,
                "bytes": len(raw), "headers": mask_headers(headers), "body": mask_body(body)}
        text = json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n"
        with self._lock, self.path.open("a", encoding="utf-8") as out:
            out.write(text)
