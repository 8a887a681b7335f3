"""Built-in ``config_migration`` strategy ``legacy-multi-threshold`` (design §8.2).

The multi-threshold design had five ``[agent]`` keys besides ``compact_ratio``
(``soft_compact_ratio``, ``tool_result_snip_ratio``, ``compact_force_ratio``,
``cold_resume_prune``, ``context_editing``). ctxfold keeps exactly one automatic trigger, so
these keys still load without error but are zeroed in memory, and ``ctxfold config migrate``
deletes their lines from files (design §8.3).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ctxfold.kernel.compat import LEGACY_AGENT_KEYS
from ctxfold.kernel.config import AgentConfig
from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import StrategyContext, StrategySpec

NAME = "legacy-multi-threshold"
TABLE = "agent"


def _zero_values() -> dict[str, Any]:
    # The schema's defaults of the legacy fields are their "zeroed" values (0.0 / None / "").
    fields = attrs.fields_dict(AgentConfig)
    return {key: fields[key].default for key in LEGACY_AGENT_KEYS}


@attrs.frozen
class LegacyMultiThreshold:
    """Zeroes the retired ``[agent]`` keys of a raw config mapping."""

    name: str = NAME
    keys: tuple[str, tuple[str, ...]] = (TABLE, LEGACY_AGENT_KEYS)

    def normalize(self, raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """Return a copy of ``raw`` with every legacy key present set to its zero value,
        and the dotted names (``agent.soft_compact_ratio``) of the keys found.

        ``raw`` is not modified. Whatever the legacy value was (any type), it is accepted:
        old files must keep loading.
        """
        out = dict(raw)
        table = raw.get(TABLE)
        if not isinstance(table, Mapping):
            return out, []
        found = [key for key in LEGACY_AGENT_KEYS if key in table]
        if found:
            zeros = _zero_values()
            out[TABLE] = {**table, **{key: zeros[key] for key in found}}
        return out, [f"{TABLE}.{key}" for key in found]


def _factory(_context: StrategyContext) -> LegacyMultiThreshold:
    return LegacyMultiThreshold()


@hookimpl
def ctxfold_config_migrations() -> list[StrategySpec]:
    """Register ``legacy-multi-threshold``."""
    return [
        StrategySpec(
            name=NAME,
            factory=_factory,
            description="zero and remove the retired multi-threshold [agent] keys",
        )
    ]
