"""Full-text search on PostgreSQL: the candidates of a compiled query, and the rows hits show.

A query is parsed once by :mod:`memstrata.query.compile` (natural language by default; ``AND``,
``OR``, ``NOT``, ``"phrases"`` and ``prefix*`` when written; never a syntax error) and
each term is rendered for the three indexes:

* word    - ``tsv @@ phraseto_tsquery('memstrata_english', ...)`` on the generated, stemmed
  ``tsvector`` (GIN);
* trigram - ``ILIKE '%...%'`` on the indexed text (``pg_trgm`` GIN), for code-like terms
  and quoted phrases that mix scripts;
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

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg

from memstrata.errors import SessionStoreError
from memstrata.query.compile import CompiledQuery, Node, Term
from memstrata.query.filters import Filters, tool_call_pattern
from memstrata.store.backend import Candidate, HitRow, Order, Transaction
from memstrata.store.hits import text_of
from memstrata.store.postgres import ranking
from memstrata.store.postgres.bounds import SEARCH_TIMEOUT_MS, bound_query, substring_budget
from memstrata.store.postgres.codec import sqlite_form
from memstrata.store.postgres.messages import quote_lexeme
from memstrata.store.postgres.schema import INDEXED_TEXT, TS_CONFIG
from memstrata.store.rank import BOOLEAN_RANKED, COMMON_DF
from memstrata.store.titles import escape_like

Conn = psycopg.Connection[Any]

# The first window of the newest-first walk (see _walk_newest), in rows of the tenant.
WALK_WINDOW = 2000
# A row fetched through a GIN bitmap costs about this many rows read by the newest-first
# walk (scattered heap pages against an id range read in order; measured on the
# benchmark corpus at 200k messages: 5-10 us against 1.5 us a row).
BITMAP_ROW_COST = 5
# The plans search statements need, whatever the planner's statistics say (they may be
# missing: a server with autovacuum off, a table just bulk-loaded). A sequential scan of
# a table shared by every tenant is never the right way to search one; counts go through
# the GIN bitmaps; the newest-first walk reads idx_messages_ns_id backwards.
SEARCH_PLAN = {"enable_seqscan": "off"}
# (gin_fuzzy_search_limit would bound a common term's bitmap, but on these two-column
# indexes it samples the tenant's own entry as well, so a common term of a big tenant
# came back with a few hundred rows and passed for rare: not used.)
PROBE_PLAN = {"enable_indexscan": "off", "enable_indexonlyscan": "off"}
WALK_PLAN = {"enable_bitmapscan": "off", "enable_sort": "off"}


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
    such groups -> their conjunction.
    """
    groups = []
    for text, prefix in (
        (m.group(1).replace('""', '"'), m.group(2)) for m in _QUOTED.finditer(rendered)
    ):
        tokens = [quote_lexeme(t) for t in text.split(" ") if t]
        if not tokens:
            continue
        if prefix:
            tokens[-1] += ":*"
        groups.append(" <-> ".join(tokens))
    if not groups:
        return None
    return " & ".join(f"({g})" for g in groups) if len(groups) > 1 else groups[0]


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
        preds.append(f"m.tsv @@ {query}")
        params += qparams
    trigram = _unquote(term.trigram) if term.trigram and substrings else None
    if trigram is not None:
        pattern = "%" + escape_like(trigram[0]) + "%"
        preds.append(f"{_TEXT} ILIKE %s")
        params.append(pattern)
    cjk = cjk_tsquery(term.cjk) if term.cjk else None
    if cjk is not None:
        # cjk is NULL for rows without CJK: the IS NOT NULL keeps the predicate two-valued,
        # or NOT (a term) would be NULL, not true, on every such row.
        preds.append("(m.cjk IS NOT NULL AND m.cjk @@ %s::tsquery)")
        params.append(cjk)
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


def filter_sql(ns: str, filters: Filters) -> tuple[str, list[Any]]:
    """The tenant and the row filters as a WHERE fragment over ``messages m``."""
    clauses = ["m.namespace = %s"]
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


