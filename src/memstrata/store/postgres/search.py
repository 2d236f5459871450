"""Full-text search on PostgreSQL: the candidates of a compiled query, and the rows hits show.

A query is parsed once by :mod:`memstrata.query.compile` (natural language by default; ``AND``,
``OR``, ``NOT``, ``"phrases"`` and ``prefix*`` when written; never a syntax error) and
each term is rendered for the three indexes:

* word    - ``tsv @@ phraseto_tsquery('memstrata_english', ...)`` on the generated, stemmed
  ``tsvector`` (GIN);
* trigram - ``~* '...'`` (the text as a case-insensitive regular expression of itself) on
  the indexed text (``pg_trgm`` GIN), for code-like terms and quoted phrases that mix
  scripts;
* cjk     - a ``tsquery`` of bigrams (``<->`` phrases, ``:*`` for a trailing single
  character) on the CJK bigram ``tsvector`` (GIN), so 1-2 character words use an index.

A term matches when any index finds it; the query tree combines terms with SQL ``AND``,
``OR`` and ``NOT``. The candidates are ranked with SQLite's BM25 by
:mod:`memstrata.store.postgres.ranking`. As on SQLite, candidates are bounded: an OR
query scans every row of its rare terms and only the newest rows of terms too common to
matter; a boolean query ranks its newest ``BOOLEAN_RANKED`` matches.

Work is bounded before ranking, whatever the statistics say: one statement probes every
term's indexes for at most ``COMMON_DF`` ids each, which gives both the counts and, for
rare terms, every candidate; common terms are walked newest first on the tenant's id index; only the
chosen candidates are ranked. The plans are pinned with planner settings local to the
search's transaction, so a table never analyzed is searched the same way.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg

from memstrata.errors import SessionStoreError
from memstrata.query.compile import CompiledQuery, Node, Term, word_term
from memstrata.query.filters import Filters, tool_call_pattern
from memstrata.store.backend import Candidate, HitRow, Order, Transaction
from memstrata.store.hits import text_of
from memstrata.store.postgres import ranking
from memstrata.store.postgres.bounds import SEARCH_TIMEOUT_MS, bound_query, substring_budget
from memstrata.store.postgres.codec import sqlite_form
from memstrata.store.postgres.held import held_arms
from memstrata.store.postgres.messages import quote_lexeme, too_long
from memstrata.store.postgres.schema import INDEXED_TEXT, TS_CONFIG
from memstrata.store.rank import BOOLEAN_RANKED, COMMON_DF

Conn = psycopg.Connection[Any]

# The first window of the newest-first walk (see _walk_newest), in rows of the tenant.
WALK_WINDOW = 2000
# The most rows of the tenant one walk reads: matches of common terms older than the
# newest MAX_WALK rows are not looked for (a bound on the work, whatever the terms).
MAX_WALK = 16_000
# A posting a GIN scan reads costs about this many rows of a walk: the (namespace, term)
# indexes intersect the term's postings in every tenant with the tenant's own (measured:
# 1.3 us a posting at 100k messages, 1.9-2.5 us at 1M, against 1.0-1.2 us a walked row).
# A walk's window whose matches are sparse enough is read through the indexes (see
# _sparse): at 100k messages a window of 8,000 rows holding 70 matches took 2.3 against
# 10.8 ms.
GIN_ENTRY_COST = 2
# The same without the tenant's key (a tenant that is most of the table, see
# DOMINANT_SHARE): the term's postings alone, 0.2-0.3 us each at 100k-1M messages.
GIN_FREE_COST = 0.25
# A tenant holding at least this share of the table's rows searches the GIN indexes
# without its own key: a (namespace, term) index intersects the term's postings with the
# tenant's, whose list is then most of the table, and reading that list was most of a
# GIN scan (a term in 7,740 of 1M rows: 10-19 ms with the key, 2 ms without); the few
# other tenants' rows the scan then finds are dropped when their rows are read.
DOMINANT_SHARE = 0.75
# The tenant's newest rows that tell common terms from rare ones (see _probe), and the
# fewest of them a term must be found in to pass for common.
SAMPLE_ROWS = 2000
SAMPLE_MIN_HITS = 3
# The most arm tests (rows times arms) one sample makes: a query of many terms (a pasted
# text, a list of identifiers) samples fewer rows, down to SAMPLE_MIN_ROWS.
SAMPLE_TESTS = 16_000
SAMPLE_MIN_ROWS = 500
# Terms the ranking sample holds in none of its rows are probed without the sample (see
# Probed.add) where a term in COMMON_DF of the tenant's rows would have been seen in this
# many of the sample's rows on average (see _unseen).
UNSEEN_EXPECTED = 2.0
# A row fetched through a GIN bitmap costs about this many rows read by the newest-first
# walk (scattered heap pages against an id range read in order; measured on the
# benchmark corpus at 200k messages: 5-10 us against 1.5 us a row).
BITMAP_ROW_COST = 5
# The plans search statements need, whatever the planner's statistics say (they may be
# missing: a server with autovacuum off, a table just bulk-loaded). A sequential scan of
# a table shared by every tenant is never the right way to search one; counts go through
# the GIN bitmaps; the newest-first walk reads idx_messages_ns_id backwards.
# JIT off: the probes the sample spares still count in a statement's estimated cost,
# which then passes jit_above_cost, and compiling took longer than the search (200 ms
# for a question at 1M messages).
SEARCH_PLAN = {"enable_seqscan": "off", "jit": "off"}
# (gin_fuzzy_search_limit would bound a common term's bitmap, but on these two-column
# indexes it samples the tenant's own entry as well, so a common term of a big tenant
# came back with a few hundred rows and passed for rare: not used.)


@contextmanager
def planner(conn: Conn, **settings: str) -> Iterator[None]:
    """Planner settings for the statements inside, restored afterwards (one round trip
    each way; local to the transaction, so a failed statement cannot leak them)."""
    names = list(settings)
    row = conn.execute(
        "SELECT "
        + ", ".join(
            f"current_setting(%s) AS o{i}, set_config(%s, %s, true) AS n{i}"
            for i in range(len(names))
        ),
        [v for name in names for v in (name, name, settings[name])],
    ).fetchone()
    assert row is not None  # a SELECT without FROM returns one row
    previous = [str(row[f"o{i}"]) for i in range(len(names))]
    try:
        yield
    finally:
        if conn.info.transaction_status != _FAILED:
            conn.execute(
                "SELECT "
                + ", ".join(f"set_config(%s, %s, true) AS r{i}" for i in range(len(names))),
                [v for name, old in zip(names, previous, strict=True) for v in (name, old)],
            )


_QUOTED = re.compile(r'"((?:[^"]|"")*)"(\*?)')
# A substring test: the text holds the term's text, case aside. A regular expression
# (~*) rather than ILIKE '%...%': the same rows, for half the work where it counts. Its
# trigrams (pg_trgm) make a cheaper GIN scan (a code identifier cut inside, "tor_cache",
# at 1M messages: 15 against 38 ms for the same 5,017 candidates), and testing a row
# does not lowercase the row's whole text first, as ILIKE does (those candidates
# rechecked in 25 against 60 ms).
SUBSTRING = " ~* "
# Every ASCII character that is not a letter or a digit, escaped: in an advanced
# regular expression a backslash before such a character makes it itself; letters,
# digits and the other scripts stand for themselves.
_REGEX_SPECIAL = re.compile(r"([\x00-\x2f\x3a-\x40\x5b-\x60\x7b-\x7f])")


def substring_pattern(text: str) -> str:
    """``text`` as a regular expression that matches it literally (for :data:`SUBSTRING`)."""
    return _REGEX_SPECIAL.sub(r"\\\1", text)


_TEXT = f"({INDEXED_TEXT.replace('coalesce(', 'coalesce(m.')})"


@dataclass
class TermSql:
    """One positive or negated term as SQL: a match predicate."""

    term: Term
    pred: str
    params: list[Any] = field(default_factory=list)
    # Each index's predicate on its own: probed one by one (see _probe), every arm uses
    # its index, where the planner facing their OR often scans the whole tenant.
    arms: list[tuple[str, list[Any]]] = field(default_factory=list)


def _unquote(rendered: str) -> tuple[str, bool] | None:
    """``"text"*`` (an FTS5 rendering of :mod:`memstrata.query.compile`) -> (text, prefix)."""
    match = _QUOTED.fullmatch(rendered)
    if match is None:
        return None
    return match.group(1).replace('""', '"'), bool(match.group(2))


def cjk_tsquery(rendered: str) -> str | None:
    """The bigram-index rendering of a term as ``tsquery`` text (lexemes quoted verbatim).

    ``"修改 改"`` -> ``'修改' <-> '改'``; ``"苹"*`` -> ``'苹':*``; a parenthesised AND of
    such groups -> their conjunction. None when nothing is left, and when a token is
    longer than any lexeme (see MAX_LEXEME_BYTES): no row's vector holds it.
    """
    groups = []
    for text, prefix in (
        (m.group(1).replace('""', '"'), m.group(2)) for m in _QUOTED.finditer(rendered)
    ):
        words = [t for t in text.split(" ") if t]
        if any(too_long(t) for t in words):
            return None
        tokens = [quote_lexeme(t) for t in words]
        if not tokens:
            continue
        if prefix:
            tokens[-1] += ":*"
        groups.append(" <-> ".join(tokens))
    if not groups:
        return None
    return " & ".join(f"({g})" for g in groups) if len(groups) > 1 else groups[0]


# A term's CJK arm as term_sql writes it (its tsquery follows).
_CJK_ARM = "(m.cjk IS NOT NULL AND m.cjk @@ "


def term_sql(term: Term, *, substrings: bool = True) -> TermSql:
    """Render one term for the three indexes: a predicate true when any index finds it.

    ``substrings=False`` leaves the trigram index out (see :func:`_word_found`).
    """
    preds: list[str] = []
    params: list[Any] = []
    word = _unquote(term.word) if term.word else None
    if word is not None:
        text, prefix = word
        query = f"phraseto_tsquery('{TS_CONFIG}', %s)"
        if prefix:
            # The phrase's last lexeme becomes a prefix; an empty phrase stays empty.
            query = (
                f"(CASE WHEN numnode({query}) > 0 THEN ({query}::text || ':*')::tsquery "
                "ELSE ''::tsquery END)"
            )
            qparams = [text, text]
        else:
            qparams = [text]
        # A scalar subquery is evaluated once per statement (phraseto_tsquery is only
        # stable: as a plain call it was parsed again for every row it was tested on).
        query = f"(SELECT {query})"
        preds.append(f"m.tsv @@ {query}")
        params += qparams
    cjk = cjk_tsquery(term.cjk) if term.cjk else None
    if cjk is not None:
        # cjk is NULL for rows without CJK: the IS NOT NULL keeps the predicate two-valued,
        # or NOT (a term) would be NULL, not true, on every such row.
        preds.append(f"{_CJK_ARM}%s::tsquery)")
        params.append(cjk)
    trigram = _unquote(term.trigram) if term.trigram and substrings else None
    if trigram is not None:
        # Last: a row the word or CJK arm finds is never tested for the substring (the
        # costliest test, on the row's whole text), as OR stops at its first true arm.
        preds.append(f"{_TEXT}{SUBSTRING}%s")
        params.append(substring_pattern(trigram[0]))
    if not preds:
        return TermSql(term, "FALSE")
    arms: list[tuple[str, list[Any]]] = []
    at = 0
    for pred in preds:
        count = pred.count("%s")
        arms.append((pred, params[at : at + count]))
        at += count
    return TermSql(term, "(" + " OR ".join(preds) + ")", params, arms)


def tree_sql(node: Node, substrings: set[Term] | None = None) -> tuple[str, list[Any]]:
    """The boolean predicate of a query tree (``not``: first child and none of the rest).

    ``substrings``: the terms that may use the trigram index (None: every term).
    """
    if node.op == "term":
        assert node.term is not None
        t = term_sql(node.term, substrings=substrings is None or node.term in substrings)
        return t.pred, t.params
    parts = [tree_sql(child, substrings) for child in node.children]
    params = [p for _, ps in parts for p in ps]
    if node.op == "or":
        return "(" + " OR ".join(s for s, _ in parts) + ")", params
    if node.op == "and":
        return "(" + " AND ".join(s for s, _ in parts) + ")", params
    head, *rest = parts
    if not rest:
        return head
    return (
        "(" + head[0] + " AND NOT (" + " OR ".join(s for s, _ in rest) + "))",
        params,
    )


def tenant_sql(keyed: bool = True) -> str:
    """The tenant's clause over ``messages m`` (one value). ``keyed=False``: the same
    test where no index can serve it, so that a GIN scan reads only the terms' postings,
    not the tenant's key as well (see DOMINANT_SHARE)."""
    return "m.namespace = %s" if keyed else "(m.namespace = %s) IS TRUE"


