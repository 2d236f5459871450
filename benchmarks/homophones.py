"""Chinese homophone slips: does a query typed with the wrong character of the right
sound find what the right one finds, and does a query typed right stay as it is?

Usage::

    python benchmarks/homophones.py PATH/madial-zh-dev [--spans 2] [--seed 7]
        [--out benchmarks/results/homophones.md]

The store (SQLite, a temporary file): every MADial-Bench memory as a session of one
message (as ``benchmarks/recall.py`` writes them), and every other turn of the MADial
dialogues as a message of a background session, so that the store holds the bigrams of
natural Chinese conversation, not only those of the memories (an unknown bigram is what
marks a slip, and a store that knows more bigrams offers more wrong corrections).

The queries are synthetic and say so: from each memory's event, up to ``--spans`` runs
of 4 to 10 Chinese characters between punctuation (chosen by a seeded generator), each
asked as written ("clean") and with one character replaced by another of the same
reading, or, in a third set of 2-3 character windows, two side by side ("slip", the
characters and the replacements chosen by the same generator among
the characters :func:`memstrata.query.homophones.sounds_alike` offers, as a pinyin input
method offers them). Each query asks ``search_sessions``; the rank of the memory it came
from among the memory sessions found is what is scored: hit@1 and hit@5, with typo
correction off (``store.typos = False``) and on (the default). Also counted: the clean
queries correction changed (wrong corrections), the slips corrected back to the span as
written, and the time ``respell`` takes. A query taken from the store's own text holds
only bigrams the store holds, so it is never corrected; what correction does to text
the store never held is counted on the turns left out of the store (each of their
Chinese runs asked as written: any change there is a wrong correction, or a guess).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from memstrata import SessionStore  # noqa: E402
from memstrata.query.cjk import CJK_RUN  # noqa: E402
from memstrata.query.homophones import sounds_alike  # noqa: E402
from store import percentile  # noqa: E402  (the benchmarks' own helpers, by path)

_TURN = re.compile(r'^<([^>]*)>\s*:\s*"?(.*?)"?\s*$', re.S)


@dataclass
class Query:
    memory: str
    clean: str
    slip: str


def load(folder: Path) -> tuple[dict[str, str], list[str]]:
    """The memories (session id -> event text, full text) and every dialogue turn."""
    memories: dict[str, str] = {}
    for path in sorted(folder.glob("*-memory.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                for row in json.loads(line).values():
                    memories[f"memory_{int(row['id'])}"] = (
                        f"{row['event']}\x00{row['event']} {row['scene']} {row['emotion']}"
                    )
    turns: list[str] = []
    for path in sorted(folder.glob("*-dialogue.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                for turn in json.loads(line)["dialogue"]:
                    match = _TURN.match(turn.strip())
                    if match and match.group(2):
                        turns.append(match.group(2))
    return memories, turns


def make_queries(
    memories: dict[str, str],
    spans: int,
    rng: random.Random,
    short: bool = False,
    double: bool = False,
) -> list[Query]:
    """Up to ``spans`` queries per memory: runs of 4-10 characters of its event, or
    (``short``) a window of 2-3 characters inside a longer run (a name, a term); one
    character replaced, or (``double``) two side by side."""
    out = []
    for sid, text in memories.items():
        event = text.split("\x00")[0]
        if short:
            runs = [m.group() for m in CJK_RUN.finditer(event) if len(m.group()) >= 4]
            runs = [
                r[at : at + size]
                for r in runs
                for size in (2, 3)
                for at in [rng.randrange(len(r) - size + 1)]
            ]
        else:
            runs = [m.group() for m in CJK_RUN.finditer(event) if 4 <= len(m.group()) <= 10]
        for clean in rng.sample(runs, min(spans, len(runs))):
            width = 2 if double else 1
            places = [
                i
                for i in range(len(clean) - width + 1)
                if all(sounds_alike(ch) for ch in clean[i : i + width])
            ]
            if not places:
                continue
            at = rng.choice(places)
            typed = "".join(rng.choice(sounds_alike(ch)) for ch in clean[at : at + width])
            out.append(Query(sid, clean, clean[:at] + typed + clean[at + width :]))
    return out


def rank_of(store: SessionStore, query: str, memory: str) -> int | None:
    hits = [h["session_id"] for h in store.search_sessions(query, limit=50)]
    found = [s for s in hits if s.startswith("memory_")]
    return found.index(memory) + 1 if memory in found else None


def measure(store: SessionStore, queries: list[Query]) -> dict[str, Any]:
    """Ranks per setting, corrections made, and respell's time, for one query set."""
    rows: dict[str, list[int | None]] = {}
    for label, typos, field in (
        ("clean, correction off", False, "clean"),
        ("clean, correction on", True, "clean"),
        ("slip, correction off", False, "slip"),
        ("slip, correction on", True, "slip"),
    ):
        store.typos = typos
        rows[label] = [rank_of(store, getattr(q, field), q.memory) for q in queries]
    store.typos = True
    changed = [(q, fix) for q in queries if (fix := store.respell(q.clean)[1])]
    restored = [q for q in queries if store.respell(q.slip)[0] == q.clean]
    fixed = [q for q in queries if store.respell(q.slip)[1]]
    timing: dict[str, list[float]] = {"clean": [], "slip": []}
    for _ in range(3):
        for q in queries:
            for field in timing:
                started = time.perf_counter()
                store.respell(getattr(q, field))
                timing[field].append((time.perf_counter() - started) * 1000)
    return {
        "queries": queries,
        "rows": rows,
        "changed": changed,
        "restored": restored,
        "fixed": fixed,
        "timing": timing,
    }


