"""Facts recall on LoCoMo observations: does the facts store return the right fact?

Usage:
    python benchmarks/facts_recall.py PATH/locomo.json [--limit-questions N] [--hybrid]
        [--ablations] [--output benchmarks/results/facts_recall.md]

Each conversation's observations (``observation.session_N_observation`` : speaker ->
``[[fact text, dia_id or list], ...]``) are stored as facts in a fresh FactStore (one
temp folder per conversation), as the provider's ``remember`` path would: category
``episodic``, subject the speaker's name in lower case, the text as written (it names
the speaker). Every question except category 5 (adversarial) is asked verbatim; a hit
is a returned fact whose dia_ids meet the question's evidence.

Measured, overall and per category:

* ``search``  - ``FactStore.search`` (the facts_search tool and CLI path): R@1/5/10,
  NDCG@5;
* ``recall``  - ``FactStore.recall`` (the gated per-turn prefetch): the same, plus how
  often it returns nothing for a question, and how often it returns anything for a set
  of unrelated chit-chat messages asked of every conversation's store (the gate must
  stay quiet).

``--hybrid`` embeds every fact with the offline all-MiniLM-L6-v2 (``index_vectors``) and
measures both paths with the vectors fused in. ``--ablations`` adds the levers: no
stemming (a store whose word index uses the plain tokenizer), no stopwords, and the
per-index fusion replaced by the word index alone. Timings are medians of one run on a
shared machine: noisy.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from memstrata.providers.facts import recall as facts_recall
from memstrata.providers.facts import vectors as facts_vectors
from memstrata.providers.facts.schema import Fact
from memstrata.providers.facts.store import FactStore
from memstrata.search.embedders import Embedder

KS = (1, 5, 10)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
PLAIN = "unicode61 remove_diacritics 2"
# Messages a user might send that no LoCoMo observation is about: the recall gate should
# return nothing for them. Written for this benchmark (none is taken from the data).
CHITCHAT = [
    "hi there, how are you today?",
    "thanks, that was helpful",
    "ok sounds good, let's continue",
    "can you fix this python traceback for me?",
    "what is 17 times 23?",
    "please summarise the text above in three bullet points",
    "write a haiku about autumn leaves",
    "how do I reverse a linked list in C?",
    "what's the capital of Australia?",
    "convert 30 degrees celsius to fahrenheit",
    "explain the difference between TCP and UDP",
    "rename the variable foo to bar in this function",
    "is it better to use tabs or spaces?",
    "good morning!",
    "can you make the tone of this email more formal?",
    "what does HTTP status 418 mean?",
    "sort these numbers: 5, 3, 9, 1",
    "translate 'good night' into German",
    "why is the sky blue?",
    "run the unit tests again please",
    "the build failed with a linker error",
    "what time zone is UTC+8?",
    "give me a regex for an email address",
    "how many bytes are in a kilobyte?",
    "let's stop here for today, bye",
    "remind me what we were doing",
    "try again with a shorter answer",
    "what is the square root of 144?",
    "list three sorting algorithms",
    "does this SQL query need an index?",
]


DEFAULTS_TEXT = """\
Defaults and why: keyword only, which needs no model and no indexing step: Porter
stemming, the session search's stopwords, the session search's fusion of the indexes
and the subject boost (x1.5 for a fact whose subject the question names); recall adds
the significant-term gate with the coverage rule (a message is answered only when some
fact holds more than a third of the significant terms of one of its sentences or
lines) and ranks what it answers as search does. Hybrid recall is opt-in (`search.embedder`): it
needs a model and its indexing step and costs one forward pass per query; when on, it
scores at or above keyword-only on every metric and question category below, and
answers no more chit-chat. The coverage rule trades recall R@5 (see "no coverage gate")
for answering a few percent of unrelated chit-chat instead of over a third: an
unrelated fact injected every turn costs tokens and can mislead the model, while a fact
the gate misses is still one `facts_search` away."""


@dataclass
class Conversation:
    """One LoCoMo sample: its facts (text, speaker, dia_ids) and its questions."""

    name: str
    facts: list[tuple[str, str, set[str]]]
    questions: list[tuple[str, int, set[str]]]


def dia_ids(value: Any) -> set[str]:
    """Dia ids named by an evidence item or list, read leniently ("D1:3", "D8:6; D9:17")."""
    items = value if isinstance(value, list) else [value]
    out: set[str] = set()
    for item in items:
        for match in re.finditer(r"D\s*:?\s*(\d+)\s*:\s*(\d+)", str(item)):
            out.add(f"D{int(match.group(1))}:{int(match.group(2))}")
    return out


def load(path: Path, limit_questions: int | None, half: str | None = None) -> list[Conversation]:
    """Read a LoCoMo-format file into conversations (category 5 left out); ``half`` keeps
    the conversations of even ("a") or odd ("b") position, as benchmarks/recall.py does."""
    data = json.loads(path.read_text(encoding="utf-8"))
    convs: list[Conversation] = []
    budget = limit_questions
    for n, sample in enumerate(data):
        if half is not None and n % 2 != (0 if half == "a" else 1):
            continue
        facts: list[tuple[str, str, set[str]]] = []
        observation = sample.get("observation") or {}
        for key in sorted(observation, key=lambda k: int(re.sub(r"\D", "", k) or 0)):
            for speaker, items in (observation[key] or {}).items():
                for item in items:
                    if not item or not str(item[0]).strip():
                        continue
                    ids = dia_ids(item[1] if len(item) > 1 else "")
                    facts.append((str(item[0]), str(speaker), ids))
        questions = []
        for qa in sample.get("qa", []):
            if qa.get("category") == 5:
                continue
            gold = dia_ids(qa.get("evidence", []))
            if not gold:
                continue
            if budget is not None and budget <= 0:
                break
            questions.append((str(qa["question"]), int(qa["category"]), gold))
            if budget is not None:
                budget -= 1
        convs.append(Conversation(str(sample.get("sample_id", n)), facts, questions))
    return [c for c in convs if c.questions and c.facts]


def subject_of(speaker: str) -> str:
    """The facts subject for a speaker: the name in lower case, letters and digits only."""
    return re.sub(r"[^a-z0-9]+", "_", speaker.lower()).strip("_")[:32] or "user"


@contextlib.contextmanager
def open_store(folder: Path, word_tokenizer: str | None = None) -> Iterator[FactStore]:
    """A fresh FactStore in ``folder``; ``word_tokenizer`` rebuilds its (empty) word index."""
    store = FactStore(folder / "facts.db")
    try:
        if word_tokenizer:
            conn = sqlite3.connect(store.path, isolation_level=None)
            try:
                conn.execute("DROP TABLE facts_fts")
                conn.execute(
                    "CREATE VIRTUAL TABLE facts_fts USING fts5(content, key, value, "
                    f"content='facts', content_rowid='id', tokenize='{word_tokenizer}')"
                )
            finally:
                conn.close()
        yield store
    finally:
        store.close()


@contextlib.contextmanager
def open_postgres(dsn: str, folder: Path, word_tokenizer: str | None = None) -> Iterator[Any]:
    """A fresh namespace of the facts store on PostgreSQL, its rows deleted afterwards."""
    from memstrata.providers.facts.postgres import PostgresFactStore

    if word_tokenizer:
        raise SystemExit("the tokenizer ablations run on SQLite only")
    store = PostgresFactStore(dsn, namespace=f"facts-bench-{os.getpid()}-{folder.name}")
    try:
        yield store
    finally:
        store.delete_namespace()
        store.close()


def fill(store: FactStore, conv: Conversation) -> dict[int, set[str]]:
    """Store the conversation's facts; return each fact id's dia_ids."""
    labels: dict[int, set[str]] = defaultdict(set)
    for text, speaker, ids in conv.facts:
        fact = store.add(text, category="episodic", subject=subject_of(speaker), source="tool")
        labels[fact.id] |= ids
    return labels


@dataclass
class Scores:
    """Per-question metric values by category, plus empties and latencies."""

    rows: dict[int, list[dict[str, float]]] = field(default_factory=lambda: defaultdict(list))
    empty: int = 0
    chitchat_asked: int = 0
    chitchat_answered: int = 0
    chitchat_facts: int = 0
    millis: list[float] = field(default_factory=list)

    def add(self, category: int, ranked: list[set[str]], gold: set[str]) -> None:
        """Score one ranked list of facts (their dia_ids) against the gold dia_ids."""
        hits = [bool(ids & gold) for ids in ranked]
        row = {f"R@{k}": float(any(hits[:k])) for k in KS}
        dcg = sum(1 / math.log2(i + 2) for i, hit in enumerate(hits[:5]) if hit)
        idcg = sum(1 / math.log2(i + 2) for i in range(min(len(gold), 5)))
        row["NDCG@5"] = dcg / idcg
        self.rows[category].append(row)
        self.empty += not ranked

    def mean(self, category: int | None = None) -> dict[str, float]:
        """Averages over one category, or over every question."""
        rows = (
            [r for rs in self.rows.values() for r in rs]
            if category is None
            else self.rows.get(category, [])
        )
        keys = [f"R@{k}" for k in KS] + ["NDCG@5"]
        return {k: sum(r[k] for r in rows) / len(rows) if rows else 0.0 for k in keys}

    def count(self, category: int | None = None) -> int:
        """Number of questions scored."""
        if category is None:
            return sum(len(v) for v in self.rows.values())
        return len(self.rows.get(category, []))


Finder = Callable[[FactStore, str], list[Fact]]


@dataclass
class System:
    """One configuration: how it finds facts, and whether it is the gated recall path."""

    find: Finder
    gated: bool
    tokenizer: str | None = None
    hybrid: bool = False
    # A PostgreSQL DSN: the system runs on PostgresFactStore (a fresh namespace per
    # conversation) instead of the SQLite file.
    dsn: str | None = None


@contextlib.contextmanager
def overridden(module: Any, name: str, value: Any) -> Iterator[None]:
    """Temporarily replace a module constant (an ablation)."""
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


def searcher(**kwargs: Any) -> Finder:
    """Explicit search, top 10."""
    return lambda store, q: store.search(q, limit=10, **kwargs)


def recaller(**kwargs: Any) -> Finder:
    """Gated recall, top 10."""
    return lambda store, q: store.recall(q, limit=10, **kwargs)


def run(
    convs: list[Conversation], systems: dict[str, System], embedder: Embedder | None
) -> dict[str, Scores]:
    """Score every system on every conversation (one store per conversation and tokenizer)."""
    results = {name: Scores() for name in systems}
    groups: dict[tuple[str | None, str | None], list[str]] = defaultdict(list)
    for name, system in systems.items():
        groups[system.tokenizer, system.dsn].append(name)
    for conv in convs:
        for (tokenizer, dsn), names in groups.items():
            opened = open_store if dsn is None else partial(open_postgres, dsn)
            with tempfile.TemporaryDirectory() as tmp, opened(Path(tmp), tokenizer) as store:
                labels = fill(store, conv)
                if embedder is not None and any(systems[n].hybrid for n in names):
                    store.embedder = embedder
                    store.index_vectors()
                for name in names:
                    system, scores = systems[name], results[name]
                    store.embedder = embedder if system.hybrid else None
                    for question, category, gold in conv.questions:
                        start = time.perf_counter()
                        found = system.find(store, question)
                        scores.millis.append((time.perf_counter() - start) * 1000)
                        scores.add(category, [labels.get(f.id, set()) for f in found], gold)
                    if system.gated:
                        for message in CHITCHAT:
                            found = system.find(store, message)
                            scores.chitchat_asked += 1
                            scores.chitchat_answered += bool(found)
                            scores.chitchat_facts += len(found)
        print(
            f"  {conv.name}: {len(conv.facts)} facts, {len(conv.questions)} questions",
            file=sys.stderr,
        )
    return results


def table(results: dict[str, Scores], systems: dict[str, System]) -> str:
    """Markdown tables: overall, recall gate, then R@5 per category."""
    metrics = [f"R@{k}" for k in KS] + ["NDCG@5"]
    lines = [
        "| system | n | " + " | ".join(metrics) + " | p50 ms |",
        "|---|---|" + "---|" * (len(metrics) + 1),
    ]
    for name, sc in results.items():
        m = sc.mean()
        vals = " | ".join(f"{m[k]:.3f}" for k in metrics)
        p50 = statistics.median(sc.millis) if sc.millis else 0.0
        lines.append(f"| {name} | {sc.count()} | {vals} | {p50:.1f} |")
    gated = [n for n in results if systems[n].gated]
    if gated:
        lines += [
            "",
            "Recall gate (prefetch path): questions answered with nothing, and unrelated "
            "chit-chat messages answered with something (lower is better):",
            "",
            "| system | questions with no fact | chit-chat with a fact | facts per chit-chat |",
            "|---|---|---|---|",
        ]
        for name in gated:
            sc = results[name]
            asked = max(1, sc.chitchat_asked)
            lines.append(
                f"| {name} | {sc.empty}/{sc.count()} ({sc.empty / max(1, sc.count()):.1%}) | "
                f"{sc.chitchat_answered}/{sc.chitchat_asked} "
                f"({sc.chitchat_answered / asked:.1%}) | {sc.chitchat_facts / asked:.2f} |"
            )
    lines += ["", "R@5 / NDCG@5 per category:", ""]
    cats = [c for c in CATEGORIES if any(sc.count(c) for sc in results.values())]
    lines.append("| system | " + " | ".join(f"{CATEGORIES[c]} ({c})" for c in cats) + " |")
    lines.append("|---|" + "---|" * len(cats))
    for name, sc in results.items():
        cells = []
        for c in cats:
            m = sc.mean(c)
            cells.append(f"{m['R@5']:.3f} / {m['NDCG@5']:.3f} (n={sc.count(c)})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the tables and optionally write them to --output."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("path", type=Path, help="LoCoMo-format JSON file")
    parser.add_argument("--limit-questions", type=int, default=None)
    parser.add_argument("--hybrid", action="store_true", help="also measure MiniLM vectors")
    parser.add_argument("--ablations", action="store_true", help="also measure the levers")
    parser.add_argument(
        "--half",
        choices=("a", "b"),
        default=None,
        help="measure the conversations of even (a) or odd (b) position only",
    )
    parser.add_argument(
        "--postgres",
        metavar="DSN",
        default=None,
        help="also run the default systems (and hybrid ones) on PostgresFactStore at DSN",
    )
    parser.add_argument("--output", type=Path, default=None, help="write a Markdown report")
    args = parser.parse_args(argv)
    convs = load(args.path, args.limit_questions, args.half)
    systems: dict[str, System] = {
        "search (default: keyword)": System(searcher(), gated=False),
        "recall (default: keyword, gated)": System(recaller(), gated=True),
    }
    embedder: Embedder | None = None
    if args.hybrid:
        from memstrata.search.embedders import offline_embedder

        embedder = _cached(offline_embedder())
        systems["search + hybrid all-MiniLM-L6-v2"] = System(searcher(), False, hybrid=True)
        systems["recall + hybrid all-MiniLM-L6-v2"] = System(recaller(), True, hybrid=True)
        if args.ablations:
            for path, find, gated in (("search", searcher(), False), ("recall", recaller(), True)):
                rerank = _with(find, facts_vectors, f"{path.upper()}_VECTOR_MIN", 2.0)
                systems[f"{path} + hybrid, ablation: rerank only (no vector-only facts)"] = System(
                    rerank, gated, hybrid=True
                )
            for cos in (0.4, 0.6):
                systems[f"recall + hybrid, ablation: vector-only facts from cos {cos}"] = System(
                    _with(recaller(), facts_vectors, "RECALL_VECTOR_MIN", cos), True, hybrid=True
                )
            for path, find, gated in (("search", searcher(), False), ("recall", recaller(), True)):
                systems[f"{path} + hybrid, ablation: vector weight 2"] = System(
                    _with(find, facts_vectors, "VECTOR_WEIGHT", 2.0), gated, hybrid=True
                )
    if args.ablations:
        systems["search, ablation: no stemming"] = System(searcher(), False, tokenizer=PLAIN)
        systems["recall, ablation: no stemming"] = System(recaller(), True, tokenizer=PLAIN)
        systems["recall, ablation: no coverage gate (the previous recall)"] = System(
            _with(recaller(), facts_recall, "RECALL_MIN_COVERAGE", 0.0), True
        )
        systems["search, ablation: no subject boost"] = System(
            _with(searcher(), facts_recall, "SUBJECT_BOOST", 0.0), False
        )
        systems["recall, ablation: no subject boost"] = System(
            _with(recaller(), facts_recall, "SUBJECT_BOOST", 0.0), True
        )
        systems["search, ablation: no stopwords"] = System(
            _with(searcher(), facts_recall, "SEARCH_STOPWORDS", frozenset()), False
        )
        systems["search, ablation: word index only"] = System(
            _with(searcher(), facts_recall, "SEARCH_INDEXES", ("word",)), False
        )
    if args.postgres:
        shipped = [n for n in systems if "ablation" not in n]
        for name in shipped:
            systems[f"{name} [postgres]"] = replace(systems[name], dsn=args.postgres)
    started = time.perf_counter()
    results = run(convs, systems, embedder)
    elapsed = time.perf_counter() - started
    report = table(results, systems)
    if isinstance(embedder, _Cached) and embedder.query_millis:
        report += (
            "\n\nHybrid rows: each question's vector is computed once and cached, so the "
            "first hybrid system pays the embedder and the second reuses it. Embedding one "
            f"question with all-MiniLM-L6-v2 in numpy: median "
            f"{statistics.median(embedder.query_millis):.1f} ms "
            f"({len(embedder.query_millis)} questions and chit-chat messages); add it to "
            "the recall row for a fresh message."
        )
    print(report)
    questions = sum(len(c.questions) for c in convs)
    facts = sum(len(c.facts) for c in convs)
    reachable = sum(
        1 for c in convs for _, _, gold in c.questions if any(ids & gold for _, _, ids in c.facts)
    )
    report += (
        f"\n\nCeiling: {reachable} of {questions} questions ({reachable / questions:.3f}) have "
        "an evidence dia_id that some observation names; no system can hit the others."
    )
    print(f"\n{len(convs)} conversations, {facts} facts, {questions} questions, {elapsed:.0f}s")
    if args.output is not None:
        header = (
            "# Facts recall on LoCoMo observations\n\n"
            f"Data: `{args.path.name}`, {len(convs)} conversations, {facts} observations stored "
            f"as facts (subject = speaker), {questions} questions (category 5 excluded), asked "
            "verbatim; a fresh facts store per conversation; a hit is a returned fact whose "
            f"dia_ids meet the question's evidence. {len(CHITCHAT)} unrelated chit-chat "
            "messages are sent to the recall path of every store. Latencies are medians of "
            "one run on a shared, noisy machine.\n\n" + DEFAULTS_TEXT + "\n\n"
        )
        if args.postgres:
            header += POSTGRES_TEXT + "\n\n"
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(header + report + "\n", encoding="utf-8")
    return 0


POSTGRES_TEXT = (
    "Rows marked `[postgres]` ran the same systems on `PostgresFactStore` (a fresh namespace "
    "of one PostgreSQL database per conversation, the same facts and the same vectors) in "
    "the same run (`--postgres DSN`). The recall gate, the subject boost and the fusion with "
    "vectors are the same code on both backends; the keyword score differs (FTS5's BM25 on "
    "SQLite, each term's IDF times its `ts_rank` on PostgreSQL). PostgreSQL latencies "
    "include a round trip per statement to a local server."
)


def _with(find: Finder, module: Any, name: str, value: Any) -> Finder:
    def wrapped(store: FactStore, q: str) -> list[Fact]:
        with overridden(module, name, value):
            return find(store, q)

    return wrapped


class _Cached:
    """Wraps an embedder with a text -> vector cache (the ablations embed the same texts)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = inner.name
        self.dims = inner.dims
        self.cache: dict[str, list[float]] = {}
        self.query_millis: list[float] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        missing = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if missing:
            start = time.perf_counter()
            self.cache.update(zip(missing, self.inner.embed(missing), strict=True))
            if len(missing) == 1:  # a query: its forward pass is part of a query's cost
                self.query_millis.append((time.perf_counter() - start) * 1000)
        return [self.cache[t] for t in texts]


def _cached(embedder: Embedder) -> Embedder:
    return _Cached(embedder)


if __name__ == "__main__":
    raise SystemExit(main())
