"""The facts store on PostgreSQL: the facts of one tenant (``namespace``) of a database.

:class:`PostgresFactStore` is a backend of
:class:`~memstrata.providers.facts.base.BaseFactStore`, so it has the SQLite store's
methods, results and errors; it lives in the database of the session store
(``store.dsn``) and is scoped to the same tenant, so every machine of a user shares the
facts as it shares the sessions. What differs is underneath:

* the tables (``facts``, ``fact_history``, ``fact_vectors``) carry ``namespace`` and
  every query filters on it; ids come from one sequence, so they are unique across
  tenants and never reused;
* the three keyword indexes are the session store's: a generated, stemmed ``tsvector``
  (content weighted over the slot's key and value), a ``pg_trgm`` expression index for
  substrings, and a CJK bigram ``tsvector`` written with the row;
* a search scores each query term by its rarity among the tenant's live facts (IDF)
  times its ``ts_rank`` in the fact, the terms' ranks scaled to their best candidate
  (FTS5's BM25 on SQLite); the recall gate, fusion and vectors are the shared rules;
* vectors are unit float32 ``bytea`` compared over the newest ``VECTOR_SCAN`` of the
  tenant, in the client, or by the server when it has pgvector
  (:mod:`memstrata.store.postgres.pgvector`);
* writes of one tenant are serialised by a transaction-level advisory lock, as SQLite's
  ``BEGIN IMMEDIATE`` serialises writers of the file, so two processes setting one slot
  at once leave one live value.

Its schema has its own numbered migrations, recorded in ``_facts_migrations``.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, cast

import psycopg

from memstrata.config import Config
from memstrata.errors import SchemaError, StorageError
from memstrata.providers.facts.backend import FactTransaction
from memstrata.providers.facts.base import BaseFactStore
from memstrata.providers.facts.contract import FACT_COLUMNS, FactChangeRow, FactRow, VectorRow
from memstrata.providers.facts.schema import CATEGORIES, STATUSES
from memstrata.search.embedders import Embedder
from memstrata.store.postgres.bounds import bound_query
from memstrata.store.postgres.codec import pg_text
from memstrata.store.postgres.database import Conn, Database, Durability
from memstrata.store.postgres.held import held_arms
from memstrata.store.postgres.messages import cjk_vector
from memstrata.store.postgres.pgvector import FACTS, ServerFactRows, ServerVectors
from memstrata.store.postgres.schema import TS_CONFIG, refold_cjk_vectors
from memstrata.store.postgres.search import SUBSTRING, cjk_tsquery, substring_pattern
from memstrata.store.postgres.store import configured

if TYPE_CHECKING:
    from memstrata.query.compile import CompiledQuery, Index, Node, Term

__all__ = ["FACT_MIGRATIONS", "PostgresFactStore", "PostgresFactTransaction", "migrate_facts"]

Migration = Any  # Callable[[Conn], None]
FACT_MIGRATIONS: list[tuple[str, Migration]] = []
# The advisory lock that serialises facts migrations across processes ("memfacts").
_MIGRATION_LOCK_KEY: Final = 0x6D656D6661637473
# The text the substring index sees (as SQLite's trigram index: content, key, value).
_TEXT: Final = "(f.content || ' ' || coalesce(f.key, '') || ' ' || coalesce(f.value, ''))"
_INDEXED_TEXT: Final = "(content || ' ' || coalesce(key, '') || ' ' || coalesce(value, ''))"
# Matches a search ranks at most, newest first, so a query's cost does not grow with the
# tenant's facts; and rows a term's count reads at most (a rarer term decides anyway).
SEARCH_SCAN: Final = 2000
DF_SCAN: Final = 10_000
# Terms of one search that reach SQL (each costs a rank expression and a count): a
# natural query keeps its longest, an explicit one its first (store.postgres.bounds).
# A question has a handful; a pasted page of CJK text has hundreds of bigram terms.
SEARCH_TERMS: Final = 64
# ts_rank weights {D, C, B, A}: content is A, the slot's key and value B (half, as the
# SQLite column weights 1.0, 0.5, 0.5).
_RANK_WEIGHTS: Final = "'{0.1, 0.2, 0.5, 1.0}'::float4[]"
# A substring found counts as a fixed share of a term's evidence (the trigram index
# tells presence, not frequency).
_SUBSTRING_RANK: Final = 0.1
_QUOTED = re.compile(r'"((?:[^"]|"")*)"(\*?)')


def _migration(fn: Migration) -> Migration:
    FACT_MIGRATIONS.append((fn.__name__, fn))
    return fn


@_migration
def f001_facts(conn: Conn) -> None:
    categories = ", ".join(f"'{c}'" for c in CATEGORIES)
    statuses = ", ".join(f"'{s}'" for s in STATUSES)
    statements = [
        f"""
        CREATE TABLE facts (
            id bigserial PRIMARY KEY,
            namespace text NOT NULL,
            content text NOT NULL,
            category text NOT NULL CHECK (category IN ({categories})),
            subject text NOT NULL DEFAULT 'user',
            key text,
            value text,
            source text NOT NULL,
            target text,
            session_id text,
            confidence double precision NOT NULL DEFAULT 1.0,
            status text NOT NULL DEFAULT 'live' CHECK (status IN ({statuses})),
            superseded_by bigint REFERENCES facts(id),
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            last_recalled_at double precision,
            recall_count bigint NOT NULL DEFAULT 0,
            -- The word index, computed by the server so it can never drift: the content
            -- weighs A, the slot's key and value B.
            tsv tsvector GENERATED ALWAYS AS (
                setweight(to_tsvector('{TS_CONFIG}'::regconfig, content), 'A') ||
                setweight(to_tsvector('{TS_CONFIG}'::regconfig,
                    coalesce(key, '') || ' ' || coalesce(value, '')), 'B')) STORED,
            -- CJK bigrams, written with the row (NULL without CJK), as for messages.
            cjk tsvector,
            CHECK ((key IS NULL) = (value IS NULL))
        )
        """,
        # One live value per (tenant, subject, key): the database settles racing writers.
        "CREATE UNIQUE INDEX idx_facts_live_slot ON facts(namespace, subject, key) "
        "WHERE status = 'live' AND key IS NOT NULL",
        # The same sentence twice adds nothing; hashed, as a fact may exceed a btree entry.
        "CREATE UNIQUE INDEX idx_facts_live_content ON facts(namespace, subject, md5(content)) "
        "WHERE status = 'live' AND key IS NULL",
        "CREATE INDEX idx_facts_status ON facts(namespace, status, category, updated_at)",
        "CREATE INDEX idx_facts_mirror ON facts(namespace, source, target, status)",
        "CREATE INDEX idx_facts_superseded_by ON facts(superseded_by) "
        "WHERE superseded_by IS NOT NULL",
        "CREATE INDEX idx_facts_ns_tsv ON facts USING gin (namespace, tsv)",
        f"CREATE INDEX idx_facts_ns_trgm ON facts USING gin (namespace, {_INDEXED_TEXT} "
        "gin_trgm_ops)",
        "CREATE INDEX idx_facts_ns_cjk ON facts USING gin (namespace, cjk) WHERE cjk IS NOT NULL",
        """
        CREATE TABLE fact_history (
            id bigserial PRIMARY KEY,
            namespace text NOT NULL,
            fact_id bigint NOT NULL,
            action text NOT NULL,
            before text,
            after text,
            origin text NOT NULL,
            session_id text,
            at double precision NOT NULL
        )
        """,
        "CREATE INDEX idx_fact_history_fact ON fact_history(namespace, fact_id, id)",
        "CREATE INDEX idx_fact_history_ns ON fact_history(namespace, id)",
        # A vector goes with its fact (a purge); a retirement drops it in set_status.
        """
        CREATE TABLE fact_vectors (
            namespace text NOT NULL,
            model text NOT NULL,
            fact_id bigint NOT NULL REFERENCES facts(id) ON DELETE CASCADE,
            dims integer NOT NULL,
            vector bytea NOT NULL,
            created_at double precision NOT NULL,
            PRIMARY KEY (namespace, model, fact_id)
        )
        """,
        "CREATE INDEX idx_fact_vectors_fact ON fact_vectors(fact_id)",
    ]
    for statement in statements:
        conn.execute(statement)


@_migration
def f002_folded_cjk_vectors(conn: Conn) -> None:
    # Folded as the messages' CJK vectors are (the session schema's m009).
    refold_cjk_vectors(conn, "facts", ("content", "key", "value"))


def _first(row: Any) -> str:
    return str(row["name"] if isinstance(row, dict) else row[0])


def migrate_facts(conn: Conn) -> list[str]:
    """Apply the missing facts migrations (``conn`` outside a transaction); return them.

    The session schema (extensions, the text search configuration) must be in place:
    :class:`~memstrata.store.postgres.database.Database` applies it when it opens.
    """
    known = [name for name, _ in FACT_MIGRATIONS]
    done: list[str] = []
    for name, fn in FACT_MIGRATIONS:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK_KEY,))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS _facts_migrations (id serial PRIMARY KEY, "
                "name text NOT NULL UNIQUE, applied_at double precision NOT NULL)"
            )
            applied = [_first(r) for r in conn.execute("SELECT name FROM _facts_migrations")]
            if name in applied:
                continue
            fn(conn)
            conn.execute(
                "INSERT INTO _facts_migrations(name, applied_at) VALUES (%s, %s)",
                (name, time.time()),
            )
        done.append(name)
    with conn.transaction():
        unknown = [
            _first(r)
            for r in conn.execute("SELECT name FROM _facts_migrations ORDER BY id")
            if _first(r) not in known
        ]
    if unknown:
        raise SchemaError(
            f"The facts tables of this PostgreSQL database were upgraded by a newer memstrata "
            f"(migrations {unknown}). Upgrade memstrata: pip install -U 'memstrata[postgres]'."
        )
    return done


# -- search SQL ----------------------------------------------------------------------------


def _unquote(rendered: str) -> tuple[str, bool] | None:
    """``"text"*`` (an FTS5 rendering of :mod:`memstrata.query.compile`) -> (text, prefix)."""
    match = _QUOTED.fullmatch(rendered)
    if match is None:
        return None
    return match.group(1).replace('""', '"'), bool(match.group(2))


def _word_query(rendered: str) -> tuple[str, list[Any]] | None:
    word = _unquote(rendered)
    if word is None:
        return None
    text, prefix = word
    query = f"phraseto_tsquery('{TS_CONFIG}', %s)"
    if not prefix:
        return query, [text]
    # The phrase's last lexeme becomes a prefix; an empty phrase stays empty.
    return (
        f"(CASE WHEN numnode({query}) > 0 THEN ({query}::text || ':*')::tsquery "
        "ELSE ''::tsquery END)",
        [text, text],
    )


def _probe_arms(
    probes: Sequence[tuple[Index, str, Term]],
) -> list[tuple[int, tuple[str, list[Any], str, list[Any]]]]:
    """Each probe an index can see, by its number, with its :func:`_arm`."""
    arms = ((k, _arm(index, term)) for k, (index, _, term) in enumerate(probes))
    return [(k, arm) for k, arm in arms if arm is not None]


def _arm(index: Index, term: Term) -> tuple[str, list[Any], str, list[Any]] | None:
    """One index's predicate for ``term`` and its rank expression (None: it cannot see it)."""
    rendered = term.render(index)
    if rendered is None:
        return None
    if index == "word":
        query = _word_query(rendered)
        if query is None:
            return None
        sql, params = query
        return (
            f"f.tsv @@ {sql}",
            params,
            f"ts_rank({_RANK_WEIGHTS}, f.tsv, {sql})",
            params,
        )
    if index == "trigram":
        text = _unquote(rendered)
        if text is None:
            return None
        # The session search's substring test (a case-insensitive regular expression of
        # the text: see memstrata.store.postgres.search.SUBSTRING).
        pattern = substring_pattern(text[0])
        return (
            f"{_TEXT}{SUBSTRING}%s",
            [pattern],
            f"(CASE WHEN {_TEXT}{SUBSTRING}%s THEN {_SUBSTRING_RANK} ELSE 0 END)",
            [pattern],
        )
    cjk = cjk_tsquery(rendered)
    if cjk is None:
        return None
    # cjk is NULL without CJK: IS NOT NULL keeps the predicate two-valued under NOT.
    return (
        "(f.cjk IS NOT NULL AND f.cjk @@ %s::tsquery)",
        [cjk],
        "COALESCE(ts_rank(f.cjk, %s::tsquery), 0)",
        [cjk],
    )


