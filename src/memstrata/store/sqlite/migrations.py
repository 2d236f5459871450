"""Numbered schema migrations for the SQLite session store.

Each migration is a function registered in order; :func:`migrate` applies the missing
ones when a store opens, each together with its row in ``_migrations`` in one
transaction. A shipped migration is never edited: a change is a new migration.

Table and column names follow Hermes' ``state.db`` where Hermes has them, so code and
queries written against Hermes port with little change.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence

from memstrata.errors import SchemaError
from memstrata.query.cjk import cjk_terms, unfolded_cjk_terms
from memstrata.query.fold import folds

Migration = Callable[[sqlite3.Connection], None]
MIGRATIONS: list[tuple[str, Migration]] = []

# The indexed text of a message is its content, its tool name and its tool-call
# arguments: agent systems hide much of their signal in tool arguments.
INDEXED_COLUMNS = ("content", "tool_name", "tool_calls")
# The SQL function the CJK index triggers call (memstrata.query.cjk.cjk_terms). Its name
# stands for the tokens it returns: when they change, the name changes too, with a
# migration that re-indexes the rows and re-creates the triggers. A process of an earlier
# version still running then fails its writes ("no such function") instead of handing the
# contentless index other tokens than it was given, which would corrupt it.
CJK_FUNCTION = "memstrata_cjk_folded"
# What the triggers called before m005: the tokens of the text as written.
UNFOLDED_CJK_FUNCTION = "memstrata_cjk_terms"


def migration(fn: Migration) -> Migration:
    """Register ``fn`` as the next migration, named after the function."""
    MIGRATIONS.append((fn.__name__, fn))
    return fn


def register_functions(conn: sqlite3.Connection) -> None:
    """Register the SQL functions the index triggers call; needed on every connection."""
    conn.create_function(CJK_FUNCTION, 3, cjk_terms, deterministic=True)
    # For the triggers of a store m005 has not migrated yet (it replaces them).
    conn.create_function(UNFOLDED_CJK_FUNCTION, 3, unfolded_cjk_terms, deterministic=True)


@migration
def m001_initial(conn: sqlite3.Connection) -> None:
    _run_script(
        conn,
        """
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            source TEXT NOT NULL DEFAULT 'cli',
            user_id TEXT,
            model TEXT,
            model_config TEXT,
            system_prompt TEXT,
            -- Children are orphaned, never deleted, when a parent goes; lineage_kind records
            -- why a child exists ('compression', 'branch', 'delegate', 'reset') when it is
            -- created, so lineage is read, not guessed from timestamps.
            parent_session_id TEXT REFERENCES sessions(id) ON DELETE SET NULL,
            lineage_kind TEXT,
            started_at REAL NOT NULL,
            ended_at REAL,
            end_reason TEXT,
            message_count INTEGER NOT NULL DEFAULT 0,
            tool_call_count INTEGER NOT NULL DEFAULT 0,
            api_call_count INTEGER NOT NULL DEFAULT 0,
            input_tokens INTEGER NOT NULL DEFAULT 0,
            output_tokens INTEGER NOT NULL DEFAULT 0,
            cache_read_tokens INTEGER NOT NULL DEFAULT 0,
            cache_write_tokens INTEGER NOT NULL DEFAULT 0,
            reasoning_tokens INTEGER NOT NULL DEFAULT 0,
            estimated_cost_usd REAL,
            title TEXT,
            archived INTEGER NOT NULL DEFAULT 0,
            -- Timestamp of the newest message, kept by the store on every append, so that a
            -- listing ordered by activity reads sessions only, never the messages table.
            last_active REAL
        );
        CREATE UNIQUE INDEX idx_sessions_title_unique ON sessions(title)
            WHERE title IS NOT NULL;
        CREATE INDEX idx_sessions_parent ON sessions(parent_session_id);
        CREATE INDEX idx_sessions_started ON sessions(started_at DESC);
        CREATE INDEX idx_sessions_source ON sessions(source, started_at DESC);

        -- id is an INTEGER PRIMARY KEY, i.e. the rowid itself: the external-content FTS
        -- tables below are keyed by rowid, and only an aliased rowid is stable across VACUUM.
        CREATE TABLE messages (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            role TEXT NOT NULL,
            content TEXT,
            tool_call_id TEXT,
            tool_calls TEXT,
            tool_name TEXT,
            timestamp REAL NOT NULL,
            token_count INTEGER,
            finish_reason TEXT,
            reasoning TEXT,
            api_content TEXT,
            active INTEGER NOT NULL DEFAULT 1,
            compacted INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX idx_messages_session ON messages(session_id, id);
        CREATE INDEX idx_messages_session_ts ON messages(session_id, timestamp);
        CREATE INDEX idx_messages_timestamp ON messages(timestamp);

        CREATE TABLE state_meta (key TEXT PRIMARY KEY, value TEXT);

        """,
    )
    create_fts_tables(conn)
    create_index_triggers(conn)


def _run_script(conn: sqlite3.Connection, script: str) -> None:
    # executescript() would COMMIT the migration's transaction first; run one by one.
    # Statements end with ";" at the end of a line; "--" comment lines are dropped.
    lines = [ln for ln in script.splitlines() if not ln.strip().startswith("--")]
    for statement in "\n".join(lines).split(";\n"):
        if statement.strip():
            conn.execute(statement)


# The word index's tokenizer (prefix walks tokenize a prefix the same way).
WORD_TOKENIZER = "porter unicode61 remove_diacritics 2"
# The full-text objects, kept apart from m001's tables so that `memstrata sessions reindex`
# can recreate whichever of them went missing with the same definitions.
FTS_TABLES: dict[str, str] = {
    # Word index (unicode61 + Porter stemming, so "painted" finds "painting": measured on
    # LoCoMo session recall, benchmarks/results/recall.md). External content: the text
    # lives once, in messages.
    "messages_fts": (
        "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5("
        "content, tool_name, tool_calls, content='messages', content_rowid='id', "
        f"tokenize='{WORD_TOKENIZER}')"
    ),
    # Substring index (trigram): identifiers, paths, partial words, CJK of 3+ chars.
    # detail='none' stores no positions: 248 instead of 869 bytes per message. Without
    # positions FTS5 refuses a trigram phrase, so a substring is found as the AND of its
    # trigrams and confirmed with instr() on the row (memstrata.store.sqlite.substring).
    "messages_fts_trigram": (
        "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_trigram USING fts5("
        "content, tool_name, tool_calls, content='messages', content_rowid='id', "
        "tokenize='trigram', detail='none')"
    ),
    # CJK bigram index, contentless: its text is derived by CJK_FUNCTION, a
    # deterministic function, so a delete can hand back exactly the inserted tokens.
    # Rows without CJK (nor full-width letters or digits) are never inserted (nor
    # deleted), keeping its statistics exact.
    "messages_fts_cjk": (
        "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_cjk USING fts5("
        "terms, content='', tokenize='unicode61 remove_diacritics 0')"
    ),
}
EXTERNAL_CONTENT_TABLES = ("messages_fts", "messages_fts_trigram")
CJK_TABLE = "messages_fts_cjk"


def create_fts_tables(conn: sqlite3.Connection) -> None:
    """Create the three full-text tables that do not exist yet."""
    for sql in FTS_TABLES.values():
        conn.execute(sql)


def index_trigger_sql() -> dict[str, str]:
    """Name -> ``CREATE TRIGGER IF NOT EXISTS`` statement of every index trigger."""
    cols = ", ".join(INDEXED_COLUMNS)
    new = ", ".join(f"new.{c}" for c in INDEXED_COLUMNS)
    old = ", ".join(f"old.{c}" for c in INDEXED_COLUMNS)
    bodies: dict[str, tuple[str, str]] = {}
    for table in EXTERNAL_CONTENT_TABLES:
        ins = f"INSERT INTO {table}(rowid, {cols}) VALUES (new.id, {new});"
        dele = f"INSERT INTO {table}({table}, rowid, {cols}) VALUES ('delete', old.id, {old});"
        bodies[f"{table}_ai"] = ("AFTER INSERT ON messages", ins)
        bodies[f"{table}_ad"] = ("AFTER DELETE ON messages", dele)
        # Only an edit of an indexed column touches the index: archiving (active=0) is
        # an update of other columns and keeps the row searchable.
        bodies[f"{table}_au"] = (f"AFTER UPDATE OF {cols} ON messages", f"{dele} {ins}")
    cjk_new = f"{CJK_FUNCTION}({new})"
    cjk_old = f"{CJK_FUNCTION}({old})"
    cjk_ins = (
        f"INSERT INTO {CJK_TABLE}(rowid, terms) SELECT new.id, {cjk_new} "
        f"WHERE {cjk_new} IS NOT NULL;"
    )
    cjk_del = (
        f"INSERT INTO {CJK_TABLE}({CJK_TABLE}, rowid, terms) "
        f"SELECT 'delete', old.id, {cjk_old} WHERE {cjk_old} IS NOT NULL;"
    )
    bodies[f"{CJK_TABLE}_ai"] = ("AFTER INSERT ON messages", cjk_ins)
    bodies[f"{CJK_TABLE}_ad"] = ("AFTER DELETE ON messages", cjk_del)
    bodies[f"{CJK_TABLE}_au"] = (f"AFTER UPDATE OF {cols} ON messages", f"{cjk_del} {cjk_ins}")
    return {
        name: f"CREATE TRIGGER IF NOT EXISTS {name} {when} BEGIN {body} END"
        for name, (when, body) in bodies.items()
    }


def create_index_triggers(conn: sqlite3.Connection) -> None:
    """Create the index triggers that do not exist yet."""
    for sql in index_trigger_sql().values():
        conn.execute(sql)


def applied(conn: sqlite3.Connection) -> list[str]:
    """Names of the migrations already applied, in order."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS _migrations ("
        "id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, applied_at REAL NOT NULL)"
    )
    return [row[0] for row in conn.execute("SELECT name FROM _migrations ORDER BY id")]


