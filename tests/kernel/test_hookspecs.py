"""Every hook has a docstring contract; every strategy kind has exactly one hook."""

from __future__ import annotations

import inspect

import pytest

from ctxfold.kernel import contracts, hookspecs
from ctxfold.kernel.kinds import KINDS

HOOKS = [
    (name, fn) for name, fn in vars(hookspecs).items()
    if name.startswith("ctxfold_") and callable(fn)
]


def test_there_are_hooks() -> None:
    assert len(HOOKS) == len(KINDS) + 3  # one registration hook per kind, three observers


@pytest.mark.parametrize(("name", "fn"), HOOKS, ids=[name for name, _ in HOOKS])
def test_every_hook_documents_its_contract(name: str, fn: object) -> None:
    doc = inspect.getdoc(fn) or ""
    assert len(doc.split()) >= 12, f"{name} has no docstring contract"
    assert "called" in doc.lower(), f"{name} does not say how it is called"


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_each_registration_hook_names_the_protocol_and_options_of_its_kind(kind) -> None:
    doc = inspect.getdoc(getattr(hookspecs, kind.hook)) or ""
    assert f"contracts.{kind.protocol.__name__}`" in doc, (kind.hook, kind.protocol)
    assert f"kinds.{kind.options.__name__}`" in doc, (kind.hook, kind.options)
    assert getattr(contracts, kind.protocol.__name__) is kind.protocol


def test_the_table_of_kinds_is_the_set_of_registration_hooks() -> None:
    registration = {name for name, _ in HOOKS if name not in (
        "ctxfold_before_request", "ctxfold_after_install", "ctxfold_after_prepare")}
    assert registration == {kind.hook for kind in KINDS}
    assert len({kind.name for kind in KINDS}) == len(KINDS)


def test_every_protocol_method_is_documented() -> None:
    for kind in KINDS:
        for name, member in vars(kind.protocol).items():
            if callable(member) and not name.startswith("_") and kind.protocol is not \
                    contracts.Store:
                assert inspect.getdoc(member), f"{kind.protocol.__name__}.{name}"