def filter_sql(ns: str, filters: Filters, *, keyed: bool = True) -> tuple[str, list[Any]]:
    """The tenant and the row filters as a WHERE fragment over ``messages m``
    (``keyed``: see :func:`tenant_sql`)."""
    clauses = [tenant_sql(keyed)]
    params: list[Any] = [ns]
    if not filters.include_inactive:
        # Rewound or undone rows are hidden; compaction-archived rows stay findable.
        clauses.append("(m.active = 1 OR m.compacted = 1)")
    if filters.roles:
        clauses.append("m.role = ANY(%s)")
        params.append(list(filters.roles))
    session_of = "SELECT 1 FROM sessions s WHERE s.namespace = m.namespace AND s.id = m.session_id"
    if filters.sources:
        clauses.append(f"EXISTS ({session_of} AND s.source = ANY(%s))")
        params.append(list(filters.sources))
    if filters.exclude_sources:
        clauses.append(f"NOT EXISTS ({session_of} AND s.source = ANY(%s))")
        params.append(list(filters.exclude_sources))
    if filters.exclude_session_ids:
        clauses.append("NOT (m.session_id = ANY(%s))")
        params.append(list(filters.exclude_session_ids))
    for tool in filters.hidden_tools:
        clauses.append("(m.tool_name IS NULL OR m.tool_name <> %s)")
        clauses.append(
            "NOT (m.tool_calls IS NOT NULL AND coalesce(m.content, '') = '' "
            "AND strpos(m.tool_calls, %s) > 0)"
        )
        params.extend([tool, tool_call_pattern(tool)])
    if filters.hide_live:
        # The live rows of the current conversation are in the model's context already.
        clauses.append("NOT (m.active = 1 AND m.session_id = ANY(%s))")
        params.append(list(filters.hide_live))
    if filters.since is not None:
        clauses.append("m.timestamp >= %s")
        params.append(filters.since)
    if filters.until is not None:
        clauses.append("m.timestamp <= %s")
        params.append(filters.until)
    return " AND ".join(clauses), params


@dataclass
class Sample:
    """The tenant's newest rows read by :func:`_probe`: how many, the oldest one's id
    (None: the sample held the whole tenant), and the ids among them that match what is
    looked for and pass the search's filters, newest first."""

    rows: int
    low: int | None
    ids: list[int] = field(default_factory=list)


@dataclass
class Hint:
    """A walk's predicate as the GIN indexes serve it (SQL and values), the rows of the
    table those indexes cover (every tenant's) and the postings a GIN scan for it reads
    per row (:func:`memstrata.store.postgres.ranking.postings`): see :func:`_sparse`."""

    pred: str
    params: Sequence[Any]
    table: int
    postings: float
    # What reading one posting costs, in walked rows (GIN_ENTRY_COST, or GIN_FREE_COST
    # for a scan without the tenant's key, see tenant_sql).
    entry_cost: float


