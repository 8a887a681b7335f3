"""Secret masking for `ctxfold config show` (design §1.5)."""

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


def test_a_short_key_is_masked_only_where_it_stands_alone() -> None:
    from ctxfold.secrets import mask_secret

    text = "tokens: tok. Bearer tok, key=tok&x; stok tok_2 tok-3 'tok'"
    assert mask_secret(text, "tok") == "tokens: ***. Bearer ***, key=***&x; stok tok_2 tok-3 '***'"


def test_a_long_key_is_masked_wherever_it_occurs_and_in_its_json_form() -> None:
    from ctxfold.secrets import mask_secret

    key = "0f3a9c1e5b2d4f6a8c0e"
    assert mask_secret(f"x{key}y and {key}", key) == "x***y and ***"
    quoted = 'ab"cd\\ef/gh-ijklmnop'
    assert mask_secret('{"key": "ab\\"cd\\\\ef/gh-ijklmnop"}', quoted) == '{"key": "***"}'


def test_a_remembered_key_is_masked_in_every_text_whatever_its_format() -> None:
    from ctxfold.secrets import forget_secrets, redact_text, remember_secret

    key = "cXV1eDpjb3JnZQ=="  # no known prefix
    forget_secrets()
    try:
        assert key in redact_text(f"got {key}")
        remember_secret(key)
        assert redact_text(f"got {key}!") == "got ***!"
    finally:
        forget_secrets()


def test_a_key_cut_by_the_kept_body_leaves_no_part_behind() -> None:
    from ctxfold.transport.errors import ERROR_BODY_KEPT, status_error

    key = "0f3a9c1e5b2d4f6a8c0e2b4d6f8a0c1e"
    text = "x" * (ERROR_BODY_KEPT - 8) + key + " tail"
    error, _ = status_error(provider="p", status=500, text=text, url="http://127.0.0.1/",
                            attempts=1, request_id="", key=key, api_key_env="K",
                            base_url="http://127.0.0.1/")
    assert key[:8] not in error.body and key[:8] not in str(error)
