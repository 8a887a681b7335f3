"""LiteLLM, asynchronously: ``await cm.aprepare()`` before each ``litellm.acompletion``.

LiteLLM has no agent loop of its own, so the call site is the hook: the host appends what
it gets back, sends ``to_openai()`` of the prepared request and answers ctxfold's
``use_capability`` calls with ``await cm.aanswer(call)``. The summarize callable is a
coroutine over the same ``acompletion``; ctxfold awaits it. Run it:

    pip install "ctxfold[examples]" && python examples/litellm_async.py
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no cost-map download at import
import litellm
from _support import (
    BASH_TOOL,
    MODEL,
    SYSTEM,
    TASKS,
    WINDOW,
    bash,
    describe,
    finish,
    model,
)

import ctxfold


async def main() -> None:
    with model() as emu, tempfile.TemporaryDirectory() as sessions:
        # "openai/<model>" sends the OpenAI chat wire format to api_base.
        target = {"model": f"openai/{MODEL}", "api_base": emu.base_url,
                  "api_key": "unused-by-the-emulator"}

        async def summarize(request: ctxfold.SummaryRequest) -> str:
            reply = await litellm.acompletion(**target, max_tokens=request.max_tokens,
                                              **ctxfold.to_openai(request))
            return reply.choices[0].message.content or ""

        cm = ctxfold.open_session("litellm", store_path=sessions, tools=[BASH_TOOL],
                                  window=WINDOW, summarize=summarize)
        history: list[Any] = []

        def add(*messages: Any) -> None:
            history.extend(messages)
            cm.append(*messages)

        add({"role": "system", "content": SYSTEM})
        calls = 0
        for task in TASKS:
            add({"role": "user", "content": task})
            while True:
                prepared = await cm.aprepare()
                describe(calls, prepared)
                calls += 1
                reply = await litellm.acompletion(**target, **prepared.to_openai())
                message = reply.choices[0].message
                add(message)  # LiteLLM's Message object, as it is
                cm.observe_usage(reply.usage)
                if not message.tool_calls:
                    print(f"  assistant: {message.content}")
                    break
                for call in message.tool_calls:  # use_capability is ctxfold's, bash the host's
                    add(await cm.aanswer(call) or {
                        "role": "tool", "tool_call_id": call.id,
                        "content": bash(**json.loads(call.function.arguments))})
        finish(cm, emu, host_messages=len(history))


if __name__ == "__main__":
    asyncio.run(main())
