"""README.md's "Use it in an agent" snippet runs as written (``.ci/readme_snippet.py``): at a
16K window, 30 turns, at least two checkpoints, a ``use_capability`` call answered, the
session listed by the CLI. CI also runs it from a fresh ``pip install .``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import ctxfold

SCRIPT = Path(__file__).resolve().parents[1] / ".ci" / "readme_snippet.py"


def test_the_readme_snippet_runs_as_written_at_a_16k_window(tmp_path: Path) -> None:
    here = str(Path(ctxfold.__file__).resolve().parents[1])  # the ctxfold under test
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": here,
                               "CTXFOLD_CONFIG_HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "30 turns" in proc.stdout and "(0 rejected)" in proc.stdout
