"""Invariant 4: between installs every request's bytes extend the previous request's bytes.

Also invariant 1 (canonical is permanent) over the same random sessions.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tests.conftest import make_config

from ctxfold import Message, ToolCall, message_to_openai, open_session
from ctxfold.testing import RecordingSummarizer

step = st.one_of(
    st.tuples(st.just("user"), st.text(min_size=1, max_size=200)),
    st.tuples(st.just("round"), st.integers(min_value=1, max_value=3),
              st.integers(min_value=500, max_value=12_000)),
    st.tuples(st.just("say"), st.text(min_size=1, max_size=400)),
)


def serialize(messages) -> bytes:
    """The request's message list, as a provider request body would carry it."""
    parts = [json.dumps(message_to_openai(m, local_fields=False), ensure_ascii=False,
                        separators=(",", ":")) for m in messages]
    return ("[" + ",".join(parts)).encode()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(step, min_size=10, max_size=40),
    window=st.sampled_from([4_000, 8_000, 20_000]),
)
def test_requests_are_byte_prefix_extensions_between_installs(steps, window) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cm = open_session(
            "prop",
            config=make_config(Path(tmp), window=window, ratio=0.6),
            summarizer=RecordingSummarizer(),
        )
        cm.append(Message(role="system", content="sys"), Message(role="user", content="task"))
        previous: bytes | None = None
        version = 0
        installs = 0
        history: list[str] = []
        call_no = 0
        for kind, *args in steps:
            if kind == "user":
                cm.append(Message(role="user", content=args[0]))
            elif kind == "say":
                cm.append(Message(role="assistant", content=args[0]))
            else:
                n, size = args
                calls = tuple(ToolCall(id=f"k{call_no + i}", name="bash", arguments="{}")
                              for i in range(n))
                cm.append(Message(role="assistant", content="", tool_calls=calls))
                for i, c in enumerate(calls):
                    cm.append(Message(role="tool", tool_call_id=c.id, name="bash",
                                      content=f"out{call_no + i} " * (size // 5)))
                call_no += n
            try:
                prepared = cm.prepare()
            except Exception as exc:  # only the documented maintenance error may escape
                assert type(exc).__name__ == "CompactionRequiredError"
                continue
            current = serialize(prepared.messages)
            if previous is not None and prepared.projection_version == version:
                assert current.startswith(previous), "request prefix changed without an install"
            if prepared.projection_version != version:
                installs += 1
            version = prepared.projection_version
            previous = current
            # Canonical only ever grows by appends: earlier lines never change.
            now = [json.dumps(message_to_openai(m), sort_keys=True) for m in cm.canonical]
            assert now[: len(history)] == history
            history = now
        event(f"installs={min(installs, 3)}")
