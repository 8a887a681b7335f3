"""What every real-library policy shares: feeding the library chat dicts, reading back the
request it would send, and writing its summaries with the replay's shared summarizer.

The library decides *when* to compact, *what* to keep and *which messages* to summarize; the
adapter only translates. Its summaries come from the same summarizer every other policy uses,
asked for the same briefing length, fed the messages the library selected — its previous
summary, in whatever wrapper the library gives it (:attr:`PeerPolicy.summary_prefixes`),
handed over as a previous summary to merge, and tool calls included; the summary request is
billed as the prompt the library itself would have sent its model, and a real summarizer
(``--summarizer-provider``) is sent exactly that prompt. After each request the adapter gets
the usage a provider would report (:meth:`PeerPolicy.observe_usage`) and gives it to the
library on the next assistant message, as the library's own model client would.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ctxfold.interop.chat import message_from_openai, message_to_openai
from ctxfold.kernel.errors import CtxfoldError, MaintenanceError, PolicyFailedError
from ctxfold.kernel.kinds import PolicyOptions
from ctxfold.kernel.sessions import PolicyRequest, SummaryCall
from ctxfold.kernel.summary import summary_output_cap, validate_summary_result, wrap_summary
from ctxfold.kernel.types import Message, RequestShape, SummaryRequest, Usage

#: How the real-library policies are installed (the ``peers`` extra pins their versions).
INSTALL = "install them with: pip install 'ctxfold[peers]'"


def chat_dict(message: Message) -> dict[str, Any]:
    """A canonical message as the chat dict a library would hold (no reasoning: none of the
    libraries sends it back)."""
    out = message_to_openai(message, local_fields=False)
    out.pop("reasoning_content", None)
    return out


def to_messages(dicts: Sequence[Mapping[str, Any]], where: str) -> tuple[Message, ...]:
    """Chat dicts the library produced, as ctxfold messages (flattened: billing and probes
    read text)."""
    return tuple(message_from_openai(d, where=f"{where}[{i}]", lossless=False)
                 for i, d in enumerate(dicts))


class PeerPolicy:
    """A :class:`~ctxfold.kernel.contracts.Policy` around a library; subclasses implement
    :meth:`feed` (one chat dict, in order) and :meth:`build` (the chat dicts of the request the
    library would send now)."""

    name = "peer"
    #: How the library opens the message that carries its previous summary.
    summary_prefixes: tuple[str, ...] = ()

    def __init__(self, setup: PolicyOptions) -> None:
        self.setup = setup
        self.history: list[Message] = []
        self._calls: list[SummaryCall] = []
        self._fallbacks = 0
        self._previous = ""
        self.usage: Usage | None = None  # the last request's, for the next assistant message

    def observe_usage(self, usage: Usage) -> None:
        """The usage a provider reports for the request just billed."""
        self.usage = usage

    # -- what subclasses implement ---------------------------------------------------------
    def feed(self, message: dict[str, Any]) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def build(self) -> list[dict[str, Any]]:  # pragma: no cover - interface
        raise NotImplementedError

    # -- the Policy contract ---------------------------------------------------------------
    def observe(self, message: Message) -> None:
        self.history.append(message)
        self.feed(chat_dict(message))

    def canonical(self) -> tuple[Message, ...]:
        """The fed history (the library's own state is what it chose to keep)."""
        return tuple(self.history)

    def request(self) -> PolicyRequest:
        try:
            dicts = self.build()
        except CtxfoldError:
            raise
        except Exception as exc:  # the library's own failure ends its run, with the reason
            raise PolicyFailedError(f"policy {self.name}: the library raised "
                                    f"{type(exc).__name__}: {str(exc)[:300]}") from exc
        messages = to_messages(dicts, f"policy {self.name}: request")
        calls = tuple(self._calls)
        self._calls.clear()
        fallbacks, self._fallbacks = self._fallbacks, 0
        body = json.dumps(dicts, ensure_ascii=False, sort_keys=True)
        extends = body.startswith(self._previous[:-1]) if self._previous else True
        self._previous = body
        return PolicyRequest(messages=messages, summaries=calls,
                             installed=bool(calls) or bool(fallbacks) or not extends,
                             prunes=1 if not calls and not fallbacks and not extends else 0,
                             fallback_summaries=fallbacks)

    # -- helpers for subclasses ------------------------------------------------------------
    def count(self, dicts: Sequence[Mapping[str, Any]]) -> int:
        """Tokens of ``dicts`` by the replay's estimator (what the library's counter returns)."""
        return self.setup.estimator.estimate(RequestShape(list(to_messages(dicts, "count"))))

    def count_text(self, text: str) -> int:
        return self.count([{"role": "user", "content": text}])

    def selected_messages(self, selected: Sequence[Mapping[str, Any]]) -> tuple[Message, ...]:
        """``selected`` as ctxfold messages, the library's previous summary (a user message
        opening with one of :attr:`summary_prefixes`) as a summary message to merge."""
        out: list[Message] = []
        for message in to_messages(selected, f"policy {self.name}: summary"):
            prefix = next((p for p in self.summary_prefixes if message.role == "user"
                           and message.content.startswith(p)), None)
            out.append(message if prefix is None
                       else wrap_summary(message.content[len(prefix):].strip()))
        return tuple(out)

    def summarize(self, selected: Sequence[Mapping[str, Any]], prompt: str) -> str:
        """The library's summary of ``selected`` (the messages it chose), written by the shared
        summarizer at the replay's briefing length; the call is billed as ``prompt``, the one
        user message the library would have sent its model (and a real summarizer is sent
        exactly that)."""
        window = self.setup.window
        billed = SummaryRequest(messages=(Message(role="user", content=prompt),), tools=(),
                                max_tokens=summary_output_cap(window),
                                target_tokens=self.setup.summary_tokens)
        offline = getattr(self.setup.summarizer, "name", "") == "extractive"
        request = attrs.evolve(billed, messages=self.selected_messages(selected)) \
            if offline else billed
        try:
            text = validate_summary_result(self.setup.summarizer.summarize(request),
                                           session_id=self.setup.session_name)
        except MaintenanceError as exc:
            raise PolicyFailedError(f"policy {self.name}: {exc}") from exc
        self._calls.append(SummaryCall(request=billed, text=text))
        return text

    def count_fallback(self) -> None:
        """The library installed a summary without calling its model (a fixed fallback)."""
        self._fallbacks += 1
