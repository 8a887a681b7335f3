"""The public API is what ``import ctxfold`` exports: pinned, importable, and what the docs use."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import ctxfold

REPO = Path(__file__).resolve().parents[1]

PUBLIC = {
    "__version__",
    # the engine
    "ContextManager", "open_session", "create_provider", "PreparedRequest", "ResumeResult",
    "UsageObservation", "SessionWarning",
    # configuration
    "load_config", "LoadedConfig", "Config",
    # replaying recorded sessions; the loopback emulator (tests, demos); the store extensions
    "replay_paths", "ReplaySettings", "Emulator", "EmulatorOptions", "Fault", "ReplySpec",
    "CountStore", "PrefixStore", "Transcript", "LazyLines",
    # value types
    "Message", "ToolCall", "ToolSchema", "Usage", "ChatRequest", "ChatResponse",
    "SummaryRequest", "SummaryResult", "Projection", "Receipt", "Action", "CacheState",
    "SidecarState",
    "ForkPoint",
    "RequestShape", "TextStats", "SseEvent", "ImportedSession", "PolicyRequest", "SummaryCall",
    "Appended",
    # writing plugins
    "hookimpl", "Registry", "StrategySpec", "StrategyContext", "NoOptions", "EstimatorOptions",
    "StoreOptions", "ProviderOptions", "SummarizerOptions", "ImporterOptions", "PolicyOptions",
    "Estimator", "IncrementalEstimator", "Pruner", "Summarizer", "AsyncSummarizer", "Store",
    "SidecarCodec", "ProviderDefaults", "Provider", "AsyncProvider", "StreamAssembler",
    "ForkPoints",
    "Translator", "ConfigMigration",
    "Importer", "Policy", "TokenizerEstimator", "SessionBuilder", "import_session",
    "HttpProvider", "build_http_provider", "ChatCompletionsTranslator",
    # the host tool the model pages bounded tool results with
    "USE_CAPABILITY_TOOL",
    # OpenAI chat interop
    "message_from_openai", "message_to_openai", "to_openai", "to_responses",
    # the error tree
    "CtxfoldError", "ConfigError", "ConfigSyntaxError", "PluginError", "MessageError",
    "SessionError", "ToolResultError", "ImporterError", "StoreError", "AppendError",
    "SidecarError",
    "SidecarVersionError", "StaleContextError", "MaintenanceError",
    "CompactionRequiredError", "SummaryFailedError", "SummarizerError", "SummaryCapError",
    "PolicyFailedError",
    "SmokeError",
    "ProviderError", "AuthenticationError", "RateLimitError", "ContextLimitError",
    "ServerError", "ProviderConnectionError", "ProviderTimeoutError",
    "ProviderResponseError", "ProviderRequestError",
}


def test_all_is_pinned() -> None:
    assert set(ctxfold.__all__) == PUBLIC


def test_every_exported_name_resolves() -> None:
    for name in ctxfold.__all__:
        assert getattr(ctxfold, name) is not None, name


def test_every_exception_is_under_the_root() -> None:
    for name in ctxfold.__all__:
        value = getattr(ctxfold, name)
        if isinstance(value, type) and issubclass(value, BaseException) and not issubclass(
                value, Warning):  # warnings are not raised: a host filters them by category
            assert issubclass(value, ctxfold.CtxfoldError), name


def test_every_exception_ctxfold_defines_is_under_the_root() -> None:
    import importlib
    import inspect
    import pkgutil

    from ctxfold.plugins.policies.peers import PEERS

    optional = {m for _mod, _cls, requires, _d in PEERS.values() for m in requires} | {"openai"}
    seen = []
    for info in pkgutil.walk_packages(ctxfold.__path__, "ctxfold."):
        try:
            module = importlib.import_module(info.name)
        except ModuleNotFoundError as exc:  # a peer policy whose library is not installed
            assert (exc.name or "").split(".")[0] in optional, exc
            continue
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == info.name and issubclass(cls, Exception) and not issubclass(
                    cls, Warning):
                seen.append(cls)
                assert issubclass(cls, ctxfold.CtxfoldError), cls
    assert len(seen) > 20


def test_importing_ctxfold_stays_light() -> None:
    code = ("import sys, ctxfold; from ctxfold import ContextManager, open_session, "
            "load_config; import ctxfold.serve; heavy = [m for m in ('httpx', 'tokenizers', "
            "'tiktoken', 'rich', 'starlette', 'uvicorn') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_readme_docs_and_examples_teach_only_the_public_api() -> None:
    texts = [REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "examples").glob("*.py")]
    # Everything a reader is taught comes from ``import ctxfold`` (the pytest plugin is enabled
    # by its module name, ``ctxfold.testing``): no deep import, and no deep call in the prose.
    deep = re.compile(r"(?:from|import) ctxfold\.(?!testing\b)[\w.]+"
                      r"|ctxfold\.[a-z_]+\.[\w.]+\(")
    offenders = [f"{p.name}: {m.group(0)}" for p in texts for m in deep.finditer(p.read_text())
                 if p.name not in ("architecture.md", "changelog.md")]
    assert offenders == []


def test_every_example_is_explained_in_the_integrations_page() -> None:
    page = (REPO / "docs" / "integrations.md").read_text()
    examples = sorted(p.name for p in (REPO / "examples").glob("[!_]*.py"))
    assert len(examples) >= 6
    assert [name for name in examples if f"examples/{name}" not in page] == []


def test_the_readme_lists_every_command_and_every_doc() -> None:
    """README's command table and doc list omitted `serve` (and docs/serve.md)."""
    from ctxfold.cli.main import build_parser

    readme = (REPO / "README.md").read_text()
    table = readme[readme.index("## Commands"):readme.index("## Documentation")]
    listed = readme[readme.index("## Documentation"):]
    choices = next(a for a in build_parser()._actions if a.dest == "command").choices
    commands = {parser.prog.split()[-1] for parser in choices.values()}  # aliases left out
    assert sorted(c for c in commands if f"`ctxfold {c}" not in table) == []
    docs = sorted(p.name for p in (REPO / "docs").glob("*.md") if p.name != "changelog.md")
    assert [d for d in docs if f"docs/{d}" not in listed] == []
    page = (REPO / "docs" / "integrations.md").read_text()
    assert "not yet released" not in page and "ctxfold serve" in page
