"""The ctxfold exception tree.

::

    CtxfoldError
    ├── ConfigError                 invalid TOML, unknown key, wrong type, out-of-range value
    │   └── ConfigSyntaxError       TOML the migration lexer cannot read (carries ``line``)
    ├── PluginError                 unknown or duplicate strategy name, broken plugin, unknown
    │                               factory option
    ├── MessageError                a message (ctxfold or OpenAI format) is malformed: names
    │                               the message index and the field
    ├── SessionError                hostile/invalid session id, unknown session, bad operation
    │   └── ToolResultError         session:tool_result lookup or paging error
    ├── ImporterError               a transcript file cannot be imported (unknown format or
    │                               malformed content; names file, position and reason)
    ├── StoreError                  transcript unreadable or corrupt (names file and line)
    │   ├── AppendError             an append failed: ``landed`` False (not stored) or None
    │   └── SidecarError            sidecar unreadable, invalid or newer than this code
    │       └── SidecarVersionError sidecar written by a newer ctxfold (never discarded)
    ├── StaleContextError           a compare-and-swap install lost (something moved); the
    │                               engine handles it, it never reaches a caller
    ├── MaintenanceError            prepare()/compact() could not make the request fit
    │   ├── CompactionRequiredError above the hard ceiling and no checkpoint could be installed
    │   ├── SummaryFailedError      the summarizer returned empty or truncated output
    │   ├── SummarizerError         the summarizer itself failed (a plugin, or the host's
    │   │                           summarize callable raised)
    │   ├── SummaryCapError         a fold would pass ``[checkpoint] max_summaries_per_hour``
    │   └── PolicyFailedError       a replay policy could not build a request that fits
    ├── SmokeError                  a smoke-test step failed (assertion, cost cap, order)
    └── ProviderError               anything that went wrong talking to a provider
        ├── AuthenticationError     401/403
        ├── RateLimitError          429 after the retry budget
        ├── ContextLimitError       the request exceeded the provider's context window
        ├── ServerError             5xx after the retry budget
        ├── ProviderConnectionError could not connect, or the connection dropped
        ├── ProviderTimeoutError    no answer in time (incl. the stream duration ceiling)
        ├── ProviderResponseError   a response ctxfold cannot parse
        └── ProviderRequestError    any other 4xx: the provider rejected the request

Every message says what was wrong, where (file, key, session, line) and what to do. No
message ever contains an API key: a :class:`ProviderError` masks its message and ``body``
itself (by value: ``ctxfold.secrets``), whoever raises it; it also carries the HTTP
``status``, the provider's ``request_id`` and the start of the response ``body``."""

from __future__ import annotations

from ctxfold.secrets import redact_text


class CtxfoldError(Exception):
    """Root of every error ctxfold raises on purpose."""


class ConfigError(CtxfoldError):
    """A configuration file, environment variable or flag is invalid."""


