"""``ctxfold inspect SESSION [--json] [--root DIR]``: what the model sees and why.

Shows the projection (version, covered count, body size, tokens), the last receipt, the
cache state, the telemetry records, the pinned rules (explicit pins and the rules the current
checkpoint carries), the last fold's check (probe score before/after its repair, the facts
kept verbatim) and the size of the provider-visible view against the
trigger and the window. Strictly read-only: unlike opening a session it never repairs a torn
transcript tail, never discards an invalid sidecar and never records a resume; problems are
reported instead (``notices``). The JSON keys are documented in ``docs/cli.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ctxfold.cli.common import add_config_flag
from ctxfold.cli.inspect_render import render, render_view
from ctxfold.cli.store_access import StoreHandle, add_root_flag, iso_time, require_session

if TYPE_CHECKING:
    from ctxfold.kernel.state import SidecarState
    from ctxfold.kernel.types import Message

#: Protocol reserve below the window (the hard ceiling, design §2.4).
PROTOCOL_RESERVE = 256


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "inspect",
        help="show a session's projection, receipt, cache state and telemetry (read-only)",
        description="Show the projection, last receipt, cache state, telemetry and the view "
        "size against the trigger and window of SESSION. Never modifies anything.",
    )
    parser.add_argument("session", metavar="SESSION", help="session id")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--view", action="store_true",
                        help="also print the messages the model sees now (summaries in full, "
                        "other messages to 400 characters unless --full)")
    parser.add_argument("--full", action="store_true", help="with --view: print every "
                        "message in full")
    parser.add_argument("--profile", metavar="NAME", default=None,
                        help="price the cache ledger's net saving in USD with this replay "
                        "price profile (deepseek-flash, deepseek-v4-pro, mimo, openai, "
                        "anthropic-sonnet, anthropic-haiku); "
                        "without it the ledger is in tokens only")
    add_root_flag(parser)
    add_config_flag(parser, "provider.context_window", "--window",
                    help="context window in tokens (default: the one the session ran with, "
                    "else [provider] context_window)")
    parser.set_defaults(func=run)


def read_canonical(handle: StoreHandle, session_id: str) -> tuple[list[Message], list[str]]:
    """The transcript without repairing anything; (messages, notices)."""
    path = getattr(handle.store, "transcript_path", None)
    if path is None:  # another store: its load() is the only reader there is
        return handle.store.load(session_id), []
    from ctxfold.plugins.stores.fs_lines import parse_transcript

    file = path(session_id)
    parsed = parse_transcript(file.read_bytes(), file)
    notices = []
    if parsed.torn:
        notices.append(f"transcript {file}: unfinished last line ({len(parsed.torn)} bytes) "
                       "ignored here; the next write to the session moves it aside")
    return parsed.messages, notices


def read_state(handle: StoreHandle, session_id: str, canonical: Sequence[Message]
               ) -> tuple[SidecarState, bool, str, list[str]]:
    """Decode and validate the sidecar without writing; (state, present, error, notices)."""
    from ctxfold.engine.sidecar import fresh_state, reject_lone_surrogates, validate_projection
    from ctxfold.kernel.errors import CtxfoldError, SidecarVersionError
    from ctxfold.kernel.kinds import SIDECAR_FORMAT

    try:
        raw = handle.store.read_sidecar(session_id)
        if raw is None:
            return fresh_state(), False, "", []
        codec = handle.registry.create(SIDECAR_FORMAT, handle.config.store.sidecar_format,
                                       config=handle.config)
        data = json.loads(raw)
        state = codec.decode(data)
        reject_lone_surrogates(raw, data)
    except SidecarVersionError as exc:
        error = (f"{exc}; opening the session fails and keeps the file until ctxfold is "
                 "upgraded")
        return fresh_state(), True, error, [error]
    except (CtxfoldError, ValueError, TypeError, KeyError, RecursionError) as exc:
        error = f"sidecar unreadable or invalid ({exc}); opening the session discards it"
        return fresh_state(), True, error, [error]
    state, notices = validate_projection(state, canonical, session_id)
    return state, True, "", notices


def visible(state: SidecarState, canonical: Sequence[Message]) -> list[Message]:
    """Projection body + canonical tail, else canonical (the kernel's own rule)."""
    from ctxfold.kernel.view import visible_view

    return visible_view(state.projection, canonical)


def _plain(obj: Any) -> Any:
    return attrs.asdict(obj) if obj is not None else None


def ran_with(state: SidecarState, config: Any, registry: Any, *, window_flag: bool
             ) -> dict[str, Any]:
    """What the session ran with — its sidecar's record (``settings``) — and the config's
    values only where it recorded none (or where ``--window`` was given)."""
    from ctxfold.kernel.kinds import ESTIMATOR

    recorded = state.settings
    window = config.provider.context_window
    ratio = config.agent.compact_ratio
    trigger = math.floor(window * ratio)
    out = {"window": window, "trigger": trigger, "compact_ratio": ratio,
           "model": config.provider.model, "provider": config.provider.name,
           "estimator": config.estimator.name, "from": "config"}
    if recorded is None:
        return out
    out["from"] = "session"
    if recorded.window and not window_flag:
        out["window"], out["trigger"] = recorded.window, recorded.trigger_tokens
        out["compact_ratio"] = recorded.compact_ratio
    for key in ("model", "provider"):
        out[key] = getattr(recorded, key) or out[key]
    if recorded.estimator in registry.names(ESTIMATOR):
        out["estimator"] = recorded.estimator
    return out


def collect(handle: StoreHandle, session_id: str, *, now: float | None = None,
            window_flag: bool = False, profile: str | None = None) -> dict[str, Any]:
    """Everything ``inspect`` reports, as a JSON-ready dict (see ``docs/cli.md``). The
    window, trigger, model and estimator are the session's own (recorded in its sidecar),
    the config's only where it recorded none or ``window_flag`` (``--window``) says so."""
    from ctxfold.kernel.kinds import ESTIMATOR
    from ctxfold.kernel.state import CacheState
    from ctxfold.kernel.types import RequestShape

    require_session(handle, session_id)
    canonical, notices = read_canonical(handle, session_id)
    state, present, error, more = read_state(handle, session_id, canonical)
    notices += more
    view = visible(state, canonical)
    config = handle.registry.resolve(handle.config)
    settings = ran_with(state, config, handle.registry, window_flag=window_flag)
    estimator = handle.registry.create(ESTIMATOR, settings["estimator"], config=config)
    tokens = int(estimator.estimate(RequestShape(view)))
    window, trigger = settings["window"], settings["trigger"]
    ttl = config.provider.cache_ttl_minutes
    last = handle.store.last_activity(session_id)
    now = time.time() if now is None else now
    idle = None if last is None else max(0.0, now - last)
    label = (CacheState.UNKNOWN if idle is None
             else CacheState.COLD if idle >= ttl * 60 else CacheState.WARM)
    p = state.projection
    projection = None if p is None else {
        "version": p.projection_version,
        "covered_count": p.covered_count,
        "body_messages": len(p.messages),
        "tokens": p.projection_tokens,
        "source_tokens": p.source_tokens,
        "summary_hash": p.summary_hash,
        "covered_prefix_hash": p.covered_prefix_hash,
        "created_at": p.created_at,
    }
    return {
        "session": session_id,
        "root": handle.where,
        "messages": len(canonical),
        "projection": projection,
        "view": {
            "messages": len(view),
            "tokens": tokens,
            "estimator": settings["estimator"],
            "trigger": trigger,
            "window": window,
            "hard_ceiling": window - PROTOCOL_RESERVE,
            "compact_ratio": settings["compact_ratio"],
            "trigger_used": round(tokens / trigger, 4) if trigger else None,
            "window_used": round(tokens / window, 4) if window else None,
            "above_trigger": tokens >= trigger,
        },
        "settings": settings,
        "receipt": _plain(state.last_receipt),
        "cache": {
            "state": str(state.last_cache_state),
            "state_now": str(label),
            "ttl_minutes": ttl,
            "last_activity": iso_time(last),
            "idle_seconds": None if idle is None else round(idle, 1),
            "prompt_cache_key": state.prompt_cache_key,
        },
        "telemetry": [_plain(r) for r in state.telemetry],
        "ledger": ledger(state, profile),
        "rules": standing(canonical, view, state),
        "sidecar": {
            "present": present,
            "error": error,
            "schema_version": state.schema_version if present and not error else None,
            "generation": state.generation,
            "transcript_version": state.transcript_version,
            "updated_at": state.updated_at,
        },
        "notices": notices,
    }


def ledger(state: SidecarState, profile: str | None) -> dict[str, Any]:
    """The cache ledger of every install the telemetry holds and their total; the net saving
    in USD at ``profile``'s prices (replay price profiles), ``None`` without one."""
    from ctxfold.kernel.ledger import LedgerTotal
    from ctxfold.replay.pricing import get_price

    price = None if profile is None else get_price(profile)
    prices = None if price is None else (price.hit, price.uncached, price.output)
    entries = []
    for record in state.telemetry:
        if record.kind == "install" and record.ledger is not None:
            e = record.ledger
            entries.append({
                "projection_version": record.projection_version, "action": record.action,
                "trigger": record.trigger, **attrs.asdict(e), "rewritten": e.rewritten,
                "not_sent": e.not_sent,
                "net_saving_usd": None if prices is None else round(e.net_saving(*prices), 8)})
    total = LedgerTotal.of(r.ledger for r in state.telemetry
                           if r.kind == "install" and r.ledger is not None)
    return {
        "profile": profile, "entries": entries,
        "total": {**attrs.asdict(total),
                  "summary_usd": None if prices is None
                  else round(total.summary_cost(*prices), 8),
                  "net_saving_usd": None if prices is None
                  else round(total.net_saving(*prices), 8)},
    }


def standing(canonical: Sequence[Message], view: Sequence[Message], state: SidecarState
             ) -> dict[str, Any]:
    """The session's pins, the rules its checkpoint carries and the last fold's check."""
    from ctxfold.engine.check import facts_list
    from ctxfold.engine.pins import is_pin_block, standing_rules
    from ctxfold.kernel.summary import is_summary_message, unwrap_summary

    pins = standing_rules(canonical, 0, extract=False)[0]
    block = next((m for m in view if is_pin_block(m)), None)
    summary = next((m for m in view if is_summary_message(m)), None)
    receipt = state.last_receipt
    last = next((t for t in reversed(state.telemetry)
                 if t.kind == "install" and t.action == "summary"), None)
    check = None
    if receipt is not None and receipt.probes_before is not None:
        check = {"probes_before": receipt.probes_before, "probes_after": receipt.probes_after,
                 "detail": ""}
    elif last is not None and last.detail:
        check = {"probes_before": None, "probes_after": None, "detail": last.detail}
    return {
        "explicit": [{"text": r.text, "position": r.position, "message_id": r.message_id,
                      "reason": r.reason} for r in pins],
        "checkpoint_rules": [] if block is None else
        [line for line in block.content.splitlines() if line.startswith("- ")],
        "last_check": check,
        "repaired": [] if summary is None else facts_list(unwrap_summary(summary)),
    }


def run(args: argparse.Namespace) -> int:
    from ctxfold.cli.common import config_overrides
    from ctxfold.cli.store_access import open_store
    from ctxfold.interop.chat import message_to_openai

    handle = open_store(args)
    report = collect(handle, args.session,
                     window_flag="provider.context_window" in config_overrides(args),
                     profile=args.profile)
    view: list[Message] = []
    if args.view:
        canonical, _ = read_canonical(handle, args.session)
        state, _present, _error, _more = read_state(handle, args.session, canonical)
        view = visible(state, canonical)
        report["view"]["content"] = [message_to_openai(m, local_fields=False) for m in view]
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        print(render(report))
        if args.view:
            print(render_view(view, full=args.full))
    return 0
