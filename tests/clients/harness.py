"""The stack a real client runs against: ``ctxfold emulate`` (the upstream, scripted with
rules that call the client's own tools) and ``ctxfold serve`` (the proxy under test), each a
real process on an ephemeral 127.0.0.1 port, plus what a driver asserts afterwards.

Key modes. ``forwarded`` (what users run by default): no provider key is configured where
the proxy runs; the client sends :data:`CLIENT_KEY` and the proxy must forward it, to every
upstream call (summaries included). ``configured``: the proxy's provider key variable holds
:data:`CLIENT_KEY` and the client sends another key, which the proxy must not use. Either
way the emulator refuses any request without :data:`CLIENT_KEY` with a 401, so a key lost on
the way shows.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import attrs

#: The key every upstream request must carry (a made-up one: the emulator checks it).
CLIENT_KEY = "sk-ctxfold-clients-test-0123456789abcdef"
#: What a client sends in ``configured`` mode (never valid upstream).
OTHER_KEY = "sk-ctxfold-clients-not-the-provider-key"
#: The provider key variable of the proxy's config; set only in ``configured`` mode.
PROVIDER_KEY_ENV = "CTXFOLD_CLIENTS_PROVIDER_KEY"
#: The emulator reads the key it requires from here.
EMULATOR_KEY_ENV = "CTXFOLD_CLIENTS_EMULATOR_KEY"

KeyMode = Literal["forwarded", "configured"]
CTXFOLD = str(Path(sys.executable).with_name("ctxfold"))
#: The turn number the client wrote in its newest message, as an emulator rule template (it
#: survives the proxy's folding, which a count of the request's messages does not).
TURN = "{{match:Turn ([0-9]+)}}"


def print_filler(step: str, repeat: int = 200) -> str:
    """The shell command a rule has the model run: step ``step``'s numbered filler text."""
    return ("python3 -c \"print('CTXFOLD-STEP-" + step + " ' + 'lorem ipsum dolor sit amet, "
            f"consectetur adipiscing elit ' * {repeat})\"")


def _start(argv: Sequence[str], *, env: Mapping[str, str], log: Path,
           timeout: float = 60.0) -> tuple[subprocess.Popen[str], str]:
    """Start a ctxfold server process; return it and the URL it printed first."""
    err = log.open("a")
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=err, text=True,
                            env=dict(env), start_new_session=True)
    err.close()
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    line = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline().strip()
        if line.startswith("http://") or proc.poll() is not None:
            break
    if not line.startswith("http://"):
        _stop(proc)
        raise RuntimeError(f"{argv[1]} did not start: {log.read_text()[-2000:]}")
    return proc, line


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def base_env() -> dict[str, str]:
    """This process's environment without anything that would point a client elsewhere
    (OpenAI/LiteLLM/Codex variables, proxies)."""
    drop = re.compile(r"^(OPENAI_|AZURE_|ANTHROPIC_|LITELLM_|CODEX_|OPENCODE|AIDER_|LLM_|"
                      r"MSWEA_|DEEPSEEK_|MIMO_|CTXFOLD_)|_proxy$|_PROXY$")
    return {k: v for k, v in os.environ.items() if not drop.search(k)}


