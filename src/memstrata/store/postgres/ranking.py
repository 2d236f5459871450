"""Ranking search candidates on PostgreSQL with SQLite's BM25.

SQLite ranks a natural query with FTS5's ``bm25()``: every term of the query counts, by
its rarity (IDF) and its frequency in the row, normalised by the row's length in tokens
against the index's average. ``ts_rank`` knows neither the rarity of a term nor the
average length, and scaling each term to its best candidate (what this store did)
made a bigram found once in a long memory weigh as much as a rare name: on the Chinese
dev set session recall trailed SQLite's by a fifth. Here the candidates the indexes
found are scored as FTS5 scores them (:mod:`memstrata.store.bm25`, one implementation
for both backends):

* a term's frequency in a row and the row's length come from the row's ``tsvector``
  (word index) and CJK bigram ``tsvector``: the positions of the term's lexemes (a
  phrase where they follow each other), and all the positions of the row, which count
  every token as FTS5 counts them (the word configuration has no stopwords);
* the document frequencies and the average lengths come from the tenant's newest
  :data:`SAMPLE_ROWS` rows (:class:`Sample`), scaled to the tenant's size: exact for a
  tenant of at most that many rows, an estimate read in bounded time for a larger one.
  The sample is kept per tenant and brought up to date with the rows written since, so
  a search reads only what is new;
* every term of the query is scored, also those the candidate search left out
  (:func:`memstrata.store.postgres.bounds.bound_query` keeps the rarest ones, by the
  same sample, to find the candidates);
* a term only a substring scan found (an identifier inside a longer one) counts as
  present once, as SQLite's trigram index counts a term the word index does not know.

The scores keep FTS5's scale and the best candidate scores 1.0, as SQLite's fusion
(:func:`memstrata.store.rank.fuse_evidence`) scales them.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from memstrata.query.compile import CompiledQuery, Term
from memstrata.store import bm25
from memstrata.store.backend import Candidate
from memstrata.store.hits import term_needle, text_of
from memstrata.store.postgres.codec import sqlite_form
from memstrata.store.postgres.schema import TABLE_MESSAGES, TENANT_MESSAGES
from memstrata.store.rank import COMMON_DF
from memstrata.store.titles import escape_like

__all__ = [
    "SAMPLE_ROWS",
    "Sample",
    "cjk_groups",
    "parse_vector",
    "vector_length",
    "phrase_patterns",
    "Scoring",
    "sample",
    "scoring",
    "term_frequency",
    "text_length",
]

Conn = psycopg.Connection[Any]
Vector = dict[str, str]
# (lexeme, offset from the phrase's first lexeme, prefix) for each lexeme of a phrase.
Pattern = tuple[tuple[str, int, bool], ...]
# A term in one index: every group must be found (a phrase each); None: not in the index.
Groups = tuple[Pattern, ...]

# The tenant's newest rows whose statistics rank a search: COMMON_DF, the share of a
# tenant the candidate search reads for one term, so a tenant SQLite ranks with exact
# statistics (at most COMMON_DF rows: FTS5's bm25() over every row) is ranked exactly.
SAMPLE_ROWS = COMMON_DF
# Tenants whose samples stay in memory (per process, least recently used dropped).
CACHED_TENANTS = 64
# The tenant's size is the sum of its sessions' message counters: a read of every session
# row of the tenant (2 ms at 1M messages in 13,000 sessions, ten times that at 10M), so a
# process counts it at most every RECOUNT_S and in between adds the rows appended since,
# which it reads for the sample anyway. What changes the counters otherwise (deletes,
# rewinds and compaction, which recount a session) makes this process count afresh at
# once (see changed); another process's such change is seen within RECOUNT_S, as is a row
# committed after a newer one was counted. The size is a statistic of the ranking (a
# term's estimated rows, the sample's scale), which the planner's own are far staler than.
RECOUNT_S = 10.0
# Word lexemes of a term text under the word configuration (phraseto_tsquery is
# deterministic for a configuration), so a repeated term costs no round trip.
CACHED_TERMS = 20_000
# Up to this many lexemes in a query's index, only they are read from a row's vector
# (filtered by the server) instead of the whole vector.
PICKED_LEXEMES = 32

_LEXEME = re.compile(r"('(?:[^']|'')*')(?::([0-9A-D,]+))?")
_QUERY_ITEM = re.compile(r"('(?:[^']|'')*')(:\*)?|<(\d+|-)>|(&|\||!|\(|\))")


def _unquoted(lexeme: str) -> str:
    """A quoted lexeme as its text (what ``setweight`` takes)."""
    return lexeme[1:-1].replace("''", "'").replace("\\\\", "\\")


def parse_vector(text: str | None) -> Vector:
    """A ``tsvector``'s text form as {quoted lexeme: its positions as written}.

    Lexemes stay quoted as the server writes them (``'it''s'``), which is also how a
    ``tsquery`` writes them, so no unescaping is needed; the positions are read only for
    the lexemes a query holds. A split on spaces reads a row in microseconds; a lexeme
    with a space or without positions (never written by the store) takes the regex.
    """
    if not text:
        return {}
    items = text.split(" ")
    if text.count("':") == len(items):
        try:
            return dict(item.rsplit(":", 1) for item in items)
        except ValueError:
            pass
    return {m.group(1): m.group(2) or "1" for m in _LEXEME.finditer(text)}


def vector_length(vector: Vector) -> int:
    """A row's length in tokens: all its positions (a token at each)."""
    return sum(p.count(",") for p in vector.values()) + len(vector)


