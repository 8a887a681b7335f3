"""The OpenAI Python SDK, Responses API: output items in, ``input`` items out.

``cm.append`` takes the response's output items as the SDK returns them and the host's own
``function_call_output`` items; each request is ``cm.prepare().to_responses()``, and a
``function_call`` of ctxfold's ``use_capability`` is answered by ``cm.answer(item)`` (a
``function_call_output`` item). The model writes the summaries too, through
``client.responses.create``. Run it:

    pip install "ctxfold[examples]" && python examples/openai_responses.py
"""

from __future__ import annotations

import json
import tempfile
from typing import Any

from _support import BASH_TOOL, SYSTEM, TASKS, WINDOW, bash, describe, finish, model
from openai import OpenAI

import ctxfold

MODEL = "gpt-5.5"
DIAGRAM = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}


def main() -> None:
    with model("responses") as emu, tempfile.TemporaryDirectory() as sessions:
        client = OpenAI(base_url=emu.base_url, api_key="unused-by-the-emulator")

        def summarize(request: ctxfold.SummaryRequest) -> str:
            reply = client.responses.create(model=MODEL, max_output_tokens=request.max_tokens,
                                            **ctxfold.to_responses(request))
            return reply.output_text

        cm = ctxfold.open_session("openai-responses", store_path=sessions, tools=[BASH_TOOL],
                                  window=WINDOW, summarize=summarize)
        history: list[Any] = []  # one entry per message, only to check that ctxfold kept all

        def add(*items: Any) -> None:
            history.extend(items)
            cm.append(*items)

        add({"role": "system", "content": SYSTEM},
            {"role": "user", "content": [{"type": "input_text", "text": TASKS[0]}, DIAGRAM]})
        calls = 0
        for t, task in enumerate(TASKS):
            if t:
                add({"role": "user", "content": task})
            while True:
                prepared = cm.prepare()
                describe(calls, prepared)
                calls += 1
                reply = client.responses.create(model=MODEL, **prepared.to_responses())
                cm.observe_usage(reply.usage)
                cm.append(*reply.output)  # output items as the SDK returns them: ctxfold
                history.append(reply.output)  # keeps one assistant message per reply
                calls_made = [item for item in reply.output if item.type == "function_call"]
                if not calls_made:
                    print(f"  assistant: {reply.output_text}")
                    break
                for call in calls_made:  # use_capability is ctxfold's, bash the host's
                    add(cm.answer(call) or {"type": "function_call_output",
                                            "call_id": call.call_id,
                                            "output": bash(**json.loads(call.arguments))})
        finish(cm, emu, host_messages=len(history))
        # Folded out of the view, the image is still in the canonical transcript, exactly.
        assert ctxfold.message_to_openai(cm.canonical[1], local_fields=False)["content"][1] \
            == DIAGRAM


if __name__ == "__main__":
    main()
