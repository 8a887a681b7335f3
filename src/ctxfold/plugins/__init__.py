"""Built-in plugins. They use exactly the hooks third parties use.

``DEFAULT_PLUGINS`` lists the modules the plugin manager registers, in order. Each module
implements one or more registration hooks of :mod:`ctxfold.kernel.hookspecs`.
"""

DEFAULT_PLUGINS: tuple[str, ...] = (
    # one line per built-in plugin module
    "ctxfold.plugins.estimators.heuristic",
    "ctxfold.plugins.estimators.tiktoken",
    "ctxfold.plugins.estimators.deepseek",
    "ctxfold.plugins.pruners.head_tail",
    "ctxfold.plugins.summarizers.extractive",
    "ctxfold.plugins.summarizers.llm",
    "ctxfold.plugins.legacy_config",
    "ctxfold.plugins.providers.deepseek",
    "ctxfold.plugins.providers.mimo",
    "ctxfold.plugins.providers.responses",
    "ctxfold.plugins.providers.anthropic",
    "ctxfold.emulator.plugin",
    "ctxfold.plugins.importers.openai",
    "ctxfold.plugins.importers.mini_swe_agent_v1",
    "ctxfold.plugins.importers.mini_swe_agent_v2",
    "ctxfold.plugins.importers.swe_agent",
    "ctxfold.plugins.importers.openhands_v1",
    "ctxfold.plugins.importers.openhands_sdk_log",
    "ctxfold.plugins.importers.claude_code_jsonl",
    "ctxfold.plugins.importers.claude_code_xml",
    "ctxfold.plugins.stores.fs",
    "ctxfold.plugins.stores.postgres",
    "ctxfold.plugins.sidecar_v3",
    "ctxfold.plugins.policies.ctxfold_engine",
    "ctxfold.plugins.policies.append_only",
    "ctxfold.plugins.policies.truncate_oldest",
    "ctxfold.plugins.policies.codex_like",
    "ctxfold.plugins.policies.opencode_like",
    "ctxfold.plugins.policies.openhands_like",
    "ctxfold.plugins.policies.masking",
    "ctxfold.plugins.policies.peers",
)
