"""Secret masking for `ctxfold config show` (SPEC invariant 12)."""

from __future__ import annotations

import pytest

from ctxfold.secrets import is_secret_key, mask_url_credentials


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("https://user:hunter2@example.com/v1", "https://***@example.com/v1"),
        ("https://example.com/v1?api_key=sk-zzz&region=eu",
         "https://example.com/v1?api_key=***&region=eu"),
        ("https://example.com/?access_token=abc", "https://example.com/?access_token=***"),
        ("https://example.com/v1?model=x", "https://example.com/v1?model=x"),
    ],
)
def test_url_secrets_are_masked(url: str, masked: str) -> None:
    assert mask_url_credentials(url) == masked


def test_secret_key_names() -> None:
    assert is_secret_key("provider.api_key") and is_secret_key("token")
    assert not is_secret_key("provider.api_key_env")
    assert not is_secret_key("agent.max_output_tokens")