def text_length(text: str | None) -> int:
    """:func:`vector_length` of a ``tsvector``'s text form, without reading it: a comma
    between positions, one lexeme per closing quote and colon."""
    return text.count(",") + text.count("':") if text else 0


def phrase_patterns(query: str) -> Groups:
    """A ``tsquery``'s text form (a phrase, or an AND of phrases) as groups of patterns.

    ``'art-show' <-> 'art' <-> 'show'`` is one phrase; ``('修改' <-> '改') & ('苹':*)``
    two groups; an empty query none.
    """
    groups: list[Pattern] = []
    current: list[tuple[str, int, bool]] = []
    offset = 0
    for match in _QUERY_ITEM.finditer(query):
        lexeme, prefix, distance, op = match.groups()
        if lexeme is not None:
            # A prefix is matched on the quoted form without its closing quote.
            current.append((lexeme[:-1] if prefix else lexeme, offset, bool(prefix)))
        elif distance is not None:
            offset += 1 if distance == "-" else int(distance)
        elif op in ("&", "|", "!"):
            # An AND of groups (what the CJK rendering makes); OR and NOT do not occur in
            # a single term's rendering and are read as AND, which can only count less.
            if current:
                groups.append(tuple(current))
            current, offset = [], 0
    if current:
        groups.append(tuple(current))
    return tuple(groups)


def _written(vector: Vector, lexeme: str, prefix: bool) -> list[str]:
    """The positions (as written) of ``lexeme``, or of every lexeme it is a prefix of."""
    if not prefix:
        found = vector.get(lexeme)
        return [found] if found is not None else []
    return [ps for lex, ps in vector.items() if lex.startswith(lexeme)]


def _positions(vector: Vector, lexeme: str, prefix: bool) -> list[int]:
    if not prefix:
        written = vector.get(lexeme)
        return [] if written is None else [int(p.rstrip("ABCD")) for p in written.split(",")]
    return [int(p.rstrip("ABCD")) for ps in _written(vector, lexeme, prefix) for p in ps.split(",")]


