"""Context-overflow parsing (design §7.2) against verbatim provider error bodies (see
docs/providers.md, "Wire facts that surprised us")."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxfold import ContextLimitError
from ctxfold.transport.overflow import parse_context_limit

DEEPSEEK_V4 = (
    '{"error":{"message":"This model\'s maximum context length is 1048576 tokens. However, you '
    'requested 1293247 tokens (900031 in the messages, 393216 in the completion). Please reduce '
    'the length of the messages or completion.","type":"invalid_request_error","param":null,'
    '"code":"invalid_request_error"}}'
)
DEEPSEEK_V3 = DEEPSEEK_V4.replace("1048576", "65536").replace("1293247", "70000").replace(
    "900031", "61808").replace("393216", "8192")
OPENAI_CHAT = (
    '{"error":{"message":"This model\'s maximum context length is 8192 tokens. However, you '
    'requested 8213 tokens (6683 in the messages, 730 in the functions, and 800 in the '
    'completion). Please reduce the length of the messages, functions, or completion.",'
    '"type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}'
)
OPENAI_RESPONSES = (
    '{"type":"invalid_request_error","code":"context_length_exceeded","message":"Your input '
    'exceeds the context window of this model. Please adjust your input and try again.",'
    '"param":"input"}'
)
OPENAI_RESPONSES_STREAM = json.dumps({"type": "error", "sequence_number": 2,
                                      "error": json.loads(OPENAI_RESPONSES)})


@pytest.mark.parametrize(("body", "numbers"), [
    (DEEPSEEK_V4, (1_048_576, 900_031, 393_216)),
    (DEEPSEEK_V3, (65_536, 61_808, 8_192)),
    (OPENAI_CHAT, (8_192, 6_683 + 730, 800)),
    (OPENAI_RESPONSES, (0, 0, 0)),
    (OPENAI_RESPONSES_STREAM, (0, 0, 0)),
    ('{"error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > '
     '200000 maximum"}}', (200_000, 210_000, 0)),
    ('{"error":{"message":"input length and `max_tokens` exceed context limit: 190000 + 20000 '
     '> 200000, decrease input length or `max_tokens` and try again"}}', (200_000, 190_000,
                                                                         20_000)),
    ('{"error":{"message":"This model\'s maximum context length is 4097 tokens. However, your '
     'messages resulted in 5000 tokens. Please reduce the length of the messages."}}',
     (4_097, 5_000, 0)),
    ('{"error":{"message":"too big","context_length":1000,"prompt_tokens":900,'
     '"completion_tokens":200}}', (1_000, 900, 200)),
    ('{"message":"too big","max_context_length":1000,"usage":{"input_tokens":1200}}',
     (1_000, 1_200, 0)),
    # plain text body (a proxy that does not speak JSON)
    ("prompt is too long: 300,001 tokens > 262,144 maximum", (262_144, 300_001, 0)),
])
@pytest.mark.parametrize("status", [400, 413, 422])
def test_known_bodies(body, numbers, status):
    exc = parse_context_limit(status, body)
    assert isinstance(exc, ContextLimitError)
    assert (exc.window, exc.prompt, exc.completion) == numbers
    assert exc.status == status
    assert "context window exceeded" in str(exc) and "compact" in str(exc)


@pytest.mark.parametrize("status", [200, 401, 429, 500, 503])
def test_other_statuses_are_never_overflow(status):
    assert parse_context_limit(status, DEEPSEEK_V4) is None


@pytest.mark.parametrize("body", [
    "",
    "not json at all",
    '{"error":{"message":"Invalid Format","type":"invalid_request_error"}}',
    '{"code":"400","message":"Param Incorrect","param":"messages","type":""}',
    '{"error":{"message":"The \\"reasoning_content\\" in the thinking mode must be passed back '
    'to the API","type":"invalid_request_error"}}',
    # numbers that do not describe an overflow
    '{"error":{"message":"x","context_length":1000,"prompt_tokens":10}}',
])
def test_non_overflow_bodies(body):
    assert parse_context_limit(400, body) is None


def test_inconsistent_numbers_are_discarded():
    # requested != prompt + completion
    bad_sum = DEEPSEEK_V4.replace("1293247", "1293000")
    assert parse_context_limit(400, bad_sum) is None
    # prompt + completion does not exceed the window
    not_over = DEEPSEEK_V4.replace("1293247", "900031").replace("900031 in", "500000 in") \
        .replace("393216 in", "400031 in")
    assert parse_context_limit(400, not_over) is None


def test_explicit_code_keeps_overflow_but_zeroes_bad_numbers():
    body = OPENAI_CHAT.replace("8213 tokens", "9999 tokens")
    exc = parse_context_limit(400, body)
    assert exc is not None and (exc.window, exc.prompt, exc.completion) == (0, 0, 0)


@given(window=st.integers(1, 10**7), prompt=st.integers(1, 10**7), completion=st.integers(0, 10**6))
def test_template_round_trip(window, prompt, completion):
    body = json.dumps({"error": {"message": (
        f"This model's maximum context length is {window} tokens. However, you requested "
        f"{prompt + completion} tokens ({prompt} in the messages, {completion} in the "
        "completion)."), "code": "invalid_request_error"}})
    exc = parse_context_limit(400, body)
    if prompt + completion > window:
        assert exc is not None and (exc.window, exc.prompt, exc.completion) == (
            window, prompt, completion)
    else:
        assert exc is None


def test_emulator_mimo_body_parses_generically() -> None:
    from ctxfold.emulator.profiles import get_profile
    from ctxfold.emulator.wire_chat import overflow_error
    from ctxfold.transport.overflow import parse_context_limit

    body = json.dumps(overflow_error(get_profile("mimo", window=20000), 1518, 18794).body)
    err = parse_context_limit(400, body)
    assert err is not None
    assert (err.window, err.prompt, err.completion) == (20000, 1518, 18794)