@attrs.define
class Stack:
    """Emulator + proxy for one client run (see the module doc)."""

    root: Path
    #: The emulator's profile and the proxy's provider (one wire end to end; ``anthropic``
    #: is the Messages wire with cache breakpoints ctxfold places).
    profile: Literal["deepseek", "responses", "anthropic"]
    window: int
    rules: Mapping[str, Any]
    key_mode: KeyMode = "forwarded"
    emulator_url: str = ""
    proxy_url: str = ""
    _procs: list[subprocess.Popen[str]] = attrs.field(factory=list)

    @property
    def sessions_dir(self) -> Path:
        return self.root / "sessions"

    @property
    def config_path(self) -> Path:
        return self.root / "ctxfold.toml"

    @property
    def proxy_log(self) -> Path:
        return self.root / "serve.log"

    @property
    def emulator_log(self) -> Path:
        return self.root / "upstream.jsonl"

    @property
    def client_key(self) -> str:
        """The key the client is configured with."""
        return CLIENT_KEY if self.key_mode == "forwarded" else OTHER_KEY

    @property
    def base_url(self) -> str:
        """What the client is pointed at (``http://127.0.0.1:PORT/v1``)."""
        return self.proxy_url

    @property
    def root_url(self) -> str:
        """The proxy without ``/v1`` (``http://127.0.0.1:PORT``): what Anthropic clients are
        pointed at (the SDK's ``base_url``, Claude Code's ``ANTHROPIC_BASE_URL``), which
        append ``/v1/messages`` themselves."""
        return self.proxy_url.removesuffix("/v1")

    def start(self) -> Stack:
        override = os.environ.get("CTXFOLD_CLIENTS_KEY_MODE")
        if override:  # e.g. to see what fails apart from the forwarded key
            assert override in ("forwarded", "configured"), override
            self.key_mode = override  # type: ignore[assignment]
        window = os.environ.get("CTXFOLD_CLIENTS_WINDOW")
        if window:  # diagnosis: a window no session reaches shows what fails without a fold
            self.window = int(window)
        self.root.mkdir(parents=True, exist_ok=True)
        rules = self.root / "rules.json"
        rules.write_text(json.dumps(self.rules, indent=1))
        env = base_env()
        env[EMULATOR_KEY_ENV] = CLIENT_KEY
        emu, self.emulator_url = _start(
            [CTXFOLD, "emulate", "--port", "0", "--profile", self.profile, "--script",
             str(rules), "--log-requests", str(self.emulator_log), "--key-env",
             EMULATOR_KEY_ENV], env=env, log=self.root / "emulate.log")
        self._procs.append(emu)
        upstream = self.emulator_url + ("/v1" if self.profile == "responses" else "")
        self.config_path.write_text(
            "[provider]\n"
            f"name = \"{self.profile}\"\n"
            f"base_url = \"{upstream}\"\n"
            f"api_key_env = \"{PROVIDER_KEY_ENV}\"\n"
            "max_retries = 0\n"
            "[store]\n"
            f"path = \"{self.sessions_dir}\"\n")
        env = base_env()
        if self.key_mode == "configured":
            env[PROVIDER_KEY_ENV] = CLIENT_KEY
        proxy, self.proxy_url = _start(
            [CTXFOLD, "serve", "--config", str(self.config_path), "--port", "0", "--window",
             str(self.window), "--lock-wait", "20"], env=env, log=self.proxy_log)
        self._procs.append(proxy)
        return self

    def stop(self) -> None:
        for proc in reversed(self._procs):
            _stop(proc)
        self._procs.clear()

    # -- what happened ---------------------------------------------------------------------

    def upstream_requests(self) -> list[dict[str, Any]]:
        """Every request the emulator received (masked), in order."""
        if not self.emulator_log.exists():
            return []
        return [json.loads(line) for line in self.emulator_log.read_text().splitlines()
                if line.strip()]

    def proxy_failures(self) -> list[str]:
        """The proxy's log lines of answers it did not give with 200, and its refusals."""
        bad = []
        for line in self.proxy_log.read_text().splitlines():
            status = re.search(r" status=(\d{3}) ", line)
            if (status and status[1] != "200") or " refused: " in line or "Traceback" in line \
                    or " ERROR " in line:
                bad.append(line)
        return bad

    def upstream_failures(self) -> list[str]:
        """Upstream requests the emulator did not answer with 200 (an overflow, a 401 for a
        lost key, a malformed body)."""
        return [f"#{r['index']} {r['method']} {r['path']} -> {r['status']}"
                for r in self.upstream_requests() if r["status"] != 200]

    def _ctxfold(self, *args: str) -> Any:
        out = subprocess.run([CTXFOLD, *args, "--root", str(self.sessions_dir), "--json"],
                             capture_output=True, text=True, timeout=120, check=True,
                             env=base_env(), cwd=self.root)
        return json.loads(out.stdout)

    def sessions(self) -> list[dict[str, Any]]:
        """``ctxfold sessions list --json``."""
        listed = self._ctxfold("sessions", "list")
        return listed if isinstance(listed, list) else listed.get("sessions", [])

    def summary(self) -> str:
        """A short account for assertion messages."""
        statuses: dict[int, int] = {}
        for r in self.upstream_requests():
            statuses[r["status"]] = statuses.get(r["status"], 0) + 1
        tail = self.proxy_failures()[:6]
        return (f"upstream statuses {statuses}; proxy failures ({len(self.proxy_failures())}):"
                "\n  " + "\n  ".join(tail))


@contextmanager
def running(stack: Stack) -> Iterator[Stack]:
    """Start ``stack``, stop it afterwards whatever happens."""
    try:
        yield stack.start()
    finally:
        stack.stop()


@attrs.frozen
class Run:
    """One client process that finished."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def describe(self) -> str:
        return (f"{' '.join(self.argv)[:200]} -> exit {self.returncode} in {self.seconds:.0f}s"
                f"\n--- stdout (tail)\n{self.stdout[-2500:]}\n--- stderr (tail)\n"
                f"{self.stderr[-2500:]}")


def client_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A clean environment for a client: its own HOME and XDG directories (no user config
    is read or written), nothing pointing anywhere but what ``extra`` sets."""
    env = base_env()
    for name, sub in (("HOME", ""), ("XDG_CONFIG_HOME", ".config"),
                      ("XDG_DATA_HOME", ".local/share"), ("XDG_CACHE_HOME", ".cache"),
                      ("XDG_STATE_HOME", ".local/state")):
        path = home / sub if sub else home
        path.mkdir(parents=True, exist_ok=True)
        env[name] = str(path)
    env.update(extra or {})
    return env