def term_frequency(vector: Vector, groups: Groups) -> int:
    """How many times a row of ``vector`` holds the term (the fewest of its groups): a
    phrase counts where each lexeme follows the first at its offset."""
    fewest = 0
    for pattern in groups:
        (first, _, prefix), rest = pattern[0], pattern[1:]
        if not rest and not prefix:
            # One lexeme (most terms): its positions counted, none parsed.
            written = vector.get(first)
            count = 0 if written is None else written.count(",") + 1
        elif not rest:
            count = sum(ps.count(",") + 1 for ps in _written(vector, first, prefix))
        elif (not prefix and first not in vector) or any(
            not last and lexeme not in vector for lexeme, _, last in rest
        ):
            count = 0  # a phrase the row lacks a word of: no position read
        else:
            starts = _positions(vector, first, prefix)
            for lexeme, offset, last in rest:
                if not starts:
                    break  # a long phrase stops at its first lexeme the row lacks
                follow = set(_positions(vector, lexeme, last))
                starts = [p for p in starts if p + offset in follow]
            count = len(starts)
        if count == 0:
            return 0  # the fewest of the groups
        fewest = count if fewest == 0 else min(fewest, count)
    return fewest


@dataclass
class _Index:
    """One index's side of a sample: each sampled row's vector, and who holds what."""

    vectors: dict[int, Vector] = field(default_factory=dict)
    holders: dict[str, set[int]] = field(default_factory=dict)
    tokens: int = 0

    def add(self, rid: int, vector: Vector) -> None:
        self.vectors[rid] = vector
        self.tokens += vector_length(vector)
        for lexeme in vector:
            self.holders.setdefault(lexeme, set()).add(rid)

    def drop(self, rid: int) -> None:
        vector = self.vectors.pop(rid, None)
        if vector is None:
            return
        self.tokens -= vector_length(vector)
        for lexeme in vector:
            held = self.holders.get(lexeme)
            if held is not None:
                held.discard(rid)
                if not held:
                    del self.holders[lexeme]

    def copy(self) -> _Index:
        return _Index(dict(self.vectors), {k: set(v) for k, v in self.holders.items()}, self.tokens)

    def postings(self, groups: Groups) -> int:
        """The postings of the term's lexemes among the sampled rows: what a GIN scan for
        it reads (every lexeme's list, each lexeme a prefix covers)."""
        found = 0
        for pattern in groups:
            for lexeme, _, prefix in pattern:
                if prefix:
                    found += sum(
                        len(h) for lex, h in self.holders.items() if lex.startswith(lexeme)
                    )
                else:
                    found += len(self.holders.get(lexeme, ()))
        return found

    def count(self, groups: Groups) -> int:
        """Sampled rows holding the term."""
        if len(groups) == 1 and len(groups[0]) == 1 and not groups[0][0][2]:
            return len(self.holders.get(groups[0][0][0], ()))
        return len(self.rows(groups))

    def rows(self, groups: Groups) -> set[int]:
        """The sampled rows holding the term."""
        if not groups:
            return set()
        first, _, prefix = groups[0][0]
        if prefix:
            rows = {r for lex, held in self.holders.items() if lex.startswith(first) for r in held}
        else:
            rows = self.holders.get(first, set())
        if len(groups) == 1 and len(groups[0]) == 1:
            return rows
        return {r for r in rows if term_frequency(self.vectors[r], groups) > 0}


