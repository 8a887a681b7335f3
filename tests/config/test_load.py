"""The config load pipeline: layers, precedence, strict validation, legacy keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest

from ctxfold import Config, ConfigError, LoadedConfig, Registry, StrategySpec, hookimpl, load_config
from ctxfold.config.load import validate_strategy_names
from ctxfold.kernel.compat import LEGACY_AGENT_KEYS
from ctxfold.kernel.plugin_manager import make_plugin_manager

DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    project = tmp_path / "project"
    home = tmp_path / "home"
    project.mkdir()
    home.mkdir()
    return {"project": project, "user": home / "config.toml", "home": home}


def _load(dirs: dict[str, Path], **kwargs: Any) -> LoadedConfig:
    kwargs.setdefault("env", {})
    return load_config(cwd=dirs["project"], user_config_path=dirs["user"], **kwargs)


def _error(dirs: dict[str, Path], **kwargs: Any) -> str:
    with pytest.raises(ConfigError) as info:
        _load(dirs, **kwargs)
    return str(info.value)


def test_defaults_when_nothing_is_configured(dirs: dict[str, Path]) -> None:
    loaded = _load(dirs)
    # Nothing configured = the schema's defaults, with what the default provider declares
    # filled into the [provider] values the schema leaves unset.
    assert loaded.config == Registry.from_config().resolve(Config())
    declared = {"provider.model", "provider.context_window", "provider.cache_ttl_minutes"}
    assert {loaded.sources[k] for k in declared} == {"provider default (emulator)"}
    # Strategy names left empty are the defaults the plugins declare (the kernel names none).
    named = {"provider.name", "estimator.name", "pruner.name", "summarizer.name", "store.name",
             "store.sidecar_format"}
    assert {k: loaded.sources[k] for k in named} == {
        "provider.name": "plugin default (builtin:ctxfold.emulator.plugin)",
        "estimator.name": "plugin default (builtin:ctxfold.plugins.estimators.deepseek)",
        "pruner.name": "plugin default (builtin:ctxfold.plugins.pruners.head_tail)",
        "summarizer.name": "plugin default (builtin:ctxfold.plugins.summarizers.llm)",
        "store.name": "plugin default (builtin:ctxfold.plugins.stores.fs)",
        "store.sidecar_format": "plugin default (builtin:ctxfold.plugins.sidecar_v3)",
    }
    assert (loaded.config.pruner.name, loaded.config.store.sidecar_format) == ("head-tail", "v3")
    assert {v for k, v in loaded.sources.items() if k not in declared | named} == {"default"}
    assert "agent.compact_ratio" in loaded.sources and "plugins.disabled" in loaded.sources
    assert loaded.notices == () and loaded.files == ()


def test_precedence_of_every_layer(dirs: dict[str, Path]) -> None:
    user, project = dirs["user"], dirs["project"] / "ctxfold.toml"
    user.write_text("[agent]\ncompact_ratio = 0.5\neffort = 'low'\nmax_output_tokens = 7\n"
                    "[store]\npath = 'u'\n")
    project.write_text("[agent]\ncompact_ratio = 0.6\neffort = 'max'\n[store]\npath = 'p'\n")
    env = {"CTXFOLD_AGENT_COMPACT_RATIO": "0.7", "CTXFOLD_STORE_PATH": "e"}
    loaded = _load(dirs, env=env, cli_overrides={"agent.compact_ratio": 0.9})
    cfg = loaded.config
    agent = cfg.agent
    assert (agent.compact_ratio, agent.effort, agent.max_output_tokens) == (0.9, "max", 7)
    assert cfg.store.path == "e"
    assert loaded.sources["agent.compact_ratio"] == "flag --compact-ratio"
    assert loaded.sources["store.path"] == "env CTXFOLD_STORE_PATH"
    assert loaded.sources["agent.effort"] == f"project file {project}"
    assert loaded.sources["agent.max_output_tokens"] == f"user file {user}"
    assert loaded.sources["provider.name"] == "plugin default (builtin:ctxfold.emulator.plugin)"
    assert loaded.files == (user, project)


def test_user_file_from_config_home_env(dirs: dict[str, Path]) -> None:
    dirs["user"].write_text("[provider]\nname = 'deepseek'\n")
    loaded = load_config(cwd=dirs["project"], env={"CTXFOLD_CONFIG_HOME": str(dirs["home"])})
    assert loaded.config.provider.name == "deepseek"
    assert loaded.sources["provider.name"] == f"user file {dirs['user']}"


def test_explicit_config_path_replaces_cwd_file_and_must_exist(dirs: dict[str, Path]) -> None:
    (dirs["project"] / "ctxfold.toml").write_text("[agent]\neffort = 'low'\n")
    (dirs["project"] / "alt.toml").write_text("[agent]\neffort = 'none'\n")
    loaded = _load(dirs, config_path="alt.toml")
    assert loaded.config.agent.effort == "none"
    assert loaded.files == (dirs["project"] / "alt.toml",)
    message = _error(dirs, config_path="missing.toml")
    assert "missing.toml" in message and "does not exist" in message


def test_env_values_are_parsed_by_field_type(dirs: dict[str, Path]) -> None:
    env = {
        "CTXFOLD_PROVIDER_CONTEXT_WINDOW": "65536",
        "CTXFOLD_PROVIDER_TIMEOUT_SECONDS": "30",
        "CTXFOLD_PROVIDER_NAME": "deepseek",
        "CTXFOLD_PLUGINS_DISABLED": "estimators.tiktoken, x",
        "CTXFOLD_CONFIG_HOME": "/ignored/not/a/setting",
        "CTXFOLD_SOMETHING_ELSE": "ignored",
        "HOME": "/x",
    }
    cfg = _load(dirs, env=env).config
    assert cfg.provider.context_window == 65536 and cfg.provider.timeout_seconds == 30.0
    assert cfg.provider.name == "deepseek"
    assert cfg.plugins.disabled == ("estimators.tiktoken", "x")
    env = {"CTXFOLD_PLUGINS_DISABLED": '["a", "b,c"]'}
    assert _load(dirs, env=env).config.plugins.disabled == ("a", "b,c")


def test_flag_strings_are_parsed_and_named(dirs: dict[str, Path]) -> None:
    loaded = _load(dirs, cli_overrides={"provider.name": "mimo", "agent.max_output_tokens": "5",
                                        "agent.effort": None},
                   flag_names={"provider.name": "--provider"})
    assert loaded.config.provider.name == "mimo" and loaded.config.agent.max_output_tokens == 5
    assert loaded.sources["provider.name"] == "flag --provider"
    assert loaded.sources["agent.effort"] == "default"
    message = _error(dirs, cli_overrides={"agent.compact_ratio": "high"})
    assert "flag --compact-ratio" in message and "'high'" in message
    assert "0.30 to 0.95" in message


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        ("[agent]\ncompact_ratio = 1.5\n",
         ["line 2", "agent.compact_ratio = 1.5", "out of range", "0.30 to 0.95"]),
        ("[agent]\ncompact_ratio = 0.29\n", ["agent.compact_ratio = 0.29", "0.30 to 0.95"]),
        ('[agent]\ncompact_ratio = "0.7"\n',
         ["agent.compact_ratio = '0.7'", "wrong type (str)", "a number from 0.30 to 0.95"]),
        ("[agent]\nmax_output_tokens = true\n",
         ["agent.max_output_tokens = True", "wrong type (bool)", "integer >= 0"]),
        ("[agent]\nmax_output_tokens = -1\n", ["agent.max_output_tokens = -1", ">= 0"]),
        ("[agent]\neffort = 'extreme'\n",
         ["agent.effort = 'extreme'", "none, low, medium, high, max"]),
        ("[agent]\ncompact_ratio = 0.8\nratio = 0.8\n",
         ["line 3", "unknown key agent.ratio = 0.8", "allowed keys in [agent]: compact_ratio, "
          "max_output_tokens, effort"]),
        ("[agents]\ncompact_ratio = 0.8\n",
         ["unknown table [agents]", "allowed tables: agent, provider"]),
        ("agent = 3\n", ["[agent] must be a table", "got 3"]),
        ("[plugins]\ndisabled = 'x'\n", ["plugins.disabled = 'x'", "a list of strings"]),
        ("[provider]\ntimeout_seconds = 0\n", ["provider.timeout_seconds = 0", "> 0"]),
        ("[checkpoint]\nmax_summaries_per_hour = -1\n",
         ["line 2", "checkpoint.max_summaries_per_hour = -1", ">= 0"]),
        ("[checkpoint]\nmax_summaries_per_hour = 2.5\n",
         ["checkpoint.max_summaries_per_hour = 2.5", "wrong type (float)",
          "an integer >= 0 (0 = no cap)"]),
        ("[store]\nconnect_timeout_seconds = 0\n", ["store.connect_timeout_seconds = 0", "> 0"]),
        ("[store]\nstatement_timeout_seconds = nan\n",
         ["store.statement_timeout_seconds = nan", "> 0"]),
        ("[agent]\ncompact_ratio = \n", ["invalid TOML", "line 2, column"]),
        ("[provider]\ncontext_window = 1" + "0" * 4999 + "\n", ["invalid TOML value"]),
        ("[provider]\nmodel = " + "[" * 2000 + "]" * 2000 + "\n", ["nested too deeply"]),
    ],
)
def test_invalid_file_values_name_file_key_value_and_allowed(
    dirs: dict[str, Path], text: str, needles: list[str]
) -> None:
    path = dirs["project"] / "ctxfold.toml"
    path.write_text(text)
    message = _error(dirs)
    assert f"project file {path}" in message
    for needle in needles:
        assert needle in message


def test_the_summary_cap_loads_from_a_file_and_the_environment(dirs: dict[str, Path]) -> None:
    assert _load(dirs).config.checkpoint.max_summaries_per_hour == 60
    (dirs["project"] / "ctxfold.toml").write_text("[checkpoint]\nmax_summaries_per_hour = 0\n")
    assert _load(dirs).config.checkpoint.max_summaries_per_hour == 0  # 0: no cap
    env = {"CTXFOLD_CHECKPOINT_MAX_SUMMARIES_PER_HOUR": "12"}
    assert _load(dirs, env=env).config.checkpoint.max_summaries_per_hour == 12
    message = _error(dirs, env={"CTXFOLD_CHECKPOINT_MAX_SUMMARIES_PER_HOUR": "lots"})
    assert "checkpoint.max_summaries_per_hour" in message and "integer >= 0" in message


def test_all_problems_of_a_file_in_one_error(dirs: dict[str, Path]) -> None:
    dirs["user"].write_text("[agent]\ncompact_ratio = 'x'\nbogus = 1\n[nope]\n")
    message = _error(dirs)
    assert message.startswith("3 configuration problems")
    assert f"user file {dirs['user']} line 2: agent.compact_ratio" in message
    assert "unknown key agent.bogus" in message and "unknown table [nope]" in message


def test_env_errors_name_the_variable_and_hide_unknown_values(dirs: dict[str, Path]) -> None:
    message = _error(dirs, env={"CTXFOLD_AGENT_COMPACT_RATIO": "0.2"})
    assert message.startswith("env CTXFOLD_AGENT_COMPACT_RATIO: agent.compact_ratio = 0.2")
    message = _error(dirs, env={"CTXFOLD_PROVIDER_API_KEY": "sk-live-SECRET"})
    assert "CTXFOLD_PROVIDER_API_KEY" in message and "CTXFOLD_PROVIDER_API_KEY_ENV" in message
    assert "SECRET" not in message
    message = _error(dirs, env={"CTXFOLD_PROVIDER_CONTEXT_WINDOW": "1.5k"})
    assert "env CTXFOLD_PROVIDER_CONTEXT_WINDOW" in message and "'1.5k'" in message


def test_url_credentials_never_appear_in_errors(dirs: dict[str, Path]) -> None:
    (dirs["project"] / "ctxfold.toml").write_text(
        "[provider]\nbase_url = 'ftp://bob:hunter2@example.com'\n")
    message = _error(dirs)
    assert "provider.base_url" in message and "http" in message
    assert "hunter2" not in message


def test_legacy_keys_load_zeroed_with_exactly_one_notice(dirs: dict[str, Path]) -> None:
    project = dirs["project"] / "ctxfold.toml"
    dirs["user"].write_text("[agent]\nsoft_compact_ratio = 0.5\ncold_resume_prune = 'on'\n")
    project.write_text("agent.context_editing = 7\n[provider]\nname = 'deepseek'\n")
    env = {"CTXFOLD_AGENT_COMPACT_FORCE_RATIO": "not even a number"}
    loaded = _load(dirs, env=env)
    agent = loaded.config.agent
    assert (agent.soft_compact_ratio, agent.compact_force_ratio) == (0.0, 0.0)
    assert (agent.cold_resume_prune, agent.context_editing) == (None, "")
    assert len(loaded.notices) == 1
    notice = loaded.notices[0]
    assert f"ctxfold config migrate {dirs['user']}" in notice
    assert f"ctxfold config migrate {project}" in notice
    assert "CTXFOLD_AGENT_COMPACT_FORCE_RATIO" in notice
    for key in ("soft_compact_ratio", "cold_resume_prune", "context_editing"):
        assert f"agent.{key}" in notice


def test_legacy_handling_goes_through_the_strategy_family(dirs: dict[str, Path]) -> None:
    (dirs["project"] / "ctxfold.toml").write_text("[agent]\nsoft_compact_ratio = 0.5\n")
    without = Registry(make_plugin_manager(["legacy_config"], load_entry_points=False))
    message = _error(dirs, registry=without)
    assert "unknown key agent.soft_compact_ratio" in message
    assert all(k not in message.split("allowed keys")[1] for k in LEGACY_AGENT_KEYS)


class _FakeStrategies:
    @hookimpl
    def ctxfold_providers(self) -> list[StrategySpec]:
        return [StrategySpec(name="fake", factory=lambda c: None)]

    @hookimpl
    def ctxfold_stores(self) -> list[StrategySpec]:
        return [StrategySpec(name="fs-fake", factory=lambda c: None)]


def test_unknown_strategy_names_list_the_available_ones(dirs: dict[str, Path]) -> None:
    registry = Registry(make_plugin_manager(load_entry_points=False,
                                            extra_plugins=[_FakeStrategies()]))
    path = dirs["project"] / "ctxfold.toml"
    path.write_text("[provider]\nname = 'nope'\n[store]\nname = 'nope-store'\n")
    message = _error(dirs, registry=registry)
    assert f"project file {path}: provider.name = 'nope' is not a registered provider" in message
    assert "available: " in message and "fake" in message
    assert "store.name = 'nope-store'" in message and "fs-fake" in message
    # A separate call gives the same check for configs loaded without a registry.
    loaded = _load(dirs)
    with pytest.raises(ConfigError, match=r"provider\.name = 'nope'"):
        validate_strategy_names(loaded, registry)


def test_bom_and_crlf_files_load(dirs: dict[str, Path]) -> None:
    (dirs["project"] / "ctxfold.toml").write_bytes(
        b"\xef\xbb\xbf[agent]\r\ncompact_ratio = 0.75\r\n")
    assert _load(dirs).config.agent.compact_ratio == 0.75


def test_every_key_is_documented() -> None:
    if not DOCS.is_file():
        pytest.fail(f"{DOCS} is missing")
    text = DOCS.read_text()
    for section in attrs.fields(Config):
        assert f"[{section.name}]" in text
        for field in attrs.fields(section.type):  # type: ignore[arg-type]
            assert f"`{field.name}`" in text, f"{section.name}.{field.name} is not documented"


def test_disabling_a_kinds_default_plugin_says_so(dirs: dict[str, Path]) -> None:
    disabled = make_plugin_manager(["estimators.deepseek"], load_entry_points=False)
    with pytest.raises(ConfigError, match=r"estimator\.name is empty and no registered "
                                          r"estimator declares itself the default \(was it "
                                          r"disabled"):
        _load(dirs, registry=Registry(disabled))


# -- one config problem, one message (issue: the documented path is the real path) -----------


def test_an_unknown_provider_is_one_problem_not_one_per_kind(dirs: dict[str, Path]) -> None:
    (dirs["project"] / "ctxfold.toml").write_text('[provider]\nname = "nope"\n')
    loaded = _load(dirs)
    assert (loaded.config.estimator.name, loaded.config.store.name) == ("deepseek", "fs")
    with pytest.raises(ConfigError) as info:
        validate_strategy_names(loaded, Registry.from_config())
    message = str(info.value)
    assert "provider.name = 'nope' is not a registered provider" in message
    assert "configuration problems" not in message and "is empty" not in message
    message = _error(dirs, registry=Registry.from_config())
    assert message.count("\n") == 0 and "'nope'" in message


def test_an_unknown_key_hides_no_other_problem_of_its_file(dirs: dict[str, Path]) -> None:
    path = dirs["project"] / "ctxfold.toml"
    path.write_text('[agent]\ncompact_ratio = 1.5\nbogus = 1\n[store]\nwhat = 2\npath = 3\n'
                    '[nosuch]\nx = 1\n')
    message = _error(dirs)
    assert message.startswith("5 configuration problems:")
    lines = message.splitlines()[1:]
    for line, expected in zip(lines, (
            "line 2: agent.compact_ratio = 1.5 is out of range",
            "line 3: unknown key agent.bogus", "line 5: unknown key store.what",
            "line 6: store.path = 3 has the wrong type", "line 8: unknown table [nosuch]"),
            strict=True):
        assert f"project file {path} {expected}" in line


def test_the_estimator_follows_the_provider_unless_named(dirs: dict[str, Path]) -> None:
    path = dirs["project"] / "ctxfold.toml"
    path.write_text('[provider]\nname = "responses"\n')
    loaded = _load(dirs)
    assert loaded.config.estimator.name == "tiktoken"
    assert loaded.sources["estimator.name"] == "provider default (responses)"
    path.write_text('[provider]\nname = "emulator"\nprofile = "responses"\n')
    assert _load(dirs).config.estimator.name == "tiktoken"
    path.write_text('[provider]\nname = "responses"\n[estimator]\nname = "heuristic"\n')
    assert _load(dirs).config.estimator.name == "heuristic"  # an explicit name wins
    path.write_text('[provider]\nname = "deepseek"\n')
    assert _load(dirs).config.estimator.name == "deepseek"
