"""Fuzz targets over files ctxfold reads: sidecars, transcripts, config files (with the
environment layer), importer inputs and vouched prefixes (``fuzz_prefix``).

Only a :class:`ctxfold.CtxfoldError` may escape. A sidecar, however broken, must not stop
the session from opening (it is discarded and rebuilt; only a newer ``schema_version`` is an
error); a read (view, prepare, wire forms, paging, read-only commands) never changes the
transcript's bytes.
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
from pathlib import Path
from typing import Any

from benchmarks.reliability.common import (
    API_KEY,
    PASSWORD,
    REPO,
    SECRETS,
    Figures,
    cli_in_process,
    load,
    open_quiet,
    short,
    tag_summary,
    write_config,
)
from benchmarks.reliability.fuzz_prefix import PrefixBench, prefix_target
from benchmarks.reliability.fuzz_values import (
    DEPTHS,
    SURROGATES,
    TEXT,
    VALUES,
    dumps,
    edits_of,
    mutate,
    paths,
    run_targets,
)
from benchmarks.reliability.worker import call, filler, result, user
from hypothesis import strategies as st

import ctxfold

WINDOW = 40_000
FIXTURES = REPO / "tests" / "fixtures" / "importers"
ROLES = st.sampled_from(["system", "user", "assistant", "tool", "developer", "function", "x"])


class Bench:
    """One session (``f``) and its registry, shared by the file targets."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.store = work / "sessions"
        self.config = load(write_config(work, self.store))
        self.registry = ctxfold.Registry.from_config(self.config.config)
        rng = random.Random(3)
        cm = self.open(create=True)
        cm.append({"role": "system", "content": "#f0-0a# You are a test agent."},
                  user("f0-0b", "start"))
        for n in range(1, 12):
            size = 60_000 if n == 1 else 2000
            cm.append(call(f"f0-{n}a", f"c{n}"), result(f"f0-{n}b", f"c{n}", filler(rng, size)))
        cm.compact()
        self.transcript = (self.store / "f.jsonl").read_bytes()
        self.sidecar = json.loads((self.store / "f.context.json").read_bytes())

    def open(self, create: bool = False) -> Any:
        return open_quiet("f", config=self.config, window=WINDOW, summarize=tag_summary,
                          create=create, registry=self.registry)

    def reset(self, transcript: bytes | None = None) -> None:
        """Only ``f.jsonl`` (and the sidecar if restored later) stays in the store."""
        for path in self.store.iterdir():
            if path.name != "f.jsonl":
                path.unlink()
        (self.store / "f.jsonl").write_bytes(self.transcript if transcript is None
                                             else transcript)

    def reads(self, cm: Any, figures: Figures, cli: bool = False) -> None:
        """Every read path of an open session; the transcript bytes must not change."""
        path = self.store / "f.jsonl"
        before = path.read_bytes()
        cm.view()
        prepared = cm.prepare()
        for convert in (ctxfold.to_openai, ctxfold.to_responses):
            with contextlib.suppress(ctxfold.MessageError):
                json.dumps(convert(prepared), ensure_ascii=False).encode()
        for message in cm.canonical:
            ctxfold.message_to_openai(message)
            if message.role == "tool":
                cm.use_capability({"action": "call", "capability_id": "session:tool_result",
                                   "arguments": {"tool_call_id": message.tool_call_id}})
        cm.estimate()
        if cli:
            for command in (["sessions", "show", "f"], ["inspect", "f"], ["sessions", "list"]):
                cli_in_process([*command, "--root", str(self.store),
                                "--config", str(self.work / "ctxfold.toml")])
        if path.read_bytes() != before:
            figures.problem("mutations", "a read path changed the transcript")


# -- sidecars -----------------------------------------------------------------------------------


def sidecar_target(bench: Bench) -> tuple[Any, Any]:
    base = bench.sidecar
    docs = st.one_of(
        edits_of(base).map(lambda e: dumps(mutate(base, e)).encode()),
        edits_of(base).map(lambda e: dumps(mutate(base, e)).encode()),
        VALUES.map(lambda v: dumps(v).encode()),
        st.binary(max_size=200),
    )

    def check(data: bytes, figures: Figures) -> None:
        bench.reset()
        (bench.store / "f.context.json").write_bytes(data)
        try:
            cm = bench.open()
        except ctxfold.SidecarVersionError:
            figures.note("fuzz_sidecar_newer_schema")
            return
        except ctxfold.CtxfoldError as exc:
            figures.problem("failures", f"an invalid sidecar stops the session from opening: "
                            f"{type(exc).__name__}", short(data, 200))
            return
        bench.reads(cm, figures)

    return docs, check


# -- transcripts --------------------------------------------------------------------------------

MESSAGE_FIELDS = {"content": VALUES, "tool_calls": VALUES, "tool_call_id": VALUES,
                  "name": VALUES, "raw_content": VALUES, "parts": VALUES, "extra": VALUES,
                  "partial": VALUES, "local_only": VALUES, "created_at": VALUES,
                  "origin": VALUES, "responses_items": VALUES, "anthropic_blocks": VALUES,
                  "content_form": VALUES}


