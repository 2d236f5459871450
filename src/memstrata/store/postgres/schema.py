"""Numbered schema migrations for the PostgreSQL session store and curated memory.

The same shape as :mod:`memstrata.store.sqlite.migrations` for SQLite: each migration runs in one
transaction together with its row in ``_migrations``. Several processes may open a new
database at once: each transaction first takes a transaction-level advisory lock, then
re-reads ``_migrations``, so a migration is applied exactly once and the others skip it.
A shipped migration is never edited: a change is a new migration.

Every table carries ``namespace`` (the tenant) and every primary key whose ids come from
callers includes it, so two tenants may use the same session id without meeting.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from memstrata.errors import SchemaError

Migration = Callable[[psycopg.Connection[Any]], None]
MIGRATIONS: list[tuple[str, Migration]] = []

# Key of the advisory lock that serialises migrations across processes and machines
# (an arbitrary constant: "memstrata" in ASCII, folded into a signed 64-bit integer).
MIGRATION_LOCK_KEY = 0x6D656D7374726174

# Classes of the advisory locks that let one process at a time do a schema's upkeep (the
# statistics passes; building an HNSW index), each lock taken for one schema: a store of
# another schema in the same database neither waits for nor skips its own. (One lock
# for the whole database had a 10M-message load's passes in one schema skip the final
# pass of a load in another, which then ended without statistics.)
MAINTENANCE_LOCK = 0x6D656D01
VECTOR_INDEX_LOCK = 0x6D656D02


@contextmanager
def schema_lock(conn: psycopg.Connection[Any], kind: int, wait: float = 0.0) -> Iterator[bool]:
    """Take the advisory lock ``kind`` of the connection's schema (session-level) on
    ``conn`` (autocommit, rows as dicts, as the store's maintenance connections give
    them); yield whether it was taken, and release it afterwards. ``wait``: seconds to
    wait for a holder to release it (0: not at all)."""
    row = conn.execute(
        "SELECT pg_try_advisory_lock(%s, hashtext(current_schema())) AS got", (kind,)
    ).fetchone()
    got = bool(row and row["got"])
    if not got and wait > 0:
        # lock_timeout bounds the wait (advisory locks obey it); reset for the connection.
        conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{round(wait * 1000)}ms",))
        try:
            conn.execute("SELECT pg_advisory_lock(%s, hashtext(current_schema()))", (kind,))
            got = True
        except psycopg.errors.LockNotAvailable:
            pass
        finally:
            conn.execute("RESET lock_timeout")
    try:
        yield got
    finally:
        if got:
            conn.execute("SELECT pg_advisory_unlock(%s, hashtext(current_schema()))", (kind,))


# Text search configuration of the word index: the Snowball English stemmer without a
# stopword list, the PostgreSQL twin of SQLite's "porter unicode61". Decided by
# measurement: LoCoMo session recall (locomo-dev, 760 questions, search_sessions) is
# R@5 0.924 stemmed against 0.886 with the "simple" dictionary ("painted" must find
# "painting"). Stopwords are dropped by the query side in natural-language mode and
# kept in the index, so that a quoted phrase such as "to be or not" can still match.
TS_CONFIG = "memstrata_english"

# The text the indexes see: content, tool name and tool-call arguments, as in SQLite.
INDEXED_TEXT = (
    "coalesce(content, '') || ' ' || coalesce(tool_name, '') || ' ' || coalesce(tool_calls, '')"
)


# The search indexes of m001 (one column each), kept as they shipped: m001 creates
# them and m002 replaces them.
_M001_INDEXES: dict[str, str] = {
    "idx_messages_tsv": "CREATE INDEX IF NOT EXISTS idx_messages_tsv ON messages USING gin (tsv)",
    "idx_messages_trgm": (
        "CREATE INDEX IF NOT EXISTS idx_messages_trgm ON messages "
        f"USING gin (({INDEXED_TEXT}) gin_trgm_ops)"
    ),
    "idx_messages_cjk": (
        "CREATE INDEX IF NOT EXISTS idx_messages_cjk ON messages USING gin (cjk) "
        "WHERE cjk IS NOT NULL"
    ),
}

# A GIN index takes new rows into a pending list and merges the list into the index in
# one batch: the bigger the batch, the cheaper each row (a message's ~130 trigrams share
# their index entries with the batch's other rows). Every search reads the whole list,
# though, and with autovacuum off nothing merged it before the next insert past the
# limit, so m005 capped it at 256 kB; with lists that small an append is about an eighth
# slower (one client: 2,213 against 2,522 msg/s, benchmarks/results/
# store_postgres_append.md, where the trigram index is half the server's work). Since
# m007 the lists take the server's default 4 MB again and the store merges them itself
# in its maintenance passes, at most once a minute while it writes and on close()
# (memstrata.store.postgres.maintenance): a search after a bulk write finds them empty,
# and a search during one the rows waiting since the last pass.
GIN_PENDING_LIST_KB = 4096
GIN_STORAGE = f" WITH (gin_pending_list_limit = {GIN_PENDING_LIST_KB})"

# The search indexes now, kept apart so that `reindex` can recreate a missing one with
# the same definition. Each leads with the tenant (a btree_gin column), so a term's
# matches are read for one tenant only, whatever the other tenants hold.
SEARCH_INDEXES: dict[str, str] = {
    "idx_messages_ns_tsv": (
        "CREATE INDEX IF NOT EXISTS idx_messages_ns_tsv ON messages USING gin (namespace, tsv)"
        f"{GIN_STORAGE}"
    ),
    # Substrings (identifiers, paths, CJK of 3+ characters): trigram GIN over the indexed
    # text, an expression index so that the text is stored once.
    "idx_messages_ns_trgm": (
        "CREATE INDEX IF NOT EXISTS idx_messages_ns_trgm ON messages "
        f"USING gin (namespace, ({INDEXED_TEXT}) gin_trgm_ops){GIN_STORAGE}"
    ),
    "idx_messages_ns_cjk": (
        "CREATE INDEX IF NOT EXISTS idx_messages_ns_cjk ON messages USING gin (namespace, cjk)"
        f"{GIN_STORAGE} WHERE cjk IS NOT NULL"
    ),
    # A tenant's rows newest first: the walk that finds the newest matches of common
    # terms (memstrata.store.postgres.search._walk_newest).
    "idx_messages_ns_id": (
        "CREATE INDEX IF NOT EXISTS idx_messages_ns_id ON messages (namespace, id)"
    ),
}


# The GIN search indexes: those with a pending list (the tenant's id order is a btree).
GIN_INDEXES = tuple(name for name, sql in SEARCH_INDEXES.items() if "USING gin" in sql)

# A tenant's messages as its sessions' counters say (one value: the tenant), and the
# table's, every tenant's, as the planner's statistics last counted them (reltuples is
# -1, or 0 before PostgreSQL 14, until the table's first ANALYZE or VACUUM: 0 here).
TENANT_MESSAGES = "(SELECT coalesce(sum(message_count), 0) FROM sessions WHERE namespace = %s)"
TABLE_MESSAGES = "greatest((SELECT reltuples FROM pg_class WHERE oid = 'messages'::regclass), 0)"


def migration(fn: Migration) -> Migration:
    """Register ``fn`` as the next migration, named after the function."""
    MIGRATIONS.append((fn.__name__, fn))
    return fn


def _ensure_table(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS _migrations ("
        "id serial PRIMARY KEY, name text NOT NULL UNIQUE, applied_at double precision NOT NULL)"
    )


def applied(conn: psycopg.Connection[Any]) -> list[str]:
    """Names of the migrations already applied, in order (inside the caller's transaction)."""
    rows = conn.execute("SELECT name FROM _migrations ORDER BY id").fetchall()
    return [_first(r) for r in rows]


def _first(row: Any) -> str:
    # Rows may be tuples or dicts depending on the connection's row factory.
    return str(row["name"] if isinstance(row, dict) else row[0])


def migrate(conn: psycopg.Connection[Any]) -> list[str]:
    """Apply every missing migration; return the names applied now.

    ``conn`` must not be inside a transaction: each migration gets its own.
    """
    _check_extensions_visible(conn)
    known = [name for name, _ in MIGRATIONS]
    done_now: list[str] = []
    for name, fn in MIGRATIONS:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
            _ensure_table(conn)
            if name in applied(conn):
                continue
            fn(conn)
            conn.execute(
                "INSERT INTO _migrations(name, applied_at) VALUES (%s, %s)", (name, time.time())
            )
        done_now.append(name)
    with conn.transaction():
        unknown = [name for name in applied(conn) if name not in known]
    if unknown:
        raise SchemaError(
            f"This PostgreSQL database was upgraded by a newer memstrata (migrations {unknown}). "
            "Upgrade memstrata: pip install -U 'memstrata[postgres]'."
        )
    return done_now


EXTENSIONS = ("pg_trgm", "btree_gin")


def _value(row: Any, key: str) -> Any:
    return row[key] if isinstance(row, dict) else row[0]


def _check_extensions_visible(conn: psycopg.Connection[Any]) -> None:
    """Refuse, naming the fix, when an extension the schema needs sits in a schema this
    connection's search_path leaves out: its operator classes (``gin_trgm_ops``) would
    then "not exist" halfway through a migration."""
    path_row = conn.execute("SELECT current_schemas(false) AS path").fetchone()
    path = list(_value(path_row, "path") or []) if path_row is not None else []
    hidden = []
    for name in EXTENSIONS:
        row = conn.execute(
            "SELECT n.nspname AS schema FROM pg_extension e "
            "JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = %s",
            (name,),
        ).fetchone()
        if row is not None and _value(row, "schema") not in path:
            hidden.append((name, str(_value(row, "schema"))))
    if not hidden:
        return
    names = ", ".join(f"{name} (in schema {where!r})" for name, where in hidden)
    wanted = ",".join(dict.fromkeys([*path, *(where for _, where in hidden)]))
    raise SchemaError(
        f"The extension(s) {names} are installed in a schema this connection's "
        f"search_path ({', '.join(path) or 'empty'}) leaves out, so their operators are "
        f"invisible. Add the schema to the search_path: append "
        f"'?options=-csearch_path%3D{wanted}' to store.dsn, or run "
        f"ALTER ROLE CURRENT_USER SET search_path = {', '.join(wanted.split(','))}; "
        "then retry (`memstrata help postgres` explains)."
    )


def _run(conn: psycopg.Connection[Any], script: str) -> None:
    # Statements end with ";" at the end of a line; "--" comment lines are dropped first.
    lines = [ln for ln in script.splitlines() if not ln.strip().startswith("--")]
    for statement in "\n".join(lines).split(";\n"):
        if statement.strip():
            conn.execute(statement)


@migration
def m001_initial(conn: psycopg.Connection[Any]) -> None:
    try:
        with conn.transaction():
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    except psycopg.Error as exc:
        raise SchemaError(
            f"The pg_trgm extension is needed for substring and CJK search ({exc}). "
            "Install the PostgreSQL contrib package, or have a superuser run "
            "CREATE EXTENSION pg_trgm in this database, then retry."
        ) from exc
    _run(
        conn,
        f"""
        -- A dictionary and configuration of our own, so the index does not change when a
        -- server's default_text_search_config does.
        CREATE TEXT SEARCH DICTIONARY memstrata_english_stem (
            TEMPLATE = snowball, Language = english);
        CREATE TEXT SEARCH CONFIGURATION {TS_CONFIG} (COPY = simple);
        ALTER TEXT SEARCH CONFIGURATION {TS_CONFIG}
            ALTER MAPPING FOR asciiword, word, hword, hword_part, asciihword, hword_asciipart
            WITH memstrata_english_stem;
        CREATE TABLE sessions (
            namespace text NOT NULL,
            id text NOT NULL,
            source text NOT NULL DEFAULT 'cli',
            user_id text,
            model text,
            model_config text,
            system_prompt text,
            parent_session_id text,
            lineage_kind text,
            started_at double precision NOT NULL,
            ended_at double precision,
            end_reason text,
            message_count bigint NOT NULL DEFAULT 0,
            tool_call_count bigint NOT NULL DEFAULT 0,
            api_call_count bigint NOT NULL DEFAULT 0,
            input_tokens bigint NOT NULL DEFAULT 0,
            output_tokens bigint NOT NULL DEFAULT 0,
            cache_read_tokens bigint NOT NULL DEFAULT 0,
            cache_write_tokens bigint NOT NULL DEFAULT 0,
            reasoning_tokens bigint NOT NULL DEFAULT 0,
            estimated_cost_usd double precision,
            title text,
            archived integer NOT NULL DEFAULT 0,
            last_active double precision,
            PRIMARY KEY (namespace, id),
            -- Children are orphaned, never deleted, when a parent goes (as in SQLite);
            -- only the parent column is cleared, never the namespace.
            FOREIGN KEY (namespace, parent_session_id) REFERENCES sessions(namespace, id)
                ON DELETE SET NULL (parent_session_id)
        );
        CREATE UNIQUE INDEX idx_sessions_title_unique ON sessions(namespace, title)
            WHERE title IS NOT NULL;
        CREATE INDEX idx_sessions_parent ON sessions(namespace, parent_session_id);
        CREATE INDEX idx_sessions_started ON sessions(namespace, started_at DESC);
        CREATE INDEX idx_sessions_source ON sessions(namespace, source, started_at DESC);
        -- Prefix lookups (resolve_session_id) under any collation.
        CREATE INDEX idx_sessions_id_prefix ON sessions(namespace, id text_pattern_ops);
        CREATE TABLE messages (
            id bigserial PRIMARY KEY,
            namespace text NOT NULL,
            session_id text NOT NULL,
            role text NOT NULL,
            content text,
            tool_call_id text,
            tool_calls text,
            tool_name text,
            timestamp double precision NOT NULL,
            token_count bigint,
            finish_reason text,
            reasoning text,
            api_content text,
            active integer NOT NULL DEFAULT 1,
            compacted integer NOT NULL DEFAULT 0,
            -- The word index: computed by the server from the row, so it can never drift.
            tsv tsvector GENERATED ALWAYS AS (
                to_tsvector('{TS_CONFIG}'::regconfig, {INDEXED_TEXT})) STORED,
            -- CJK bigrams (memstrata.query.cjk), written by the store with the row: PostgreSQL's
            -- parser keeps a CJK run as one word, so 1-2 character words need their own
            -- lexemes; NULL for rows without CJK.
            cjk tsvector,
            FOREIGN KEY (namespace, session_id) REFERENCES sessions(namespace, id)
                ON DELETE CASCADE
        );
        CREATE INDEX idx_messages_session ON messages(namespace, session_id, id);
        CREATE INDEX idx_messages_timestamp ON messages(namespace, timestamp);
        CREATE TABLE state_meta (
            namespace text NOT NULL,
            key text NOT NULL,
            value text,
            PRIMARY KEY (namespace, key)
        );
        -- Query-focused summaries of past conversations (see SQLite's m002_summary_cache).
        CREATE TABLE summary_cache (
            namespace text NOT NULL,
            tip_session_id text NOT NULL,
            root_session_id text NOT NULL,
            message_count integer NOT NULL,
            last_message_id bigint NOT NULL,
            query text NOT NULL,
            model text NOT NULL DEFAULT '',
            summary text NOT NULL,
            created_at double precision NOT NULL,
            PRIMARY KEY (namespace, tip_session_id, message_count, last_message_id, query)
        );
        CREATE INDEX idx_summary_cache_root ON summary_cache(namespace, root_session_id);
        -- Curated memory (MEMORY.md / USER.md) rows, one per target, locked with
        -- SELECT ... FOR UPDATE by the memory layer.
        CREATE TABLE curated_memory (
            namespace text NOT NULL,
            target text NOT NULL,
            content text NOT NULL DEFAULT '',
            version bigint NOT NULL DEFAULT 0,
            updated_at double precision,
            PRIMARY KEY (namespace, target)
        )
        """,
    )
    for sql in _M001_INDEXES.values():
        conn.execute(sql)
    # Lineage falls back to markers in model_config for imported rows (see
    # memstrata.store.lineage); model_config is free text, so reading it as JSON must
    # never raise (PostgreSQL 15 has no IS JSON).
    conn.execute(
        """
        CREATE FUNCTION memstrata_json_has_key(doc text, key text) RETURNS boolean
        LANGUAGE plpgsql IMMUTABLE AS $$
        BEGIN
            RETURN doc IS NOT NULL AND jsonb_typeof(doc::jsonb) = 'object' AND doc::jsonb ? key;
        EXCEPTION WHEN others THEN
            RETURN false;
        END $$
        """
    )
    # tool_call_count counts the calls of a JSON array, or one for other text (as SQLite's
    # json_array_length); NULL when the text is not a JSON array.
    conn.execute(
        """
        CREATE FUNCTION memstrata_json_array_length(doc text) RETURNS integer
        LANGUAGE plpgsql IMMUTABLE AS $$
        BEGIN
            IF jsonb_typeof(doc::jsonb) = 'array' THEN
                RETURN jsonb_array_length(doc::jsonb);
            END IF;
            RETURN NULL;
        EXCEPTION WHEN others THEN
            RETURN NULL;
        END $$
        """
    )
    # A summary quotes its conversation: deleting a session must not leave its content
    # behind in the cache (as SQLite's summary_cache_session_ad trigger).
    conn.execute(
        """
        CREATE FUNCTION memstrata_summary_cache_ad() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            DELETE FROM summary_cache
             WHERE namespace = OLD.namespace
               AND (tip_session_id = OLD.id OR root_session_id = OLD.id);
            RETURN OLD;
        END $$
        """
    )
    conn.execute(
        "CREATE TRIGGER summary_cache_session_ad AFTER DELETE ON sessions "
        "FOR EACH ROW EXECUTE FUNCTION memstrata_summary_cache_ad()"
    )


@migration
def m002_tenant_search_indexes(conn: psycopg.Connection[Any]) -> None:
    # The m001 indexes hold every tenant's rows: a term common in other tenants made
    # each tenant's searches read (and skip) all of those rows, and "newest matches"
    # walked the whole table's ids. The replacements lead with the namespace. Building
    # them reads the table once (minutes for millions of messages).
    try:
        with conn.transaction():
            conn.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
    except psycopg.Error as exc:
        raise SchemaError(
            f"The btree_gin extension is needed for per-tenant search indexes ({exc}). "
            "Install the PostgreSQL contrib package (which also holds pg_trgm), or have a "
            "superuser run CREATE EXTENSION btree_gin in this database, then retry."
        ) from exc
    for name in _M001_INDEXES:
        conn.execute(f"DROP INDEX IF EXISTS {name}")
    for sql in SEARCH_INDEXES.values():
        conn.execute(sql)


@migration
def m003_curated_memory_history(conn: psycopg.Connection[Any]) -> None:
    # The audit history of curated memory (memstrata.memory.postgres_history), the twin
    # of the file backend's memory_history.db. Ids are numbered per tenant, so a tenant's
    # history reads 1, 2, 3 and says nothing about other tenants' writes; the text is
    # kept as the exact UTF-8 bytes before and after, as for files.
    _run(
        conn,
        """
        CREATE TABLE curated_memory_history (
            namespace text NOT NULL,
            id bigint NOT NULL,
            at double precision NOT NULL,
            target text NOT NULL,
            action text NOT NULL,
            who text NOT NULL,
            why text NOT NULL DEFAULT '',
            before bytea,
            after bytea,
            undoes bigint,
            PRIMARY KEY (namespace, id),
            FOREIGN KEY (namespace, undoes) REFERENCES curated_memory_history(namespace, id)
        );
        CREATE INDEX idx_curated_memory_history_target
            ON curated_memory_history(namespace, target, id)
        """,
    )
    # Append-only: a recorded change is never rewritten. Deleting stays possible, for
    # delete_namespace() (erasing a tenant erases its history too).
    conn.execute(
        """
        CREATE FUNCTION memstrata_history_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION 'curated_memory_history is append-only: rows are never updated';
        END $$
        """
    )
    conn.execute(
        "CREATE TRIGGER curated_memory_history_no_update BEFORE UPDATE ON curated_memory_history "
        "FOR EACH ROW EXECUTE FUNCTION memstrata_history_append_only()"
    )


@migration
def m004_expansions_and_vectors(conn: psycopg.Connection[Any]) -> None:
    # The two caches of the recall options that SQLite keeps (its m003 and m004):
    # message vectors for hybrid recall, as unit float32 blobs compared in the client
    # (no extension is needed on the server), and query expansions per model and question.
    # A vector goes with its message (ON DELETE CASCADE), as SQLite's trigger does it.
    _run(
        conn,
        """
        CREATE TABLE message_vectors (
            namespace text NOT NULL,
            model text NOT NULL,
            message_id bigint NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
            dims integer NOT NULL,
            vector bytea NOT NULL,
            created_at double precision NOT NULL,
            PRIMARY KEY (namespace, model, message_id)
        );
        CREATE INDEX idx_message_vectors_message ON message_vectors(message_id);
        CREATE TABLE query_expansions (
            namespace text NOT NULL,
            model text NOT NULL,
            query text NOT NULL,
            subqueries text NOT NULL,
            created_at double precision NOT NULL,
            PRIMARY KEY (namespace, model, query)
        )
        """,
    )


@migration
def m005_small_gin_pending_lists(conn: psycopg.Connection[Any]) -> None:
    # The search indexes' GIN pending lists capped at 256 kB (undone by m007, see
    # GIN_PENDING_LIST_KB); the indexes of m002 were created with the server's default.
    _set_pending_lists(conn, 256)


def _set_pending_lists(conn: psycopg.Connection[Any], kb: int) -> None:
    # Applies to new inserts: a list already longer is merged by the next insert past
    # the limit, by VACUUM or by gin_clean_pending_list.
    for name in GIN_INDEXES:
        conn.execute(f"ALTER INDEX {name} SET (gin_pending_list_limit = {kb})")


# A tsvector's length in tokens (every position of every lexeme): what ranking's BM25
# divides by. Read from the text form (a lexeme per "':", a comma between positions),
# which costs a detoast and a cast per row: on the search side about two thirds of the
# statement that reads the candidates (6 of 9 ms for a question's 500 rows at 100k), so
# a row's counts are stored with it (m006) and the expression is only a fallback.
@migration
def m006_token_counts(conn: psycopg.Connection[Any]) -> None:
    # DROP EXPRESSION (below) is PostgreSQL 13+: say so before changing anything.
    if conn.info.server_version < 130000:
        raise SchemaError(
            f"memstrata needs PostgreSQL 13 or newer; this server is version "
            f"{conn.info.server_version // 10000}. Upgrade the server (or keep the data on "
            "SQLite, the default), then retry."
        )
    # Each row's length in tokens in the word and the CJK index, written with the row by
    # the store (nullable and without a default, so adding them rewrites nothing; rows
    # written before read NULL and are counted from their vectors, as before).
    conn.execute(
        "ALTER TABLE messages ADD COLUMN IF NOT EXISTS tsv_tokens integer, "
        "ADD COLUMN IF NOT EXISTS cjk_tokens integer"
    )
    # tsv is now written by the INSERT (word_vector) instead of generated: the statement
    # makes the vector once and counts it, where a generated column beside a written
    # count would have each row parsed twice. Existing values stay; nothing is rewritten.
    # (Messages' content is never updated, so nothing else writes tsv.)
    conn.execute("ALTER TABLE messages ALTER COLUMN tsv DROP EXPRESSION")
    # Counts a tsvector once: inlined, the expression would read its argument three times.
    conn.execute(
        """
        CREATE OR REPLACE FUNCTION memstrata_tokens(v tsvector) RETURNS integer
        LANGUAGE plpgsql IMMUTABLE STRICT AS $$
        DECLARE t text := v::text;
        BEGIN
            RETURN length(v) + length(t) - length(replace(t, ',', ''));
        END $$
        """
    )
    # A writer that leaves tsv out (a process of an older version, opened before this
    # migration, during a rolling upgrade) still gets it made from the row, as the
    # generated column did. The WHEN test runs without calling the function, so the
    # store's own inserts, which write tsv, pay next to nothing for it.
    _word_vector_trigger(conn)
    conn.execute(
        "CREATE TRIGGER messages_tsv_bi BEFORE INSERT ON messages FOR EACH ROW "
        "WHEN (NEW.tsv IS NULL) EXECUTE FUNCTION memstrata_messages_tsv()"
    )


@migration
def m007_gin_pending_lists_merged_by_the_store(conn: psycopg.Connection[Any]) -> None:
    # Back to 4 MB pending lists (see GIN_PENDING_LIST_KB): the store's writers merge
    # them in their maintenance passes instead of every few hundred rows.
    _set_pending_lists(conn, GIN_PENDING_LIST_KB)


@migration
def m008_word_vectors_of_long_messages(conn: psycopg.Connection[Any]) -> None:
    # The trigger that makes a row's word vector when its writer leaves it out (a
    # migration from SQLite, a writer of an older version) reads the same bounded text
    # as the store's INSERT (WORD_INDEX_CHARS): unbounded, a long message failed there.
    _word_vector_trigger(conn)


@migration
def m009_folded_cjk_vectors(conn: psycopg.Connection[Any]) -> None:
    # The CJK vectors hold folded text (memstrata.query.fold): traditional characters
    # simplified, full-width letters and digits in ASCII, as every query is now folded.
    refold_cjk_vectors(conn, "messages", ("content", "tool_name", "tool_calls"), "cjk_tokens")


def refold_cjk_vectors(
    conn: psycopg.Connection[Any],
    table: str,
    columns: tuple[str, str, str],
    tokens: str | None = None,
) -> int:
    """Write again the CJK vector (and its length in ``tokens``) of every row of ``table``
    (all tenants) whose ``columns`` folding changes; return how many. The server finds
    them by a character class of what folds (one pass over the table); on a database
    not in UTF-8 every row holding CJK or a full-width character is read and checked."""
    # Imported here: the messages module imports this one.
    from memstrata.query.fold import FOLDING, folds
    from memstrata.store.postgres.messages import cjk_row

    encoding = _value(conn.execute("SHOW server_encoding").fetchone(), "server_encoding")
    utf8 = str(encoding).upper() in ("UTF8", "UTF-8")
    pattern = "[" + (FOLDING if utf8 else "\uff10-\uff5a") + "]"
    test = " OR ".join(f"{c} ~ %s" for c in columns) + ("" if utf8 else " OR cjk IS NOT NULL")
    set_tokens = f", {tokens} = v.tokens" if tokens else ""
    changed, last = 0, 0
    while True:
        rows = conn.execute(
            f"SELECT id, {', '.join(columns)} FROM {table} WHERE id > %s AND ({test}) "
            "ORDER BY id LIMIT 2000",
            [last, *[pattern] * len(columns)],
        ).fetchall()
        if not rows:
            return changed
        last = int(_value(rows[-1], "id"))
        ids, vectors, counts = [], [], []
        for row in rows:
            values = list(row.values()) if isinstance(row, dict) else list(row)
            if not any(folds(v) for v in values[1:] if isinstance(v, str)):
                continue
            vector, count = cjk_row(*values[1:])
            ids.append(int(values[0]))
            vectors.append(vector)
            counts.append(count)
        if ids:
            conn.execute(
                f"UPDATE {table} t SET cjk = v.cjk::tsvector{set_tokens} "
                "FROM unnest(%s::bigint[], %s::text[], %s::int[]) AS v(id, cjk, tokens) "
                "WHERE t.id = v.id",
                [ids, vectors, counts],
            )
            changed += len(ids)


# A tsvector holds at most 1 MB of lexemes and positions: a message whose words made a
# bigger one (a tool's 3 MB output, a log of many distinct ids) failed its whole append
# with "string is too long for tsvector". The word index reads a message's first
# WORD_INDEX_CHARS characters, whose vector stays under 0.7 MB whatever they hold (a
# lexeme and its first position cost at most 9 bytes per 2 characters); SQLite indexes
# all of it, and the trigram index reads all of it here too.
WORD_INDEX_CHARS = 150_000


def _word_vector_trigger(conn: psycopg.Connection[Any]) -> None:
    """(Re)define the function of the trigger that makes a row's word vector."""
    conn.execute(
        f"""
        CREATE OR REPLACE FUNCTION memstrata_messages_tsv() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            NEW.tsv := {word_vector("NEW.content", "NEW.tool_name", "NEW.tool_calls")};
            NEW.tsv_tokens := memstrata_tokens(NEW.tsv);
            RETURN NEW;
        END $$
        """
    )


def word_vector(
    content: str = "content", tool_name: str = "tool_name", tool_calls: str = "tool_calls"
) -> str:
    """The word index's ``tsvector`` of a row, from the SQL of its content, tool_name and
    tool_calls (what the column's generation expression was until m006)."""
    text = (
        INDEXED_TEXT.replace("(content,", f"({content},")
        .replace("(tool_name,", f"({tool_name},")
        .replace("(tool_calls,", f"({tool_calls},")
    )
    return f"to_tsvector('{TS_CONFIG}'::regconfig, left({text}, {WORD_INDEX_CHARS}))"