def run_client(argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, timeout: float,
               stdin: str | None = None) -> Run:
    """Run one client command to its end (killed with its process group at ``timeout``)."""
    started = time.monotonic()
    proc = subprocess.Popen(list(argv), cwd=cwd, env=dict(env), text=True,
                            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        err += f"\n[killed after {timeout:g}s]"
    return Run(argv=tuple(argv), returncode=proc.returncode, stdout=out, stderr=err,
               seconds=time.monotonic() - started)


def tool(name: str) -> str:
    """The path of an installed client executable (``.ci/clients.sh`` installs them and
    exports ``CTXFOLD_CLIENTS_HOME``)."""
    home = Path(os.environ["CTXFOLD_CLIENTS_HOME"])
    for candidate in (home / "npm" / "node_modules" / ".bin" / name,
                      *sorted(home.glob(f"venv-*/bin/{name}"))):
        if candidate.exists():
            return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} is not installed under {home}; run .ci/clients.sh")
    return found


def venv_python(client: str) -> str:
    """The interpreter of a client's own virtualenv."""
    return str(Path(os.environ["CTXFOLD_CLIENTS_HOME"]) / f"venv-{client}" / "bin" / "python")


# -- assertions shared by the drivers ------------------------------------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def _anthropic_results(messages: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """``(tool name, result text)`` of the ``tool_result`` blocks of an Anthropic body's
    last message (a user message), named from the ``tool_use`` blocks before it."""
    if not messages or messages[-1].get("role") != "user" \
            or not isinstance(messages[-1].get("content"), list):
        return []
    names = {b.get("id"): b.get("name") for m in messages if m.get("role") == "assistant"
             and isinstance(m.get("content"), list) for b in m["content"]
             if isinstance(b, Mapping) and b.get("type") == "tool_use"}
    return [(str(names.get(b.get("tool_use_id"))), _text_of(b.get("content")))
            for b in messages[-1]["content"]
            if isinstance(b, Mapping) and b.get("type") == "tool_result"]


def tool_rounds(requests: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """``(tool name, result text)`` of every upstream request that ends with the result of
    a tool call made in the same body: what the client sent back after running its tool
    (Chat Completions ``tool`` messages, Responses ``*_call_output`` items, Anthropic
    ``tool_result`` blocks)."""
    rounds = []
    for request in requests:
        body = request.get("body") or {}
        if "messages" in body and _anthropic_results(body["messages"]):
            rounds += _anthropic_results(body["messages"])
        elif "messages" in body:
            items = body["messages"]
            tail = []
            for item in reversed(items):
                if item.get("role") != "tool":
                    break
                tail.append(item)
            names = {c.get("id"): c.get("function", {}).get("name")
                     for m in items if m.get("role") == "assistant"
                     for c in m.get("tool_calls") or ()}
            rounds += [(str(names.get(t.get("tool_call_id"))), _text_of(t.get("content")))
                       for t in reversed(tail)]
        elif isinstance(body.get("input"), list):
            items = body["input"]
            tail = []
            for item in reversed(items):
                if not str(item.get("type", "")).endswith("_call_output"):
                    break
                tail.append(item)
            names = {i.get("call_id"): i.get("name") for i in items
                     if str(i.get("type", "")).endswith("_call")}
            rounds += [(str(names.get(t.get("call_id"))), _text_of(t.get("output")))
                       for t in reversed(tail)]
    return rounds


def reached_upstream(stack: Stack, text: str) -> bool:
    """Whether a message containing ``text`` was in some upstream request's history."""
    return any(text in json.dumps(r.get("body"), ensure_ascii=False)
               for r in stack.upstream_requests())


def install_count(stack: Stack) -> int:
    """Distinct checkpoints installed over every session of the run (a fork that carries
    its parent's records does not count them twice)."""
    seen = set()
    for session in stack.sessions():
        report = stack._ctxfold("inspect", session["id"], "--window", str(stack.window))
        for t in report.get("telemetry", []):
            if t.get("kind") == "install" and t.get("action") == "summary":
                seen.add((t.get("created_at"), t.get("projection_version"),
                          t.get("tokens_before"), t.get("tokens_after")))
    return len(seen)


def check_client(stack: Stack, run: Run) -> None:
    """Fail now when a client run failed (the next run of the driver would only repeat it)."""
    assert run.returncode == 0, f"the client failed: {run.describe()}\n{stack.summary()}"


def check_run(stack: Stack, runs: Sequence[Run], *, min_installs: int = 3) -> None:
    """What every driver asserts: each client run exited 0; the proxy answered every
    request with 200 and refused nothing; the upstream answered every request with 200 (no
    overflow, no lost key); at least ``min_installs`` checkpoints were installed."""
    for run in runs:
        check_client(stack, run)
    assert stack.proxy_failures() == [], stack.summary()
    assert stack.upstream_failures() == [], stack.summary()
    installs = install_count(stack)
    assert installs >= min_installs, (
        f"{installs} checkpoint(s) installed, expected at least {min_installs}; sessions: "
        f"{[(s['id'], s.get('messages')) for s in stack.sessions()]}\n{stack.summary()}")