def transcript_target(bench: Bench) -> tuple[Any, Any]:
    lines = bench.transcript.split(b"\n")[:-1]
    messages = st.fixed_dictionaries({"role": st.one_of(ROLES, VALUES)},
                                     optional=MESSAGE_FIELDS).map(lambda d: dumps(d).encode())
    surrogate = SURROGATES.map(lambda s: json.dumps({"role": "user", "content": f"a{s}b"}))
    line = st.one_of(
        messages, messages,
        surrogate.map(str.encode),
        st.tuples(ROLES, TEXT).map(lambda rt: json.dumps({"role": rt[0], "content": rt[1]})
                                   .encode()),
        DEPTHS.map(lambda d: ("[" * d + "]" * d).encode()),
        DEPTHS.map(lambda d: ('{"role":"user","content":"x","extra":' + "[" * d + "]" * d
                              + "}").encode()),
        st.just(b'{"role":"user","content":"x","created_at":1' + b"0" * 5000 + b"}"),
        st.binary(max_size=60),
    )
    cases = st.tuples(st.sampled_from(["last", "append", "middle"]), line, st.booleans(),
                      st.integers(1, len(lines) - 2))

    def check(case: tuple[str, bytes, bool, int], figures: Figures) -> None:
        where, text, newline, i = case
        body = list(lines)
        if where == "middle":
            body[i] = text
        elif where == "last":
            body[-1] = text
        else:
            body.append(text)
        bench.reset(b"\n".join(body) + (b"\n" if newline or where == "middle" else b""))
        try:
            cm = bench.open()
        except ctxfold.CtxfoldError as exc:
            figures.note(f"fuzz_transcript_refused_{type(exc).__name__}")
            return
        # The read-only commands build registries (~0.15 s): one case in ten runs them.
        bench.reads(cm, figures, cli=i % 10 == 0)
        cm.append(user("f9-1a", "after"))
        if [m.role for m in bench.open().canonical] != [m.role for m in cm.canonical]:
            figures.problem("failures", "transcript reads back differently after an append",
                            short(text))

    return cases, check


# -- config files and the environment layer ---------------------------------------------------

KEYS = {"agent": ["compact_ratio", "max_output_tokens", "effort", "soft_compact_ratio"],
        "provider": ["name", "model", "base_url", "api_key_env", "context_window",
                     "cache_ttl_minutes", "profile", "timeout_seconds", "max_retries"],
        "estimator": ["name"], "pruner": ["name"], "summarizer": ["name", "model"],
        "store": ["name", "path", "sidecar_format"], "plugins": ["disabled"], "x": ["y"]}
TOML_SCALARS = st.one_of(
    st.integers().map(str), st.just("1" * 5000), st.floats().map(repr),
    DEPTHS.map(lambda d: "[" * d + "]" * d), DEPTHS.map(lambda d: "{a = " * d + "1" + "}" * d),
    st.booleans().map(lambda b: str(b).lower()), TEXT.map(json.dumps),
    st.sampled_from(['"\\ud800"', "nan", "inf", "-inf", "1979-05-27T07:32:00Z", "0x1F", "1e999",
                     '"http://user:pw@127.0.0.1:1"', "'''a\nb'''", '"heuristic"', '"fs"', "0.8"]))
TOML_VALUES = st.recursive(TOML_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
    st.lists(st.tuples(st.sampled_from(["a", "name", "b"]), inner), max_size=2)
    .map(lambda kv: "{" + ", ".join(f"{k} = {v}" for k, v in kv) + "}")), max_leaves=5)


#: Values a key accepts, so that many documents load and reach what follows loading.
VALID = {"compact_ratio": ["0.8", "0.3", "0.95"], "max_output_tokens": ["0", "4096"],
         "effort": ['"high"', '"none"'], "name": ['"heuristic"', '"fs"', '"extractive"',
                                                 '"deepseek"', '"emulator"', '"head-tail"'],
         "context_window": ["0", "100000"], "max_retries": ["0", "2"],
         "base_url": ['"http://127.0.0.1:9"', f'"http://user:{PASSWORD}@127.0.0.1:9/v1"'],
         "api_key_env": ['"CTXFOLD_FAKE_KEY"', f'"{API_KEY}"'],
         "disabled": ['["estimators.tiktoken"]', "[]"], "path": ['"sessions"']}


def render_toml(pairs: list[tuple[str, str, str]]) -> str:
    """One table per section (a repeated header would only test the TOML parser)."""
    tables: dict[str, dict[str, str]] = {}
    for section, key, value in pairs:
        tables.setdefault(section, {})[key] = value
    return "".join(f"[{s}]\n" + "".join(f"{k} = {v}\n" for k, v in kv.items())
                   for s, kv in tables.items())