def migrate(conn: sqlite3.Connection) -> list[str]:
    """Apply every missing session-store migration; return the names applied now.

    ``conn`` must be in autocommit mode (``isolation_level=None``); see :func:`run_migrations`.
    """
    return run_migrations(conn, MIGRATIONS)


def run_migrations(
    conn: sqlite3.Connection,
    migrations: Sequence[tuple[str, Migration]],
    *,
    what: str = "database",
) -> list[str]:
    """Apply the missing ``migrations`` in order, recorded in ``_migrations``; return those applied.

    ``conn`` must be in autocommit mode (``isolation_level=None``). Each migration runs in
    ``BEGIN IMMEDIATE`` so two processes opening a new store at once cannot both apply it:
    the second re-reads the table under the write lock and skips what is done. ``what``
    names the database in the error raised when it holds migrations this version does
    not know (it was upgraded by a newer memstrata).
    """
    known = [name for name, _ in migrations]
    done_now: list[str] = []
    for name, fn in migrations:
        if name in applied(conn):
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            if name in applied(conn):
                conn.execute("ROLLBACK")
                continue
            fn(conn)
            conn.execute(
                "INSERT INTO _migrations(name, applied_at) VALUES (?, ?)", (name, time.time())
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        done_now.append(name)
    unknown = [name for name in applied(conn) if name not in known]
    if unknown:
        raise SchemaError(
            f"This {what} was upgraded by a newer memstrata (migrations {unknown}). "
            "Upgrade memstrata: pip install -U memstrata."
        )
    return done_now


@migration
def m002_summary_cache(conn: sqlite3.Connection) -> None:
    # Query-focused summaries of past conversations (session_search). Keyed by the
    # conversation's tip, how many messages it had and its last message id, and the
    # normalised query: a conversation that grows or changes gets a fresh summary, an
    # unchanged one is recalled for free.
    _run_script(
        conn,
        """
        CREATE TABLE summary_cache (
            tip_session_id TEXT NOT NULL,
            root_session_id TEXT NOT NULL,
            message_count INTEGER NOT NULL,
            last_message_id INTEGER NOT NULL,
            query TEXT NOT NULL,
            model TEXT NOT NULL DEFAULT '',
            summary TEXT NOT NULL,
            created_at REAL NOT NULL,
            PRIMARY KEY (tip_session_id, message_count, last_message_id, query)
        );
        CREATE INDEX idx_summary_cache_root ON summary_cache(root_session_id);
        """,
    )
    # A summary quotes its conversation: deleting or pruning a session must not leave
    # its content behind here. (One statement: _run_script splits at ";" line ends.)
    conn.execute(
        "CREATE TRIGGER summary_cache_session_ad AFTER DELETE ON sessions BEGIN "
        "DELETE FROM summary_cache WHERE tip_session_id = old.id OR root_session_id = old.id; "
        "END"
    )


@migration
def m003_message_vectors(conn: sqlite3.Connection) -> None:
    # Embeddings of messages for hybrid recall (memstrata.search.embedders), computed by an
    # explicit indexing step, never on the append path. One row per (embedding model,
    # message): switching models keeps the old vectors until they are pruned. ``vector``
    # is little-endian float32, ``dims`` floats long; an empty blob marks a message with
    # no text to embed, so the indexer does not pick it up again. A rowid table, not
    # WITHOUT ROWID: a 1.5 KB row fits a table leaf page but overflows an index page,
    # which made each vector read three times slower.
    _run_script(
        conn,
        """
        CREATE TABLE message_vectors (
            id INTEGER PRIMARY KEY,
            model TEXT NOT NULL,
            message_id INTEGER NOT NULL,
            dims INTEGER NOT NULL,
            vector BLOB NOT NULL,
            created_at REAL NOT NULL,
            UNIQUE (model, message_id)
        );
        CREATE INDEX idx_message_vectors_message ON message_vectors(message_id);
        """,
    )
    # A vector quotes its message's meaning: deleting a message (or its session, by
    # cascade) deletes its vectors, and editing its text drops them so the next indexing
    # step embeds the new text. (One statement each: _run_script splits at ";" line ends.)
    conn.execute(
        "CREATE TRIGGER message_vectors_ad AFTER DELETE ON messages BEGIN "
        "DELETE FROM message_vectors WHERE message_id = old.id; END"
    )
    conn.execute(
        "CREATE TRIGGER message_vectors_au AFTER UPDATE OF content ON messages BEGIN "
        "DELETE FROM message_vectors WHERE message_id = old.id; END"
    )


@migration
def m004_query_expansions(conn: sqlite3.Connection) -> None:
    # Sub-queries the summary model wrote for a question (memstrata.search.expansion), keyed by
    # the model and the normalised question: asking again costs no model call. They
    # quote nothing from the conversations, so deleting sessions leaves them.
    _run_script(
        conn,
        """
        CREATE TABLE query_expansions (
            model TEXT NOT NULL,
            query TEXT NOT NULL,
            subqueries TEXT NOT NULL,
            created_at REAL NOT NULL,
            PRIMARY KEY (model, query)
        ) WITHOUT ROWID;
        """,
    )


def refold_cjk_index(
    conn: sqlite3.Connection,
    table: str,
    index: str,
    columns: Sequence[str],
    triggers: Mapping[str, str],
) -> int:
    """Re-index in the contentless CJK ``index`` the rows of ``table`` whose ``columns``
    (the three the CJK function reads) folding changes: each is deleted with the tokens
    it was inserted with (unfolded) and inserted with the folded ones. Other rows' tokens
    are the same either way. The index's ``triggers`` (name -> CREATE statement, calling
    CJK_FUNCTION) replace those of the same names. Returns the rows re-indexed.

    A scan of every row in Python, once (0.7 s at 100,000 messages of the benchmark
    corpus, ``benchmarks/fold_migration.py``)."""
    for name, create in triggers.items():
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
        conn.execute(create)
    cols = ", ".join(columns)
    changed = 0
    last = 0
    while True:
        rows = conn.execute(
            f"SELECT id, {cols} FROM {table} WHERE id > ? ORDER BY id LIMIT 5000", (last,)
        ).fetchall()
        if not rows:
            return changed
        last = int(rows[-1][0])
        for rid, *values in rows:
            if not any(folds(v) for v in values if isinstance(v, str)):
                continue
            old, new = unfolded_cjk_terms(*values), cjk_terms(*values)
            if old == new:
                continue
            if old is not None:
                conn.execute(
                    f"INSERT INTO {index}({index}, rowid, terms) VALUES ('delete', ?, ?)",
                    (rid, old),
                )
            if new is not None:
                conn.execute(f"INSERT INTO {index}(rowid, terms) VALUES (?, ?)", (rid, new))
            changed += 1


@migration
def m005_folded_cjk_index(conn: sqlite3.Connection) -> None:
    # The CJK index holds folded text (memstrata.query.fold): traditional characters
    # simplified, full-width letters and digits in ASCII, as every query is now folded.
    cjk_triggers = {n: sql for n, sql in index_trigger_sql().items() if n.startswith(CJK_TABLE)}
    refold_cjk_index(conn, "messages", CJK_TABLE, INDEXED_COLUMNS, cjk_triggers)