def report(name: str, found: dict[str, Any]) -> list[str]:
    def hit(ranks: list[int | None], k: int) -> float:
        return sum(1 for r in ranks if r is not None and r <= k) / len(ranks)

    queries, timing, changed = found["queries"], found["timing"], found["changed"]
    n = len(queries)
    lines = [
        "",
        f"## {name} ({n} queries)",
        "",
        "| queries | hit@1 | hit@5 | not found |",
        "|---|---:|---:|---:|",
    ]
    for label, ranks in found["rows"].items():
        missing = sum(1 for r in ranks if r is None)
        lines.append(f"| {label} | {hit(ranks, 1):.3f} | {hit(ranks, 5):.3f} | {missing} |")
    lines += [
        "",
        f"- Slips corrected: {len(found['fixed'])} of {n}; back to the text exactly as "
        f"written: {len(found['restored'])} of {n}.",
        f"- Clean queries changed by correction (wrong corrections): {len(changed)} of {n}"
        + (": " if changed else ".")
        + ", ".join(
            f"`{q.clean}` ({', '.join(f'{a} -> {b}' for a, b in fix.items())})"
            for q, fix in changed[:12]
        ),
        f"- `respell` time: clean p50 {statistics.median(timing['clean']):.2f} ms, "
        f"p95 {percentile(timing['clean'], 95):.2f}; slip p50 "
        f"{statistics.median(timing['slip']):.2f} ms, p95 {percentile(timing['slip'], 95):.2f} "
        "(3 rounds after one untimed correction of every query).",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("madial", type=Path)
    parser.add_argument("--spans", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    memories, turns = load(args.madial)
    # Every other turn is stored; the others are text the store never held, asked as
    # they are to count what correction changes in a query about something new.
    background, unseen = turns[::2], turns[1::2]
    sets = {
        "spans of 4-10 characters": make_queries(memories, args.spans, random.Random(args.seed)),
        "windows of 2-3 characters": make_queries(
            memories, args.spans, random.Random(args.seed), short=True
        ),
        "windows of 2-3 characters, two slips side by side": make_queries(
            memories, args.spans, random.Random(args.seed), short=True, double=True
        ),
    }
    with tempfile.TemporaryDirectory() as folder:
        store = SessionStore(Path(folder) / "state.db")
        try:
            for sid, text in memories.items():
                store.create_session(sid, source="madial")
                store.append_messages(sid, [{"role": "user", "content": text.split("\x00")[1]}])
            for n in range(0, len(background), 50):
                store.create_session(f"dialogue_{n}", source="madial")
                store.append_messages(
                    f"dialogue_{n}",
                    [{"role": "user", "content": t} for t in background[n : n + 50]],
                )
            results = {name: measure(store, queries) for name, queries in sets.items()}
            # Each run of Chinese between punctuation as written (a clause, as a user
            # would type it), and, as the worst case, cut to its first 2 or 3 characters
            # (a fragment that ends inside a word, which no user types).
            rng = random.Random(args.seed)
            runs = [m.group() for t in unseen for m in CJK_RUN.finditer(t) if len(m.group()) >= 2]
            new_text = {
                "clauses": runs,
                "fragments": [r[: rng.choice((2, 3))] for r in runs],
            }
            changed_new = {
                kind: [(w, fix) for w in texts if (fix := store.respell(w)[1])]
                for kind, texts in new_text.items()
            }
            messages = len(memories) + len(background)
        finally:
            store.close()

    def hit(ranks: list[int | None], k: int) -> float:
        return sum(1 for r in ranks if r is not None and r <= k) / len(ranks)

    lines = [
        "# Chinese homophone slips",
        "",
        f"`python benchmarks/homophones.py madial-zh-dev --spans {args.spans} "
        f"--seed {args.seed}`; Python {platform.python_version()}, "
        f"{platform.system()} {platform.machine()}.",
        "",
        f"Store: {len(memories)} MADial-Bench zh memories (one session each) and "
        f"{len(background):,} dialogue turns (every other one) as background, "
        f"{messages:,} messages. Queries "
        "(synthetic): text of the memories' events, each as written and with one "
        "character replaced by another of the same reading (in the last set, two side "
        "by side, each by one of its own reading). Scored: the rank of the "
        "query's memory among the memory sessions found.",
    ]
    for name, found in results.items():
        lines += report(name, found)
    lines += [
        "",
        "## Text the store never held",
        "",
        f"The turns not stored ({len(unseen):,}): each run of Chinese in them between "
        "punctuation asked as written (a clause) and cut to its first 2 or 3 characters "
        "(a fragment ending inside a word: the worst case). Any change is a wrong "
        "correction or a guess.",
        "",
    ]
    for kind, texts in new_text.items():
        changed = changed_new[kind]
        lines.append(
            f"- {kind}: {len(texts):,} queries, correction changed {len(changed)} "
            f"({len(changed) / max(len(texts), 1):.1%})"
            + (": " if changed else ".")
            + ", ".join(
                f"`{w}` ({', '.join(f'{a} -> {b}' for a, b in fix.items())})"
                for w, fix in changed[:12]
            )
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
