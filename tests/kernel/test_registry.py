"""Plugin manager and registry: selection by name, unknown and duplicate names, blocking."""

from __future__ import annotations

import pytest

from ctxfold import Config, EstimatorOptions, PluginError, Registry, StrategySpec, hookimpl
from ctxfold.kernel.kinds import ESTIMATOR
from ctxfold.kernel.plugin_manager import make_plugin_manager
from ctxfold.plugins import DEFAULT_PLUGINS


class _Counter:
    name = "fake"

    def estimate(self, shape):  # pragma: no cover - not called here
        return 0

    def calibrate(self, shape, usage):  # pragma: no cover - not called here
        return False

    def reset_calibration(self):  # pragma: no cover - not called here
        pass


def _estimator_plugin(name: str):
    class Plugin:
        @hookimpl
        def ctxfold_estimators(self):
            return [StrategySpec(name=name, factory=lambda ctx: _Counter())]

    return Plugin()


def test_builtins_are_registered_from_default_plugins() -> None:
    pm = make_plugin_manager(load_entry_points=False)
    names = {name for name, _plugin in pm.list_name_plugin()}
    assert set(DEFAULT_PLUGINS) <= names


def test_every_spec_records_its_source() -> None:
    registry = Registry.from_config(load_entry_points=False)
    specs = registry.specs()
    assert specs, "built-ins register strategies"
    for spec in specs:
        builtin = ("builtin:ctxfold.plugins.", "builtin:ctxfold.emulator.")
        assert spec.source.startswith(builtin), spec


def test_unknown_name_lists_available() -> None:
    registry = Registry(
        make_plugin_manager(load_entry_points=False, extra_plugins=[_estimator_plugin("alpha")])
    )
    with pytest.raises(PluginError) as err:
        registry.get("estimator", "nope")
    message = str(err.value)
    assert "'nope'" in message and "alpha" in message and "available" in message


def test_duplicate_name_names_both_sources() -> None:
    pm = make_plugin_manager(
        load_entry_points=False,
        extra_plugins=[_estimator_plugin("twin"), _estimator_plugin("twin")],
    )
    with pytest.raises(PluginError) as err:
        Registry(pm)
    assert "duplicate estimator name 'twin'" in str(err.value)
    assert str(err.value).count(" by ") >= 2


def test_disabled_plugins_are_blocked_by_short_or_full_name() -> None:
    some = DEFAULT_PLUGINS[0]
    short = some.removeprefix("ctxfold.plugins.")
    for name in (some, short):
        pm = make_plugin_manager([name], load_entry_points=False)
        assert pm.get_plugin(some) is None
        assert pm.is_blocked(some)


def test_create_calls_the_factory_with_context() -> None:
    seen = []

    class Plugin:
        @hookimpl
        def ctxfold_estimators(self):
            return [
                StrategySpec(
                    name="spy", factory=lambda ctx: seen.append(ctx) or _Counter()
                )
            ]

    registry = Registry.from_config(load_entry_points=False, extra_plugins=[Plugin()])
    options = EstimatorOptions(encoding="x")
    built = registry.create(ESTIMATOR, "spy", config=Config(), options=options)
    assert isinstance(built, _Counter)
    assert [ctx.options for ctx in seen] == [options]
    assert seen[0].registry is registry


def test_the_kind_comes_from_the_hook() -> None:
    """A descriptor need not repeat the kind its hook names: the registry fills it in."""
    class Plugin:
        @hookimpl
        def ctxfold_estimators(self):
            return [StrategySpec(name="plain", factory=lambda ctx: _Counter())]

    registry = Registry.from_config(load_entry_points=False, extra_plugins=[Plugin()])
    assert registry.get(ESTIMATOR, "plain").kind == "estimator"
    assert all(spec.kind == "estimator" for spec in registry.specs(ESTIMATOR))


