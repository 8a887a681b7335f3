"""Part ``leaks``: grep everything the run wrote, and every text a user would have seen, for
the fake credentials (``common.SECRETS``).

Files: every file under the run's work directory (transcripts, sidecars, ``.corrupt`` files,
temp files, acknowledgement records, the workers' stderr) except the config files that hold
the credentials on purpose. Texts: error messages, CLI output and log records the other
parts collected. A secret is looked for as it is, percent-encoded and JSON-escaped, so an
escaped copy in a JSON file counts too.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Iterable
from pathlib import Path

from benchmarks.reliability.common import SECRETS, Figures

#: Files that contain a secret because the harness wrote it there (the input, not a leak).
INPUTS = ("ctxfold.toml", "fuzz.toml")


def forms(secret: str) -> set[bytes]:
    """The byte strings a copy of ``secret`` could appear as."""
    texts = {secret, urllib.parse.quote(secret, safe=""), json.dumps(secret)[1:-1]}
    return {t.encode() for t in texts}


def scan(root: Path, texts: Iterable[tuple[str, str]] = (),
         secrets: Iterable[str] = SECRETS) -> Figures:
    figures = Figures()
    needles = [(secret, form) for secret in secrets for form in forms(secret)]

    def look(kind: str, where: str, data: bytes) -> None:
        figures.scanned += 1
        figures.note("leaks_bytes_scanned", len(data))
        for secret, form in needles:
            if form in data:
                at = data.index(form)
                context = data[max(0, at - 60): at + len(form) + 20]
                figures.problem("secrets", f"a credential ({secret[:6]}…) in {kind}",
                                f"{where}: {context!r}")
                break

    for folder, _dirs, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            if name in INPUTS or path.is_symlink():
                continue
            try:
                data = path.read_bytes()
            except OSError:
                continue
            kind = "a " + (path.suffix or name.split("-")[0]) + " file"
            look(kind, str(path.relative_to(root)), data)
            figures.note("leaks_files")
    for where, text in texts:
        look(where.split(":")[0], where, text.encode("utf-8", "surrogatepass"))
        figures.note("leaks_texts")
    return figures
