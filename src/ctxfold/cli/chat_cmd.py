"""``ctxfold chat [--session ID] [--root DIR]``: a small interactive loop against the provider.

Reads lines from stdin (a terminal or a script): plain text is a user turn (append, then
``ContextManager.complete``, then print the reply); ``/compact [focus]``, ``/status``,
``/rewind N``, ``/search QUERY``, ``/pin TEXT``, ``/help`` and ``/quit`` are commands. After
each turn one status line says whether a checkpoint was installed and the turn's cache hit ratio
(``usage.cache_hit_tokens / usage.prompt_tokens``). The provider is ``[provider] name``
(the in-process ``emulator`` by default).

Exit status: 0 when every turn and command succeeded, 1 when any failed (each failure is
reported on stderr and the loop goes on), 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from ctxfold.cli.common import add_config_flag
from ctxfold.cli.store_access import add_root_flag

if TYPE_CHECKING:
    from ctxfold.engine.manager import ContextManager
    from ctxfold.kernel.contracts import Provider
    from ctxfold.kernel.types import Usage

HELP = """commands:
  TEXT             send TEXT as a user turn
  /compact [FOCUS] install a checkpoint now (optional focus for the summary)
  /status          tokens, trigger, window, projection version, cache state
  /rewind N        go back to the first N messages (the history stays as a session of its own)
  /search QUERY    search the whole session history (folded messages too), newest first
  /pin TEXT        pin a standing rule: every checkpoint carries it verbatim
  /help            this help
  /quit            leave (end of input does the same)"""


#: ``use_capability`` rounds one chat turn answers before it shows the model's reply.
MAX_LOOKUPS = 8


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "chat",
        help="interactive chat with the configured provider (emulator by default)",
        description="Chat on a session, reading turns and /commands from stdin. "
        "Type /help for the commands.",
    )
    parser.add_argument("--session", default=None, metavar="ID",
                        help="session id to create or continue (default: chat-<UTC time>)")
    parser.add_argument("--system", default=None, metavar="TEXT",
                        help="system prompt for a new session")
    add_root_flag(parser)
    add_config_flag(parser, "provider.context_window", "--window",
                    help="context window in tokens (default: [provider] context_window)")
    parser.set_defaults(func=run)


def hit_ratio(usage: Usage) -> str:
    """``cache_hit_tokens / prompt_tokens`` as a percentage (``n/a`` without a prompt)."""
    if usage.prompt_tokens <= 0:
        return "n/a"
    return f"{usage.cache_hit_tokens / usage.prompt_tokens * 100:.1f}%"


def status_line(cm: ContextManager) -> str:
    """What ``/status`` prints."""
    projection = cm.state.projection
    return (f"session {cm.session_id}: {len(cm.canonical)} messages, view {cm.estimate()} "
            f"tokens, trigger {cm.trigger_tokens}, window {cm.window}, projection version "
            f"{projection.projection_version if projection else 0}, cache "
            f"{cm.state.last_cache_state}")


class ChatLoop:
    """One chat session: turns and commands, output to ``out``, errors to ``err``."""

    def __init__(self, cm: ContextManager, provider: Provider, out: TextIO, err: TextIO) -> None:
        self.cm = cm
        self.provider = provider
        self.out = out
        self.err = err
        self.failures = 0

    def _version(self) -> int:
        projection = self.cm.state.projection
        return projection.projection_version if projection else 0

    def _say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def _fail(self, text: str) -> None:
        self.failures += 1
        print(f"ctxfold: error: {text}", file=self.err, flush=True)

    def turn(self, text: str) -> None:
        """Append ``text`` as a user message, complete, print the reply and a status line."""
        from ctxfold.kernel.types import Message

        before = self._version()
        if pending_user_text(self.cm) != text:  # a failed turn left it: send it again
            self.cm.append(Message(role="user", content=text))
        response = self.cm.complete(self.provider)
        for _ in range(MAX_LOOKUPS):  # the model looks up folded history: answer, go on
            answers = [self.cm.answer(call) for call in response.message.tool_calls]
            if not answers or None in answers:
                break
            self._say(f"[the model looked up the session's history: {len(answers)} "
                      "use_capability call(s) answered]")
            self.cm.append(*answers)
            response = self.cm.complete(self.provider)
        self._say(response.message.content)
        after = self._version()
        checkpoint = ""
        if after != before:
            receipt = self.cm.state.last_receipt
            action = receipt.action if receipt else "checkpoint"
            checkpoint = f"; checkpoint installed (version {after}, {action})"
        usage = response.usage
        self._say(f"[prompt {usage.prompt_tokens} tokens, cache hit {hit_ratio(usage)} "
                  f"({usage.cache_hit_tokens}/{usage.prompt_tokens}), completion "
                  f"{usage.completion_tokens}{checkpoint}]")

    def compact(self, focus: str) -> None:
        """``/compact [focus]``: a manual checkpoint."""
        before_tokens, before = self.cm.estimate(), self._version()
        prepared = self.cm.compact(focus or None)
        if prepared.projection_version == before:
            receipt = self.cm.state.last_receipt
            why = f" ({receipt.reason})" if receipt is not None and receipt.reason else ""
            self._say(f"[compact: nothing installed{why}; view {prepared.tokens} tokens]")
            return
        self._say(f"[compact: checkpoint installed (version {prepared.projection_version}, "
                  f"{prepared.summary_calls} summary calls); view {before_tokens} -> "
                  f"{prepared.tokens} tokens]")

    def rewind(self, arg: str) -> None:
        """``/rewind N``: go back to the first N messages; the history as it was is kept as
        a session of its own (never deleted)."""
        total = len(self.cm.canonical)
        try:
            upto = int(arg)
        except ValueError:
            self._fail(f"/rewind needs a message count from 0 to {total}, got {arg!r}")
            return
        kept = self.cm.rewind(upto)
        where = f"; the history as it was is session {kept}" if kept else ""
        self._say(f"[rewound to {upto} messages (dropped {total - upto}){where}]")

    def search(self, query: str) -> None:
        """``/search QUERY``: the model's ``session:search`` (terms, newest first); the
        transcript is not touched."""
        import json

        answer = self.cm.use_capability({"action": "call", "capability_id": "session:search",
                                         "arguments": {"query": query}})
        if answer.startswith("error: "):
            self._fail(f"/search: {answer.removeprefix('error: ')}")
            return
        result = json.loads(answer)
        for hit in result["hits"]:
            excerpt = " ".join(hit["matches"][0]["excerpt"].split())[:120]
            call = f" {hit['tool_call_id']}" if hit.get("tool_call_id") else ""
            self._say(f"{hit['ref']} {hit['role']}{call}: {excerpt}")
        more = "" if result["complete"] else " (more: narrow the query)"
        self._say(f"[search: {len(result['hits'])} messages{more}]")

    def pin(self, text: str) -> None:
        """``/pin TEXT``: a standing rule every checkpoint carries verbatim."""
        if not text:
            self._fail("/pin needs the rule text, e.g. /pin Never push to main.")
            return
        self.cm.pin(text, reason="chat /pin")
        self._say(f"[pinned as #{len(self.cm.canonical) - 1}: every checkpoint carries it "
                  "verbatim after the task]")

    def handle(self, line: str) -> bool:
        """Process one input line; False when the loop should end."""
        from ctxfold.kernel.errors import CtxfoldError

        text = line.strip()
        if not text:
            return True
        command, _, arg = text.partition(" ")
        try:
            if command in ("/quit", "/exit"):
                return False
            if command == "/help":
                self._say(HELP)
            elif command == "/status":
                self._say(status_line(self.cm))
            elif command == "/compact":
                self.compact(arg.strip())
            elif command == "/rewind":
                self.rewind(arg.strip())
            elif command == "/search":
                self.search(arg.strip())
            elif command == "/pin":
                self.pin(arg.strip())
            elif command.startswith("/"):
                self._fail(f"unknown command {command!r}; type /help for the commands")
            else:
                self.turn(text)
        except CtxfoldError as exc:
            self._fail(str(exc))
        return True

    def run(self, lines: Iterable[str], prompt: bool) -> int:
        """Read until ``/quit`` or end of input; 1 if anything failed, else 0."""
        iterator = iter(lines)
        while True:
            if prompt:
                print("> ", end="", file=self.out, flush=True)
            line = next(iterator, None)
            if line is None or not self.handle(line):
                break
        return 1 if self.failures else 0


def pending_user_text(cm: Any) -> str | None:
    """The text of a user message the transcript ends with (a turn that failed), if any."""
    # A local-only message (a pin record) is never a turn.
    last = next((m for m in reversed(cm.canonical) if not m.local_only), None)
    return last.content if last is not None and last.role == "user" else None


def run(args: argparse.Namespace) -> int:
    from ctxfold.cli.store_access import open_store
    from ctxfold.engine.opening import open_session
    from ctxfold.kernel.kinds import PROVIDER
    from ctxfold.kernel.types import Message
    from ctxfold.session_id import validate_session_id

    handle = open_store(args)
    session_id = validate_session_id(
        args.session or "chat-" + datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ"))
    config, registry = handle.config, handle.registry
    provider = registry.create(PROVIDER, config.provider.name, config=config)
    try:
        existed = handle.store.exists(session_id)
        cm = open_session(session_id, config=config, registry=registry,
                          store=handle.store, provider=provider)
        if registry.provider_defaults(config).loopback:  # say where the answers come from
            print(f"[model: the loopback emulator ({config.provider.name!r}), not a real "
                  "model; set [provider] name (e.g. deepseek) for one]", flush=True)
        if existed:
            resumed = cm.resume()
            notice = f"; {resumed.notice}" if resumed.notice else ""
            print(f"[session {session_id}: {len(cm.canonical)} messages, cache "
                  f"{resumed.cache_state}{notice}]", flush=True)
            pending = pending_user_text(cm)
            if pending is not None:
                print(f"[the last turn got no answer: {pending[:60]!r}; send it again to "
                      "retry — it is not appended twice]", flush=True)
        else:
            if args.system:
                cm.append(Message(role="system", content=args.system))
            print(f"[new session {session_id}; /help for commands]", flush=True)
        loop = ChatLoop(cm, provider, sys.stdout, sys.stderr)
        started = handle.store.revision(session_id)
        status = loop.run(_lines(sys.stdin), prompt=sys.stdin.isatty())
        if not existed and handle.store.revision(session_id) == started:
            # Nothing was said (or done): leave no empty session behind for `sessions list`
            # or `replay` of the sessions folder to stumble over.
            handle.store.delete(session_id)
            print(f"[session {session_id} not kept: nothing was said]", flush=True)
        return status
    finally:
        close = getattr(provider, "close", None)
        if callable(close):
            close()


def _lines(stream: TextIO) -> Iterable[str]:
    # readline, not iteration: iterating a pipe reads ahead in blocks, which is fine for
    # scripts but would make a terminal wait for several lines.
    while True:
        line = stream.readline()
        if not line:
            return
        yield line
