"""Locating a data file shipped inside an installed distribution, with clear errors."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from ctxfold.kernel.errors import PluginError


def bundled_file(estimator: str, distribution: str, relative: str, install_hint: str) -> Path:
    """Path of ``relative`` inside the installed ``distribution``; a :class:`PluginError`
    naming the estimator and what to install when it is missing. Never downloads."""
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        raise PluginError(
            f"estimator {estimator!r} needs the {distribution!r} distribution, which is not "
            f"installed; {install_hint}"
        ) from None
    path = Path(str(dist.locate_file(relative)))
    if not path.is_file():
        raise PluginError(
            f"estimator {estimator!r}: {path} is missing from the {distribution!r} "
            f"installation; reinstall it (`pip install --force-reinstall {distribution}`)"
        )
    return path
