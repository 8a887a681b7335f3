"""Load benchmark of ``ctxfold serve``: N concurrent clients × M turns over loopback.

For each number of clients (``--clients 1,8``) two processes are started: ``ctxfold
emulate`` (the upstream, scripted to answer every turn with a tool call) and ``ctxfold
serve`` in front of it (``[provider] name = "deepseek"`` pointed at the emulator, a small
``--window`` so checkpoints happen). Each client runs an agent's loop — its whole history
resent every turn, a tool result of ``--result-chars`` appended after each call — first
straight to the emulator, then through the proxy, with the same history sizes. The proxy's
*added latency* of a turn is its latency through the proxy minus the same client's same turn
straight to the emulator; turns are split by what ctxfold did (``X-Ctxfold-Action``):
``none`` is below the trigger, anything else a checkpoint (its summary request is part of
what the turn costs). Also reported: throughput of each phase and the serve process's memory.

Writes the "## ctxfold serve overhead" section of docs/performance.md (``--no-write`` to
skip). Run: ``python benchmarks/bench_serve.py`` (needs the ``serve`` extra).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine_line, write_section

SECTION = "## ctxfold serve overhead"
BASH = {"type": "function", "function": {
    "name": "bash", "description": "Run a shell command.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                   "required": ["command"]}}}
CLI = [sys.executable, "-c", "import sys; from ctxfold.cli.main import main; "
       "sys.exit(main(sys.argv[1:]))"]


def start(args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """Start a ctxfold command; return it and the first line it prints (its URL)."""
    process = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, env=env)
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line.startswith("http://127.0.0.1:"):
        process.kill()
        raise SystemExit(f"ctxfold {args[0]} did not start (printed {line!r})")
    return process, line


def memory(pid: int) -> dict[str, float]:
    """Resident and peak resident memory of ``pid`` in MiB (Linux ``/proc``)."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            out[name] = int(value.split()[0]) / 1024
    return out


