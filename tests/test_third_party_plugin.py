"""A real third-party estimator plugin, built as its own distribution and selected by TOML."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PLUGIN_MODULE = '''
"""A third-party estimator: one token per character of every visible text field."""

from ctxfold import StrategySpec, hookimpl
from ctxfold.engine.opening import open_session


class CharCount:
    name = "charcount"

    def estimate(self, shape):
        total = 0
        for m in shape.messages:
            total += len(m.content) + len(m.reasoning_content or "")
            total += sum(len(c.name) + len(c.arguments) for c in m.tool_calls)
        return total

    def calibrate(self, shape, usage):
        return False

    def reset_calibration(self):
        pass


@hookimpl
def ctxfold_estimators():
    return [StrategySpec(name="charcount", factory=lambda ctx: CharCount(),
                         description="one token per character")]
'''


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("plugin-src")
    (src / "ctxfold_charcount.py").write_text(PLUGIN_MODULE)
    (src / "pyproject.toml").write_text(
        textwrap.dedent(
            """
            [build-system]
            requires = ["setuptools>=61"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "ctxfold-charcount"
            version = "1.2.3"

            [tool.setuptools]
            py-modules = ["ctxfold_charcount"]

            [project.entry-points.ctxfold]
            charcount = "ctxfold_charcount"
            """
        )
    )
    site = tmp_path_factory.mktemp("plugin-site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
         "--no-build-isolation", "--target", str(site), str(src)],
        check=True,
        capture_output=True,
    )
    assert list(site.glob("ctxfold_charcount-1.2.3.dist-info"))
    return site


def _write_config(tmp_path: Path, disabled: list[str] | None = None) -> Path:
    config = tmp_path / "ctxfold.toml"
    config.write_text(
        textwrap.dedent(
            f"""
            [estimator]
            name = "charcount"

            [summarizer]
            name = "extractive"

            [store]
            path = "{(tmp_path / "sessions").as_posix()}"

            [plugins]
            disabled = {json.dumps(disabled or [])}
            """
        )
    )
    return config


def test_selected_purely_through_toml(
    plugin_site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ctxfold import Message, Registry, load_config, open_session

    monkeypatch.syspath_prepend(str(plugin_site))
    loaded = load_config(config_path=_write_config(tmp_path), cwd=tmp_path, env={})
    registry = Registry.from_config(loaded.config)
    spec = registry.get("estimator", "charcount")
    assert "ctxfold-charcount 1.2.3" in spec.source

    cm = open_session("third-party", config=loaded.config, registry=registry)
    cm.append(Message(role="user", content="x" * 37), Message(role="assistant", content="ok"))
    assert type(cm.estimator).__name__ == "CharCount"
    assert cm.prepare().tokens == 39


def test_disabled_by_entry_point_name(
    plugin_site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ctxfold import PluginError, Registry, load_config

    monkeypatch.syspath_prepend(str(plugin_site))
    loaded = load_config(
        config_path=_write_config(tmp_path, ["charcount"]), cwd=tmp_path, env={}
    )
    registry = Registry.from_config(loaded.config)
    with pytest.raises(PluginError, match="unknown estimator 'charcount'"):
        registry.get("estimator", "charcount")


def test_plugins_command_lists_it(plugin_site: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(plugin_site), "CTXFOLD_CONFIG_HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "ctxfold.cli.main", "plugins", "--json"],
        check=True, capture_output=True, text=True, env=env, cwd=tmp_path,
    ).stdout
    rows = json.loads(out)
    mine = [r for r in rows if r["name"] == "charcount"]
    assert mine and mine[0]["kind"] == "estimator"
    assert "ctxfold-charcount" in mine[0]["source"]
    kinds = {(r["kind"], r["name"]) for r in rows}
    assert ("store", "fs") in kinds and ("sidecar_format", "v3") in kinds
    assert {("estimator", n) for n in ("heuristic", "tiktoken", "deepseek")} <= kinds