def _term_sql(term: Term, indexes: Sequence[Index]) -> tuple[str, list[Any], str, list[Any]]:
    """A term's predicate (any of ``indexes`` finds it) and its rank (their sum)."""
    arms = [a for a in (_arm(i, term) for i in indexes) if a is not None]
    if not arms:
        return "FALSE", [], "0", []
    return (
        "(" + " OR ".join(a[0] for a in arms) + ")",
        [p for a in arms for p in a[1]],
        "(" + " + ".join(a[2] for a in arms) + ")",
        [p for a in arms for p in a[3]],
    )


def _tree_sql(node: Node, indexes: Sequence[Index]) -> tuple[str, list[Any]]:
    """The boolean predicate of a query tree (``not``: first child and none of the rest)."""
    if node.op == "term":
        assert node.term is not None
        pred, params, _, _ = _term_sql(node.term, indexes)
        return pred, params
    parts = [_tree_sql(child, indexes) for child in node.children]
    params = [p for _, ps in parts for p in ps]
    if node.op in ("or", "and"):
        joiner = " OR " if node.op == "or" else " AND "
        return "(" + joiner.join(s for s, _ in parts) + ")", params
    head, *rest = parts
    if not rest:
        return head
    return "(" + head[0] + " AND NOT (" + " OR ".join(s for s, _ in rest) + "))", params


