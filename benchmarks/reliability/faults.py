"""Part ``faults``: provider faults through ``cm.complete(provider)`` against the loopback
emulator (``ctxfold.emulator``), over real HTTP on 127.0.0.1.

Each round starts an emulator (a random profile: deepseek, mimo or responses) in one of three
modes: ``wide`` (the provider's own window), ``prompt`` (a window far smaller than the
session's and a 1,024-token output budget: the transcript outgrows the provider and requests
are rejected as too long) or ``reservation`` (the smaller window with the default output
budget: the first request is rejected because of the output it reserves); overflow recovery
is design §7.3 (learn the window; retry with a clipped output budget, or compact and retry). A
provider built from a config whose ``base_url`` carries a password and whose key comes from
``$CTXFOLD_RELIABILITY_KEY`` (both checked by the ``leaks`` part). Each case appends a user
turn (or the results of the previous reply's tool calls), injects 0–2 faults (429, 503,
dropped connection, stall, malformed chunk, slow first byte) and calls ``complete()``:

* it returns: exactly one message appended — the scripted reply, text unchanged — and the
  transcript only grew;
* it raises a :class:`ctxfold.CtxfoldError`: nothing appended, the transcript's bytes
  unchanged; neither a 429/503 within the retry budget nor an overflow rejection may end
  this way;
* anything else is a crash. After every case the session reread from disk equals memory.

Error texts, the ``chat`` command's output and every log record are kept for ``leaks``.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any

from benchmarks.reliability.common import (
    KEY_ENV,
    PASSWORD,
    Figures,
    load,
    open_quiet,
    run_cli,
    short,
    tag_summary,
    worker_env,
    write_config,
)
from benchmarks.reliability.worker import filler

import ctxfold

#: Injected fault kinds, 429 and 503 twice as often (``Any``: ``Fault`` wants its literals).
KINDS: tuple[Any, ...] = ("rate_limit", "rate_limit", "overloaded", "overloaded", "drop",
                          "malformed", "slow", "stall")
PROFILES = ("deepseek", "mimo", "responses")
#: Round modes, in turn (see the module docstring).
MODES = ("wide", "prompt", "wide", "reservation")
OVERFLOW_ERRORS = (ctxfold.ContextLimitError, ctxfold.CompactionRequiredError)
RETRIES = 2
WINDOW = 30_000
ROUND = 25
REPLY = "#{tag}# done: é 漢 🙂 \u2028 \"quoted\" \\ back"


def faulted(records: Any) -> list[str]:
    """The fault of each request that had one: an injected kind, or ``overflow`` (HTTP 400:
    rejected as too long, whatever fault was queued for it)."""
    return ["overflow" if r.status == 400 else r.fault for r in records
            if r.status == 400 or r.fault]


class Texts(logging.Handler):
    """Every log record while a round runs (httpx logs each request at INFO)."""

    def __init__(self, texts: list[tuple[str, str]]) -> None:
        super().__init__(logging.DEBUG)
        self.texts = texts

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.texts.append((f"log {record.name}", record.getMessage()))
        except Exception:  # a record that cannot be formatted is not this harness's concern
            self.texts.append((f"log {record.name}", str(record.msg)))


class Round:
    """One emulator, one provider, one session."""

    def __init__(self, work: Path, number: int, rng: random.Random, emu: Any,
                 mode: str) -> None:
        self.rng = rng
        self.number = number
        self.emu = emu
        self.mode = mode
        url = emu.base_url.replace("http://", f"http://harness:{PASSWORD}@")
        budget = "[agent]\nmax_output_tokens = 1024\n" if mode == "prompt" else ""
        self.config_path = write_config(
            work / "config", work / "sessions",
            f'{budget}[provider]\nname = "{emu.profile.name}"\nbase_url = "{url}"\n'
            f'api_key_env = "{KEY_ENV}"\nmax_retries = {RETRIES}\n')
        self.config = load(self.config_path)
        self.waits: list[float] = []
        self.provider: Any = ctxfold.create_provider(self.config, options=ctxfold.ProviderOptions(
            sleep=self.waits.append, idle_timeout=0.4, total_timeout=4.0))
        self.session = f"faults-{number}"
        self.store = work / "sessions"
        self.cm = open_quiet(self.session, config=self.config, window=WINDOW,
                             summarize=tag_summary)
        self.cm.append({"role": "system", "content": f"#q{number}-0a# You are a test agent."})
        self.reply: dict[str, Any] = {}

    def script(self, body: Any, profile: Any) -> Any:
        from ctxfold.emulator import ReplySpec

        return ReplySpec(text=self.reply["text"], tool_calls=self.reply["calls"])

    def transcript(self) -> bytes:
        return (self.store / f"{self.session}.jsonl").read_bytes()

    def next_input(self, n: int) -> None:
        last = self.cm.canonical[-1]
        if last.role == "assistant" and last.tool_calls:
            for call in last.tool_calls:
                size = self.rng.randint(*((3000, 14000) if self.mode == "prompt" else
                                          (200, 6000)))
                self.cm.append_tool_result(call.id, f"#q{self.number}-{n}t# " + filler(
                    self.rng, size), tool_name="bash")
        else:
            self.cm.append({"role": "user", "content": f"#q{self.number}-{n}a# go on"})

    def case(self, n: int, figures: Figures, texts: list[tuple[str, str]]) -> None:
        rng = self.rng
        tag = f"q{self.number}-{n}r"
        calls = (ctxfold.ToolCall(id=f"call_{tag}", name="bash", arguments='{"cmd": "ls"}'),) \
            if rng.random() < (0.6 if self.mode == "prompt" else 0.35) else ()
        self.reply = {"text": REPLY.format(tag=tag), "calls": calls}
        self.next_input(n)
        from ctxfold.emulator import Fault

        injected = [Fault(rng.choice(KINDS), count=rng.choice([1, 1, 2, 3]), retry_after=0.01,
                          delay=0.05, stall_cap=1.0, interval=0.05,
                          after_events=rng.randint(0, 3))
                    for _ in range(rng.choice([0, 1, 1, 1, 2]))]
        for fault in injected:
            self.emu.inject(fault)
        before, length, start = self.transcript(), len(self.cm.canonical), len(self.emu.requests)
        try:
            response = self.cm.complete(self.provider)
        except ctxfold.CtxfoldError as exc:
            texts.append((f"faults: {type(exc).__name__}", str(exc)))
            figures.note(f"faults_error_{type(exc).__name__}")
            if self.transcript() != before or len(self.cm.canonical) != length:
                figures.problem("failures", "a failed complete() wrote to the transcript",
                                f"{type(exc).__name__}: {str(exc)[:160]}")
            rejected = any(r.status == 400 for r in self.emu.requests[start:])
            budget = [f for f in injected if f.kind in ("rate_limit", "overloaded")]
            if isinstance(exc, OVERFLOW_ERRORS):
                what = "overflow not recovered" if rejected else \
                    "complete() refused (window learned from an earlier overflow)"
                figures.problem("failures", f"{what} ({self.mode} mode, "
                                f"{self.emu.profile.name}): {type(exc).__name__}",
                                f"window {self.cm.window}: {str(exc)[:240]}")
            elif len(injected) == 1 and injected[0].count <= RETRIES and (
                    budget or (injected[0].kind == "drop" and injected[0].after_events == 0)):
                kind: str = injected[0].kind if budget else "drop before any content"
                figures.problem("failures", f"a {kind} within the retry budget was not "
                                "retried to success (design §7.1)", f"{type(exc).__name__}: "
                                f"{str(exc)[:160]}")
        except Exception as exc:
            figures.crash("faults: complete()", exc, [f.kind for f in injected])
        else:
            self.check_reply(response, before, length, tag, figures)
            if faulted(self.emu.requests[start:]):
                figures.recovered += 1
        finally:
            self.emu.faults.clear()
        hit = faulted(self.emu.requests[start:])
        figures.faults += len(hit)
        for kind in hit:
            figures.note(f"faults_hit_{kind}_{self.mode}" if kind == "overflow" else
                         f"faults_hit_{kind}")
        reread = open_quiet(self.session, config=self.config, window=WINDOW,
                            summarize=tag_summary, create=False)
        if reread.canonical != self.cm.canonical:
            figures.problem("failures", "after complete() the session on disk differs from "
                            "memory", tag)

    def check_reply(self, response: Any, before: bytes, length: int, tag: str,
                    figures: Figures) -> None:
        added = self.cm.canonical[length:]
        if len(added) != 1 or added[0].role != "assistant":
            figures.problem("failures", "complete() did not append exactly one reply",
                            f"{tag}: {short([m.role for m in added])}")
        elif added[0].content != self.reply["text"] or \
                [c.id for c in added[0].tool_calls] != [c.id for c in self.reply["calls"]]:
            figures.problem("failures", "the appended reply differs from what the provider sent",
                            f"{short(added[0].content)} != {short(self.reply['text'])}")
        if response.message.content != self.reply["text"]:
            figures.problem("failures", "complete() returned a reply that differs from the sent "
                            "one", short(response.message.content))
        if not self.transcript().startswith(before):
            figures.problem("mutations", "complete() rewrote earlier transcript bytes", tag)


class Holder:
    """The emulator's script: the reply the current round's case expects."""

    round: Round

    def __call__(self, body: Any, profile: Any) -> Any:
        return self.round.script(body, profile)


def chat_once(work: Path, one: Round, texts: list[tuple[str, str]]) -> None:
    """``ctxfold chat`` (a child process) through a fault the retries cannot absorb."""
    from ctxfold.emulator import Fault

    one.emu.inject(Fault("overloaded", count=RETRIES + 1))
    _code, out, err = run_cli(["chat", "--session", f"chat-{one.number}", "--root",
                              str(one.store), "--config", str(one.config_path)],
                             cwd=work, env=worker_env(), stdin="hello\nsecond turn\n",
                             timeout=60)
    one.emu.faults.clear()
    texts.append(("ctxfold chat stdout", out))
    texts.append(("ctxfold chat stderr", err))
    for args in (["config", "show"], ["config", "show", "--json"]):
        texts.append((f"ctxfold {' '.join(args)}", "\n".join(
            map(str, run_cli([*args, "--config", str(one.config_path)], cwd=work,
                             env=worker_env())))))


def run(cases: int, work: Path, *, seed: int = 0, texts: list[tuple[str, str]] | None = None,
        log: Any = None) -> Figures:
    """``cases`` calls of ``complete()``; ``texts`` collects what a user would see."""
    from ctxfold.emulator import Emulator

    figures = Figures()
    rng = random.Random(seed)
    texts = [] if texts is None else texts
    handler = Texts(texts)
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        for number in range((cases + ROUND - 1) // ROUND):
            mode = MODES[number % len(MODES)]
            window = None if mode == "wide" else rng.choice([6_000, 12_000])
            holder = Holder()
            with Emulator(rng.choice(PROFILES), window=window,
                          counter=lambda t: max(1, len(t) // 4), script=holder) as emu:
                one = holder.round = Round(work / f"round-{number}", number, rng, emu, mode)
                for n in range(1, min(ROUND, cases - number * ROUND) + 1):
                    one.case(n, figures, texts)
                    figures.note("faults_cases")
                if number % 4 == 0:
                    chat_once(work, one, texts)
                    figures.note("faults_chat_runs")
                one.provider.close()
            if log:
                print(f"faults: round {number + 1} {figures.summary_line()}", file=log,
                      flush=True)
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    return figures