def config_target(bench: Bench) -> tuple[Any, Any]:
    known = st.sampled_from([(s, k) for s in KEYS for k in KEYS[s]]).flatmap(
        lambda sk: st.tuples(st.just(sk[0]), st.just(sk[1]), st.one_of(
            st.sampled_from(VALID.get(sk[1], ['"x"'])), TOML_VALUES)))
    unknown = st.tuples(st.sampled_from(sorted(KEYS)), TEXT.map(json.dumps), TOML_VALUES)
    pair = st.one_of(known, known, unknown)
    document = st.lists(pair, max_size=6).map(render_toml)
    env_name = st.one_of(st.sampled_from([f"CTXFOLD_{s.upper()}_{k.upper()}" for s in KEYS
                                          for k in KEYS[s]]), st.just("CTXFOLD_PROVIDER_API_KEY"))
    env = st.dictionaries(env_name, TEXT.filter(lambda t: "\x00" not in t), max_size=2)
    raw = st.tuples(st.binary(max_size=20), st.integers(0, 200))
    cases = st.tuples(document, env, st.one_of(st.none(), raw), st.integers(0, 39))

    def check(case: tuple[str, dict[str, str], Any, int], figures: Figures) -> None:
        text, env, raw, n = case
        data = text.encode("utf-8", "surrogatepass")
        if raw is not None:
            data = data[: raw[1]] + raw[0] + data[raw[1]:]
        path = bench.work / "fuzz.toml"
        path.write_bytes(data)
        # A registry takes ~40 ms, `config show` ~0.2 s: one case in 40 builds its own and runs it.
        shown: list[str] = []
        try:
            loaded = ctxfold.load_config(config_path=path, env=env, cwd=bench.work,
                                         user_config_path=bench.work / "no-user-config.toml",
                                         registry=bench.registry if n else None)
            if n == 0:
                ctxfold.Registry.from_config(loaded.config)
                for extra in ([], ["--json"]):
                    shown.append(cli_in_process(["config", "show", "--config", str(path),
                                                 *extra])[1])
        except ctxfold.CtxfoldError as exc:
            shown.append(str(exc))
            raise
        finally:
            leaked = [t for t in shown if any(s in t for s in SECRETS)]
            if leaked:
                figures.problem("secrets", "config loading or config show printed a "
                                "credential", short(leaked[0]))

    return cases, check


# -- importer inputs ----------------------------------------------------------------------------


def importer_target(bench: Bench) -> tuple[Any, Any]:
    sources = sorted(p for p in FIXTURES.rglob("*") if p.is_file())
    originals = {p: p.read_bytes() for p in sources}
    trees = {}
    for p, data in originals.items():
        try:
            trees[p] = json.loads(data)
        except ValueError:
            trees[p] = [json.loads(x) for x in data.splitlines() if x.strip()] \
                if p.suffix == ".jsonl" else None
    formats = {"openhands_v1": "openhands-v1"}
    for p in sources:
        if "openhands_v1" not in p.parts:
            formats[p.name] = ctxfold.import_session(p, bench.registry).format

    def variant(p: Path) -> Any:
        tree = trees[p]
        if tree is None or not paths(tree):
            return st.tuples(st.just(p), st.integers(0, len(originals[p])),
                             st.one_of(st.binary(max_size=30), TEXT.map(
                                 lambda t: t.encode("utf-8", "surrogatepass")),
                                 DEPTHS.map(lambda d: b"<a>" * d)),
                             st.integers(0, 40))
        return st.tuples(st.just(p), edits_of(tree), DEPTHS, st.booleans())

    cases = st.sampled_from(sources).flatmap(variant)

    def check(case: tuple[Any, ...], figures: Figures) -> None:
        source = case[0]
        root = bench.work / "import"
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(FIXTURES, root)
        target = root / source.relative_to(FIXTURES)
        if isinstance(case[1], int):  # bytes spliced into a non-JSON file
            _, at, data, cut = case
            blob = originals[source]
            target.write_bytes(blob[:at] + data + blob[at + cut:])
        else:
            _, edits, depth, as_lines = case
            tree = mutate(trees[source], edits)
            if source.suffix == ".jsonl" and isinstance(tree, list) and as_lines:
                text = "\n".join(dumps(x, depth) for x in tree) + "\n"
            else:
                text = dumps(tree, depth)
            target.write_text(text)
        top = root / "openhands_v1" / "conv0001" if "openhands_v1" in source.parts else target
        name = "openhands_v1" if "openhands_v1" in source.parts else source.name
        for fmt in (None, formats[name]):
            with contextlib.suppress(ctxfold.CtxfoldError):
                ctxfold.import_session(top, bench.registry, fmt)

    return cases, check


TARGETS = {"sidecar": sidecar_target, "transcript": transcript_target,
           "config": config_target, "importer": importer_target,
           "prefix": lambda bench: prefix_target(PrefixBench(bench.work))}


def run(examples: int, work: Path, *, seed: int = 0, targets: tuple[str, ...] = tuple(TARGETS),
        log: Any = None) -> Figures:
    return run_targets(TARGETS, Bench(work), examples, seed, targets, log)