def _filters(
    ns: str,
    *,
    category: str | None = None,
    subject: str | None = None,
    status: str | None = None,
    source: str | None = None,
) -> tuple[str, list[Any]]:
    clauses = ["f.namespace = %s"]
    params: list[Any] = [ns]
    pairs = (("category", category), ("subject", subject), ("status", status), ("source", source))
    for column, value in pairs:
        if value is not None:
            clauses.append(f"f.{column} = %s")
            params.append(value)
    return " AND ".join(clauses), params


_SELECT = ", ".join(f"f.{c}" for c in FACT_COLUMNS)


def _fact(row: Mapping[str, Any]) -> FactRow:
    return cast(FactRow, {c: row[c] for c in FACT_COLUMNS})


class PostgresFactTransaction(ServerFactRows, FactTransaction):
    """The primitives on one pooled connection, for the facts of tenant ``ns``
    (``server_vectors``: how the store compares vectors, see
    :mod:`memstrata.store.postgres.pgvector`)."""

    def __init__(self, conn: Conn, ns: str, server_vectors: ServerVectors | None = None) -> None:
        self.conn = conn
        self.ns = ns
        self.server_vectors = server_vectors

    def _all(self, sql: str, params: Sequence[Any]) -> list[FactRow]:
        return [_fact(r) for r in self.conn.execute(sql, params).fetchall()]

    def _one(self, sql: str, params: Sequence[Any]) -> FactRow | None:
        rows = self._all(sql, params)
        return rows[0] if rows else None

    def lock(self) -> None:
        """Serialise this tenant's facts writers until the transaction ends."""
        self.conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ("memstrata-facts:" + self.ns,)
        )

    def get(self, fact_id: int) -> FactRow | None:
        return self._one(
            f"SELECT {_SELECT} FROM facts f WHERE f.namespace = %s AND f.id = %s",
            (self.ns, fact_id),
        )

    def live_slot(self, subject: str, key: str) -> FactRow | None:
        return self._one(
            f"SELECT {_SELECT} FROM facts f WHERE f.namespace = %s AND f.subject = %s "
            "AND f.key = %s AND f.status = 'live'",
            (self.ns, subject, pg_text(key)),
        )

    def live_content(self, subject: str, content: str) -> FactRow | None:
        return self._one(
            f"SELECT {_SELECT} FROM facts f WHERE f.namespace = %s AND f.subject = %s "
            "AND md5(f.content) = md5(%s) AND f.content = %s AND f.key IS NULL "
            "AND f.status = 'live'",
            (self.ns, subject, pg_text(content), pg_text(content)),
        )

    def insert(self, values: Mapping[str, Any]) -> int:
        columns = [c for c in FACT_COLUMNS if c != "id"]
        row = [pg_text(v) if isinstance(v, str) else v for v in (values[c] for c in columns)]
        cjk = cjk_vector(values["content"], values["key"], values["value"])
        found = self.conn.execute(
            f"INSERT INTO facts(namespace, {', '.join(columns)}, cjk) "
            f"VALUES (%s, {', '.join('%s' for _ in columns)}, %s::tsvector) RETURNING id",
            [self.ns, *row, cjk],
        ).fetchone()
        assert found is not None
        return int(found["id"])

    def set_status(self, fact_id: int, status: str, successor: int | None, at: float) -> None:
        self.conn.execute(
            "UPDATE facts SET status = %s, superseded_by = %s, updated_at = %s "
            "WHERE namespace = %s AND id = %s",
            (status, successor, at, self.ns, fact_id),
        )
        if status != "live":
            # A vector lives as long as its fact is live (SQLite's fact_vectors_retired).
            self.conn.execute(
                "DELETE FROM fact_vectors WHERE namespace = %s AND fact_id = %s",
                (self.ns, fact_id),
            )

    def set_successor(self, fact_id: int, successor: int) -> None:
        self.conn.execute(
            "UPDATE facts SET superseded_by = %s WHERE namespace = %s AND id = %s",
            (successor, self.ns, fact_id),
        )

    def purge(self, fact_id: int) -> None:
        self.conn.execute(
            "UPDATE facts SET superseded_by = NULL WHERE namespace = %s AND superseded_by = %s",
            (self.ns, fact_id),
        )
        # The vectors go by ON DELETE CASCADE, the index entries with the row.
        self.conn.execute("DELETE FROM facts WHERE namespace = %s AND id = %s", (self.ns, fact_id))
        self.conn.execute(
            "DELETE FROM fact_history WHERE namespace = %s AND fact_id = %s", (self.ns, fact_id)
        )

    def add_history(
        self,
        fact_id: int,
        action: str,
        before: str | None,
        after: str | None,
        origin: str,
        session_id: str | None,
        at: float,
    ) -> None:
        self.load_history(
            [
                {
                    "fact_id": fact_id,
                    "action": action,
                    "before": before,
                    "after": after,
                    "origin": origin,
                    "session_id": session_id,
                    "at": at,
                }
            ]
        )

    def mark_recalled(self, ids: Sequence[int], at: float) -> None:
        self.conn.execute(
            "UPDATE facts SET last_recalled_at = %s, recall_count = recall_count + 1 "
            "WHERE namespace = %s AND id = ANY(%s)",
            (at, self.ns, list(ids)),
        )

    def history(self, fact_id: int | None, limit: int) -> list[FactChangeRow]:
        sql = (
            "SELECT id, fact_id, action, before, after, origin, session_id, at "
            "FROM fact_history WHERE namespace = %s"
        )
        params: list[Any] = [self.ns]
        if fact_id is not None:
            sql += " AND fact_id = %s"
            params.append(fact_id)
        rows = self.conn.execute(sql + " ORDER BY id DESC LIMIT %s", [*params, limit]).fetchall()
        return [cast(FactChangeRow, dict(r)) for r in rows]

    def rows(
        self,
        *,
        category: str | None,
        subject: str | None,
        status: str | None,
        source: str | None,
        limit: int,
        offset: int,
    ) -> list[FactRow]:
        where, params = _filters(
            self.ns, category=category, subject=subject, status=status, source=source
        )
        return self._all(
            f"SELECT {_SELECT} FROM facts f WHERE {where} "
            "ORDER BY f.updated_at DESC, f.id DESC LIMIT %s OFFSET %s",
            [*params, limit, offset],
        )

    def count(self, *, category: str | None, status: str | None) -> int:
        where, params = _filters(self.ns, category=category, status=status)
        row = self.conn.execute(f"SELECT count(*) AS n FROM facts f WHERE {where}", params)
        found = row.fetchone()
        return int(found["n"]) if found else 0

    def slots(self, subject: str, categories: Sequence[str]) -> list[FactRow]:
        return self._all(
            f"SELECT {_SELECT} FROM facts f WHERE f.namespace = %s AND f.status = 'live' "
            "AND f.key IS NOT NULL AND f.subject = %s AND f.category = ANY(%s) ORDER BY f.key",
            (self.ns, subject, list(categories)),
        )

    def containing(
        self,
        text: str,
        *,
        source: str | None = None,
        target: str | None = None,
        fold_case: bool = False,
        limit: int | None = None,
    ) -> list[FactRow]:
        column = "lower(f.content)" if fold_case else "f.content"
        clauses = ["f.namespace = %s", "f.status = 'live'", f"strpos({column}, %s) > 0"]
        params: list[Any] = [self.ns, pg_text(text)]
        if source is not None:
            clauses.append("f.source = %s")
            params.append(source)
        if target is not None:
            clauses.append("f.target = %s")
            params.append(target)
        tail = ""
        if limit is not None:
            tail = " LIMIT %s"
            params.append(limit)
        return self._all(
            f"SELECT {_SELECT} FROM facts f WHERE {' AND '.join(clauses)} "
            f"ORDER BY f.updated_at DESC, f.id DESC{tail}",
            params,
        )

    def live_rows(
        self, ids: Sequence[int], *, category: str | None, subject: str | None
    ) -> dict[int, FactRow]:
        if not ids:
            return {}
        where, params = _filters(self.ns, category=category, subject=subject, status="live")
        rows = self._all(
            f"SELECT {_SELECT} FROM facts f WHERE {where} AND f.id = ANY(%s)",
            [*params, list(ids)],
        )
        return {int(r["id"]): r for r in rows}

    def live_subjects(self) -> set[str]:
        rows = self.conn.execute(
            "SELECT DISTINCT subject FROM facts WHERE namespace = %s AND status = 'live'",
            (self.ns,),
        ).fetchall()
        return {str(r["subject"]) for r in rows}

    def keyword_scores(
        self,
        compiled: CompiledQuery,
        *,
        indexes: Sequence[Index],
        category: str | None,
        subject: str | None,
        limit: int,
    ) -> tuple[dict[int, float], dict[int, FactRow]]:
        tree = bound_query(compiled, SEARCH_TERMS).tree
        if tree is None or not indexes:
            return {}, {}
        terms = list(dict.fromkeys(tree.positive_terms()))
        rendered = [_term_sql(t, indexes) for t in terms]
        where, params = _filters(self.ns, category=category, subject=subject, status="live")
        predicate, predicate_params = _tree_sql(tree, indexes)
        ranks = "".join(f", {r[2]} AS r{i}" for i, r in enumerate(rendered))
        # The newest matches (bounded), each with every term's rank, ...
        found = self.conn.execute(
            f"SELECT {_SELECT}{ranks} FROM facts f WHERE {where} AND {predicate} "
            "ORDER BY f.id DESC LIMIT %s",
            [
                *(p for r in rendered for p in r[3]),
                *params,
                *predicate_params,
                max(limit, SEARCH_SCAN),
            ],
        ).fetchall()
        if not found:
            return {}, {}
        # ... and each term's rarity among the tenant's live facts (counts bounded).
        counts = [
            f"(SELECT count(*) FROM (SELECT 1 FROM facts f WHERE f.namespace = %s "
            f"AND f.status = 'live' AND {r[0]} LIMIT {DF_SCAN}) x) AS d{i}"
            for i, r in enumerate(rendered)
        ]
        stats = self.conn.execute(
            "SELECT (SELECT count(*) FROM facts WHERE namespace = %s AND status = 'live') AS n"
            + "".join(", " + c for c in counts),
            [self.ns, *(p for r in rendered for p in [self.ns, *r[1]])],
        ).fetchone()
        assert stats is not None
        total = int(stats["n"])
        weights = []
        for i in range(len(terms)):
            df = int(stats[f"d{i}"])
            best = max(float(row[f"r{i}"] or 0.0) for row in found)
            idf = math.log(1 + (total - df + 0.5) / (df + 0.5))
            weights.append(idf / best if best > 0 else 0.0)
        scores: dict[int, float] = {}
        rows: dict[int, FactRow] = {}
        for row in found:
            fact_id = int(row["id"])
            scores[fact_id] = sum(w * float(row[f"r{i}"] or 0.0) for i, w in enumerate(weights))
            rows[fact_id] = _fact(row)
        # The best ``limit`` by score, as SQLite keeps the best of each index.
        kept = sorted(scores, key=lambda i: (-scores[i], -i))[: max(limit, 0) * len(indexes)]
        return {i: scores[i] for i in kept}, {i: rows[i] for i in kept}

    def term_ids(self, index: Index, expression: str, term: Term) -> set[int]:
        arm = _arm(index, term)
        if arm is None:
            return set()
        rows = self.conn.execute(
            f"SELECT f.id FROM facts f WHERE f.namespace = %s AND {arm[0]}", [self.ns, *arm[1]]
        ).fetchall()
        return {int(r["id"]) for r in rows}

    def terms_ids(self, probes: Sequence[tuple[Index, str, Term]]) -> list[set[int]]:
        # Every probe in one statement: the tenant's facts each matches (k: the probe's
        # number). A probe no index can see has none.
        live = _probe_arms(probes)
        found: list[set[int]] = [set() for _ in probes]
        if not live:
            return found
        union = " UNION ALL ".join(
            f"(SELECT {k} AS k, f.id FROM facts f WHERE f.namespace = %s AND {arm[0]})"
            for k, arm in live
        )
        params = [p for _, arm in live for p in [self.ns, *arm[1]]]
        for row in self.conn.execute(union, params).fetchall():
            found[int(row["k"])].add(int(row["id"]))
        return found

    def live_held(self, probes: Sequence[tuple[Index, str, Term]]) -> list[bool]:
        # Whether a live fact holds each probe (store.postgres.held: the probes of one
        # index in one subquery over their values, not one subquery each).
        live = _probe_arms(probes)
        found = held_arms(
            self.conn,
            "FROM facts f WHERE f.namespace = %s AND f.status = 'live'",
            [self.ns],
            [(arm[0], arm[1]) for _, arm in live],
        )
        held = {live[i][0] for i in found}
        return [k in held for k in range(len(probes))]

    def retired_ids(self) -> set[int]:
        rows = self.conn.execute(
            "SELECT id FROM facts WHERE namespace = %s AND status <> 'live'", (self.ns,)
        ).fetchall()
        return {int(r["id"]) for r in rows}

    def live_count(self) -> int:
        return self.count(category=None, status="live")

    def has_vectors(self, model: str) -> bool:
        row = self.conn.execute(
            "SELECT 1 FROM fact_vectors WHERE namespace = %s AND model = %s LIMIT 1",
            (self.ns, model),
        ).fetchone()
        return row is not None

    def vectors(self, model: str, scan: int) -> list[tuple[int, bytes]]:
        rows = self.conn.execute(
            "SELECT fact_id, vector FROM fact_vectors WHERE namespace = %s AND model = %s "
            "ORDER BY fact_id DESC LIMIT %s",
            (self.ns, model, max(0, scan)),
        ).fetchall()
        return [(int(r["fact_id"]), bytes(r["vector"])) for r in rows]

    _PENDING = (
        "FROM facts f WHERE f.namespace = %s AND f.status = 'live' AND NOT EXISTS "
        "(SELECT 1 FROM fact_vectors v WHERE v.namespace = f.namespace AND v.model = %s "
        "AND v.fact_id = f.id)"
    )

    def pending_count(self, model: str) -> int:
        row = self.conn.execute(f"SELECT count(*) AS n {self._PENDING}", (self.ns, model))
        found = row.fetchone()
        return int(found["n"]) if found else 0

    def pending_batch(self, model: str, after: int, size: int) -> list[tuple[int, str]]:
        rows = self.conn.execute(
            f"SELECT f.id, f.content {self._PENDING} AND f.id > %s ORDER BY f.id LIMIT %s",
            (self.ns, model, after, size),
        ).fetchall()
        return [(int(r["id"]), str(r["content"])) for r in rows]

    def put_vectors(
        self, model: str, dims: int, items: Sequence[tuple[int, bytes]], at: float
    ) -> int:
        if not items:
            return 0
        live = set(self.live_rows([fid for fid, _ in items], category=None, subject=None))
        rows: list[VectorRow] = [
            {"model": model, "fact_id": fid, "dims": dims, "vector": blob, "created_at": at}
            for fid, blob in items
            if fid in live
        ]
        self.load_vectors(rows)
        return len(rows)

    def dump_facts(self) -> list[FactRow]:
        return self._all(
            f"SELECT {_SELECT} FROM facts f WHERE f.namespace = %s ORDER BY f.id", [self.ns]
        )

    def dump_history(self) -> list[FactChangeRow]:
        return self.history(None, 2**62)[::-1]

    def dump_vectors(self) -> list[VectorRow]:
        rows = self.conn.execute(
            "SELECT model, fact_id, dims, vector, created_at FROM fact_vectors "
            "WHERE namespace = %s ORDER BY model, fact_id",
            (self.ns,),
        ).fetchall()
        return [cast(VectorRow, {**r, "vector": bytes(r["vector"])}) for r in rows]

    def load_history(self, rows: Iterable[Mapping[str, Any]]) -> None:
        params = [
            (
                self.ns,
                r["fact_id"],
                r["action"],
                pg_text(r["before"]),
                pg_text(r["after"]),
                pg_text(r["origin"]),
                pg_text(r["session_id"]),
                r["at"],
            )
            for r in rows
        ]
        if params:
            with self.conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO fact_history(namespace, fact_id, action, before, after, "
                    "origin, session_id, at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                    params,
                )

    def load_vectors(self, rows: Iterable[VectorRow]) -> None:
        params = [
            (self.ns, r["model"], r["fact_id"], r["dims"], r["vector"], r["created_at"])
            for r in rows
        ]
        if params:
            with self.conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO fact_vectors(namespace, model, fact_id, dims, vector, "
                    "created_at) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT "
                    "(namespace, model, fact_id) DO UPDATE SET dims = excluded.dims, "
                    "vector = excluded.vector, created_at = excluded.created_at",
                    params,
                )
            self.fill_embeddings([(p[1], p[2], p[3], p[4]) for p in params])


