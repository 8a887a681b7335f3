"""The client's answer in the Responses format: the typed event sequence as deltas arrive
(``response.created`` … ``response.completed``), or one ``response`` object.

One client answer may span several upstream rounds (the proxy answered ``use_capability``
in between); it is still one response: one ``message`` item for all of its text, a
``reasoning`` item per round that reasoned, a ``function_call`` item per client tool call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxfold.kernel.types import Usage
from ctxfold.serve.deltas import (
    Block,
    CallArgs,
    CallEnd,
    CallStart,
    Citation,
    Delta,
    Item,
    Reasoning,
    Signature,
    Text,
)
from ctxfold.serve.render_chat import sse


def responses_usage(usage: Usage) -> dict[str, Any]:
    """``usage`` in the Responses shape."""
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cache_hit_tokens},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    }


def response_echo(fields: Mapping[str, Any], instructions: str | None) -> dict[str, Any]:
    """The request fields a response object repeats (the client's own tools, not the
    proxy's ``use_capability``), with the API's defaults."""
    return {"instructions": instructions,
            "tools": list(fields.get("tools") or []),
            "tool_choice": fields.get("tool_choice", "auto"),
            "parallel_tool_calls": fields.get("parallel_tool_calls", True),
            "text": fields.get("text") or {"format": {"type": "text"}},
            "store": fields.get("store", True),
            "previous_response_id": None}


class ResponsesRenderer:
    """Renders one client answer (see the module docstring)."""

    def __init__(self, *, response_id: str, model: str, created: int,
                 echo: Mapping[str, Any] | None = None) -> None:
        self.response_id = response_id
        self.model = model
        self.created = created
        self.echo = dict(echo or {})
        self.items: list[dict[str, Any]] = []
        self._seq = 0
        self._reasoning: int | None = None  # the open reasoning item of this round
        self._message: int | None = None
        self._calls: dict[Any, int] = {}
        self._open: set[int] = set()

    def _event(self, kind: str, **payload: Any) -> str:
        text = sse({"type": kind, "sequence_number": self._seq, **payload}, event=kind)
        self._seq += 1
        return text

    def _response(self, status: str, usage: Usage | None, reason: str = "") -> dict[str, Any]:
        return {"id": self.response_id, "object": "response", "created_at": self.created,
                "status": status, "error": None,
                "incomplete_details": {"reason": reason} if reason else None,
                "model": self.model, **self.echo,
                "output": list(self.items) if usage is not None else [],
                "usage": responses_usage(usage) if usage is not None else None}

    def start(self) -> list[str]:
        """``response.created`` and ``response.in_progress``."""
        shell = self._response("in_progress", None)
        return [self._event("response.created", response=shell),
                self._event("response.in_progress", response=shell)]

    def _add(self, item: dict[str, Any]) -> tuple[int, str]:
        self.items.append(item)
        index = len(self.items) - 1
        self._open.add(index)
        opened = {**item, "status": "in_progress"} if "status" in item else dict(item)
        if item["type"] == "message":
            opened["content"] = []
        elif item["type"] == "reasoning":
            opened["summary"] = []
        return index, self._event("response.output_item.added", output_index=index,
                                  item=opened)

    def feed(self, delta: Delta) -> list[str]:
        """The events of one client-visible delta."""
        out: list[str] = []
        if isinstance(delta, Block | Signature | Citation | CallEnd):
            return []  # Anthropic's own: no Responses form
        if isinstance(delta, Reasoning):
            if self._reasoning is None:
                self._reasoning, added = self._add({
                    "id": f"rs_{self.response_id}_{len(self.items)}", "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": ""}]})
                out += [added, self._event("response.reasoning_summary_part.added",
                                           item_id=self.items[self._reasoning]["id"],
                                           output_index=self._reasoning, summary_index=0,
                                           part={"type": "summary_text", "text": ""})]
            item = self.items[self._reasoning]
            item["summary"][0]["text"] += delta.text
            return [*out, self._event("response.reasoning_summary_text.delta",
                                      item_id=item["id"], output_index=self._reasoning,
                                      summary_index=0, delta=delta.text)]
        out += self._close_reasoning()
        if isinstance(delta, Item):  # forwarded whole, as the upstream sent it
            index, added = self._add(dict(delta.item))
            return [*out, added, *self._close(index)]
        if isinstance(delta, Text):
            if self._message is None:
                self._message, added = self._add({
                    "id": f"msg_{self.response_id}", "type": "message", "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "", "annotations": []}]})
                out += [added, self._event("response.content_part.added",
                                           item_id=self.items[self._message]["id"],
                                           output_index=self._message, content_index=0,
                                           part={"type": "output_text", "text": "",
                                                 "annotations": []})]
            item = self.items[self._message]
            item["content"][0]["text"] += delta.text
            return [*out, self._event("response.output_text.delta", item_id=item["id"],
                                      output_index=self._message, content_index=0,
                                      delta=delta.text, logprobs=[])]
        if isinstance(delta, CallStart):
            index, added = self._add({
                "id": f"fc_{self.response_id}_{delta.key}", "type": "function_call",
                "status": "completed", "call_id": delta.call_id, "name": delta.name,
                "arguments": ""})
            self._calls[delta.key] = index
            return [*out, added]
        assert isinstance(delta, CallArgs)
        index = self._calls[delta.key]
        self.items[index]["arguments"] += delta.text
        return [*out, self._event("response.function_call_arguments.delta",
                                  item_id=self.items[index]["id"], output_index=index,
                                  delta=delta.text)]

    def _close_reasoning(self) -> list[str]:
        if self._reasoning is None:
            return []
        index, self._reasoning = self._reasoning, None
        return self._close(index)

    def _close(self, index: int) -> list[str]:
        self._open.discard(index)
        item = self.items[index]
        ids = {"item_id": item.get("id"), "output_index": index}
        if item["type"] == "reasoning":
            part = item["summary"][0]
            out = [self._event("response.reasoning_summary_text.done", **ids, summary_index=0,
                               text=part["text"]),
                   self._event("response.reasoning_summary_part.done", **ids, summary_index=0,
                               part=part)]
        elif item["type"] == "message":
            part = item["content"][0]
            out = [self._event("response.output_text.done", **ids, content_index=0,
                               text=part["text"], logprobs=[]),
                   self._event("response.content_part.done", **ids, content_index=0,
                               part=part)]
        elif item["type"] == "function_call":
            out = [self._event("response.function_call_arguments.done", **ids,
                               arguments=item["arguments"])]
        else:
            out = []
        return [*out, self._event("response.output_item.done", output_index=index, item=item)]

    def end_round(self) -> list[str]:
        """A round ended: its reasoning item closes (the next round reasons in a new one)."""
        return self._close_reasoning()

    def _complete(self) -> list[str]:
        out = self._close_reasoning()
        if all(i["type"] == "reasoning" for i in self.items):  # an answer is never empty
            self._message, added = self._add({
                "id": f"msg_{self.response_id}", "type": "message", "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "", "annotations": []}]})
            out.append(added)
        for index in sorted(self._open):
            out += self._close(index)
        return out

    def finish(self, finish_reason: str, usage: Usage) -> list[str]:
        """Every open item done, then ``response.completed`` (``response.incomplete`` when
        the output budget cut the answer)."""
        out = self._complete()
        if finish_reason == "length":
            final = self._response("incomplete", usage, "max_output_tokens")
            return [*out, self._event("response.incomplete", response=final)]
        return [*out, self._event("response.completed",
                                  response=self._response("completed", usage))]

    def body(self, finish_reason: str, usage: Usage) -> dict[str, Any]:
        """The whole ``response`` object (a non-streaming answer)."""
        self._complete()
        if finish_reason == "length":
            return self._response("incomplete", usage, "max_output_tokens")
        return self._response("completed", usage)

    def error(self, payload: Mapping[str, Any]) -> list[str]:
        """A failure after the stream started: an ``error`` event carrying the provider's
        error object (clients such as the OpenAI SDK raise on its ``error`` key)."""
        err = payload.get("error", payload)
        err = err if isinstance(err, Mapping) else {"message": str(err)}
        return [self._event("error", code=err.get("code"), message=err.get("message"),
                            param=err.get("param"), error=dict(err))]
