"""The counting rules the built-in estimators share: the cold CJK rate, the calibration
sanity window, the count of a non-text content part, and the calibration value."""

from __future__ import annotations

import json
import re

import attrs

from ctxfold.kernel.types import TEXT_PART_TYPES, Message

#: Tokens per character of CJK text before calibration (design §2.3).
COLD_CJK_TOKENS_PER_CHAR = 1.0
#: Calibration sanity window on provider prompt tokens per request character (design §2.3).
SANITY_MIN_TOKENS_PER_CHAR = 0.05
SANITY_MAX_TOKENS_PER_CHAR = 2.0
DEFAULT_CACHE_SIZE = 100_000
#: Tokens counted for one non-text content part (image, audio, file): OpenAI's count for a
#: 1024×1024 image at high detail (85 + 4 × 170, https://platform.openai.com/docs/guides/images-vision).
NON_TEXT_PART_TOKENS = 765

# Han (incl. extensions and compatibility ideographs), CJK punctuation, Hiragana, Katakana,
# Hangul (syllables and jamo) and the halfwidth/fullwidth forms block.
_CJK_RE = re.compile(
    "[\u1100-\u11ff\u2e80-\u2fdf\u3000-\u303f\u3040-\u309f\u30a0-\u30ff\u3130-\u318f"
    "\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef"
    "\U00020000-\U0003134f]"
)


def non_text_parts(message: Message) -> int:
    """How many of a message's content parts are not text."""
    return sum(1 for raw in message.parts
               if json.loads(raw).get("type") not in TEXT_PART_TYPES)


def cjk_count(text: str) -> int:
    """Number of CJK characters (Han, kana, Hangul, fullwidth forms) in ``text``."""
    if text.isascii():  # the common case for code and logs: no regex scan at all
        return 0
    return len(_CJK_RE.findall(text))


@attrs.frozen
class Calibration:
    """The learned scale: ``ratio`` = prompt tokens / raw tokens of the calibration request;
    ``cjk_share`` = CJK chars / chars of that request."""

    ratio: float
    cjk_share: float
    prompt_tokens: int
