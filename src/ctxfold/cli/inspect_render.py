"""The text form of ``ctxfold inspect``: the report of :func:`ctxfold.cli.inspect_cmd.collect`
and, with ``--view``, the view as the model reads it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxfold.kernel.types import Message


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.1f}%"


def render(report: dict[str, Any]) -> str:
    """The human-readable form of :func:`collect`'s report."""
    v, c, s = report["view"], report["cache"], report["sidecar"]
    out = [f"session {report['session']} in {report['root']}: {report['messages']} messages"]
    p = report["projection"]
    if p is None:
        out.append("projection: none (the view is the canonical transcript)")
    else:
        out.append(f"projection: version {p['version']}, covers {p['covered_count']} messages "
                   f"with {p['body_messages']} body messages, {p['tokens']} tokens "
                   f"(from {p['source_tokens']})")
    r = report["settings"]
    source = ("recorded by the session" if r["from"] == "session"
              else "from the config: the session recorded none yet")
    out.append(f"ran with: window {r['window']}, trigger {r['trigger']} (compact_ratio "
               f"{r['compact_ratio']}), model {r['model'] or '-'} ({r['provider'] or '-'}), "
               f"estimator {r['estimator']} — {source}")
    out.append(f"view: {v['messages']} messages, {v['tokens']} tokens ({v['estimator']}); "
               f"trigger {v['trigger']} ({_pct(v['trigger_used'])} used), window {v['window']} "
               f"({_pct(v['window_used'])} used), hard ceiling {v['hard_ceiling']}")
    r = report["receipt"]
    if r is None:
        out.append("last receipt: none")
    else:
        out.append(f"last receipt: {r['status']} {r['action']} ({r['trigger']}) version "
                   f"{r['projection_version']}, tokens {r['input_tokens']} -> "
                   f"{r['result_tokens']} (saved {r['saved_tokens']}), cache_break "
                   f"{str(r['cache_break']).lower()}" + (f", reason: {r['reason']}"
                                                         if r["reason"] else ""))
    out.append(f"cache: recorded {c['state']}, now {c['state_now']} (ttl {c['ttl_minutes']} "
               f"min, last activity {c['last_activity'] or 'unknown'}), key "
               f"{c['prompt_cache_key'] or '-'}")
    out.extend(_render_rules(report["rules"]))
    out.append(f"sidecar: {'present' if s['present'] else 'absent'}, generation "
               f"{s['generation']}" + (f", ERROR {s['error']}" if s["error"] else ""))
    rows = report["telemetry"]
    out.append(f"telemetry: {len(rows)} records")
    if rows:
        out.append("  KIND     TRIGGER   ACTION   BEFORE    AFTER    SAVED  SUMM  CACHE    "
                   "HIT      MISS     VER")
        for t in rows:
            out.append(f"  {t['kind']:<8} {t['trigger'] or '-':<9} {t['action'] or '-':<8} "
                       f"{t['tokens_before']:>7} {t['tokens_after']:>8} {t['saved_tokens']:>8} "
                       f"{t['summary_calls']:>5}  {t['cache_state']:<8} "
                       f"{t['cache_hit_tokens']:<8} {t['cache_miss_tokens']:<8} "
                       f"{t['projection_version']}")
            if t["kind"] == "thrash":  # what the guard saw is the point of the record
                out.append(f"           {t['detail']}")
    out.extend(_render_ledger(report["ledger"]))
    out.extend(f"notice: {n}" for n in report["notices"])
    return "\n".join(out)


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:.6f}"


def _render_ledger(ledger: dict[str, Any]) -> list[str]:
    t = ledger["total"]
    out = [f"cache ledger: {t['folds']} folds ({t['estimated']} estimated), {t['requests']} "
           f"requests on their views; read {t['read']}, written {t['written']}, invalidated "
           f"{t['invalidated']} (rewritten {t['rewritten']}), not sent {t['not_sent']}; "
           f"summaries {t['summary_input']} in ({t['summary_read']} cached), "
           f"{t['summary_output']} out"]
    if ledger["profile"] is None:
        out.append("  net saving vs not folding: --profile NAME prices it")
    else:
        out.append(f"  net saving vs not folding at {ledger['profile']} prices: "
                   f"{_usd(t['net_saving_usd'])} (summaries {_usd(t['summary_usd'])})")
    if ledger["entries"]:
        out.append("  VER ACTION   READ    WRITTEN INVALID SAVED/REQ REQS  SUMM-IN SUMM-OUT "
                   "NET")
        for e in ledger["entries"]:
            mark = "~" if e["estimated"] else " "
            out.append(f"  {e['projection_version']:<3} {e['action']:<7} {mark}{e['read']:<7} "
                       f"{e['written']:<7} {e['invalidated']:<7} {e['saved_per_request']:<9} "
                       f"{e['requests']:<5} {e['summary_input']:<8} {e['summary_output']:<8} "
                       f"{_usd(e['net_saving_usd'])}")
    return out


def _render_rules(rules: dict[str, Any]) -> list[str]:
    out = [f"pins: {len(rules['explicit'])} explicit; the checkpoint carries "
           f"{len(rules['checkpoint_rules'])} standing rules"]
    out.extend(f"  {line}" for line in rules["checkpoint_rules"])
    check = rules["last_check"]
    if check is not None:
        score = (f"probes {_pct(check['probes_before'])} -> {_pct(check['probes_after'])}"
                 if check["probes_before"] is not None else check["detail"])
        out.append(f"last fold check: {score}")
    if rules["repaired"]:
        out.append(f"facts kept verbatim in the summary: {len(rules['repaired'])}")
        out.extend(f"  {line}" for line in rules["repaired"])
    return out


VIEW_EXCERPT = 400


def render_view(messages: Sequence[Message], *, full: bool) -> str:
    """The view as the model reads it, one message per block."""
    from ctxfold.engine.pins import is_pin_block
    from ctxfold.kernel.summary import is_summary_message
    from ctxfold.kernel.types import TEXT_PART_TYPES

    out = [f"--- view: {len(messages)} messages ---"]
    for i, m in enumerate(messages):
        label: str = m.role
        if is_summary_message(m):
            label += " (checkpoint summary)"
        elif is_pin_block(m):
            label += " (standing rules)"
        elif m.role == "tool":
            label += f" {m.tool_call_id} ({m.name or 'tool'})"
        text = m.text
        if not full and not is_summary_message(m) and len(text) > VIEW_EXCERPT:
            text = (text[:VIEW_EXCERPT] + f"… ({len(text) - VIEW_EXCERPT} more characters; "
                    "--full shows all)")
        out.append(f"[{i}] {label}:")
        if text:
            out.append(text)
        other = [json.loads(p).get("type") for p in m.parts]
        other = [kind for kind in other if kind not in TEXT_PART_TYPES]
        if other:
            out.append(f"  (+ {len(other)} non-text parts: {', '.join(map(str, other))})")
        out.extend(f"  → {c.name}({c.arguments})" for c in m.tool_calls)
    return "\n".join(out)
