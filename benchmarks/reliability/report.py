"""The figures section of docs/reliability.md, written from one run's JSON record
(``python -m benchmarks.reliability ... --write-doc``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks._report import write_section

HEADING = "## Figures of the last run"
#: What each figure of the summary line counts (docs/reliability.md explains the checks).
MEANINGS = {
    "kills": "SIGKILLs of a running worker process that had created its session",
    "lost": "acknowledged messages missing afterwards (transcript or a multi-process run)",
    "torn": "batches that landed in part, or not contiguously",
    "fuzz_cases": "hypothesis examples run, all targets",
    "crashes": "exceptions that are not a `CtxfoldError` (any part)",
    "faults": "provider requests answered with a fault (429, 503, drop, stall, malformed, "
              "slow, or rejected as too long)",
    "recovered": "kills and torn writes after which the session reopened consistent, plus "
                 "`complete()` calls that succeeded through a fault",
    "secrets": "files or texts holding the fake API key or `base_url` password",
    "stale_views": "prepares whose view missed a message committed before they started",
    "dups": "messages present twice",
    "double_commits": "generations committed by two installs",
    "mutations": "reads that changed stored bytes",
    "failures": "any other broken promise (see the list below)",
    "torn_cases": "torn-write / damaged-file cases",
    "views": "multi-process prepares checked",
    "scanned": "files and texts grepped for the credentials",
}


def section(record: dict[str, Any]) -> str:
    m = record["machine"]
    figures = record["figures"]
    lines = [
        HEADING, "",
        f"Run on {record['date']} on a machine with {m['nproc']} CPUs ({m['cpu']}), "
        f"{m['system']}, Python {m['python']}, ctxfold at commit `{record.get('commit', '?')}`"
        f"; {record['seconds'] / 60:.0f} minutes. Command:", "",
        "```", record["command"], "```", "",
        "Summary line:", "", "```", record["summary"], "```", "",
        "| figure | value | counts |", "|---|---:|---|",
        *(f"| `{name}` | {value:,} | {MEANINGS.get(name, '')} |"
          for name, value in figures.items()),
        "",
        "Seconds per part: " + ", ".join(f"{k} {v:,.0f}"
                                         for k, v in record["part_seconds"].items()) + ".",
        "",
    ]
    problems = record["problems"]
    if problems:
        lines += ["Problems found (signature, count, first example):", ""]
        for signature, entry in sorted(problems.items()):
            example = str((entry["examples"] or [""])[0]).replace("`", "'").replace("\n", " ")
            lines.append(f"* `{signature}` × {entry['count']:,}" + (
                f" — e.g. `{example[:220]}`" if example else ""))
        lines.append("")
    else:
        lines += ["No problem was found: every bad figure is 0.", ""]
    notes = record["notes"]
    lines += ["Notes (informational counts): " + ", ".join(
        f"{k} {v:,}" for k, v in sorted(notes.items())) + "."]
    return "\n".join(lines) + "\n"


def write(record: dict[str, Any], doc: Path) -> None:
    write_section(HEADING, section(record), doc)
