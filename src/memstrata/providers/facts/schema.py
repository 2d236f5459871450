"""Schema of the SQLite facts database (``$MEMSTRATA_HOME/facts.db``): its migrations.

The facts store keeps its own file rather than tables in ``state.db``: it is an optional
provider, it can be deleted or backed up on its own, and its schema evolves on its own
numbered migrations (recorded in its own ``_migrations`` table, same shape as the session
store's: one transaction per migration with its bookkeeping row).

Three full-text indexes over a fact's text, the same three the session store keeps, so
:func:`memstrata.query.compile.compile_query` output works unchanged:

* ``facts_fts`` - unicode61 words with Porter stemming ("prefers" finds "prefer");
* ``facts_fts_trigram`` - substrings, for identifiers and paths in a fact;
* ``facts_fts_cjk`` - overlapping CJK bigrams (``cjk.py``), so a two-character Chinese
  word finds the fact.

Every row is indexed whatever its status (live, superseded, deleted): a status change
is an update of other columns and never touches the indexes; searches join ``facts``
and keep live rows. Only a purge deletes the row, and its triggers take the text out.

``fact_vectors`` (migration 2) holds optional embeddings for hybrid recall
(:mod:`memstrata.providers.facts.vectors`); unlike the text indexes, it keeps live facts only.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from memstrata.providers.facts.contract import Fact, FactChange
from memstrata.query.compile import Index
from memstrata.store.sqlite.migrations import (
    CJK_FUNCTION,
    Migration,
    refold_cjk_index,
    run_migrations,
)

# The row types live in the contract; imported here too, where they were first defined.
__all__ = ["CATEGORIES", "FTS_TABLES", "INDEXED", "STATUSES", "Fact", "FactChange", "migrate"]

FACTS_MIGRATIONS: list[tuple[str, Migration]] = []

CATEGORIES: Final = ("identity", "preference", "episodic", "note")
STATUSES: Final = ("live", "superseded", "deleted")
# Columns the word and trigram indexes hold; the CJK function takes exactly three.
INDEXED: Final = ("content", "key", "value")
FTS_TABLES: Final[dict[Index, str]] = {
    "word": "facts_fts",
    "trigram": "facts_fts_trigram",
    "cjk": "facts_fts_cjk",
}


def _migration(fn: Migration) -> Migration:
    FACTS_MIGRATIONS.append((fn.__name__, fn))
    return fn


def _run(conn: sqlite3.Connection, statements: list[str]) -> None:
    # executescript() would COMMIT the migration's transaction; run them one by one.
    for statement in statements:
        conn.execute(statement)


@_migration
def m001_facts(conn: sqlite3.Connection) -> None:
    categories = ", ".join(f"'{c}'" for c in CATEGORIES)
    statuses = ", ".join(f"'{s}'" for s in STATUSES)
    _run(
        conn,
        [
            # id aliases the rowid: the external-content indexes are keyed by rowid, and
            # only an aliased rowid is stable across VACUUM. AUTOINCREMENT keeps an id
            # from being reused after a purge, so an id in old history never names a
            # different fact.
            f"""
            CREATE TABLE facts (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                content TEXT NOT NULL,
                category TEXT NOT NULL CHECK (category IN ({categories})),
                subject TEXT NOT NULL DEFAULT 'user',
                key TEXT,
                value TEXT,
                source TEXT NOT NULL,
                target TEXT,
                session_id TEXT,
                confidence REAL NOT NULL DEFAULT 1.0,
                status TEXT NOT NULL DEFAULT 'live' CHECK (status IN ({statuses})),
                superseded_by INTEGER REFERENCES facts(id),
                created_at REAL NOT NULL,
                updated_at REAL NOT NULL,
                last_recalled_at REAL,
                recall_count INTEGER NOT NULL DEFAULT 0,
                CHECK ((key IS NULL) = (value IS NULL))
            )
            """,
            # One live value per (subject, key): the database settles two writers racing
            # to set the same slot, whatever the application code does.
            "CREATE UNIQUE INDEX idx_facts_live_slot ON facts(subject, key) "
            "WHERE status = 'live' AND key IS NOT NULL",
            # The same sentence stored twice adds nothing but recall noise.
            "CREATE UNIQUE INDEX idx_facts_live_content ON facts(subject, content) "
            "WHERE status = 'live' AND key IS NULL",
            "CREATE INDEX idx_facts_status ON facts(status, category, updated_at)",
            "CREATE INDEX idx_facts_mirror ON facts(source, target, status)",
            """
            CREATE TABLE fact_history (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                fact_id INTEGER NOT NULL,
                action TEXT NOT NULL,
                before TEXT,
                after TEXT,
                origin TEXT NOT NULL,
                session_id TEXT,
                at REAL NOT NULL
            )
            """,
            "CREATE INDEX idx_fact_history_fact ON fact_history(fact_id, id)",
            "CREATE VIRTUAL TABLE facts_fts USING fts5(content, key, value, "
            "content='facts', content_rowid='id', "
            "tokenize='porter unicode61 remove_diacritics 2')",
            "CREATE VIRTUAL TABLE facts_fts_trigram USING fts5(content, key, value, "
            "content='facts', content_rowid='id', tokenize='trigram')",
            # Contentless: its text is derived by a deterministic function, so a delete
            # can hand back exactly the tokens that were inserted.
            "CREATE VIRTUAL TABLE facts_fts_cjk USING fts5(terms, content='', "
            "tokenize='unicode61 remove_diacritics 0')",
            *_trigger_sql(),
        ],
    )


def _trigger_sql() -> list[str]:
    cols = ", ".join(INDEXED)
    new = ", ".join(f"new.{c}" for c in INDEXED)
    old = ", ".join(f"old.{c}" for c in INDEXED)
    out: list[str] = []
    for table in ("facts_fts", "facts_fts_trigram"):
        ins = f"INSERT INTO {table}(rowid, {cols}) VALUES (new.id, {new});"
        dele = f"INSERT INTO {table}({table}, rowid, {cols}) VALUES ('delete', old.id, {old});"
        out += [
            f"CREATE TRIGGER {table}_ai AFTER INSERT ON facts BEGIN {ins} END",
            f"CREATE TRIGGER {table}_ad AFTER DELETE ON facts BEGIN {dele} END",
            f"CREATE TRIGGER {table}_au AFTER UPDATE OF {cols} ON facts BEGIN {dele} {ins} END",
        ]
    cjk_new, cjk_old = f"{CJK_FUNCTION}({new})", f"{CJK_FUNCTION}({old})"
    ins = (
        f"INSERT INTO facts_fts_cjk(rowid, terms) SELECT new.id, {cjk_new} "
        f"WHERE {cjk_new} IS NOT NULL;"
    )
    dele = (
        f"INSERT INTO facts_fts_cjk(facts_fts_cjk, rowid, terms) "
        f"SELECT 'delete', old.id, {cjk_old} WHERE {cjk_old} IS NOT NULL;"
    )
    out += [
        f"CREATE TRIGGER facts_fts_cjk_ai AFTER INSERT ON facts BEGIN {ins} END",
        f"CREATE TRIGGER facts_fts_cjk_ad AFTER DELETE ON facts BEGIN {dele} END",
        f"CREATE TRIGGER facts_fts_cjk_au AFTER UPDATE OF {cols} ON facts BEGIN {dele} {ins} END",
    ]
    return out


@_migration
def m002_fact_vectors(conn: sqlite3.Connection) -> None:
    _run(
        conn,
        [
            # One vector per (embedder, fact): the embedder's name keys its vectors, so
            # two models' vectors never mix. float32 blobs, no extension needed.
            """
            CREATE TABLE fact_vectors (
                model TEXT NOT NULL,
                fact_id INTEGER NOT NULL,
                dims INTEGER NOT NULL,
                vector BLOB NOT NULL,
                created_at REAL NOT NULL,
                PRIMARY KEY (model, fact_id)
            )
            """,
            "CREATE INDEX idx_fact_vectors_fact ON fact_vectors(fact_id)",
            # A vector lives as long as its fact is live and its text unchanged: a purge,
            # a retirement (forget, supersede) or an edit of the text drops it, so no
            # stale vector can bring back a fact the user took away.
            "CREATE TRIGGER fact_vectors_ad AFTER DELETE ON facts BEGIN "
            "DELETE FROM fact_vectors WHERE fact_id = old.id; END",
            "CREATE TRIGGER fact_vectors_retired AFTER UPDATE OF status ON facts "
            "WHEN new.status <> 'live' BEGIN "
            "DELETE FROM fact_vectors WHERE fact_id = old.id; END",
            "CREATE TRIGGER fact_vectors_au AFTER UPDATE OF content, key, value ON facts BEGIN "
            "DELETE FROM fact_vectors WHERE fact_id = old.id; END",
        ],
    )


@_migration
def m003_folded_cjk_index(conn: sqlite3.Connection) -> None:
    # Folded as the session store's CJK index (its m005, memstrata.query.fold).
    cjk = FTS_TABLES["cjk"]
    triggers = {sql.split()[2]: sql for sql in _trigger_sql() if sql.split()[2].startswith(cjk)}
    refold_cjk_index(conn, "facts", cjk, INDEXED, triggers)


def migrate(conn: sqlite3.Connection) -> list[str]:
    """Apply the missing facts migrations (``conn`` in autocommit); return those applied.

    Same runner as the session store (:func:`memstrata.store.sqlite.migrations.run_migrations`): one
    ``BEGIN IMMEDIATE`` transaction per migration, so concurrent openers apply each once.
    """
    return run_migrations(conn, FACTS_MIGRATIONS, what="facts database")