def _probe(
    conn: Conn, ns: str, arms: Sequence[tuple[str, list[Any]]]
) -> tuple[list[list[int]], int]:
    """The ids of ``ns``'s rows each arm (one index's predicate) matches, at most
    COMMON_DF of them, and the tenant's size (from the sessions' counters: far cheaper
    than a count), in one statement.

    Each arm is one GIN probe read through a bitmap whose heap visits stop at COMMON_DF
    rows. Fewer than COMMON_DF ids are all the arm's rows: a rare term's candidates,
    found without a second probe.
    """
    probes = [
        f"ARRAY(SELECT m.id FROM messages m WHERE m.namespace = %s AND {sql} "
        f"LIMIT {COMMON_DF}) AS a{i}"
        for i, (sql, _) in enumerate(arms)
    ]
    with planner(conn, **PROBE_PLAN):
        row = conn.execute(
            "SELECT (SELECT COALESCE(sum(message_count), 0) FROM sessions "
            f"WHERE namespace = %s) AS total{''.join(', ' + c for c in probes)}",
            [ns, *(p for _, params in arms for p in [ns, *params])],
        ).fetchone()
    assert row is not None  # a SELECT without FROM returns one row
    return [[int(i) for i in row[f"a{i}"]] for i in range(len(arms))], int(row["total"])


class Probed:
    """The ids each arm matched (see :func:`_probe`), keyed by the arm's SQL and values."""

    def __init__(self) -> None:
        self.ids: dict[str, list[int]] = {}
        self.total = 0

    def add(self, conn: Conn, ns: str, arms: Sequence[tuple[str, list[Any]]]) -> None:
        """Probe the arms not probed yet."""
        todo = list({_key(a): a for a in arms if _key(a) not in self.ids}.values())
        if not todo and self.ids:
            return
        found, self.total = _probe(conn, ns, todo)
        self.ids.update({_key(a): ids for a, ids in zip(todo, found, strict=True)})

    def rows(self, term: TermSql) -> set[int]:
        """The term's rows seen by its arms' probes."""
        return {i for arm in term.arms for i in self.ids[_key(arm)]}

    def df(self, term: TermSql) -> int:
        """The term's rows, counted up to COMMON_DF (exact below it)."""
        return min(COMMON_DF, len(self.rows(term)))


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