@dataclass
class Sample:
    """Statistics of a tenant's newest :data:`SAMPLE_ROWS` rows, for its size ``total``."""

    total: int = 0
    newest: int = 0
    ids: list[int] = field(default_factory=list)
    word: _Index = field(default_factory=_Index)
    cjk: _Index = field(default_factory=_Index)
    # (index, groups) -> frequency, for this state of the sample.
    known: dict[tuple[str, Groups], float] = field(default_factory=dict)
    # The tenant's size by its sessions' counters (total is at least the sample's rows)
    # and when it was last counted (time.monotonic): see RECOUNT_S.
    size: int = 0
    counted_at: float = float("-inf")

    @property
    def rows(self) -> int:
        return len(self.ids)

    @property
    def complete(self) -> bool:
        """True when the sample is every row of the tenant (its statistics are exact)."""
        return self.rows >= self.total

    def scale(self) -> float:
        return self.total / self.rows if self.rows else 0.0

    def frequency(self, index: str, groups: Groups) -> float:
        """The term's estimated number of rows in the tenant's ``index``."""
        key = (index, groups)
        found = self.known.get(key)
        if found is None:
            found = self.known[key] = self._side(index).count(groups) * self.scale()
        return found

    def copy(self) -> Sample:
        """A copy to update while searches read this one."""
        return Sample(
            self.total,
            self.newest,
            list(self.ids),
            self.word.copy(),
            self.cjk.copy(),
            size=self.size,
            counted_at=self.counted_at,
        )

    def nrow(self, index: str) -> float:
        """The rows of the tenant's ``index`` (the CJK index holds the rows with CJK)."""
        return len(self._side(index).vectors) * self.scale()

    def average(self, index: str) -> float:
        side = self._side(index)
        return side.tokens / len(side.vectors) if side.vectors else 1.0

    def holding(self, index: str, groups: Groups) -> set[int]:
        """The sampled rows of ``index`` holding the term."""
        return self._side(index).rows(groups)

    def _side(self, index: str) -> _Index:
        return self.word if index == "word" else self.cjk

    def update(self, rows: Iterable[tuple[int, str | None, str | None]]) -> None:
        """Take the rows written since (newest first), dropping the oldest past the cap."""
        fresh = list(rows)
        for rid, word, cjk in fresh:
            self.word.add(rid, parse_vector(word))
            if cjk:
                self.cjk.add(rid, parse_vector(cjk))
        self.ids = [rid for rid, _, _ in fresh] + self.ids
        for rid in self.ids[SAMPLE_ROWS:]:
            self.word.drop(rid)
            self.cjk.drop(rid)
        del self.ids[SAMPLE_ROWS:]
        if self.ids:
            self.newest = max(self.newest, self.ids[0])


_samples: OrderedDict[tuple[str, ...], Sample] = OrderedDict()
_lexemes: OrderedDict[str, Groups] = OrderedDict()
_lock = threading.Lock()


def changed(ns: str) -> None:
    """This process changed tenant ``ns``'s message counters other than by appending
    (deleted or recounted sessions): its next search counts the tenant afresh (and reads
    its sample again), on any server."""
    with _lock:
        for key in [k for k in _samples if k[-1] == ns]:
            del _samples[key]


def sample(conn: Conn, ns: str) -> tuple[Sample, int, int]:
    """The tenant's sample, brought up to date (one statement when nothing was written
    since the last search of this process, two otherwise), the tenant's size as its
    sessions' counters say (counted afresh at most every RECOUNT_S, see there: the one
    read of it a search makes, see :class:`memstrata.store.postgres.search.Probed`) and
    the table's, every tenant's, as the planner's statistics last counted it (0 before
    any)."""
    row = conn.execute(
        "SELECT current_schema() AS schema, (SELECT id FROM messages WHERE namespace = ANY(%s) "
        f"ORDER BY namespace DESC, id DESC LIMIT 1) AS newest, {TABLE_MESSAGES} AS tabled",
        ([ns],),
    ).fetchone()
    assert row is not None  # a SELECT without FROM returns one row
    # The server and database by their parameters (conn.info.dsn would rebuild the whole
    # conninfo string: 0.2 ms a search).
    info = conn.info
    key = (info.host, str(info.port), info.dbname, str(row["schema"]), ns)
    newest, table = int(row["newest"] or 0), int(row["tabled"])
    now = time.monotonic()
    with _lock:
        known = _samples.get(key)
    # The rows written since the kept sample, when read already: as many as a sample
    # holds, they are also what a sample read afresh holds.
    fresh: list[tuple[int, str | None, str | None]] | None = None
    if known is not None and newest >= known.newest and now - known.counted_at < RECOUNT_S:
        if newest == known.newest:
            _keep(key, known)
            return known, known.size, table
        fresh = _fresh(conn, ns, known.newest)
        if len(fresh) < SAMPLE_ROWS:
            # Each row appended since added one to its session's counter.
            known = known.copy()  # other threads may be reading the kept one
            known.update(fresh)
            known.size += len(fresh)
            known.total = max(known.size, known.rows)
            _keep(key, known)
            return known, known.size, table
    counted = conn.execute(f"SELECT {TENANT_MESSAGES} AS total", (ns,)).fetchone()
    assert counted is not None
    total = int(counted["total"])
    if known is None or newest < known.newest or total < known.size:
        known = Sample()  # first search, or rows were deleted: read it afresh
    else:
        known = known.copy()
    if newest > known.newest or not known.ids:
        known.update(fresh if fresh is not None else _fresh(conn, ns, known.newest))
    known.size, known.counted_at = total, now
    known.total = max(total, known.rows)
    _keep(key, known)
    return known, total, table