def _probe(
    conn: Conn,
    ns: str,
    arms: Sequence[tuple[str, list[Any]]],
    gates: Sequence[Sequence[int]],
    where: tuple[str, Sequence[Any]] = ("TRUE", ()),
    *,
    total: int,
    keyed: bool = True,
) -> tuple[list[list[int] | None], list[list[int]], Sample]:
    """Which arms (one index's predicate each) are common, and every id of the others,
    in one statement, for a tenant of ``total`` rows.

    The tenant's newest SAMPLE_ROWS rows (fewer for many arms, see SAMPLE_TESTS) are read
    first (``idx_messages_ns_id``) and each arm is tested on them: an arm found in enough
    of them to hold COMMON_DF of the tenant's rows is common, and is never probed through
    its GIN index (a common term's bitmap is the costliest read a search can make). The
    other arms are probed: each probe is read through a bitmap whose heap visits stop at
    COMMON_DF rows, so fewer ids than that are all the arm's rows (a rare term's
    candidates). An arm with ``gates`` (arm indexes) is tested on the sample and probed
    only when those arms found nothing at all (a substring scan for a term the word
    index does not know): the sampled rows are then read again by id for it, so a
    question whose words the index knows never tests a substring on any row.

    Returns per arm its ids (None: common, or gated off) and its matches in the sample
    that pass ``where`` (the search's filters; none for an arm gated off), and the
    sample (its ``ids`` left empty).
    """
    size = max(SAMPLE_MIN_ROWS, min(SAMPLE_ROWS, SAMPLE_TESTS // max(1, len(arms))))
    size = min(size, SAMPLE_ROWS)
    free = [i for i in range(len(arms)) if not gates[i]]
    gated = [i for i in range(len(arms)) if gates[i]]
    cols = "".join(f", {arms[i][0]} AS h{i}" for i in free)
    counts = "".join(
        f", count(*) FILTER (WHERE h{i}) AS c{i}, "
        f"array_agg(id ORDER BY id DESC) FILTER (WHERE h{i} AND f) AS s{i}"
        for i in free
    )

    def closed(i: int) -> str:
        return " OR ".join(f"c{g} > 0 OR cardinality(a{g}) > 0" for g in gates[i])

    def probe(i: int) -> str:
        common = f"(c{i} >= {SAMPLE_MIN_HITS} AND c{i} * total >= {COMMON_DF} * n)"
        shut = f" OR {closed(i)}" if gates[i] else ""
        return f"CASE WHEN NOT ({common}{shut}) THEN {_gin_ids(arms[i][0], keyed)} END AS a{i}"

    def tested(i: int) -> str:
        # A gated arm tested on the sampled rows, read again as the sample's id range (in
        # id order: cheaper than a lookup per id), the arm a test of each (_tested: the
        # planner would rather fetch its every match through GIN). A CTE of its own,
        # read once and only when the arm's gates found nothing: joined to the sample
        # inside the arm's CASE, statistics that made the tenant look tiny had the range
        # read again for every sampled row (2 s at 3,000 messages).
        return (
            f"t{i} AS MATERIALIZED (SELECT m.id FROM p, messages m WHERE m.namespace = ANY(%s) "
            f"AND m.id >= p.low AND m.id <= p.high AND {_tested(arms[i][0])})"
        )

    def sampled(i: int) -> str:
        # The gated arm's matches among the sampled rows (NULL where a row fails the
        # filters), newest first, when its gates found nothing.
        return (
            f"CASE WHEN NOT ({closed(i)}) THEN ARRAY(SELECT CASE WHEN s.f THEN s.id END "
            f"FROM s JOIN t{i} ON t{i}.id = s.id ORDER BY s.id DESC) END AS g{i}"
        )

    # The sample: the tenant's newest rows read backwards on idx_messages_ns_id
    # ("namespace = ANY" with ORDER BY namespace is an order only that index yields, see
    # _walk_newest), each ungated arm tested on each row read.
    sql = (
        f"WITH s AS MATERIALIZED (SELECT m.id, ({where[0]}) AS f{cols} FROM messages m "
        "WHERE m.namespace = ANY(%s) ORDER BY m.namespace DESC, m.id DESC "
        f"LIMIT {size}), "
        f"c AS MATERIALIZED (SELECT count(*) AS n, min(id) AS low, max(id) AS high{counts}, "
        "%s::bigint AS total FROM s), "
        "p AS MATERIALIZED (SELECT c.*" + "".join(", " + probe(i) for i in free) + " FROM c)"
    )
    if gated:
        sql += (
            "".join(", " + tested(i) for i in gated)
            + ", q AS MATERIALIZED (SELECT p.*"
            + "".join(", " + sampled(i) for i in gated)
            + " FROM p), r AS MATERIALIZED (SELECT q.*"
            + "".join(
                f", cardinality(g{i}) AS c{i}, array_remove(g{i}, NULL) AS s{i}" for i in gated
            )
            + " FROM q) SELECT r.*"
            + "".join(", " + probe(i) for i in gated)
            + " FROM r"
        )
    else:
        sql += " SELECT p.* FROM p"
    params = [
        *where[1],
        *(v for i in free for v in arms[i][1]),
        [ns],
        total,
        *(v for i in free for v in [ns, *arms[i][1]]),
        *(v for i in gated for v in [[ns], *arms[i][1]]),
        *(v for i in gated for v in [ns, *arms[i][1]]),
    ]
    row = conn.execute(sql, params).fetchone()
    assert row is not None  # an aggregate without GROUP BY returns one row
    ids = [
        None if row[f"a{i}"] is None else [int(x) for x in row[f"a{i}"]] for i in range(len(arms))
    ]
    seen = [[int(x) for x in row[f"s{i}"] or ()] for i in range(len(arms))]
    rows = int(row["n"])
    low = int(row["low"]) if rows >= size else None
    return ids, seen, Sample(rows, low)


def _gin_ids(arm: str, keyed: bool) -> str:
    """The tenant's rows of ``arm`` through its GIN index, up to COMMON_DF ids (values:
    the tenant, then the arm's). The CTE is planned for every match (a GIN bitmap),
    whatever LIMIT follows (a plain subquery with LIMIT may be planned as a walk of the
    tenant's id index); it is read on demand, so its heap visits stop at the limit."""
    return (
        f"ARRAY(WITH x AS MATERIALIZED (SELECT m.id FROM messages m "
        f"WHERE {tenant_sql(keyed)} AND {arm}) SELECT id FROM x LIMIT {COMMON_DF})"
    )


def _probe_rare(
    conn: Conn,
    ns: str,
    arms: Sequence[tuple[str, list[Any]]],
    gates: Sequence[Sequence[int]],
    *,
    keyed: bool = True,
) -> list[list[int] | None]:
    """Every arm's ids through its GIN index, without :func:`_probe`'s sample: for
    arms the ranking sample found in none of the tenant's newest rows, which are rare
    (fewer than COMMON_DF ids) but for a term common only in older rows (then an arm
    returns COMMON_DF ids and the caller probes again with the sample). A gated arm is
    probed only when its gates found nothing, as there (None otherwise)."""
    free = [i for i in range(len(arms)) if not gates[i]]
    gated = [i for i in range(len(arms)) if gates[i]]

    def closed(i: int) -> str:
        return " OR ".join(f"cardinality(a{g}) > 0" for g in gates[i])

    sql = (
        "WITH p AS MATERIALIZED (SELECT "
        + ", ".join(f"{_gin_ids(arms[i][0], keyed)} AS a{i}" for i in free)
        + ") SELECT p.*"
        + "".join(
            f", CASE WHEN NOT ({closed(i)}) THEN {_gin_ids(arms[i][0], keyed)} END AS a{i}"
            for i in gated
        )
        + " FROM p"
    )
    params = [v for i in [*free, *gated] for v in [ns, *arms[i][1]]]
    row = conn.execute(sql, params).fetchone()
    assert row is not None  # a SELECT from a one-row CTE returns one row
    return [
        None if row[f"a{i}"] is None else [int(x) for x in row[f"a{i}"]] for i in range(len(arms))
    ]


class Probed:
    """What :func:`_probe` found of each arm, keyed by the arm's SQL and values."""

    def __init__(
        self, total: int, table: int = 0, *, keyed: bool = True, unseen: bool = False
    ) -> None:
        # total: the tenant's size, read once per search (see ranking.sample); table:
        # every tenant's (at least the tenant's); keyed: see tenant_sql; unseen: the
        # ranking sample holds none of the search's terms (see add).
        self.ids: dict[str, list[int] | None] = {}
        self.seen: dict[str, list[int]] = {}
        self.sampled = Sample(0, None)
        self.total = total
        self.table = max(table, total)
        self.keyed = keyed
        self.unseen = unseen

    def add(
        self,
        conn: Conn,
        ns: str,
        arms: Sequence[tuple[str, list[Any]]],
        gates: Sequence[Sequence[tuple[str, list[Any]]]] = (),
        where: tuple[str, Sequence[Any]] = ("TRUE", ()),
    ) -> None:
        """Probe the arms not probed yet; ``gates[i]``: the arms whose finding anything
        spares arm ``i`` its probe; ``where``: the search's filters (see :meth:`sample`).

        When the ranking sample (the tenant's newest rows) holds none of the search's
        terms (``unseen``), their arms are probed through their indexes alone, without
        the sample of the tenant's newest rows that tells common terms apart (2,000 rows
        read and tested: 2.7 of a one-word search's 7 ms at 100k messages), for terms
        absent from the newest rows are rare. Should one be found in COMMON_DF rows all
        the same (common in older rows only), the arms are probed again with the sample.
        (A term in fewer rows is then ranked over all its rows, as SQLite ranks it, also
        where the sample would have called it common for being dense in the rows just
        older than the ranking sample's; the newest of its rows were what was ranked.)
        """
        todo = {_key(a): a for a in arms if _key(a) not in self.ids}
        if not todo and self.ids:
            return
        keys = list(todo)
        gate_of = {_key(a): g for a, g in zip(arms, gates, strict=False)}
        index = {k: i for i, k in enumerate(keys)}
        gated = [[index[_key(g)] for g in gate_of.get(k, ()) if _key(g) in index] for k in keys]
        if self.unseen and todo:
            rare = _probe_rare(conn, ns, list(todo.values()), gated, keyed=self.keyed)
            if all(ids is None or len(ids) < COMMON_DF for ids in rare):
                self.ids.update(zip(keys, rare, strict=True))
                self.seen.update((k, []) for k in keys)
                return
        found, seen, self.sampled = _probe(
            conn, ns, list(todo.values()), gated, where, total=self.total, keyed=self.keyed
        )
        self.ids.update(zip(keys, found, strict=True))
        self.seen.update(zip(keys, seen, strict=True))

    def sample(self, terms: Sequence[TermSql], joiner: str, exclude: Sequence[int]) -> Sample:
        """The sample's rows passing the filters that hold every one of ``terms``
        (``joiner`` " AND ") or any (" OR "), but ``exclude``: a walk's first window."""
        each = [{i for arm in t.arms for i in self.seen.get(_key(arm), ())} for t in terms]
        held = set.intersection(*each) if joiner == " AND " else set().union(*each)
        ids = sorted(held.difference(exclude), reverse=True)
        return Sample(self.sampled.rows, self.sampled.low, ids)

    def probed(self, arm: tuple[str, list[Any]]) -> bool:
        """Whether the arm was probed (not common, not gated off)."""
        return self.ids.get(_key(arm)) is not None

    def rows(self, term: TermSql) -> set[int]:
        """The term's rows seen by its arms' probes."""
        return {i for arm in term.arms for i in self.ids.get(_key(arm)) or ()}

    def common(self, term: TermSql) -> bool:
        """Whether the term is in COMMON_DF rows or more (by the sample or its probes)."""
        return (
            any(_key(a) in self.ids and self.ids[_key(a)] is None for a in term.arms)
            or len(self.rows(term)) >= COMMON_DF
        )

    def df(self, term: TermSql) -> int:
        """The term's rows, counted up to COMMON_DF (exact below it)."""
        return COMMON_DF if self.common(term) else len(self.rows(term))


def _required(node: Node) -> set[Term]:
    """The terms every row matching ``node`` holds."""
    if node.op == "term":
        assert node.term is not None
        return {node.term}
    if node.op == "and":
        return set().union(*(_required(child) for child in node.children))
    if node.op == "not":
        return _required(node.children[0])
    sets = [_required(child) for child in node.children]
    return set.intersection(*sets) if sets else set()


def _key(arm: tuple[str, list[Any]]) -> str:
    return arm[0] + "\x00" + repr(arm[1])


@dataclass
class Carried:
    """Candidate rows read with the columns that score them (id, session, time and
    :attr:`memstrata.store.postgres.ranking.Scoring.columns`) by the statements that
    find them: a walk's windows and a read of every match through the GIN indexes. The
    scoring read (:func:`_scored_rows`) then fetches only the rows none of them returned
    (the probe's sample): a boolean query's newest 1,000 matches were read twice, once
    to find them and once to score them (4 ms of a search at 1M messages)."""

    # The scoring columns (Scoring.columns) and their values; none: the rows' ids,
    # sessions and times only.
    columns: str = ""
    params: list[Any] = field(default_factory=list)
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def scored(cls, scoring: ranking.Scoring) -> Carried:
        return cls(scoring.columns, list(scoring.params))

    @property
    def select(self) -> str:
        """The select list of a candidate row (its values: :attr:`params`, first)."""
        return "m.id, m.session_id, m.timestamp" + (f", {self.columns}" if self.columns else "")

    def lateral(self, matches: str) -> str:
        """The candidate rows of ``matches`` (``FROM ...``, values after :attr:`params`)
        after the columns of a statement that must return one row: one row per match,
        or one of NULLs when none (see :meth:`keep`)."""
        return (
            f"x.* FROM (SELECT 1) AS one LEFT JOIN LATERAL (SELECT {self.select} {matches}) "
            "AS x ON TRUE"
        )

    def keep(self, rows: Sequence[dict[str, Any]], *extra: str) -> list[int]:
        """Keep ``rows`` (their ``extra`` columns left out); their ids in order. A row
        without an id is the one row of a window that matched nothing."""
        ids = []
        for row in rows:
            if row["id"] is None:
                continue
            kept = {k: v for k, v in row.items() if k not in extra}
            self.rows[int(row["id"])] = kept
            ids.append(int(row["id"]))
        return ids


def _scored_rows(conn: Conn, ns: str, ids: Sequence[int], carried: Carried) -> list[dict[str, Any]]:
    """The rows of ``ids`` (id, session and time) with the columns that score them: those
    ``carried`` holds, and the others read now."""
    rows = [carried.rows[i] for i in ids if i in carried.rows]
    missing = [i for i in ids if i not in carried.rows]
    if missing:
        rows += conn.execute(
            f"SELECT {carried.select} FROM messages m WHERE m.namespace = %s AND m.id = ANY(%s)",
            [*carried.params, ns, missing],
        ).fetchall()
    return rows


def _newest_ids(
    conn: Conn,
    ns: str,
    where: str,
    params: Sequence[Any],
    limit: int,
    *,
    total: int,
    selective: bool,
    exclude: Sequence[int] = (),
    index: tuple[str, Sequence[Any]] | bool | None = None,
    start: Sample | None = None,
    hint: Hint | None = None,
    carried: Carried,
) -> list[int]:
    """Ids of the newest ``limit`` rows matching ``where`` (which scopes to ``ns``).

    ``index``: a predicate every match satisfies that the GIN indexes serve, ANDed to
    ``where`` by the bitmap plan only (``where`` itself then tests the matches on the
    rows read; see :func:`_tested`). ``index=False``: no bitmap plan, the walk's rows
    (bounded by MAX_WALK) are the answer. ``start``: the walk's first window, read
    already (the probe's sample). ``hint``: ``where``'s terms as the GIN indexes serve
    them, for a walk that finds them sparse (see :func:`_walk_newest`). ``carried``: the
    rows found are read with their scoring columns.

    Two plans give the same rows. Matches of common terms are found by walking the
    tenant's rows newest first (:func:`_walk_newest`), which stops as soon as it has
    enough; selective predicates, and walks that turn out to need too many rows, fetch
    every match through the GIN indexes and keep the newest. The choice is made here,
    not by the planner: it assumes a tenant's rows spread evenly over the table's ids and
    would walk the whole table backwards past other tenants' newer rows.
    """
    skip = " AND NOT (m.id = ANY(%s))" if exclude else ""
    args = [*params, *([list(exclude)] if exclude else [])]
    if not selective:
        walked = _walk_newest(
            conn,
            ns,
            where + skip,
            args,
            limit,
            total,
            give_up=index is not False,
            start=start,
            hint=hint,
            carried=carried,
        )
        if walked is not None:
            return walked
    # MATERIALIZED: every match through the indexes, then the newest; without it the
    # planner may prefer an ordered backward scan of the whole table (see above).
    gin, gin_args = (f" AND {index[0]}", list(index[1])) if isinstance(index, tuple) else ("", [])
    values = [*params, *gin_args, *([list(exclude)] if exclude else []), limit]
    # The newest matches read again by their place in the heap (ctid, in the same
    # statement, so the same row versions) with their scoring columns: no index lookup
    # per row, and no second statement to score them (boolean at 1M messages: 6 against
    # 9 ms for 1,000 matches).
    rows = conn.execute(
        f"WITH hits AS MATERIALIZED (SELECT m.id, m.ctid FROM messages m "
        f"WHERE {where}{gin}{skip}), "
        "newest AS MATERIALIZED (SELECT ctid FROM hits ORDER BY id DESC LIMIT %s) "
        f"SELECT {carried.select} FROM messages m "
        "WHERE m.ctid = ANY(ARRAY(SELECT ctid FROM newest)) ORDER BY m.id DESC",
        [*values, *carried.params],
    ).fetchall()
    return carried.keep(rows)


def _walk_newest(
    conn: Conn,
    ns: str,
    where: str,
    params: Sequence[Any],
    limit: int,
    total: int,
    *,
    give_up: bool = True,
    start: Sample | None = None,
    hint: Hint | None = None,
    carried: Carried,
) -> list[int] | None:
    """The newest ``limit`` matches, by reading the tenant's rows newest first.

    Windows of the tenant's newest rows (``idx_messages_ns_id``) are tested against
    ``where`` until ``limit`` matches are found or the tenant ends. After each window the
    matches seen so far estimate how many rows the rest needs, which sizes the next
    window; None means fetching every match through the GIN indexes is cheaper (never,
    with ``give_up=False``). At most MAX_WALK rows are read: what the walk found by then
    is the answer.

    ``where`` should test its terms on the rows read (:func:`_tested`), or the planner
    may fetch a common term's every match through GIN to find the few in a window.

    ``hint`` (``where``'s terms as the indexes serve them): a window whose matches the
    rows read so far say are sparse (:func:`_sparse`) has them found through the indexes
    (:func:`_sparse_window`), not by testing each row: the same rows, read for less.
    ``carried``: the windows' matches are read with their scoring columns.
    """
    found: list[int] = list(start.ids) if start else []
    scanned = start.rows if start else 0
    below: int | None = start.low if start else None
    window = WALK_WINDOW
    if start is not None:  # the sample was the first window
        window = _next_window(len(found), scanned, below, limit, total, scanned, give_up=give_up)
    while window > 0:
        below = _read_window(
            conn, ns, (where, params), hint, found, limit, scanned, below, window, carried
        )
        scanned += window
        window = _next_window(len(found), scanned, below, limit, total, window, give_up=give_up)
    if window < 0:
        return None
    return found[:limit]


def _one_pass(start: Sample, limit: int, total: int, hint: Hint) -> bool:
    """Whether the AND walk of common terms (its first window ``start``, the probe's
    sample) and the OR walk after it are better made one pass: at one match more than
    the sample holds, the AND walk would still end at MAX_WALK rows short of ``limit``
    (so it reads them all, and the OR walk reads them again), and it would test its rows
    one by one (not find them through the indexes: see _sparse)."""
    found, rows = len(start.ids), start.rows
    if start.low is None or (found + 1) * MAX_WALK >= limit * rows:
        return False
    window = _next_window(found, rows, start.low, limit, total, rows, give_up=False)
    return window > 0 and not _sparse(found, rows, window, hint)


def _walk_and_or(
    conn: Conn,
    ns: str,
    where: str,
    params: Sequence[Any],
    terms: Sequence[TermSql],
    limit: int,
    *,
    probed: Probed,
    exclude: Sequence[int],
    start: Sample,
    hint: Hint,
    carried: Carried,
) -> list[int]:
    """The AND walk of common ``terms`` and, when it falls short of ``limit``, the OR
    walk's newest rows after it, in one pass over the tenant's newest rows.

    The same rows as the two walks one after the other (each the newest matches among
    the tenant's newest MAX_WALK rows): the AND walk's windows, each also asked for the
    rows holding only some of the terms as long as the page may still need them. When
    the AND walk falls short it has read all MAX_WALK rows, which the OR walk would
    then read again; rows holding only some terms are rare when the terms are the
    bigrams of one Chinese word (a 3-character word's two bigrams and its phrase).
    """
    every = " AND ".join(t.pred for t in terms)
    some = " OR ".join(t.pred for t in terms)
    values = [p for t in terms for p in t.params]
    skip = " AND NOT (m.id = ANY(%s))" if exclude else ""
    skipped = [list(exclude)] if exclude else []
    anded, anded_params = f"{where} AND {_tested(every)}{skip}", [*params, *values, *skipped]
    found = list(start.ids)
    others = [i for i in probed.sample(terms, " OR ", exclude).ids if i not in set(found)]
    scanned, below, last = start.rows, start.low, start.rows
    window = _next_window(len(found), scanned, below, limit, probed.total, last, give_up=False)
    while window > 0:
        if len(others) < limit - len(found):
            # No more rows than those holding some terms only still need, at their rate
            # so far: they are often plenty, and the AND is then tested alone (cheaper).
            need = limit - len(found)
            window = min(
                window,
                _next_window(len(others), scanned, below, need, probed.total, last, give_up=False),
            )
            both, either, low = _window_both(
                conn,
                ns,
                f"{where} AND {_tested(some)}{skip}",
                [*params, *values, *skipped],
                (_tested(every), values),
                below,
                window,
            )
            found += both
            held = set(both)
            others += [i for i in either if i not in held]
        else:
            low = _read_window(
                conn, ns, (anded, anded_params), hint, found, limit, scanned, below, window, carried
            )
        scanned += window
        below, last = low, window
        window = _next_window(len(found), scanned, below, limit, probed.total, last, give_up=False)
    chosen = found[:limit]
    return chosen + others[: limit - len(chosen)]


def _read_window(
    conn: Conn,
    ns: str,
    pred: tuple[str, Sequence[Any]],
    hint: Hint | None,
    found: list[int],
    limit: int,
    scanned: int,
    below: int | None,
    rows: int,
    carried: Carried,
) -> int | None:
    """A walk's next window (:func:`_window`) of ``rows`` rows below ``below``, its
    matches of ``pred`` (SQL and values) appended to ``found`` up to ``limit`` in all;
    returns the window's oldest id (None: the tenant ended). Read through the GIN
    indexes when ``hint`` is given and the matches in the ``scanned`` rows read so far
    say the window's are sparse (:func:`_sparse_window`), each row tested otherwise:
    the same rows."""
    where, params = pred
    wanted = limit - len(found)
    if hint is not None and _sparse(len(found), scanned, rows, hint):
        ids, low = _sparse_window(conn, ns, where, params, hint, below, rows, wanted, carried)
    else:
        ids, low = _window(conn, ns, where, params, below, rows, wanted, carried)
    found += ids
    return low


def _sparse(found: int, scanned: int, window: int, hint: Hint) -> bool:
    """Whether the next ``window`` rows of a walk cost less through the GIN indexes than
    tested row by row, at the rate of ``found`` matches in the ``scanned`` rows read.

    A GIN scan reads its lexemes' postings in every tenant of the table (intersected
    with the tenant's own), about GIN_ENTRY_COST walked rows each (a phrase's or a
    prefix's lexemes are each more common than the term), and each match in the window
    is then fetched (BITMAP_ROW_COST). Half the window is the most this may cost, which
    leaves the window's ends and the planning of the extra statement their share.
    """
    if not scanned:
        return False
    rate = found / scanned
    # The sample's postings (its newest rows) or the walk's matches, whichever is more:
    # a term too rare for the sample to hold still has the postings of its matches.
    gin = max(hint.postings, rate) * hint.table * hint.entry_cost
    return gin + rate * window * BITMAP_ROW_COST <= window / 2


def _edge(below: int | None) -> tuple[str, list[Any]]:
    """The SQL of a window's end (two values: the tenant, as a one-element array, and the
    rows to skip) and its bound below ``below``.

    The window is an id range: the tenant's first and window-th rows below ``below``,
    found on idx_messages_ns_id ("namespace = ANY" with ORDER BY namespace is an order
    only that index yields, so the planner cannot pick a backward scan of the primary
    key past other tenants' newer rows).
    """
    bound = "" if below is None else " AND id < %s"
    return (
        f"SELECT id FROM messages WHERE namespace = ANY(%s){bound} "
        "ORDER BY namespace DESC, id DESC OFFSET %s LIMIT 1",
        [] if below is None else [below],
    )


def _window_range(where: str, ns: str) -> tuple[str, list[Any]]:
    """How a window's rows are read, newest first (SQL after ``where``, and its values).

    A tenant beside others (``where`` keyed, see :func:`tenant_sql`): the tenant's range
    of idx_messages_ns_id ("namespace = ANY" with ORDER BY namespace, an order only that
    index yields), so that rows of other tenants interleaved with its own are not read.
    Read as the primary key's id range, 8,000 rows of a tenant written while nine others
    wrote as much were 36,000 rows read (13.4 ms against 3.5); boolean p95 85 against
    23 ms at 100k messages (benchmarks/results/pg_interleaved.md). A tenant that is most
    of its table (``where`` unkeyed): the primary key's id range, its own rows, which
    stops at the statement's LIMIT where the planner might otherwise sort the range.
    """
    ends = "m.id >= COALESCE((SELECT id FROM lo), 0) AND m.id <= (SELECT id FROM hi)"
    if where.startswith(tenant_sql(keyed=True)):
        return f"m.namespace = ANY(%s) AND {ends} ORDER BY m.namespace DESC, m.id DESC", [[ns]]
    return f"{ends} ORDER BY m.id DESC", []


def _window(
    conn: Conn,
    ns: str,
    where: str,
    params: Sequence[Any],
    below: int | None,
    rows: int,
    wanted: int,
    carried: Carried,
) -> tuple[list[int], int | None]:
    """The newest ``wanted`` matches of ``where`` among the tenant's ``rows`` newest rows
    below ``below``, each row tested, and the window's oldest id (None: the tenant
    ended). The range is read in id order, which costs far less per row than looking
    each id up. ``carried``: the matches are read with their scoring columns."""
    edge, bound = _edge(below)
    ends = f"WITH hi AS MATERIALIZED ({edge}), lo AS MATERIALIZED ({edge}) "
    span, span_params = _window_range(where, ns)
    matches = f"FROM messages m WHERE {where} AND {span} LIMIT %s"
    head = [[ns], *bound, 0, [ns], *bound, rows - 1]
    # One row per match (one of NULLs when none), each with the window's low end.
    found = conn.execute(
        ends + f"SELECT (SELECT id FROM lo) AS low, {carried.lateral(matches)}",
        [*head, *carried.params, *params, *span_params, wanted],
    ).fetchall()
    low = found[0]["low"]
    return carried.keep(found, "low"), None if low is None else int(low)


def _window_both(
    conn: Conn,
    ns: str,
    where: str,
    params: Sequence[Any],
    also: tuple[str, Sequence[Any]],
    below: int | None,
    rows: int,
) -> tuple[list[int], list[int], int | None]:
    """:func:`_window`'s every match of ``where`` (newest first, no limit) and those of
    them that match ``also`` too, and the window's oldest id."""
    edge, bound = _edge(below)
    span, span_params = _window_range(where, ns)
    row = conn.execute(
        f"WITH hi AS MATERIALIZED ({edge}), lo AS MATERIALIZED ({edge}), "
        f"w AS MATERIALIZED (SELECT m.id, {also[0]} AS a FROM messages m WHERE {where} "
        f"AND {span}) "
        "SELECT (SELECT id FROM lo) AS low, ARRAY(SELECT id FROM w WHERE a ORDER BY id DESC) "
        "AS both, ARRAY(SELECT id FROM w ORDER BY id DESC) AS either",
        [[ns], *bound, 0, [ns], *bound, rows - 1, *also[1], *params, *span_params],
    ).fetchone()
    assert row is not None  # a SELECT without FROM returns one row
    low = None if row["low"] is None else int(row["low"])
    return [int(i) for i in row["both"]], [int(i) for i in row["either"]], low


def _sparse_window(
    conn: Conn,
    ns: str,
    where: str,
    params: Sequence[Any],
    hint: Hint,
    below: int | None,
    rows: int,
    wanted: int,
    carried: Carried,
) -> tuple[list[int], int | None]:
    """:func:`_window`'s rows, found through the GIN indexes: ``hint`` (``where``'s terms
    as the indexes serve them) ANDed with the primary key's range.

    The range's ends are read first, so that the planner sees them as values: given
    them, it ANDs the terms' GIN bitmap with the range (ends computed in the same
    statement are unknown to it, and it would test the range row by row). Plain index
    scans are off for that one read (set by the first statement, whose plan is made by
    then, and restored by the second), which leaves the planner the bitmaps.
    """
    edge, bound = _edge(below)
    ends = conn.execute(
        f"SELECT ({edge}) AS high, ({edge}) AS low, "
        "current_setting('enable_indexscan') AS was, "
        "set_config('enable_indexscan', 'off', true) AS now",
        [[ns], *bound, 0, [ns], *bound, rows - 1],
    ).fetchone()
    assert ends is not None  # a SELECT without FROM returns one row
    high, low = ends["high"], ends["low"]
    matches = (
        f"FROM messages m WHERE {where} AND ({hint.pred}) AND m.id >= %s AND m.id <= %s "
        "ORDER BY m.id DESC LIMIT %s"
    )
    values = [*params, *hint.params, 0 if low is None else low, -1 if high is None else high]
    # One row per match (one of NULLs when none), each restoring the setting.
    found = conn.execute(
        f"SELECT set_config('enable_indexscan', %s, true) AS was, {carried.lateral(matches)}",
        [ends["was"], *carried.params, *values, wanted],
    ).fetchall()
    return carried.keep(found, "was"), None if low is None else int(low)


def _next_window(
    found: int,
    scanned: int,
    below: int | None,
    limit: int,
    total: int,
    window: int,
    *,
    give_up: bool,
) -> int:
    """The walk's next window in rows: 0 to stop there (enough, the tenant's end, or
    MAX_WALK), -1 when fetching every match by bitmap is cheaper than walking on."""
    if found >= limit or below is None or scanned >= MAX_WALK:
        return 0
    # Rows still to read at the rate seen so far, against every match by bitmap.
    rate = found / scanned
    if give_up and (rate == 0 or (limit - found) / rate > BITMAP_ROW_COST * rate * total):
        return -1
    needed = (limit - found) / max(rate, 1 / MAX_WALK)
    # The next window: what the rate says is left (with a margin), growing at most
    # fourfold so that a rate read from few rows cannot send one huge window.
    return int(min(max(needed * 1.25, WALK_WINDOW), window * 4, MAX_WALK - scanned))


class Sampled:
    """The tenant's sample and size (:func:`memstrata.store.postgres.ranking.sample`) for
    the candidate searches of one transaction: read once when the transaction is a
    snapshot (REPEATABLE READ, where a second read would find the same), for each
    search otherwise. A query searches more than once when an explicit query finds too
    little, a transcript is also read by its last turn, or expansions add subqueries."""

    def __init__(self) -> None:
        self.known: tuple[ranking.Sample, int, int] | None = None

    def read(self, conn: Conn, ns: str) -> tuple[ranking.Sample, int, int]:
        if conn.isolation_level != psycopg.IsolationLevel.REPEATABLE_READ:
            return ranking.sample(conn, ns)
        if self.known is None:
            self.known = ranking.sample(conn, ns)
        return self.known


def collect_candidates(
    conn: Conn,
    ns: str,
    compiled: CompiledQuery,
    filters: Filters,
    *,
    k: int,
    order: Order,
    sampled: Sampled | None = None,
) -> list[Candidate]:
    """The rows matching ``compiled`` under ``filters``: ranked, or newest/oldest first.

    The work is bounded (:mod:`memstrata.store.postgres.bounds`): the query's terms are
    capped, few of them scan for substrings, and every statement has a timeout.
    ``sampled``: the transaction's tenant sample, when it keeps one.
    """
    if compiled.tree is None:
        return []
    try:
        with planner(conn, statement_timeout=f"{SEARCH_TIMEOUT_MS}ms", **SEARCH_PLAN):
            if order != "rank":
                return _collect(conn, ns, bound_query(compiled), filters, k=k, order=order)
            # Ranked: every term scores the candidates, the rarest find them.
            stats, total, table = (sampled or Sampled()).read(conn, ns)
            terms = list(dict.fromkeys(compiled.tree.positive_terms()))
            rarity = ranking.rarity(conn, terms, stats, TS_CONFIG, cjk_tsquery)
            bounded = bound_query(compiled, rarity=rarity)
            return _collect(
                conn,
                ns,
                bounded,
                filters,
                k=k,
                order=order,
                stats=(stats, terms, compiled),
                total=total,
                table=table,
                unseen=_unseen(rarity, stats.rows, total),
            )
    except psycopg.errors.QueryCanceled as exc:
        raise SessionStoreError(
            f"The search ran past its {SEARCH_TIMEOUT_MS / 1000:g} s bound and was stopped. "
            "Search with fewer, more specific words."
        ) from exc


_FAILED = psycopg.pq.TransactionStatus.INERROR


def _unseen(rarity: dict[Term, float], rows: int, total: int) -> bool:
    """Whether the ranking sample's ``rows`` (the tenant's newest, of ``total``) holding
    none of the terms (rarity 0, or infinite: in no row at all) says they are rare: a
    term in COMMON_DF of the tenant's rows would have been found in UNSEEN_EXPECTED of
    them on average (so missed by chance in at most e^-UNSEEN_EXPECTED of searches). At
    100k messages the 500 rows expect 2.5; at 1M a quarter of one, and a Chinese bigram
    in a thousand rows went unseen in most searches (each then probed twice)."""
    if rows * COMMON_DF < UNSEEN_EXPECTED * total:
        return False
    return all(r == 0 or math.isinf(r) for r in rarity.values())


def _collect(
    conn: Conn,
    ns: str,
    compiled: CompiledQuery,
    filters: Filters,
    *,
    k: int,
    order: Order,
    stats: tuple[ranking.Sample, list[Term], CompiledQuery] | None = None,
    total: int = 0,
    table: int = 0,
    unseen: bool = False,
) -> list[Candidate]:
    assert compiled.tree is not None
    # A tenant that is most of the table searches its GIN indexes without its own key
    # (see DOMINANT_SHARE); rows are still filtered by tenant, the answers the same.
    dominant = 0 < table <= total / DOMINANT_SHARE
    where, params = filter_sql(ns, filters, keyed=not dominant)
    allowed = substring_budget(list(dict.fromkeys(compiled.tree.terms())))
    pred, pred_params = tree_sql(compiled.tree, allowed)
    if order != "rank":
        direction = "DESC" if order == "newest" else "ASC"
        rows = conn.execute(
            f"SELECT m.id, m.session_id, m.timestamp FROM messages m WHERE {where} AND {pred} "
            f"ORDER BY m.timestamp {direction}, m.id {direction} LIMIT %s",
            [*params, *pred_params, k],
        ).fetchall()
        return [
            Candidate(int(r["id"]), str(r["session_id"]), float(r["timestamp"]), {}) for r in rows
        ]
    positives = list(dict.fromkeys(compiled.tree.positive_terms()))
    probed = Probed(total, table, keyed=not dominant, unseen=unseen)
    if compiled.leaves is not None:
        # As on SQLite, substring matching (the costliest scan) serves a natural query's
        # term only when the word index does not know the term at all: its trigram arm
        # is probed only when its word and CJK arms found nothing, in the same statement.
        words = [term_sql(t, substrings=False) for t in positives]
        arms = [a for w in words for a in w.arms]
        gates: list[Sequence[tuple[str, list[Any]]]] = [()] * len(arms)
        for t, w in zip(positives, words, strict=True):
            if t.trigram and t in allowed:
                extra = [a for a in term_sql(t).arms if a not in w.arms]
                arms += extra
                gates += [w.arms] * len(extra)
        probed.add(conn, ns, arms, gates, (where, params))
        known = {w.term for w in words if probed.common(w) or probed.rows(w)}
        renders = [
            term_sql(t, substrings=t in allowed and t not in known) if t.trigram else w
            for t, w in zip(positives, words, strict=True)
        ]
    else:
        renders = [term_sql(t, substrings=t in allowed) for t in positives]
    terms = [t for t in renders if t.pred != "FALSE"]
    if not terms:
        return []
    probed.add(conn, ns, [a for t in terms for a in t.arms])
    assert stats is not None  # a ranked search has its statistics
    # Terms a substring scan serves: found in rows the word and CJK indexes miss.
    substrings = {t.term: probed.df(t) for t in terms if any(SUBSTRING in a for a, _ in t.arms)}
    # The candidates are read with the columns that score them (no second read).
    scoring = ranking.scoring(
        conn, stats[2], stats[0], config=TS_CONFIG, cjk_query=cjk_tsquery, substrings=substrings
    )
    carried = Carried.scored(scoring)
    if compiled.leaves is None:
        ids = _boolean_ids(
            conn,
            ns,
            compiled.tree,
            terms,
            probed,
            where,
            params,
            pred,
            pred_params,
            stats[0],
            carried,
        )
        return scoring.score(_scored_rows(conn, ns, ids, carried))
    # An OR of terms: every row of the rare terms, then the newest rows of common ones.
    rare = [t for t in terms if not probed.common(t)]
    common = [t for t in terms if probed.common(t)]
    found: list[dict[str, Any]] = []
    # A small tenant's rows holding any term, from its statistics (see ranking.holders).
    held = ranking.holders(conn, stats[1], stats[0], TS_CONFIG, cjk_tsquery)
    if rare or held:
        # The probes returned every row of the rare terms: filtered and ranked by id.
        ids = sorted({i for t in rare for i in probed.rows(t)} | held)
        found = conn.execute(
            f"SELECT {carried.select} FROM messages m "
            f"WHERE {where} AND m.id = ANY(%s) ORDER BY m.id DESC LIMIT %s",
            [*carried.params, *params, ids, COMMON_DF * max(len(rare), 1)],
        ).fetchall()
    chosen = [int(r["id"]) for r in found]
    for joiner in (" AND ", " OR "):
        if not common or len(chosen) >= k or (joiner == " AND " and len(common) < 2):
            continue
        either = joiner.join(t.pred for t in common)
        either_params = [p for t in common for p in t.params]
        both = _words_anded(common) if joiner == " AND " else _indexed(common)
        excluded = list(chosen)
        start = probed.sample(common, joiner, excluded)
        hint = _hint(conn, either, either_params, common, probed, stats[0])
        if (
            joiner == " AND "
            and both is None
            and _one_pass(start, k - len(chosen), probed.total, hint)
        ):
            # The rows holding every common term will not fill the page: their walk reads
            # all its rows and the OR's would read them again. One walk finds both.
            chosen += _walk_and_or(
                conn,
                ns,
                where,
                params,
                common,
                k - len(chosen),
                probed=probed,
                exclude=excluded,
                start=start,
                hint=hint,
                carried=carried,
            )
            break
        chosen += _newest_ids(
            conn,
            ns,
            f"{where} AND {_tested(either)}",
            [*params, *either_params],
            k - len(chosen),
            total=probed.total,
            selective=False,
            exclude=excluded,
            index=both or False,
            start=start,
            hint=hint,
            carried=carried,
        )
    # The rows found but not read with their scoring columns (the probe's sample, the
    # rows of some terms only in an AND/OR pass), in one read.
    rows = _scored_rows(conn, ns, chosen[len(found) :], carried)
    return scoring.score(found + rows)


def _hint(
    conn: Conn,
    pred: str,
    params: Sequence[Any],
    terms: Sequence[TermSql],
    probed: Probed,
    sample: ranking.Sample,
) -> Hint:
    """``pred`` (over ``terms``) as a walk's :class:`Hint`: its postings per row are the
    more of what the ranking sample's lexemes say and what the probe's sample of the
    tenant's newest rows found of each term (a term the ranking sample is too small to
    hold). A substring arm's trigram postings are in neither: such a predicate never
    passes for sparse."""
    cost = GIN_ENTRY_COST if probed.keyed else GIN_FREE_COST
    if SUBSTRING in pred:
        return Hint(pred, params, probed.table, float("inf"), cost)
    lexemes = ranking.postings(conn, [t.term for t in terms], sample, TS_CONFIG, cjk_tsquery)
    rows = probed.sampled.rows
    found = sum(len(probed.seen.get(_key(arm), ())) for t in terms for arm in t.arms)
    postings = max(lexemes, found / rows if rows else 0.0)
    return Hint(pred, params, probed.table, postings, cost)


def _tested(pred: str) -> str:
    """``pred`` as a test of the rows read, which no index serves (coalesce hides its
    operators from the planner): the newest-first walk and the candidate filters read
    their rows by id, never a common term's every match through GIN."""
    return f"coalesce(({pred}), false)"


def _boolean_ids(
    conn: Conn,
    ns: str,
    tree: Node,
    terms: Sequence[TermSql],
    probed: Probed,
    where: str,
    params: Sequence[Any],
    pred: str,
    pred_params: Sequence[Any],
    sample: ranking.Sample,
    carried: Carried,
) -> list[int]:
    """The ids of a boolean query's newest BOOLEAN_RANKED matches (``carried``: see
    :func:`_newest_ids`).

    Every match holds each term the tree requires; when one of them is rare its probe
    returned all its rows, the matches are among them, and the whole tree (NOT
    included) is tested on those rows only. Otherwise, with a common term, the newest
    rows are walked (at most MAX_WALK); when two or more terms are required and the walk
    finds their rows too sparse, one GIN scan of their words ANDed (``&&``: the index
    intersects their lists) finds the rows holding all of them. With only rare
    positive terms the matches are few and the indexes find them all.
    """
    total = probed.total
    by_term = {t.term: t for t in terms}
    required = [by_term[t] for t in _required(tree) if t in by_term]
    rare_required = [t for t in required if not probed.common(t)]
    where_all, where_params = f"{where} AND {_tested(pred)}", [*params, *pred_params]
    index: tuple[str, Sequence[Any]] | bool | None = (pred, pred_params)
    if rare_required:
        rarest = min(rare_required, key=probed.df)
        where_all += " AND m.id = ANY(%s)"
        where_params.append(sorted(probed.rows(rarest)))
        index = None
    elif any(probed.common(t) for t in terms):
        # Never every match of a common term through GIN: the walk's rows, or one scan
        # of the required words ANDed when the walk finds them too sparse.
        index = _words_anded(required) or False
    selective = bool(rare_required) or max(probed.df(t) for t in terms) < COMMON_DF
    return _newest_ids(
        conn,
        ns,
        where_all,
        where_params,
        BOOLEAN_RANKED,
        total=total,
        selective=selective,
        index=index,
        # Only a walk reads a hint: a selective search has no estimate to make.
        hint=None if selective else _hint(conn, pred, pred_params, terms, probed, sample),
        carried=carried,
    )


def _words_anded(terms: Sequence[TermSql]) -> tuple[str, list[Any]] | None:
    """One index's predicate for rows holding every one of ``terms`` (at least two): their
    ``tsquery`` ANDed (``&&``), so that one GIN scan intersects their lists. The word
    index when each term has a word arm; else the CJK index when each has a CJK arm (a
    Chinese word's bigrams and their phrase: without it, the rows holding all of them
    could only be walked to, 15 ms for the 10,000 newest rows of a tenant beside nine
    others where a scan of the 1,023 rows holding them took 5). None otherwise.
    """
    if len(terms) < 2:
        return None
    for column, arm_of in (("tsv", _word_query), ("cjk", _cjk_query)):
        queries = [arm_of(t) for t in terms]
        if all(q is not None for q in queries):
            both = " && ".join(f"({q[0]})" for q in queries if q is not None)
            values = [v for q in queries if q is not None for v in q[1]]
            return f"m.{column} @@ ({both})", values
    return None


def _indexed(terms: Sequence[TermSql]) -> tuple[str, list[Any]] | None:
    """One common term as the GIN indexes serve it, so that a walk to its newest rows
    can give up for one scan of all of them when the rate it sees says that costs less
    (a word in 1 % of a tenant's rows: 100 matches at the end of a 10,000-row walk, or
    one scan of its 1,000 rows); the walk alone stopped at MAX_WALK rows, short of the
    page where the term is rarer. None for several terms (the rows holding any of two
    common words, once the rows holding both are taken, looked rarer than they were,
    and the scan of both lists cost a Chinese compound 1.3-1.8x its walk) and for a term
    a substring scan serves (its trigram lists no rate estimates)."""
    if len(terms) != 1 or SUBSTRING in terms[0].pred:
        return None
    return terms[0].pred, list(terms[0].params)


def _cjk_query(term: TermSql) -> tuple[str, list[Any]] | None:
    """The term's CJK-index ``tsquery`` (SQL and values) when that is its only arm (CJK
    text, which the CJK index holds wherever it is written), else None: a Latin word's
    CJK arm holds it only glued to CJK text, so an AND through that index would miss the
    rows holding it as a word."""
    if len(term.arms) == 1 and term.arms[0][0].startswith(_CJK_ARM):
        return "%s::tsquery", list(term.arms[0][1])
    return None


def _word_query(term: TermSql) -> tuple[str, list[Any]] | None:
    """The term's word-index ``tsquery`` (SQL and values), None when it has no word arm.

    (A row holding the word only as Latin glued to CJK, which the CJK arm finds, is not
    found through it.)
    """
    for sql, values in term.arms:
        if sql.startswith("m.tsv @@ "):
            return sql.removeprefix("m.tsv @@ "), values
    return None


def _neighbours(row: dict[str, Any]) -> list[dict[str, str]]:
    """The previous and next message of a hit row of :meth:`SearchRows.hit_rows`."""
    return [
        {"role": row[f"{k}_role"], "content": text_of(sqlite_form(row[f"{k}_content"]))}
        for k in ("prev", "next")
        if row[f"{k}_role"] is not None
    ]


class SearchRows(Transaction):
    """The search primitives of a PostgreSQL transaction."""

    conn: Conn
    ns: str
    sampled: Sampled

    def candidates(
        self, compiled: CompiledQuery, filters: Filters, k: int, order: Order
    ) -> list[Candidate]:
        return collect_candidates(
            self.conn, self.ns, compiled, filters, k=k, order=order, sampled=self.sampled
        )

    def held_words(self, words: Sequence[str]) -> list[str]:
        # The tenant's ranking sample answers first: a word in its newest rows is held,
        # and when the sample is the whole tenant it answers for every word. Only the
        # words it does not hold are looked up in the GIN indexes (each word's arms: a
        # Latin word's word and CJK ones, for it glued to CJK text; a CJK bigram's CJK
        # one), one statement for all of them (store.postgres.held). A GIN scan reads a
        # word's whole posting list even for LIMIT 1, so a common word looked up there
        # cost 5 ms at 100k rows; a word the sample misses is rare, and its list short.
        asked = []
        for word in words:
            term = word_term(word)
            if term is not None:
                asked.append((word, term))
        if not asked:
            return []
        stats, _, _ = self.sampled.read(self.conn, self.ns)
        rarity = ranking.rarity(self.conn, [t for _, t in asked], stats, TS_CONFIG, cjk_tsquery)
        held = {w for w, t in asked if 0 < rarity[t] < math.inf}
        owners: list[str] = []
        arms: list[tuple[str, list[Any]]] = []
        for w, t in asked:
            if rarity[t] == 0:
                for arm in term_sql(t, substrings=False).arms:
                    owners.append(w)
                    arms.append(arm)
        if arms:
            found = held_arms(self.conn, f"FROM messages m WHERE {tenant_sql()}", [self.ns], arms)
            held |= {owners[k] for k in found}
        return [w for w, _ in asked if w in held]

    def written_between(
        self, spans: Sequence[tuple[float, float]], filters: Filters, k: int
    ) -> list[Candidate]:
        where, params = filter_sql(self.ns, filters)
        inside = " OR ".join("(m.timestamp >= %s AND m.timestamp < %s)" for _ in spans)
        rows = self.conn.execute(
            f"SELECT m.id, m.session_id, m.timestamp FROM messages m WHERE {where} "
            f"AND ({inside}) ORDER BY m.timestamp DESC LIMIT %s",
            [*params, *(bound for span in spans for bound in span), k],
        ).fetchall()
        return [Candidate(int(r["id"]), str(r["session_id"]), float(r["timestamp"])) for r in rows]

    def timestamp_range(self) -> tuple[float | None, float | None]:
        row = self.conn.execute(
            "SELECT min(timestamp) AS first, max(timestamp) AS last FROM messages "
            "WHERE namespace = %s",
            (self.ns,),
        ).fetchone()
        return (row["first"], row["last"]) if row else (None, None)

    def hit_rows(
        self, message_ids: Sequence[int], filters: Filters, *, context: bool
    ) -> dict[int, HitRow]:
        # With ``context``, the previous and next visible message of each hit come in the
        # same statement (each one index probe of idx_messages_session).
        visible = "" if filters.include_inactive else " AND (n.active = 1 OR n.compacted = 1)"
        same = "n.namespace = m.namespace AND n.session_id = m.session_id"
        near = (
            ", p.role AS prev_role, p.content AS prev_content, "
            "x.role AS next_role, x.content AS next_content"
            if context
            else ""
        )
        joins = (
            f"LEFT JOIN LATERAL (SELECT n.role, n.content FROM messages n WHERE {same} "
            f"AND n.id < m.id{visible} ORDER BY n.id DESC LIMIT 1) p ON true "
            f"LEFT JOIN LATERAL (SELECT n.role, n.content FROM messages n WHERE {same} "
            f"AND n.id > m.id{visible} ORDER BY n.id ASC LIMIT 1) x ON true "
            if context
            else ""
        )
        rows = self.conn.execute(
            "SELECT m.id, m.session_id, m.role, m.content, m.timestamp, m.tool_name, "
            f"m.tool_calls, s.source, s.model, s.started_at{near} FROM messages m "
            # Each hit's session by its key: OFFSET 0 keeps the planner from turning this
            # into a join that, without statistics, reads every session of the tenant.
            "CROSS JOIN LATERAL (SELECT source, model, started_at FROM sessions s "
            f"WHERE s.namespace = m.namespace AND s.id = m.session_id OFFSET 0) s {joins}"
            "WHERE m.namespace = %s AND m.id = ANY(%s)",
            (self.ns, list(message_ids)),
        ).fetchall()
        return {
            int(r["id"]): HitRow(
                id=int(r["id"]),
                session_id=str(r["session_id"]),
                role=str(r["role"]),
                text=text_of(sqlite_form(r["content"])),
                tool_name=r["tool_name"],
                tool_calls=r["tool_calls"],
                timestamp=float(r["timestamp"]),
                source=r["source"],
                model=r["model"],
                session_started=r["started_at"],
                context=tuple(_neighbours(r) if context else ()),
            )
            for r in rows
        }

    def texts(self, message_ids: Sequence[int]) -> dict[int, str]:
        rows = self.conn.execute(
            "SELECT id, content, tool_name, tool_calls FROM messages "
            "WHERE namespace = %s AND id = ANY(%s)",
            (self.ns, list(message_ids)),
        ).fetchall()
        return {
            int(r["id"]): " ".join(
                x
                for x in (text_of(sqlite_form(r["content"])), r["tool_name"], r["tool_calls"])
                if x
            ).lower()
            for r in rows
        }

    def passing(self, message_ids: Sequence[int], filters: Filters) -> list[Candidate]:
        where, params = filter_sql(self.ns, filters)
        rows = self.conn.execute(
            f"SELECT m.id, m.session_id, m.timestamp FROM messages m WHERE {where} "
            "AND m.id = ANY(%s)",
            [*params, list(message_ids)],
        ).fetchall()
        return [Candidate(int(r["id"]), str(r["session_id"]), float(r["timestamp"])) for r in rows]
