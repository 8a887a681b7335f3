"""When to retry a provider request and how long to wait (the anthropic/openai SDK rules).

Retryable: HTTP 408/409/429/5xx and connection errors. The wait is one pure function,
:func:`calculate_retry_timeout`: a server hint (``retry-after-ms``, ``Retry-After`` in seconds
or as an HTTP date) between 0 and :data:`MAX_RETRY_AFTER` seconds wins; otherwise jittered
exponential backoff. A server asking for a longer wait is not retried at all: a retry after a
short backoff would only be refused again, so the clients raise at once with a message naming
the requested wait (:func:`wait_beyond_cap`, ``exc.retry_after``).
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping

RETRYABLE_STATUSES = frozenset({408, 409, 429})
#: The longest server-requested pause ctxfold waits in-process; a longer one fails at once.
MAX_RETRY_AFTER = 60.0


def calculate_retry_timeout(
    attempt: int,
    headers: Mapping[str, str] | None = None,
    *,
    base: float = 0.5,
    cap: float = 8.0,
    jitter: float | None = None,
    now: float | None = None,
) -> float:
    """Seconds to wait before retry number ``attempt + 1`` (``attempt`` counts from 0).

    A server hint wins when it is between 0 and :data:`MAX_RETRY_AFTER` seconds:
    ``retry-after-ms`` (milliseconds), then ``Retry-After`` (seconds or an HTTP date, measured
    from ``now``, default the wall clock). Otherwise ``min(base × 2^attempt, cap)`` reduced by
    up to 25 % of jitter (``jitter`` in [0, 1); random when ``None``), so concurrent clients do
    not retry in lockstep.
    """
    hint = _retry_after(headers or {}, time.time() if now is None else now)
    if hint is not None and 0 < hint <= MAX_RETRY_AFTER:
        return hint
    delay = min(base * (2.0 ** min(attempt, 32)), cap)
    fraction = random.random() if jitter is None else jitter
    return max(delay * (1.0 - 0.25 * fraction), 0.0)


def wait_beyond_cap(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """The wait in seconds the server asked for when it exceeds :data:`MAX_RETRY_AFTER`
    (the request is then not retried), else ``None``."""
    hint = _retry_after(headers, time.time() if now is None else now)
    return hint if hint is not None and hint > MAX_RETRY_AFTER else None


def server_wait(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """The wait in seconds the server asked for (``retry-after-ms``, ``Retry-After``), if
    any; a refused request keeps it on ``exc.retry_after`` so a proxy can pass it on."""
    hint = _retry_after(headers, time.time() if now is None else now)
    return hint if hint is not None and hint > 0 else None


def _retry_after(headers: Mapping[str, str], now: float) -> float | None:
    lowered = {k.lower(): v for k, v in headers.items()}
    ms = lowered.get("retry-after-ms")
    if ms is not None:
        try:
            return float(ms) / 1000.0
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    parsed = email.utils.parsedate_tz(value)
    if parsed is None:
        return None
    return float(email.utils.mktime_tz(parsed)) - now
