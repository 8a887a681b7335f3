"""The OpenAI Python SDK, chat completions: the host owns the loop and its model.

Dicts in, dicts out: every message the agent produces goes to ``cm.append`` as it is (SDK
objects too), and each request is ``cm.prepare().to_openai()`` — the host's tools, plus
``use_capability`` once there is folded history to look up, whose calls ``cm.answer(call)``
answers. Summaries are written by the same model through the same client (the ``summarize``
callable). Run it:

    pip install "ctxfold[examples]" && python examples/openai_chat.py
"""

from __future__ import annotations

import json
import tempfile

from _support import BASH_TOOL, MODEL, SYSTEM, TASKS, WINDOW, bash, describe, finish, model
from openai import OpenAI

import ctxfold

#: A screenshot the user attaches to the first task: image parts are kept and sent exactly.
SCREENSHOT = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


def main() -> None:
    with model() as emu, tempfile.TemporaryDirectory() as sessions:
        client = OpenAI(base_url=emu.base_url, api_key="unused-by-the-emulator")

        def summarize(request: ctxfold.SummaryRequest) -> str:
            # The summary request is cache-aligned with the normal ones: same tools, same head.
            reply = client.chat.completions.create(
                model=MODEL, max_tokens=request.max_tokens, **ctxfold.to_openai(request))
            return reply.choices[0].message.content or ""

        cm = ctxfold.open_session("openai-chat", store_path=sessions, tools=[BASH_TOOL],
                                  window=WINDOW, summarize=summarize)
        history: list = []  # what the agent produced, only to check that ctxfold kept it all

        def add(*messages) -> None:
            history.extend(messages)
            cm.append(*messages)

        first_user = {"role": "user", "content": [{"type": "text", "text": TASKS[0]},
                                                  SCREENSHOT]}
        add({"role": "system", "content": SYSTEM}, first_user)
        calls = 0
        for t, task in enumerate(TASKS):
            if t:
                add({"role": "user", "content": task})
            while True:
                prepared = cm.prepare()
                describe(calls, prepared)
                calls += 1
                request = prepared.to_openai()
                if prepared.projection_version == 0:  # the attached image goes out as given
                    assert request["messages"][1] == first_user
                reply = client.chat.completions.create(model=MODEL, **request)
                message = reply.choices[0].message
                add(message)  # the SDK object, as it is
                cm.observe_usage(reply.usage)
                if not message.tool_calls:
                    print(f"  assistant: {message.content}")
                    break
                for call in message.tool_calls:  # use_capability is ctxfold's, bash the host's
                    add(cm.answer(call) or {"role": "tool", "tool_call_id": call.id,
                                            "content": bash(**json.loads(call.function.arguments))})
        finish(cm, emu, host_messages=len(history))
        # Folded out of the view, the image is still in the canonical transcript, exactly.
        assert ctxfold.message_to_openai(cm.canonical[1], local_fields=False) == first_user


if __name__ == "__main__":
    main()