def test_wrong_kind_from_a_hook_is_refused() -> None:
    class Plugin:
        @hookimpl
        def ctxfold_estimators(self):
            return [StrategySpec(kind="store", name="odd", factory=lambda ctx: None)]

    with pytest.raises(PluginError, match="registered store 'odd' from the estimator hook"):
        Registry.from_config(load_entry_points=False, extra_plugins=[Plugin()])


def test_every_hookspec_is_documented() -> None:
    from ctxfold.kernel import hookspecs

    hooks = [n for n in dir(hookspecs) if n.startswith("ctxfold_")]
    assert len(hooks) >= 12
    for name in hooks:
        doc = getattr(hookspecs, name).__doc__ or ""
        assert len(doc.strip()) > 20, f"hook {name} is undocumented"


class _Migration:
    keys = ("", ())

    def normalize(self, raw):  # pragma: no cover - not called here
        return raw


def _migration_plugin(name: str, **marks):
    class Plugin:
        @hookimpl(**marks)
        def ctxfold_config_migrations(self):
            return [StrategySpec(name=name,
                                 factory=lambda ctx: _Migration())]

    return Plugin()


def _migrations(*plugins) -> list[str]:
    registry = Registry.from_config(load_entry_points=False, extra_plugins=plugins)
    return [n for n in registry.in_call_order("config_migration") if n in ("aa", "zz")]


def test_strategies_come_in_pluggy_call_order() -> None:
    # pluggy calls the plugin registered last first; names are chosen against sorting.
    assert _migrations(_migration_plugin("zz"), _migration_plugin("aa")) == ["aa", "zz"]
    assert _migrations(_migration_plugin("aa"), _migration_plugin("zz")) == ["zz", "aa"]


def test_a_tryfirst_plugin_is_called_first() -> None:
    first = _migration_plugin("zz", tryfirst=True)
    assert _migrations(first, _migration_plugin("aa")) == ["zz", "aa"]
    from ctxfold.config.migrate import default_migrations

    registry = Registry.from_config(load_entry_points=False,
                                    extra_plugins=[first, _migration_plugin("aa")])
    assert [m for m in default_migrations(registry) if isinstance(m, _Migration)]
    assert registry.in_call_order("config_migration")[0] == "zz"


def test_a_wrapper_plugin_sees_and_changes_the_registered_strategies() -> None:
    seen = []

    class Wrapper:
        @hookimpl(wrapper=True)
        def ctxfold_estimators(self):
            groups = yield
            seen.extend(spec.name for group in groups for spec in group)
            kept = [[s for s in group if s.name != "alpha"] for group in groups]
            return [*kept, [StrategySpec(name="wrapped",
                                         factory=lambda ctx: _Counter())]]

    registry = Registry.from_config(
        load_entry_points=False, extra_plugins=[_estimator_plugin("alpha"), Wrapper()])
    assert "alpha" in seen and "heuristic" in seen
    assert "alpha" not in registry.names("estimator")
    assert "wrapped" in registry.names("estimator")
    assert "heuristic" in registry.names("estimator")
    assert registry.get("estimator", "heuristic").source.startswith("builtin:")


@pytest.mark.parametrize("extra", [{}, {"supports_native_compaction": False}],
                         ids=["plain", "with-retired-attribute"])
def test_a_provider_needs_only_what_the_protocol_documents(extra) -> None:
    from ctxfold import Provider

    def complete(self, request):  # pragma: no cover - not called here
        raise NotImplementedError

    attributes = {"name": "mine", "context_window": 1000, "cache_ttl_minutes": 5,
                  "complete": complete, **extra}
    cls = type("Mine", (), attributes)

    class Plugin:
        @hookimpl
        def ctxfold_providers(self):
            return [StrategySpec(name="mine", factory=lambda ctx: cls())]

    registry = Registry.from_config(load_entry_points=False, extra_plugins=[Plugin()])
    built = registry.create("provider", "mine", config=Config())
    assert isinstance(built, Provider) and type(built) is cls
