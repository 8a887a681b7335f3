"""The configuration schema (design §8.1): frozen attrs classes, defaults included.

Loading (files, environment, flags) lives in :mod:`ctxfold.config.load`; this module only
says what a valid configuration is. Field metadata ``allowed`` is the human description of
valid values used in error messages. In ``[provider]``, an empty or zero value means "what
the selected provider declares" (its model, context window, cache TTL, base URL and key
variable), so naming a provider is enough to use it.
"""

from __future__ import annotations

import attrs

COMPACT_RATIO_MIN = 0.30
COMPACT_RATIO_MAX = 0.95
DEFAULT_COMPACT_RATIO = 0.80
EFFORTS = ("none", "low", "medium", "high", "max")
#: ``[checkpoint] check``: repair what a summary lost (default), also ask the summarizer
#: once more naming it, or install summaries unchecked.
CHECKS = ("repair", "second-pass", "off")
PINS_RATIO_MAX = 0.25
#: One summary a minute, sustained for an hour: above the most folds one rescue of a long
#: imported or forked transcript makes (32) and far above a session's ordinary pace, so only a
#: runaway loop of folds trips it.
DEFAULT_MAX_SUMMARIES_PER_HOUR = 60

def _ratio(_inst: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not COMPACT_RATIO_MIN <= value <= COMPACT_RATIO_MAX:
        raise ValueError(
            f"{attribute.name} = {value!r} is out of range; "
            f"allowed: {COMPACT_RATIO_MIN:.2f} to {COMPACT_RATIO_MAX:.2f}"
        )


def _non_negative(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} = {value!r} must be >= 0")


def _effort(_inst: object, attribute: attrs.Attribute[str], value: str) -> None:
    if value not in EFFORTS:
        raise ValueError(f"{attribute.name} = {value!r}; allowed: {', '.join(EFFORTS)}")


def _positive(_inst: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} = {value!r} must be > 0")


def _check(_inst: object, attribute: attrs.Attribute[str], value: str) -> None:
    if value not in CHECKS:
        raise ValueError(f"{attribute.name} = {value!r}; allowed: {', '.join(CHECKS)}")


def _pins_ratio(_inst: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not 0 < value <= PINS_RATIO_MAX:
        raise ValueError(f"{attribute.name} = {value!r} is out of range; allowed: above 0, "
                         f"at most {PINS_RATIO_MAX}")


def _http_url(_inst: object, attribute: attrs.Attribute[str], value: str) -> None:
    # The value is not echoed: a URL may carry credentials (user:password@host).
    if value and not value.startswith(("http://", "https://")):
        raise ValueError(
            f"{attribute.name} must be empty or start with http:// or https://"
        )


def _allowed(text: str) -> dict[str, str]:
    return {"allowed": text}


_NON_NEGATIVE = _allowed("an integer >= 0")
_SECONDS = _allowed("a number of seconds > 0")


@attrs.frozen
class AgentConfig:
    """``[agent]``: the single maintenance trigger and the output budget."""

    compact_ratio: float = attrs.field(
        default=DEFAULT_COMPACT_RATIO,
        validator=_ratio,
        metadata=_allowed(f"a number from {COMPACT_RATIO_MIN:.2f} to {COMPACT_RATIO_MAX:.2f}"),
    )
    max_output_tokens: int = attrs.field(
        default=0, validator=_non_negative, metadata=_allowed("an integer >= 0 (0 = auto)")
    )
    effort: str = attrs.field(
        default="high", validator=_effort, metadata=_allowed("one of " + ", ".join(EFFORTS))
    )
    # Legacy keys: accepted on load, always zero/empty in memory (ctxfold.kernel.compat).
    soft_compact_ratio: float = 0.0
    tool_result_snip_ratio: float = 0.0
    compact_force_ratio: float = 0.0
    cold_resume_prune: bool | None = None
    context_editing: str = ""


@attrs.frozen
class ProviderConfig:
    """``[provider]``: which provider plugin talks to which endpoint. Empty/zero values are
    filled in from what the selected provider declares (``ctxfold config show`` tells)."""

    name: str = ""
    model: str = attrs.field(default="", metadata=_allowed("a model id (empty = the provider's)"))
    base_url: str = attrs.field(
        default="", validator=_http_url, metadata=_allowed("empty or an http(s):// URL")
    )
    api_key_env: str = attrs.field(
        default="", metadata=_allowed("the NAME of an environment variable (not the key)")
    )
    context_window: int = attrs.field(
        default=0, validator=_non_negative,
        metadata=_allowed("an integer >= 0 (0 = the provider's window)"),
    )
    cache_ttl_minutes: int = attrs.field(
        default=0, validator=_non_negative,
        metadata=_allowed("an integer >= 0 (0 = the provider's TTL)"),
    )
    profile: str = ""
    timeout_seconds: float = attrs.field(
        default=600.0, validator=_positive, metadata=_allowed("a number of seconds > 0")
    )
    max_retries: int = attrs.field(default=2, validator=_non_negative, metadata=_NON_NEGATIVE)


@attrs.frozen
class EstimatorConfig:
    """``[estimator]``: the token estimator strategy."""

    name: str = ""


@attrs.frozen
class PrunerConfig:
    """``[pruner]``: the pressure pruner strategy."""

    name: str = ""


@attrs.frozen
class SummarizerConfig:
    """``[summarizer]``: the summarizer strategy (``model`` empty = the provider's model)."""

    name: str = ""
    model: str = ""


@attrs.frozen
class CheckpointConfig:
    """``[checkpoint]``: what a checkpoint carries besides head, summary and tail — the
    standing rules (explicit pins, and rules extracted from user messages) and the check of
    its summary against the fold region's probes — and how many summaries an hour may cost."""

    extract_rules: bool = True
    pins_ratio: float = attrs.field(
        default=0.03, validator=_pins_ratio,
        metadata=_allowed(f"a number above 0, at most {PINS_RATIO_MAX}"),
    )
    check: str = attrs.field(
        default="repair", validator=_check, metadata=_allowed("one of " + ", ".join(CHECKS))
    )
    #: The thrash guard's cap (ctxfold.kernel.maintenance): no summary is asked for that would make
    #: more than this many summary installs in the last hour; 0 turns the cap off.
    max_summaries_per_hour: int = attrs.field(
        default=DEFAULT_MAX_SUMMARIES_PER_HOUR, validator=_non_negative,
        metadata=_allowed("an integer >= 0 (0 = no cap)"),
    )


@attrs.frozen
class StoreConfig:
    """``[store]``: where transcripts and sidecars live."""

    name: str = ""
    path: str = ".ctxfold/sessions"
    sidecar_format: str = ""
    #: NAME of the environment variable holding a database store's DSN (``postgres``).
    dsn_env: str = ""
    #: A database store's waits, in seconds: to connect, and for one statement (docs/stores.md).
    connect_timeout_seconds: float = attrs.field(default=10.0, validator=_positive,
                                                 metadata=_SECONDS)
    statement_timeout_seconds: float = attrs.field(default=60.0, validator=_positive,
                                                   metadata=_SECONDS)


@attrs.frozen
class PluginsConfig:
    """``[plugins]``: plugin names to block (built-in module names or entry-point names)."""

    disabled: tuple[str, ...] = ()


@attrs.frozen
class Config:
    """The effective configuration."""

    agent: AgentConfig = attrs.field(factory=AgentConfig)
    provider: ProviderConfig = attrs.field(factory=ProviderConfig)
    estimator: EstimatorConfig = attrs.field(factory=EstimatorConfig)
    pruner: PrunerConfig = attrs.field(factory=PrunerConfig)
    summarizer: SummarizerConfig = attrs.field(factory=SummarizerConfig)
    checkpoint: CheckpointConfig = attrs.field(factory=CheckpointConfig)
    store: StoreConfig = attrs.field(factory=StoreConfig)
    plugins: PluginsConfig = attrs.field(factory=PluginsConfig)