def _fresh(conn: Conn, ns: str, after: int) -> list[tuple[int, str | None, str | None]]:
    """The tenant's rows newer than id ``after``, newest first, at most SAMPLE_ROWS."""
    # "namespace = ANY" with ORDER BY namespace: the tenant's id index read backwards.
    rows = conn.execute(
        "SELECT id, tsv::text AS word, cjk::text AS cjk FROM messages "
        "WHERE namespace = ANY(%s) AND id > %s ORDER BY namespace DESC, id DESC LIMIT %s",
        ([ns], after, SAMPLE_ROWS),
    ).fetchall()
    return [(int(r["id"]), r["word"], r["cjk"]) for r in rows]


def _keep(key: tuple[str, ...], known: Sample) -> None:
    """Keep ``known`` as the tenant's sample, the most recently used."""
    with _lock:
        _samples[key] = known
        _samples.move_to_end(key)
        while len(_samples) > CACHED_TENANTS:
            _samples.popitem(last=False)


def word_groups(conn: Conn, texts: Sequence[str], config: str) -> dict[str, Groups]:
    """Each text's word-index phrase (``phraseto_tsquery``), as groups."""
    with _lock:
        out = {t: _lexemes[t] for t in texts if t in _lexemes}
    todo = [t for t in dict.fromkeys(texts) if t not in out]
    if todo:
        rows = conn.execute(
            f"SELECT t, phraseto_tsquery('{config}', t)::text AS q FROM unnest(%s::text[]) t",
            (todo,),
        ).fetchall()
        found = {str(r["t"]): phrase_patterns(str(r["q"])) for r in rows}
        out.update(found)
        with _lock:
            _lexemes.update(found)
            while len(_lexemes) > CACHED_TERMS:
                _lexemes.popitem(last=False)
    return out


@dataclass
class Scored:
    """A phrase as scored in one index: its groups, its IDF there, how often it occurs
    in the query."""

    groups: Groups
    idf: float
    times: int
    # What each hit adds before the row's BM25 gain (times x IDF), and the lexeme of a
    # one-word term (most terms), whose frequency in a row is its positions, counted
    # without term_frequency: both read once per candidate row and term.
    weight: float = field(init=False)
    lexeme: str | None = field(init=False)

    def __post_init__(self) -> None:
        self.weight = self.times * self.idf
        one = self.groups[0] if len(self.groups) == 1 and len(self.groups[0]) == 1 else None
        self.lexeme = one[0][0] if one is not None and not one[0][2] else None


def _scored(phrases: Sequence[Groups], index: str, stats: Sample) -> list[Scored]:
    nrow = stats.nrow(index)
    times = Counter(phrases)
    return [Scored(g, bm25.idf(nrow, stats.frequency(index, g)), n) for g, n in times.items()]