class ConfigSyntaxError(ConfigError):
    """The text is not TOML the migration lexer understands (``line`` is 1-based)."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(f"{message} at line {line}")
        self.line = line


class PluginError(CtxfoldError):
    """A strategy name is unknown or registered twice, or a plugin is broken."""


class MessageError(CtxfoldError):
    """A message given to ctxfold (a :class:`~ctxfold.Message`, an OpenAI chat dict, an SDK
    message object) is malformed; the text names the message index and the field."""


class SessionError(CtxfoldError):
    """A session id is invalid, a session does not exist, or an operation is impossible."""


class ToolResultError(SessionError):
    """A ``session:tool_result`` request cannot be answered (unknown id, bad offset, ...)."""


class ImporterError(CtxfoldError):
    """A transcript file could not be imported: unknown format or malformed content."""


class StoreError(CtxfoldError):
    """A transcript file is unreadable or corrupt, or the store failed."""


class AppendError(StoreError):
    """An ``append()`` failed; ``landed``: ``False`` nothing of the batch was stored, ``None``
    unknown (then appending the same batch again lands it once: ``docs/stores.md``)."""

    def __init__(self, message: str, *, landed: bool | None) -> None:
        super().__init__(message)
        self.landed = landed


class SidecarError(StoreError):
    """A sidecar is unreadable, invalid, or written by a newer ctxfold."""


class SidecarVersionError(SidecarError):
    """A sidecar's ``schema_version`` is newer than this code knows: upgrade, never downgrade.

    Unlike other sidecar errors it is not repaired by discarding the file.
    """


class StaleContextError(CtxfoldError):
    """A compare-and-swap install lost: the transcript or projection moved during the
    operation. The engine catches it, re-reads the session and records a blocked receipt."""


class MaintenanceError(CtxfoldError):
    """Maintenance could not produce a request that fits."""


class CompactionRequiredError(MaintenanceError):
    """The request is at or above the hard ceiling and no checkpoint could be installed."""


class SummaryFailedError(MaintenanceError):
    """The summarizer returned empty or length-truncated output; nothing is installed."""


class SummarizerError(MaintenanceError):
    """The summarizer failed: a plugin raised, or the host's ``summarize`` callable raised or
    returned something that is not text; nothing is installed (a ``failed`` receipt)."""


class SummaryCapError(MaintenanceError):
    """A fold would spend more summaries in the last hour than ``[checkpoint]
    max_summaries_per_hour`` allows — the checkpoints thrash. Raised before the summarizer is
    asked: nothing was spent, and neither the transcript nor the checkpoint changed.
    ``session_id``, ``count`` (summaries installed in the last hour), ``limit`` and
    ``retry_after`` (seconds until the oldest of them is an hour old) say which."""

    def __init__(self, message: str, *, session_id: str, count: int, limit: int,
                 retry_after: float) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.count = count
        self.limit = limit
        self.retry_after = retry_after


class PolicyFailedError(MaintenanceError):
    """A replay policy could not build a request that fits the window (its run stops)."""


class SmokeError(CtxfoldError):
    """A smoke-test assertion failed, the cost cap was hit, or a step ran out of order."""


class ProviderError(CtxfoldError):
    """A provider request failed.

    ``status`` is the HTTP status (``None`` when no response arrived), ``request_id`` the
    provider's request id header (empty when unknown) and ``body`` the start of the response
    body with secrets masked (empty when there was none)."""

    retry_after: float | None = None  #: seconds the server asked to wait (Retry-After)

    def __init__(
        self, message: str, *, status: int | None = None, request_id: str = "", body: str = ""
    ) -> None:
        super().__init__(redact_text(message))
        self.status = status
        self.request_id = request_id
        self.body = redact_text(body) if body else body


class AuthenticationError(ProviderError):
    """The provider rejected the credentials (HTTP 401/403)."""


class RateLimitError(ProviderError):
    """The provider kept answering 429 after the retry budget was spent."""


class ContextLimitError(ProviderError):
    """The request exceeded the provider's context window.

    ``window``, ``prompt`` and ``completion`` are the token counts parsed from the provider's
    error body (0 when the body did not say).
    """

    def __init__(
        self,
        message: str,
        *,
        window: int = 0,
        prompt: int = 0,
        completion: int = 0,
        status: int | None = 400,
        request_id: str = "",
        body: str = "",
    ) -> None:
        super().__init__(message, status=status, request_id=request_id, body=body)
        self.window = window
        self.prompt = prompt
        self.completion = completion


class ServerError(ProviderError):
    """The provider failed with a 5xx status after the retry budget was spent."""


class ProviderConnectionError(ProviderError):
    """The connection could not be made or was dropped."""


class ProviderTimeoutError(ProviderError):
    """The provider did not answer in time, or a stream passed its total-duration ceiling."""


class ProviderResponseError(ProviderError):
    """The provider's response could not be parsed."""


class ProviderRequestError(ProviderError):
    """The provider rejected the request (a 4xx other than auth, rate limit or overflow)."""