class PostgresFactStore(BaseFactStore):
    """The facts of one tenant (``namespace``) of a PostgreSQL database.

    ``dsn`` and ``namespace`` default to ``store.dsn`` and ``store.namespace``, the
    session store's; ``pool_size`` bounds the connections kept (facts are small and
    written seldom: 2 by default). Safe to share between threads; any number of
    processes and machines may use one tenant.
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        namespace: str | None = None,
        config: Config | None = None,
        pool_size: int = 2,
        durability: Durability | None = None,
        connect_timeout: float = 10.0,
        embedder: Embedder | None = None,
        pgvector: bool = True,
    ) -> None:
        cfg = config if config is not None else Config.load()
        chosen, self._namespace, mode = configured(
            cfg,
            dsn,
            namespace,
            durability,
            error=StorageError,
            subject=" for the facts store",
        )
        self._set_embedder(embedder)
        self._db = Database(
            chosen,
            size=pool_size,
            durability=mode,
            connect_timeout=connect_timeout,
        )
        try:
            with self._db.autocommit() as conn:
                migrate_facts(conn)
            # Vectors compared by the server when it has pgvector (pgvector=False: never).
            self._vectors = ServerVectors(
                self._db.direct, self._namespace, wanted=pgvector, table=FACTS
            )
        except psycopg.Error as exc:
            self._db.close()
            raise StorageError(
                f"Creating the facts tables at {self._db.dsn} failed ({exc}). Check that the "
                "role may create tables in this database, then retry."
            ) from exc
        except BaseException:
            self._db.close()
            raise

    @property
    def namespace(self) -> str:
        """The tenant whose facts this store reads and writes."""
        return self._namespace

    @property
    def location(self) -> str:
        """The DSN (password hidden) and the tenant."""
        return f"{self._db.dsn} (namespace {self._namespace!r})"

    def close(self) -> None:
        """Close every pooled connection (idempotent)."""
        self._db.close()

    def __enter__(self) -> PostgresFactStore:
        return self

    @contextmanager
    def _transaction(self, *, write: bool = False) -> Iterator[FactTransaction]:
        with self._db.connection() as conn:
            tx = PostgresFactTransaction(conn, self._namespace, self._vectors)
            if write:
                tx.lock()
            yield tx

    def _loaded(self) -> None:
        # A bulk copy changes the tables' shape at once; the planner must not wait for an
        # autovacuum that may be off (some servers turn it off for bulk loads).
        with self._db.autocommit() as conn:
            conn.execute("ANALYZE facts, fact_history, fact_vectors")

    def delete_namespace(self) -> dict[str, int]:
        """Delete every fact, history row and vector of this tenant; rows deleted per table."""
        deleted: dict[str, int] = {}
        with self._db.connection() as conn:
            PostgresFactTransaction(conn, self._namespace).lock()
            for table in ("fact_vectors", "fact_history"):
                cur = conn.execute(f"DELETE FROM {table} WHERE namespace = %s", (self._namespace,))
                deleted[table] = int(cur.rowcount)
            conn.execute(
                "UPDATE facts SET superseded_by = NULL WHERE namespace = %s "
                "AND superseded_by IS NOT NULL",
                (self._namespace,),
            )
            cur = conn.execute("DELETE FROM facts WHERE namespace = %s", (self._namespace,))
            deleted["facts"] = int(cur.rowcount)
        return deleted


if TYPE_CHECKING:
    from memstrata.providers.facts.contract import FactStoreContract

    # mypy proves here that the backend keeps the whole public contract.
    _keeps_contract: type[FactStoreContract] = PostgresFactStore
