"""Fuzz target ``proxy``: what a client — a buggy agent, a hostile tool loop, a web page — can
send ``ctxfold serve``, driven from outside over HTTP like any client (the proxy's code is
not imported).

The proxy runs as ``ctxfold serve --port 0`` with the loopback emulator upstream. Each case
is one request: a Chat Completions or Responses body with hostile values where strings,
lists and objects belong (lone surrogates, 5,000-digit numbers, NaN, nesting 100 to 100,000
levels deep), arbitrary JSON, bytes that are not JSON or not UTF-8, bodies of megabytes,
odd content types and headers (session ids, ``Origin``, ``Host``). Checked:

* every request is answered within ``case_seconds`` (a proxy that does not answer is killed
  and started again);
* no answer is a 500 and no error answer leaves the client's wire shape (a JSON
  ``{"error": {...}}`` object): either is an exception the proxy did not handle (a
  ``crash``), and so is a traceback in its log or the process dying;
* ``/healthz`` keeps answering while it runs.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from benchmarks.reliability.common import CLI, Figures, short, worker_env, write_config
from benchmarks.reliability.fuzz_calls import ITEM, MESSAGE, TOOL_CALL
from benchmarks.reliability.fuzz_values import DEPTHS, INTS, TEXT, VALUES, dumps, run_target
from hypothesis import strategies as st

CASE_SECONDS = 10.0
HEALTH_EVERY = 25
WINDOW = 16_000
PATHS = ["/v1/chat/completions", "/v1/responses", "/chat/completions", "/responses"]
CONTENT_TYPES = ["application/json", "application/json; charset=utf-8", "text/plain", "",
                 "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                 "application/json; charset=latin-1"]
#: Header values http.client can send (printable ASCII and Latin-1, no line breaks).
HEADER_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF,
                                    exclude_characters="\x7f"), max_size=40)


def _bodies() -> st.SearchStrategy[bytes]:
    model = st.one_of(st.sampled_from(["deepseek-flash", "gpt-5.5", ""]), TEXT, VALUES)
    tools = st.one_of(VALUES, st.lists(st.fixed_dictionaries(
        {"type": st.just("function"), "function": st.fixed_dictionaries(
            {"name": st.one_of(st.just("bash"), TEXT, VALUES)},
            optional={"parameters": VALUES, "description": TEXT})}), max_size=2))
    common = {"stream": st.one_of(st.booleans(), VALUES), "tools": tools,
              "max_tokens": INTS, "max_output_tokens": INTS, "temperature": VALUES,
              "stream_options": VALUES, "metadata": VALUES, "tool_choice": VALUES,
              "extra": VALUES}
    user = st.fixed_dictionaries({"role": st.just("user"), "content": TEXT})
    chat = st.fixed_dictionaries(
        {"model": model, "messages": st.one_of(
            st.lists(st.one_of(MESSAGE, user, user), max_size=4), VALUES)},
        optional=common)
    responses = st.fixed_dictionaries(
        {"model": model, "input": st.one_of(TEXT, st.lists(st.one_of(ITEM, user), max_size=4),
                                            VALUES)},
        optional={**common, "instructions": st.one_of(TEXT, VALUES),
                  "previous_response_id": st.one_of(TEXT, VALUES),
                  "store": VALUES, "tool_calls": st.lists(TOOL_CALL, max_size=1)})
    documents = st.tuples(st.one_of(chat, responses, VALUES), DEPTHS).map(
        lambda r: dumps(r[0], r[1]).encode("utf-8", "surrogatepass"))
    deep = DEPTHS.map(lambda d: [b"[" * d + b"]" * d,
                                 b'{"model": "m", "messages": ' + b"[" * d + b"]" * d + b"}",
                                 b'{"model": "m", "input": [' + b'{"a":' * d + b"1"
                                 + b"}" * d + b"]}"])
    big = st.sampled_from([1, 4]).map(
        lambda mb: b'{"model": "m", "messages": [{"role": "user", "content": "'
        + b"x" * (mb << 20) + b'"}]}')
    return st.one_of(documents, documents, documents,
                     st.tuples(deep, st.integers(0, 2)).map(lambda r: r[0][r[1]]),
                     st.binary(max_size=300), big,
                     st.just(b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'))


def requests() -> st.SearchStrategy[dict[str, Any]]:
    headers = st.fixed_dictionaries({}, optional={
        "X-Ctxfold-Session": st.one_of(st.sampled_from(["a", "a.tokens-x", "../x", "x" * 300,
                                                        "s1"]), HEADER_TEXT),
        "Authorization": st.one_of(st.just("Bearer sk-fuzz"), HEADER_TEXT),
        "Origin": st.sampled_from(["http://evil.example", "null", "http://127.0.0.1"]),
        "Host": st.sampled_from(["evil.example", "localhost:1", "127.0.0.1"]),
        "Accept": st.sampled_from(["text/event-stream", "*/*", ""]),
    })
    return st.fixed_dictionaries({"path": st.sampled_from(PATHS),
                                  "content_type": st.sampled_from(CONTENT_TYPES),
                                  "headers": headers, "body": _bodies()})


class Proxy:
    """``ctxfold serve`` in a child process (emulator upstream), restarted when it dies or
    stops answering."""

    def __init__(self, work: Path) -> None:
        self.work = work
        work.mkdir(parents=True, exist_ok=True)
        self.config = write_config(work, work / "sessions")
        self.log = work / "serve-stderr.txt"
        self.process: Any = None
        self.read = 0
        self.start()

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", CLI, "serve", "--port", "0", "--config", str(self.config),
             "--root", str(self.work / "sessions"), "--window", str(WINDOW)],
            stdout=subprocess.PIPE, stderr=open(self.log, "ab"),  # noqa: SIM115
            env=worker_env(), cwd=self.work)
        assert self.process.stdout is not None
        line = self.process.stdout.readline().decode().strip()
        if not line.startswith("http://"):
            raise RuntimeError(f"ctxfold serve did not print its URL: {line!r}")
        address = urlsplit(line)
        self.host, self.port = address.hostname or "127.0.0.1", address.port or 0

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def send(self, method: str, path: str, headers: dict[str, str], body: bytes | None,
             seconds: float) -> tuple[int, str, bytes] | None:
        """(status, content type, body), or ``None`` when no whole answer came in time."""
        deadline = time.monotonic() + seconds
        connection = http.client.HTTPConnection(self.host, self.port, timeout=seconds)
        try:
            connection.putrequest(method, path, skip_host="Host" in headers,
                                  skip_accept_encoding=True)
            for name, value in headers.items():
                connection.putheader(name, value)
            if body is not None:
                connection.putheader("Content-Length", str(len(body)))
            connection.endheaders(body)
            response = connection.getresponse()
            chunks = []
            while True:
                if time.monotonic() > deadline:
                    return None
                chunk = response.read1(65536) if hasattr(response, "read1") else \
                    response.read(65536)
                if not chunk:
                    break
                chunks.append(chunk)
            return response.status, response.getheader("Content-Type") or "", b"".join(chunks)
        except TimeoutError:
            return None
        except (OSError, http.client.HTTPException):
            return -1, "", b""  # the connection was closed without an answer
        finally:
            connection.close()

    def new_log(self) -> str:
        """What the proxy logged since the last call."""
        try:
            with self.log.open("rb") as f:
                f.seek(self.read)
                data = f.read()
        except OSError:
            return ""
        self.read += len(data)
        return data.decode("utf-8", "replace")


def exception_of(log: str) -> str:
    """The exception of the first traceback in ``log`` (its type and the start of its
    message), or ``""`` (also while the traceback is still being written)."""
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last)"):
            for after in lines[i + 1:]:
                if after and not after[0].isspace():
                    return after[:100]
            return ""
    return ""


def is_error_envelope(body: bytes) -> bool:
    try:
        document = json.loads(body)
    except ValueError:
        return False
    return isinstance(document, dict) and isinstance(document.get("error"), dict)


def proxy_target(proxy: Proxy, case_seconds: float) -> tuple[Any, Any]:
    count = 0

    def check(request: dict[str, Any], figures: Figures) -> None:
        nonlocal count
        count += 1
        headers = dict(request["headers"])
        if request["content_type"]:
            headers["Content-Type"] = request["content_type"]
        example = short({**request, "body": request["body"][:200]}, 300)
        answer = proxy.send("POST", request["path"], headers, request["body"], case_seconds)
        logged = proxy.new_log()
        if answer is not None and answer[0] in (500, -1):  # its traceback may come after it
            deadline = time.monotonic() + 1.0
            while not exception_of(logged) and time.monotonic() < deadline:
                time.sleep(0.02)
                logged += proxy.new_log()
        raised = exception_of(logged)
        if not proxy.alive():
            figures.problem("crashes", "fuzz proxy: the proxy process died", example)
            proxy.start()
            return
        if answer is None:
            figures.problem("failures", f"the proxy did not answer within {case_seconds:g} s",
                            example)
            proxy.stop()
            proxy.start()
            return
        status, content_type, body = answer
        figures.note(f"fuzz_proxy_status_{status}")
        if raised or status in (500, -1):  # one crash per request, named by its exception
            what = raised or (f"answered {status} "
                              f"{content_type.split(';')[0] or '(no content type)'}")
            figures.problem("crashes", f"fuzz proxy: {what}",
                            f"status {status} {body[:60]!r} <- {example}")
        elif status >= 400 and not is_error_envelope(body):
            figures.problem("failures", f"an error answer ({status}) is not an OpenAI error "
                            "object", f"{body[:100]!r} <- {example}")
        if count % HEALTH_EVERY == 0:
            health = proxy.send("GET", "/healthz", {}, None, 5.0)
            if health is None or health[0] != 200:
                figures.problem("failures", "/healthz did not answer 200 within 5 s while "
                                "fuzzing", str(health and health[0]))

    return requests(), check


def run(examples: int, work: Path, *, seed: int = 0, case_seconds: float = CASE_SECONDS,
        log: Any = None) -> Figures:
    figures = Figures()
    proxy = Proxy(work)
    try:
        strategy, check = proxy_target(proxy, case_seconds)
        run_target("proxy", strategy, check, examples, seed, figures)
    finally:
        proxy.stop()
    if log:
        print(f"fuzz proxy: {figures.summary_line()}", file=log, flush=True)
    return figures