class _Lookup:
    """Terms by their first lexeme, so a row is checked only for the terms it may hold
    (a long CJK query has hundreds of bigrams; a row a few dozen lexemes)."""

    def __init__(self, scored: Sequence[Scored]) -> None:
        self.by_first: dict[str, list[Scored]] = {}
        self.prefixed: list[Scored] = []
        held = {(lex, prefix) for s in scored for g in s.groups for lex, _, prefix in g}
        # The lexemes a row is read for: each one whole (quoted), and each prefix (quoted,
        # without its closing quote), wherever it stands in a phrase.
        self.lexemes = sorted(lex for lex, prefix in held if not prefix)
        self.prefixes = sorted(lex for lex, prefix in held if prefix)
        for s in scored:
            lexeme, _, prefix = s.groups[0][0]
            if prefix:
                self.prefixed.append(s)
            else:
                self.by_first.setdefault(lexeme, []).append(s)

    def __bool__(self) -> bool:
        return bool(self.by_first or self.prefixed)

    @property
    def whole(self) -> bool:
        """True when a row's whole vector is read: more than PICKED_LEXEMES lexemes and
        prefixes; else only the query's lexemes and those its prefixes cover."""
        return len(self.lexemes) + len(self.prefixes) > PICKED_LEXEMES

    def candidates(self, vector: Vector) -> list[Scored]:
        if len(self.by_first) < len(vector):
            found = [s for lexeme, ss in self.by_first.items() if lexeme in vector for s in ss]
        else:
            found = [s for lexeme in vector for s in self.by_first.get(lexeme, ())]
        return found + self.prefixed


def term_groups(
    conn: Conn, terms: Sequence[Term], config: str, cjk_query: Any
) -> tuple[dict[Term, Groups], dict[Term, Groups]]:
    """Each term's groups in the word index and in the CJK index (``cjk_query`` renders a
    term's CJK form as ``tsquery`` text)."""
    word_texts = {t: _word_text(t) for t in terms if t.word}
    words = word_groups(conn, [w for w, _ in word_texts.values()], config)
    word: dict[Term, Groups] = {}
    for t, (text, prefix) in word_texts.items():
        word[t] = _prefixed(words.get(text, ()), prefix)
    cjk: dict[Term, Groups] = {}
    for t in terms:
        groups = cjk_groups(t.cjk, cjk_query) if t.cjk else ()
        if groups:
            cjk[t] = groups
    return word, cjk


def cjk_groups(rendered: str, cjk_query: Any) -> Groups:
    """A term's CJK rendering (``"修改 改"``) as groups, through ``cjk_query`` (its
    ``tsquery`` text), kept: a long Chinese query renders thousands of them."""
    key = "\x00" + rendered  # apart from the word texts kept in the same cache
    with _lock:
        known = _lexemes.get(key)
    if known is None:
        query = cjk_query(rendered)
        known = phrase_patterns(query) if query else ()
        with _lock:
            _lexemes[key] = known
            while len(_lexemes) > CACHED_TERMS:
                _lexemes.popitem(last=False)
    return known


def _word_text(term: Term) -> tuple[str, bool]:
    assert term.word is not None
    rendered = term.word
    prefix = rendered.endswith("*")
    text = rendered[:-1] if prefix else rendered
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        text = text[1:-1].replace('""', '"')
    return text, prefix


_PHRASE = re.compile(r'"((?:[^"]|"")*)"(\*?)')


def match_groups(
    conn: Conn, compiled: CompiledQuery, config: str, cjk_query: Any
) -> dict[str, list[Groups]]:
    """The phrases FTS5's ``bm25()`` sums over for ``compiled`` in the word and the CJK
    index, as groups: every quoted string of the index's MATCH, each time it occurs (a
    CJK word is its bigrams and the phrase of them; a bigram two words share counts
    twice, as in FTS5)."""
    out: dict[str, list[Groups]] = {}
    word = [(m.group(1).replace('""', '"'), bool(m.group(2))) for m in _phrases(compiled, "word")]
    lexemes = word_groups(conn, [text for text, _ in word], config)
    out["word"] = [g for g in (_prefixed(lexemes[t], p) for t, p in word) if g]
    cjk = [cjk_groups(m.group(0), cjk_query) for m in _phrases(compiled, "cjk")]
    out["cjk"] = [g for g in cjk if g]
    return out


def _phrases(compiled: CompiledQuery, index: str) -> list[re.Match[str]]:
    match = compiled.match.get(index)  # type: ignore[call-overload]
    return list(_PHRASE.finditer(match)) if match else []


