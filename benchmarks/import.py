"""Import throughput: messages per second importing 100k messages into a fresh home.

Run:

    python benchmarks/import.py [--messages 100000] [--repeats 3] [--durability normal]
                                [--output benchmarks/results/import.md] [--quick]

The conversations come from the deterministic benchmark corpus (``benchmarks/corpus.py``:
agent turns with tool calls and results, about 10 % Chinese) and are written to disk in
two source formats:

* OpenAI-format JSONL (one ``{"id", "created", "messages"}`` conversation per line);
* a ChatGPT export (``conversations.json``: mapping trees followed from
  ``current_node``; tool calls as assistant nodes addressed to the tool, results as
  ``tool`` nodes).

Each run imports one file into a fresh SQLite home with ``memstrata.ops.importing.import_source``
(parse, detect nothing: the format is given, write through the public ``SessionStore``
API, full-text indexes maintained by triggers) and is timed end to end. The baseline,
measured in the same run on the same messages, is the store alone: ``create_session``
plus one ``append_messages`` per conversation with the messages already in memory, so
the ratio shows what parsing and the importer's bookkeeping cost on top of the writes.
A second import of the same file (which must add nothing) is timed as well.

The machine may be shared: figures are medians of the runs and the load average is
printed before and after; compare ratios rather than absolutes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus  # the benchmarks' deterministic corpus, importable by path
from memstrata.config import Config
from memstrata.ops.importing import import_source
from memstrata.store.sqlite.store import SessionStore


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def openai_lines(sessions: list[corpus.Session]) -> str:
    """The corpus as OpenAI-format JSONL."""
    lines = []
    for s in sessions:
        messages = []
        pending: list[str] = []
        for m in s.messages:
            item: dict[str, Any] = {"role": m["role"], "content": m["content"]}
            item["timestamp"] = m["timestamp"]
            if m["tool_calls"]:
                item["tool_calls"] = m["tool_calls"]
                pending = [c["id"] for c in m["tool_calls"]]
            if m["role"] == "tool":
                item["name"] = m["tool_name"]
                item["tool_call_id"] = pending.pop(0) if pending else None
            messages.append(item)
        lines.append(
            json.dumps(
                {"id": s.id, "created": s.started_at, "messages": messages}, ensure_ascii=False
            )
        )
    return "\n".join(lines) + "\n"


def chatgpt_export(sessions: list[corpus.Session]) -> str:
    """The corpus as a ChatGPT ``conversations.json`` (one node per message)."""
    conversations = []
    for s in sessions:
        mapping: dict[str, Any] = {
            "root": {"id": "root", "message": None, "parent": None, "children": []}
        }
        parent = "root"
        for n, m in enumerate(s.messages):
            node_id = f"{s.id}-{n}"
            message: dict[str, Any] = {
                "id": node_id,
                "author": {"role": m["role"], "name": m["tool_name"], "metadata": {}},
                "create_time": m["timestamp"],
                "content": {"content_type": "text", "parts": [m["content"] or ""]},
                "status": "finished_successfully",
                "weight": 1.0,
                "metadata": {},
                "recipient": "all",
            }
            if m["tool_calls"]:
                call = m["tool_calls"][0]["function"]
                message["recipient"] = call["name"]
                message["content"] = {
                    "content_type": "code",
                    "language": "json",
                    "text": call["arguments"],
                }
            mapping[node_id] = {"id": node_id, "message": message, "parent": parent, "children": []}
            mapping[parent]["children"].append(node_id)
            parent = node_id
        conversations.append(
            {
                "id": s.id,
                "conversation_id": s.id,
                "title": f"Conversation {s.id}",
                "create_time": s.started_at,
                "update_time": s.messages[-1]["timestamp"],
                "mapping": mapping,
                "current_node": parent,
            }
        )
    return json.dumps(conversations, ensure_ascii=False)


def baseline(store: SessionStore, *, sessions: list[corpus.Session]) -> int:
    """The store alone: one create_session and one append_messages per conversation."""
    written = 0
    for s in sessions:
        store.create_session(s.id, source=s.source, started_at=s.started_at)
        written += len(store.append_messages(s.id, s.messages))
    return written


def _import_messages(path: Path, fmt: str, store: SessionStore) -> int:
    return import_source(path, store, fmt=fmt).messages_added


def timed_run(
    durability: Literal["normal", "full"], work: Callable[[SessionStore], int]
) -> tuple[float, float, int, SessionStore, tempfile.TemporaryDirectory[str]]:
    """Run ``work`` on a store in a fresh home; return wall and CPU seconds, its count."""
    home = tempfile.TemporaryDirectory(prefix="memstrata-import-bench-")
    os.environ["MEMSTRATA_HOME"] = home.name
    store = SessionStore(
        Path(home.name) / "state.db", config=Config.load(Path(home.name)), durability=durability
    )
    start, cpu = time.perf_counter(), time.process_time()
    count = work(store)
    return time.perf_counter() - start, time.process_time() - cpu, count, store, home


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3, help="runs per format (median)")
    parser.add_argument("--durability", choices=("normal", "full"), default="normal")
    parser.add_argument("--output", type=Path, default=None, help="write a Markdown report")
    parser.add_argument("--quick", action="store_true", help="5,000 messages, 1 run")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.repeats = 5_000, 1
    load_before = os.getloadavg()
    log(f"generating {args.messages:,} messages ...")
    sessions = list(corpus.generate(args.messages))
    total = sum(len(s.messages) for s in sessions)
    work_dir = tempfile.TemporaryDirectory(prefix="memstrata-import-src-")
    jsonl = Path(work_dir.name) / "conversations.jsonl"
    jsonl.write_text(openai_lines(sessions), encoding="utf-8")
    chat = Path(work_dir.name) / "conversations.json"
    chat.write_text(chatgpt_export(sessions), encoding="utf-8")
    sizes = {"openai": jsonl.stat().st_size, "chatgpt": chat.stat().st_size}

    runs: dict[str, list[float]] = {"baseline": [], "openai": [], "chatgpt": []}
    cpu: dict[str, list[float]] = {"baseline": [], "openai": [], "chatgpt": []}
    reimport: dict[str, list[float]] = {"openai": [], "chatgpt": []}
    counts: dict[str, int] = {}
    works: dict[str, Callable[[SessionStore], int]] = {
        "baseline": partial(baseline, sessions=sessions),
        "openai": partial(_import_messages, jsonl, "openai"),
        "chatgpt": partial(_import_messages, chat, "chatgpt"),
    }
    sources = {"openai": jsonl, "chatgpt": chat}
    # Warm-up (untimed): the first writes of a process pay one-off costs (SQL statement
    # and regex compilation, FTS tokenizer setup) that no column should carry.
    _, _, _, store, home = timed_run(args.durability, partial(baseline, sessions=sessions[:3]))
    store.close()
    home.cleanup()
    names = list(works)
    for repeat in range(args.repeats):
        # Interleaved, and each column goes first in turn, so that a change in machine
        # load weighs on every column alike.
        for name in names[repeat % 3 :] + names[: repeat % 3]:
            seconds, cpu_s, n, store, home = timed_run(args.durability, works[name])
            if name in sources:
                start = time.perf_counter()
                again = import_source(sources[name], store, fmt=name)
                reimport[name].append(time.perf_counter() - start)
                if again.messages_added or again.sessions_added:
                    raise SystemExit(f"{name}: the second import added data (not idempotent)")
            store.close()
            home.cleanup()
            runs[name].append(seconds)
            cpu[name].append(cpu_s)
            counts[name] = n
            log(f"run {repeat + 1}: {name} {n / seconds:,.0f} msg/s")
    work_dir.cleanup()
    load_after = os.getloadavg()

    def rate(name: str) -> float:
        return counts[name] / statistics.median(runs[name])

    def paired(name: str, series: dict[str, list[float]]) -> float:
        # Each run is compared with the baseline run of the same round, so a change in
        # machine load between runs does not show up as a difference between columns.
        ratios = [b / x for b, x in zip(series["baseline"], series[name], strict=True)]
        return statistics.median(ratios)

    rows = [
        (
            "store alone (baseline)",
            "messages in memory",
            rate("baseline"),
            statistics.median(runs["baseline"]),
            1e6 * statistics.median(cpu["baseline"]) / counts["baseline"],
            "",
            "1.00x / 1.00x",
        ),
    ]
    for name, label in (("openai", "OpenAI JSONL"), ("chatgpt", "ChatGPT conversations.json")):
        rows.append(
            (
                f"import {label}",
                f"{sizes[name] / 1e6:,.1f} MB",
                rate(name),
                statistics.median(runs[name]),
                1e6 * statistics.median(cpu[name]) / counts[name],
                f"{statistics.median(reimport[name]):.2f} s",
                f"{paired(name, runs):.2f}x / {paired(name, cpu):.2f}x",
            )
        )
    lines = [
        "# Import throughput",
        "",
        f"- date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}",
        f"- command: `python benchmarks/import.py --messages {args.messages} --repeats "
        f"{args.repeats} --durability {args.durability}`",
        f"- workload: {total:,} messages in {len(sessions):,} conversations from "
        "benchmarks/corpus.py (tool calls and results, ~10 % Chinese), each run into a "
        "fresh SQLite home",
        f"- durability of every figure: `{args.durability}` (WAL, synchronous="
        f"{'NORMAL' if args.durability == 'normal' else 'FULL'})",
        f"- load average before / after: {load_before[0]:.1f} / {load_after[0]:.1f} "
        "(the machine was shared: medians of the runs; compare ratios)",
        "",
        "| what | source size | messages/s (median) | seconds (median) | CPU µs/message "
        "(median) | second import (adds nothing) | speed vs store alone (wall / CPU) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for what, size, per_s, secs, cpu_us, again_s, ratio in rows:
        lines.append(
            f"| {what} | {size} | {per_s:,.0f} | {secs:.2f} | {cpu_us:,.0f} | {again_s} | {ratio} |"
        )
    lines += ["", "Every run (messages/s, wall clock):", ""]
    lines += [
        f"- run {i + 1}: "
        + ", ".join(
            f"{name} {counts[name] / runs[name][i]:,.0f}"
            for name in ("baseline", "openai", "chatgpt")
        )
        for i in range(args.repeats)
    ]
    lines += [
        "",
        "The baseline writes the same messages through `create_session` + `append_messages` "
        "with nothing to parse; an import also reads and converts the source, sets titles "
        "and checks each session for an earlier import. A ratio near 1 means the import "
        "costs little beyond the store's own writes (three full-text indexes kept by "
        "triggers). Ratios are medians of each import run against the baseline run of the same "
        "round; CPU time (this process only) moves much less with the machine's load "
        "than wall time does.",
    ]
    report = "\n".join(lines) + "\n"
    print(report)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()