def _ranked_rows(
    conn: Conn,
    ns: str,
    where: str,
    params: Sequence[Any],
    limit: int,
    *,
    total: int,
    selective: bool,
    exclude: Sequence[int] = (),
) -> list[dict[str, Any]]:
    """The newest ``limit`` rows matching ``where`` (id, session and time), chosen by
    :func:`_newest_ids`, for :mod:`memstrata.store.postgres.ranking` to score."""
    ids = _newest_ids(
        conn, ns, where, params, limit, total=total, selective=selective, exclude=exclude
    )
    if not ids:
        return []
    rows: list[dict[str, Any]] = conn.execute(
        "SELECT m.id, m.session_id, m.timestamp FROM messages m WHERE m.id = ANY(%s)", [ids]
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
) -> list[int]:
    """Ids of the newest ``limit`` rows matching ``where`` (which scopes to ``ns``).

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
        walked = _walk_newest(conn, ns, where + skip, args, limit, total)
        if walked is not None:
            return walked
    # MATERIALIZED: every match through the indexes, then the newest; without it the
    # planner may prefer an ordered backward scan of the whole table (see above).
    rows = conn.execute(
        f"WITH hits AS MATERIALIZED (SELECT m.id FROM messages m WHERE {where}{skip}) "
        "SELECT id FROM hits ORDER BY id DESC LIMIT %s",
        [*args, limit],
    ).fetchall()
    return [int(r["id"]) for r in rows]


def _walk_newest(
    conn: Conn, ns: str, where: str, params: Sequence[Any], limit: int, total: int
) -> list[int] | None:
    """The newest ``limit`` matches, by reading the tenant's rows newest first.

    Windows of the tenant's newest rows (``idx_messages_ns_id``) are tested against
    ``where`` until ``limit`` matches are found or the tenant ends. After each window the
    matches seen so far estimate how many rows the rest needs, which sizes the next
    window; None means fetching every match through the GIN indexes is cheaper.
    """
    with planner(conn, **WALK_PLAN):
        return _walk_windows(conn, ns, where, params, limit, total)


def _walk_windows(
    conn: Conn, ns: str, where: str, params: Sequence[Any], limit: int, total: int
) -> list[int] | None:
    found: list[int] = []
    scanned = 0
    below: int | None = None
    window = WALK_WINDOW
    while True:
        bound = "" if below is None else " AND id < %s"
        bound_args = [] if below is None else [below]
        # The window is an id range: the tenant's first and window-th rows below
        # ``below``, found on idx_messages_ns_id ("namespace = ANY" with ORDER BY
        # namespace is an order only that index yields, so the planner cannot pick a
        # backward scan of the primary key past other tenants' newer rows). The range
        # is then read in id order, which costs far less per row than looking each id up.
        edge = (
            "SELECT id FROM messages WHERE namespace = ANY(%s)"
            f"{bound} ORDER BY namespace DESC, id DESC OFFSET %s LIMIT 1"
        )
        row = conn.execute(
            f"WITH hi AS MATERIALIZED ({edge}), lo AS MATERIALIZED ({edge}) "
            "SELECT (SELECT id FROM lo) AS low, "
            f"ARRAY(SELECT m.id FROM messages m WHERE {where} "
            "AND m.id >= COALESCE((SELECT id FROM lo), 0) AND m.id <= (SELECT id FROM hi) "
            "ORDER BY m.id DESC LIMIT %s) AS ids",
            [
                *[[ns], *bound_args, 0],
                *[[ns], *bound_args, window - 1],
                *params,
                limit - len(found),
            ],
        ).fetchone()
        assert row is not None  # a SELECT without FROM returns one row
        found += [int(i) for i in row["ids"]]
        if len(found) >= limit or row["low"] is None:  # enough, or the tenant's end
            return found[:limit]
        scanned += window
        below = int(row["low"])
        # Rows still to read at the rate seen so far, against every match by bitmap.
        rate = len(found) / scanned
        if rate == 0:
            return None
        needed = (limit - len(found)) / rate
        if needed > BITMAP_ROW_COST * rate * total:
            return None
        # The next window: what the rate says is left (with a margin), growing at most
        # fourfold so that a rate read from few rows cannot send one huge window.
        window = int(min(max(needed * 1.25, WALK_WINDOW), window * 4))


def collect_candidates(
    conn: Conn, ns: str, compiled: CompiledQuery, filters: Filters, *, k: int, order: Order
) -> list[Candidate]:
    """The rows matching ``compiled`` under ``filters``: ranked, or newest/oldest first.

    The work is bounded (:mod:`memstrata.store.postgres.bounds`): the query's terms are
    capped, few of them scan for substrings, and every statement has a timeout.
    """
    if compiled.tree is None:
        return []
    try:
        with planner(conn, statement_timeout=f"{SEARCH_TIMEOUT_MS}ms", **SEARCH_PLAN):
            if order != "rank":
                return _collect(conn, ns, bound_query(compiled), filters, k=k, order=order)
            # Ranked: every term scores the candidates, the rarest find them.
            stats = ranking.sample(conn, ns)
            terms = list(dict.fromkeys(compiled.tree.positive_terms()))
            rarity = ranking.rarity(conn, terms, stats, TS_CONFIG, cjk_tsquery)
            bounded = bound_query(compiled, rarity=rarity)
            return _collect(
                conn, ns, bounded, filters, k=k, order=order, stats=(stats, terms, compiled)
            )
    except psycopg.errors.QueryCanceled as exc:
        raise SessionStoreError(
            f"The search ran past its {SEARCH_TIMEOUT_MS / 1000:g} s bound and was stopped. "
            "Search with fewer, more specific words."
        ) from exc


_FAILED = psycopg.pq.TransactionStatus.INERROR


def _collect(
    conn: Conn,
    ns: str,
    compiled: CompiledQuery,
    filters: Filters,
    *,
    k: int,
    order: Order,
    stats: tuple[ranking.Sample, list[Term], CompiledQuery] | None = None,
) -> list[Candidate]:
    assert compiled.tree is not None
    where, params = filter_sql(ns, filters)
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
    probed = Probed()
    if compiled.leaves is not None:
        # As on SQLite, substring matching (the costliest scan) serves a natural query's
        # term only when the word index does not know the term at all: the word and CJK
        # arms are probed first, in the statement that also reads the tenant's size.
        words = [term_sql(t, substrings=False) for t in positives]
        probed.add(conn, ns, [a for w in words for a in w.arms])
        known = {w.term for w in words if probed.rows(w)}
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
    dfs, total = [probed.df(t) for t in terms], probed.total
    assert stats is not None  # a ranked search has its statistics
    # Terms a substring scan serves: found in rows the word and CJK indexes miss.
    substrings = {t.term: probed.df(t) for t in terms if any(" ILIKE " in a for a, _ in t.arms)}

    def scored(found: Sequence[dict[str, Any]]) -> list[Candidate]:
        return ranking.score(
            conn,
            ns,
            found,
            stats[2],
            stats[0],
            config=TS_CONFIG,
            cjk_query=cjk_tsquery,
            substrings=substrings,
        )

    if compiled.leaves is None:
        # Boolean query: rank its newest BOOLEAN_RANKED matches. Every match holds each
        # term the tree requires; when one of them is rare its probe returned all its
        # rows, and the matches are among them. With only rare positive terms the
        # matches are few and the indexes find them all.
        by_term = {t.term: t for t in terms}
        required = [by_term[t] for t in _required(compiled.tree) if t in by_term]
        rare_required = [t for t in required if probed.df(t) < COMMON_DF]
        where_all, where_params = f"{where} AND {pred}", [*params, *pred_params]
        if rare_required:
            rarest = min(rare_required, key=probed.df)
            where_all += " AND m.id = ANY(%s)"
            where_params.append(sorted(probed.rows(rarest)))
        ranked = _ranked_rows(
            conn,
            ns,
            where_all,
            where_params,
            BOOLEAN_RANKED,
            total=total,
            selective=bool(rare_required) or max(dfs) < COMMON_DF,
        )
        return scored(ranked)
    # An OR of terms: every row of the rare terms, then the newest rows of common ones.
    rare = [t for t, df in zip(terms, dfs, strict=True) if df < COMMON_DF]
    common = [t for t, df in zip(terms, dfs, strict=True) if df >= COMMON_DF]
    found: list[dict[str, Any]] = []
    # A small tenant's rows holding any term, from its statistics (see ranking.holders).
    held = ranking.holders(conn, stats[1], stats[0], TS_CONFIG, cjk_tsquery)
    if rare or held:
        # The probes returned every row of the rare terms: filtered and ranked by id.
        ids = sorted({i for t in rare for i in probed.rows(t)} | held)
        found = conn.execute(
            "SELECT m.id, m.session_id, m.timestamp FROM messages m "
            f"WHERE {where} AND m.id = ANY(%s) ORDER BY m.id DESC LIMIT %s",
            [*params, ids, COMMON_DF * max(len(rare), 1)],
        ).fetchall()
    for joiner in (" AND ", " OR "):
        if not common or len(found) >= k or (joiner == " AND " and len(common) < 2):
            continue
        found += _ranked_rows(
            conn,
            ns,
            f"{where} AND ({joiner.join(t.pred for t in common)})",
            [*params, *(p for t in common for p in t.params)],
            k - len(found),
            total=total,
            selective=False,
            exclude=[int(r["id"]) for r in found],
        )
    return scored(found)


class SearchRows(Transaction):
    """The search primitives of a PostgreSQL transaction."""

    conn: Conn
    ns: str

    def candidates(
        self, compiled: CompiledQuery, filters: Filters, k: int, order: Order
    ) -> list[Candidate]:
        return collect_candidates(self.conn, self.ns, compiled, filters, k=k, order=order)

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
        rows = self.conn.execute(
            "SELECT m.id, m.session_id, m.role, m.content, m.timestamp, m.tool_name, "
            "m.tool_calls, s.source, s.model, s.started_at FROM messages m "
            # Each hit's session by its key: OFFSET 0 keeps the planner from turning this
            # into a join that, without statistics, reads every session of the tenant.
            "CROSS JOIN LATERAL (SELECT source, model, started_at FROM sessions s "
            "WHERE s.namespace = m.namespace AND s.id = m.session_id OFFSET 0) s "
            "WHERE m.namespace = %s AND m.id = ANY(%s)",
            (self.ns, list(message_ids)),
        ).fetchall()
        contexts = self._contexts(message_ids, filters.include_inactive) if context else {}
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
                context=tuple(contexts.get(int(r["id"]), ())),
            )
            for r in rows
        }

    def _contexts(
        self, ids: Sequence[int], include_inactive: bool
    ) -> dict[int, list[dict[str, str]]]:
        """The previous and next visible message of each hit, in two statements."""
        visible = "" if include_inactive else " AND (n.active = 1 OR n.compacted = 1)"
        same = "n.namespace = m.namespace AND n.session_id = m.session_id"
        neighbours = self.conn.execute(
            f"SELECT m.id, "
            f"(SELECT n.id FROM messages n WHERE {same} AND n.id < m.id{visible} "
            "ORDER BY n.id DESC LIMIT 1) AS prev, "
            f"(SELECT n.id FROM messages n WHERE {same} AND n.id > m.id{visible} "
            "ORDER BY n.id ASC LIMIT 1) AS next "
            "FROM messages m WHERE m.namespace = %s AND m.id = ANY(%s)",
            (self.ns, list(ids)),
        ).fetchall()
        wanted = sorted(
            {int(r[k]) for r in neighbours for k in ("prev", "next") if r[k] is not None}
        )
        texts: dict[int, dict[str, str]] = {}
        if wanted:
            for r in self.conn.execute(
                "SELECT id, role, content FROM messages WHERE namespace = %s AND id = ANY(%s)",
                (self.ns, wanted),
            ).fetchall():
                texts[int(r["id"])] = {
                    "role": r["role"],
                    "content": text_of(sqlite_form(r["content"])),
                }
        return {
            int(r["id"]): [
                texts[int(r[k])]
                for k in ("prev", "next")
                if r[k] is not None and int(r[k]) in texts
            ]
            for r in neighbours
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