def _prefixed(groups: Groups, prefix: bool) -> Groups:
    """``groups`` with the last lexeme a prefix (as the search renders ``word*``)."""
    if not prefix or not groups:
        return groups
    last = groups[-1]
    lexeme, offset, _ = last[-1]
    # A prefix is matched on the quoted form without its closing quote (phrase_patterns):
    # kept, "'sho'" would cover only itself, not "'show'" (every prefix ranked 0 but
    # where stemming had cut the word to the prefix, as "paint*").
    return (*groups[:-1], (*last[:-1], (lexeme[:-1], offset, True)))


def rarity(
    conn: Conn, terms: Sequence[Term], stats: Sample, config: str, cjk_query: Any
) -> dict[Term, float]:
    """Each term's estimated rows in the tenant (word and CJK index together), to pick
    the rarest terms for the candidate search. A term the sample does not hold is rare
    (0) in a larger tenant; in a tenant the sample covers it is in no row of the word
    and CJK indexes and comes last (a substring scan may still find it)."""
    word, cjk = term_groups(conn, terms, config, cjk_query)
    out: dict[Term, float] = {}
    for t in terms:
        found = stats.frequency("word", word.get(t, ())) + stats.frequency("cjk", cjk.get(t, ()))
        out[t] = float("inf") if found == 0 and stats.complete else found
    return out


def postings(
    conn: Conn, terms: Sequence[Term], stats: Sample, config: str, cjk_query: Any
) -> float:
    """The GIN postings a scan for ``terms`` reads, per row of the table, as the sample
    holds them (every lexeme of every term, in the word and the CJK index). Infinite
    without a sample, and for a phrase (a CJK word's bigrams, a compound): its scan also
    reads again every row holding all its lexemes, in any order, which no sample of a
    few hundred rows tells."""
    if not stats.rows:
        return float("inf")
    word, cjk = term_groups(conn, terms, config, cjk_query)
    if any(len(p) > 1 for side in (word, cjk) for g in side.values() for p in g):
        return float("inf")
    found = sum(stats.word.postings(g) for g in word.values())
    found += sum(stats.cjk.postings(g) for g in cjk.values())
    return found / stats.rows


def holders(
    conn: Conn, terms: Sequence[Term], stats: Sample, config: str, cjk_query: Any
) -> set[int]:
    """Every row holding one of ``terms`` in the word or CJK index, when the sample is the
    whole tenant (empty otherwise): as SQLite ranks every match of a tenant of at most
    COMMON_DF rows, none is left out for holding only common terms."""
    if not stats.complete:
        return set()
    word, cjk = term_groups(conn, terms, config, cjk_query)
    found: set[int] = set()
    for t in terms:
        found |= stats.holding("word", word.get(t, ())) | stats.holding("cjk", cjk.get(t, ()))
    return found


@dataclass
class Scoring:
    """How one search scores its candidates (see :func:`scoring`): the columns a
    candidate statement reads with each row (:attr:`columns`), and the scores of the
    rows read so (:meth:`score`)."""

    sides: list[tuple[str, _Lookup, float]]
    extra: list[tuple[Groups, str, float]]
    stats: Sample
    columns: str
    params: list[Any]

    def score(self, rows: Sequence[Mapping[str, Any]]) -> list[Candidate]:
        """The candidate ``rows`` (id, session_id, timestamp and :attr:`columns`) scored
        as FTS5's ``bm25()`` scores the query, best first, the best 1.0."""
        cands = []
        sides = [(name, f"{name}_length", lookup, average) for name, lookup, average in self.sides]
        sides = [side for side in sides if side[2]]
        # bm25.gain's terms, computed as it computes them (the same floats): its length
        # normalisation once per row and index, not once per term.
        k1, b, k1_plus = bm25.K1, bm25.B, bm25.K1 + 1
        for r in rows:
            total = 0.0
            for name, length_key, lookup, average in sides:
                text = r.get(name)
                if not text:
                    continue
                vector = parse_vector(text)
                length = int(r.get(length_key) or text_length(text))
                norm = k1 * (1 - b + b * length / average if average > 0 else 1.0)
                for s in lookup.candidates(vector):
                    if s.lexeme is not None:
                        # Found by its lexeme (_Lookup.candidates): held at least once.
                        tf = vector[s.lexeme].count(",") + 1
                    else:
                        tf = term_frequency(vector, s.groups)
                        if not tf:
                            continue
                    total += s.weight * (tf * k1_plus / (tf + norm))
            if self.extra:
                text = _text(r)
                vector = parse_vector(r.get("word"))
                length = int(r.get("word_length") or text_length(r.get("word")))
                for groups, needle, weight in self.extra:
                    if needle and needle in text and not term_frequency(vector, groups):
                        total += weight * bm25.gain(1, length, self.stats.average("word"))
            rid, session = int(r["id"]), str(r["session_id"])
            cands.append(Candidate(rid, session, float(r["timestamp"]), {}, total))
        top = max((c.score for c in cands), default=0.0)
        for c in cands:
            c.score = c.score / top if top > 0 else 0.0
        cands.sort(key=lambda c: (-c.score, -c.id))
        return cands