def result_text(client: int, turn: int, chars: int) -> str:
    line = f"[{client}:{turn}] build step output: compiling module, 3 warnings, tests pass\n"
    return (line * (chars // len(line) + 1))[:chars]


async def client_loop(http: httpx.AsyncClient, url: str, client: int, turns: int,
                      chars: int, session: str | None) -> list[tuple[float, str]]:
    """One agent: ``turns`` requests; (seconds, action) of each."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a build agent. Use the bash tool."},
        {"role": "user", "content": f"Client {client}: make the build green."}]
    headers = {"X-Ctxfold-Session": session} if session else {}
    out = []
    for turn in range(turns):
        body = {"model": "deepseek-flash", "messages": messages, "tools": [BASH]}
        started = time.perf_counter()
        response = await http.post(url, json=body, headers=headers)
        seconds = time.perf_counter() - started
        response.raise_for_status()
        out.append((seconds, response.headers.get("x-ctxfold-action", "direct")))
        message = response.json()["choices"][0]["message"]
        messages.append(message)
        for call in message.get("tool_calls") or ():
            messages.append({"role": "tool", "tool_call_id": call["id"],
                             "content": result_text(client, turn, chars)})
        if not message.get("tool_calls"):
            messages.append({"role": "user", "content": "go on"})
    return out


async def phase(url: str, clients: int, turns: int, chars: int,
                proxied: bool) -> tuple[list[list[tuple[float, str]]], float]:
    limits = httpx.Limits(max_connections=clients * 2)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        started = time.perf_counter()
        results = await asyncio.gather(*(
            client_loop(http, url, c, turns, chars, f"bench-{c}" if proxied else None)
            for c in range(clients)))
        return list(results), time.perf_counter() - started


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


@contextlib.contextmanager
def stack(script: list[dict[str, Any]], window: int
          ) -> Iterator[tuple[str, str, subprocess.Popen[str]]]:
    """``ctxfold emulate`` answering with ``script`` and ``ctxfold serve --window window`` in
    front of it (DeepSeek provider, a key of its own), each a process of its own: yields the
    emulator's URL, the proxy's URL and the proxy process; both stopped on exit."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "script.json").write_text(json.dumps(script))
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTXFOLD_")}
        env |= {"CTXFOLD_CONFIG_HOME": str(root / "home"), "BENCH_KEY": "local-bench-key"}
        emulate, emu_url = start(["emulate", "--port", "0", "--script",
                                  str(root / "script.json")], env)
        try:
            (root / "ctxfold.toml").write_text(
                f'[provider]\nname = "deepseek"\nbase_url = "{emu_url}"\n'
                f'api_key_env = "BENCH_KEY"\n\n[store]\npath = "{root / "sessions"}"\n')
            serve, serve_url = start(["serve", "--port", "0", "--window", str(window),
                                      "--config", str(root / "ctxfold.toml")], env)
            try:
                yield emu_url, serve_url, serve
            finally:
                serve.terminate()
                serve.wait(30)
        finally:
            emulate.terminate()
            emulate.wait(30)


def run(args: argparse.Namespace) -> dict[str, Any]:
    script = [{"tool_calls": [{"id": f"call_{i}", "name": "bash",
                               "arguments": {"command": f"make step{i}"}}]}
              for i in range(2 * args.clients * args.turns + 64)]
    with stack(script, args.window) as (emu_url, serve_url, serve):
        direct, direct_s = asyncio.run(phase(f"{emu_url}/chat/completions", args.clients,
                                             args.turns, args.result_chars, proxied=False))
        via, via_s = asyncio.run(phase(f"{serve_url}/chat/completions", args.clients,
                                       args.turns, args.result_chars, proxied=True))
        mem = memory(serve.pid)
    added: dict[str, list[float]] = {"below": [], "checkpoint": []}
    for mine, base in zip(via, direct, strict=True):
        for (seconds, action), (baseline, _) in zip(mine, base, strict=True):
            added["below" if action == "none" else "checkpoint"].append(seconds - baseline)
    turns = args.clients * args.turns
    return {
        "clients": args.clients, "turns": args.turns, "window": args.window,
        "result_chars": args.result_chars,
        "direct_p50": pct([s for c in direct for s, _ in c], 0.5),
        "proxy_p50": pct([s for c in via for s, _ in c], 0.5),
        "below_n": len(added["below"]), "checkpoint_n": len(added["checkpoint"]),
        "below_p50": pct(added["below"], 0.5), "below_p99": pct(added["below"], 0.99),
        "checkpoint_p50": pct(added["checkpoint"], 0.5) if added["checkpoint"] else None,
        "checkpoint_p99": pct(added["checkpoint"], 0.99) if added["checkpoint"] else None,
        "direct_rps": turns / direct_s, "proxy_rps": turns / via_s,
        "rss_mib": mem.get("VmRSS", 0.0), "peak_rss_mib": mem.get("VmHWM", 0.0),
        "below_mean": statistics.fmean(added["below"]) * 1000,
    }


async def overhead_loop(emu_url: str, serve_url: str, turns: int, chars: int,
                        stream: bool) -> list[float]:
    """One conversation below the trigger: each turn's body sent straight to the emulator
    and through the proxy, back to back (alternating which goes first), on kept-alive
    connections; the proxy's added latency of each turn (seconds). Streamed: the time to the
    first content or tool-call delta."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a build agent. Use the bash tool."},
        {"role": "user", "content": f"Make the build green ({'streamed' if stream else 'plain'})."}]
    added = []
    async with httpx.AsyncClient(timeout=120) as http:
        async def timed(url: str, body: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
            started = time.perf_counter()
            if not stream:
                response = await http.post(url, json=body,
                                           headers={"Authorization": "Bearer k"})
                seconds = time.perf_counter() - started
                response.raise_for_status()
                return seconds, response.json()["choices"][0]["message"]
            async with http.stream("POST", url, json={**body, "stream": True},
                                   headers={"Authorization": "Bearer k"}) as response:
                response.raise_for_status()
                seconds = None
                async for line in response.aiter_lines():
                    if seconds is None and line.startswith("data: {") and (
                            '"tool_calls"' in line or ('"content":"' in line
                            and '"content":""' not in line)):
                        seconds = time.perf_counter() - started
                return seconds if seconds is not None else time.perf_counter() - started, None

        for turn in range(turns):
            body = {"model": "deepseek-flash", "messages": messages, "tools": [BASH]}
            order = [(emu_url, False), (serve_url, True)]
            if turn % 2:
                order.reverse()
            timing: dict[bool, float] = {}
            for url, proxied in order:
                timing[proxied], _ = await timed(url + "/chat/completions", body)
            added.append(timing[True] - timing[False])
            # The script answers both requests of a turn alike: the history is the answer.
            index = turn + (turns if stream else 0)
            call = {"id": f"call_{index}", "type": "function", "function": {
                "name": "bash", "arguments": json.dumps({"command": f"make step{index}"})}}
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            messages.append({"role": "tool", "tool_call_id": call["id"],
                             "content": result_text(0, turn, chars)})
    return added


def overhead(args: argparse.Namespace) -> dict[str, Any]:
    """The proxy's added latency below the trigger (see :func:`overhead_loop`): the emulator
    answers every turn with the same tool call, the window is large enough that nothing is
    ever folded, so the proxy sends the client's own history and only its own work differs."""
    script = [{"text": "", "tool_calls": [{"id": f"call_{i}", "name": "bash",
                                           "arguments": {"command": f"make step{i}"}}]}
              for i in range(2 * args.turns) for _ in (0, 1)]  # one per request
    with stack(script, 1_000_000) as (emu_url, serve_url, _serve):
        plain = asyncio.run(overhead_loop(emu_url, serve_url, args.turns, args.result_chars,
                                          stream=False))
        streamed = asyncio.run(overhead_loop(emu_url, serve_url, args.turns,
                                             args.result_chars, stream=True))
    return {"turns": args.turns, "result_chars": args.result_chars,
            "plain_p50": pct(plain, 0.5), "plain_p90": pct(plain, 0.9),
            "plain_p99": pct(plain, 0.99), "stream_p50": pct(streamed, 0.5),
            "stream_p90": pct(streamed, 0.9), "stream_p99": pct(streamed, 0.99)}


def report(results: list[dict[str, Any]], command: str,
           below: list[dict[str, Any]] | None = None) -> str:
    def ms(value: float | None) -> str:
        return "—" if value is None else f"{value:.1f} ms"

    def row(label: str, cell: Any) -> str:
        return f"| {label} | " + " | ".join(cell(r) for r in results) + " |"

    first = results[0]
    return "\n".join([
        SECTION,
        "",
        machine_line("benchmarks/bench_serve.py") + f" CPU: {cpu_model()} "
        f"(`nproc` = {os.cpu_count()}).",
        "",
        f"`{command}`: N concurrent clients × {first['turns']} turns each, over loopback, "
        f"against `ctxfold emulate` (DeepSeek profile, its tokenizer); `ctxfold serve --window "
        f"{first['window']}` (default estimator, the `llm` summarizer through the same "
        "upstream) in front of it as a separate process; clients, proxy and emulator share "
        f"the machine's CPUs. Each turn appends a {first['result_chars']:,}-character tool "
        "result. *Added latency* = a turn through the proxy minus the same client's same turn "
        "straight to the emulator (same history size); at a checkpoint it includes the "
        "summary request the proxy makes (one more upstream round trip), and after one the "
        "proxy sends *less* than the client's history, so later turns can be faster than "
        "direct (negative). The first turn of each session also opens it.",
        "",
        "| measure | " + " | ".join(f"{r['clients']} client(s)" for r in results) + " |",
        "|---|" + "---|" * len(results),
        row("latency straight to the emulator, p50", lambda r: ms(r["direct_p50"])),
        row("latency through the proxy, p50", lambda r: ms(r["proxy_p50"])),
        row("added latency below the trigger, p50 / p99 (turns)",
            lambda r: f"{ms(r['below_p50'])} / {ms(r['below_p99'])} ({r['below_n']})"),
        row("added latency at a checkpoint, p50 / p99 (turns)",
            lambda r: f"{ms(r['checkpoint_p50'])} / {ms(r['checkpoint_p99'])} "
                      f"({r['checkpoint_n']})"),
        row("throughput straight / through the proxy",
            lambda r: f"{r['direct_rps']:.1f} / {r['proxy_rps']:.1f} turns/s"),
        row("serve process memory at the end / peak (RSS)",
            lambda r: f"{r['rss_mib']:.0f} / {r['peak_rss_mib']:.0f} MiB"),
        "",
        "Where a turn's time goes in the proxy: decoding the client's body (O(history), in C), "
        "reading only the messages that differ from the conversation's last request, the two "
        "durable appends (an fsync each), `prepare()` (counting the new messages), the "
        "upstream body from each message's JSON kept between turns, and the HTTP layers — "
        "all on one Python process, so with many concurrent clients on few cores the added "
        "latency is mostly waiting for the CPU. Tails are noisy on a shared machine.",
        *([] if not below else [
            "",
            f"**Added latency below the trigger, one continuing conversation** "
            f"({below[0]['turns']} turns, each appending a tool call and its result, so the "
            f"history grows to {2 * below[0]['turns'] + 2} messages; the window is large enough "
            "that nothing is folded): each turn's body is sent straight to the emulator and "
            "through the proxy back to back, alternating which goes first, and the difference "
            "is the proxy's own work (reading the body, matching it to the session, the two "
            "durable appends of a turn — the client's new messages and the answer, each an "
            "fsync — `prepare()`, the upstream body, the answer).",
            "",
            "| each tool result | history at the median turn | non-streamed, whole answer: "
            "added p50 / p90 / p99 | streamed, first delta: added p50 / p90 / p99 |",
            "|---|---|---|---|",
            *(f"| {b['result_chars']:,} characters | about "
              f"{b['turns'] // 2 * (b['result_chars'] + 150) // 1000:,} KB | "
              f"{ms(b['plain_p50'])} / {ms(b['plain_p90'])} / {ms(b['plain_p99'])} | "
              f"{ms(b['stream_p50'])} / {ms(b['stream_p90'])} / {ms(b['stream_p99'])} |"
              for b in below),
        ]),
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--clients", default="1,8",
                        help="comma-separated numbers of concurrent clients, one run each")
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--window", type=int, default=16_000)
    parser.add_argument("--result-chars", type=int, default=4000)
    parser.add_argument("--overhead-turns", type=int, default=200,
                        help="turns of the below-the-trigger overhead run (0: skip it)")
    parser.add_argument("--overhead-chars", default="100,1000,4000",
                        help="comma-separated tool-result sizes of the overhead runs")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    results = []
    for clients in (int(n) for n in args.clients.split(",")):
        results.append(run(argparse.Namespace(**{**vars(args), "clients": clients})))
    below = [overhead(argparse.Namespace(turns=args.overhead_turns, result_chars=int(chars)))
             for chars in args.overhead_chars.split(",")] if args.overhead_turns else []
    command = "python benchmarks/bench_serve.py" + "".join(
        f" --{k.replace('_', '-')} {getattr(args, k)}" for k in
        ("clients", "turns", "window", "result_chars", "overhead_turns", "overhead_chars")
        if getattr(args, k) != parser.get_default(k))
    text = report(results, command, below)
    print(text)
    print(json.dumps([*results, *below], indent=2))
    if not args.no_write:
        write_section(SECTION, text)


if __name__ == "__main__":
    main()