def scoring(
    conn: Conn,
    compiled: CompiledQuery,
    stats: Sample,
    *,
    config: str,
    cjk_query: Any,
    substrings: Mapping[Term, float] | None = None,
    alias: str = "m",
) -> Scoring:
    """How the candidates of ``compiled`` are scored: every phrase of it (see
    :func:`match_groups`) as FTS5's ``bm25()`` scores it, summed over the word and CJK
    indexes, with the statistics of ``stats``.

    The statement that reads the candidates (``messages`` as ``alias``) reads
    :attr:`Scoring.columns` with them, so no statement reads them again to score them.
    ``substrings``: the terms a substring scan served, with their row counts; one counts
    (once) in a row that holds its text but not its word form.
    """
    phrases = match_groups(conn, compiled, config, cjk_query)
    sides = [
        (name, _Lookup(_scored(phrases[name], name, stats)), stats.average(name))
        for name in ("word", "cjk")
    ]
    extra = []
    if substrings:
        word, _ = term_groups(conn, list(substrings), config, cjk_query)
        extra = [
            (word.get(t, ()), term_needle(t), bm25.idf(stats.total, n))
            for t, n in substrings.items()
        ]
    columns, params = [], []
    for (name, lookup, _), column in zip(sides, ("tsv", "cjk"), strict=True):
        column = f"{alias}.{column}"
        if lookup.whole:
            columns.append(f"{column}::text AS {name}")
            continue
        # Only the query's lexemes leave the server (setweight marks them, ts_filter
        # keeps them), with the row's length as written with it (counted from the
        # vector by the server's one definition of it for rows written before m006).
        # A prefix's lexemes are the row's own that start with it (a whole vector of a
        # prefix query's candidate was 500 characters to send and parse, 45 us a row).
        marked = "%s::text[]"
        exact = [_unquoted(lex) for lex in lookup.lexemes]
        if lookup.prefixes:
            marked = (
                f"ARRAY(SELECT u.lexeme FROM unnest({column}) u WHERE u.lexeme = ANY(%s::text[]) "
                "OR u.lexeme LIKE ANY(%s::text[]))"
            )
            params.append(exact)
            exact = [escape_like(_unquoted(lex + "'")) + "%" for lex in lookup.prefixes]
        columns.append(
            f"ts_filter(setweight({column}, 'A', {marked}), '{{a}}')::text AS {name}, "
            f"coalesce({column}_tokens, memstrata_tokens({column})) AS {name}_length"
        )
        params.append(exact)
    if substrings:
        columns.append(f"{alias}.content, {alias}.tool_name, {alias}.tool_calls")
    return Scoring(sides, extra, stats, ", ".join(columns), params)


def _text(row: Mapping[str, Any]) -> str:
    parts = (text_of(sqlite_form(row.get("content"))), row.get("tool_name"), row.get("tool_calls"))
    return " ".join(str(p) for p in parts if p).lower()
