"""Copy a SQLite home (sessions, messages, meta, curated memory) into PostgreSQL.

:func:`migrate_home` reads ``state.db`` and ``memories/`` of a home folder and writes
them into one namespace of a PostgreSQL database, then counts both sides:

* every session row with every column (titles, lineage records, token counts, end
  reasons, archive flags) is upserted by id, parents after children are known, so a
  lineage link is never refused by the foreign key;
* every message row with every column (archived and compacted rows included, their
  flags kept) is copied in id order; PostgreSQL numbers the rows itself, so a message
  id differs between the two sides while the order is the same;
* ``state_meta`` keys are upserted; ``MEMORY.md``/``USER.md`` go to ``curated_memory``
  byte for byte;
* ``facts.db`` goes to the tenant's facts through the facts stores' own API
  (:meth:`~memstrata.providers.facts.base.BaseFactStore.dump` on the file,
  :meth:`~memstrata.providers.facts.base.BaseFactStore.load` into PostgreSQL): every fact
  with its status, slot, times and recall counts, its history and its vectors; PostgreSQL
  numbers the facts itself and the links follow;
* the summary cache is not copied: it is keyed by message ids, which change, and it is
  rebuilt on demand.

Re-running is idempotent: a session whose messages are already there (same count, same
last timestamp) is left as it is, one that differs gets its messages replaced in one
transaction, so an interrupted run is finished by running it again. Curated memory that
already differs in PostgreSQL is not overwritten unless asked; facts are copied only into
a tenant that holds none (the facts load in one transaction), and a tenant whose facts
already match the file's is left as it is.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from memstrata import fileio
from memstrata.config import Config, memstrata_home
from memstrata.errors import ImportDataError, UnreadableFileError
from memstrata.memory import postgres_history as memory_history
from memstrata.memory.format import FILE_NAMES, TARGETS
from memstrata.providers.facts.contract import FactDump
from memstrata.providers.facts.postgres import PostgresFactStore
from memstrata.providers.facts.store import FACTS_FILENAME, FactStore
from memstrata.store.postgres import ranking
from memstrata.store.postgres.codec import MESSAGE_COLUMNS, pg_text, to_pg_content
from memstrata.store.postgres.messages import cjk_row
from memstrata.store.postgres.store import PostgresSessionStore
from memstrata.store.sqlite.store import DB_FILENAME

__all__ = ["MigrationReport", "Progress", "migrate_home"]

Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``: called as sessions and messages are copied."""

# Message rows sent per statement batch: large enough to amortise round trips, small
# enough that one huge session does not hold a giant transaction in memory at once.
BATCH = 1_000
# Every message column but the two ids: the target numbers its own rows and the session
# id is given per session.
_MESSAGE_COLUMNS = tuple(c for c in MESSAGE_COLUMNS if c not in ("id", "session_id"))
# count, newest timestamp, live rows, compacted rows: a session re-archived or grown
# since the last run differs in one of them.
_FINGERPRINT = (
    "count(*) AS n, max(timestamp) AS newest, coalesce(sum(active), 0) AS live, "
    "coalesce(sum(compacted), 0) AS compacted"
)
_TEXT_COLUMNS = {"role", "tool_call_id", "tool_calls", "tool_name", "finish_reason", "reasoning"}


@dataclass
class MigrationReport:
    """What a migration copied, and the counts of both sides after it."""

    namespace: str
    sqlite_sessions: int = 0
    sqlite_messages: int = 0
    postgres_sessions: int = 0
    postgres_messages: int = 0
    sessions_copied: int = 0
    sessions_unchanged: int = 0
    meta_keys: int = 0
    memory: dict[str, str] = field(default_factory=dict)
    """Per target: ``copied``, ``unchanged``, ``absent`` or ``kept`` (PostgreSQL differs)."""
    facts: str = "absent"
    """``copied``, ``unchanged``, ``absent`` (no facts.db) or ``kept`` (PostgreSQL differs)."""
    sqlite_facts: int = 0
    postgres_facts: int = 0
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True when both sides hold the same number of sessions, messages and (unless the
        tenant's differing facts were kept) facts."""
        facts_ok = self.facts == "kept" or self.sqlite_facts == self.postgres_facts
        return facts_ok and (self.sqlite_sessions, self.sqlite_messages) == (
            self.postgres_sessions,
            self.postgres_messages,
        )

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-able data."""
        return {
            "namespace": self.namespace,
            "ok": self.ok,
            "sessions": {"sqlite": self.sqlite_sessions, "postgres": self.postgres_sessions},
            "messages": {"sqlite": self.sqlite_messages, "postgres": self.postgres_messages},
            "sessions_copied": self.sessions_copied,
            "sessions_unchanged": self.sessions_unchanged,
            "meta_keys": self.meta_keys,
            "memory": dict(self.memory),
            "facts": {
                "state": self.facts,
                "sqlite": self.sqlite_facts,
                "postgres": self.postgres_facts,
            },
            "warnings": list(self.warnings),
            "seconds": round(self.seconds, 3),
        }


def _open_sqlite(path: Path) -> sqlite3.Connection:
    # Read-only and without the store's open-time checks: a migration must be able to
    # copy a home whose indexes need a rebuild (the rows are what is copied).
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise ImportDataError(
            f"Cannot open {path}: {exc}. Check the path and permissions."
        ) from exc
    conn.row_factory = sqlite3.Row
    return conn


def _columns(conn: psycopg.Connection[Any], table: str) -> set[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND table_name = %s",
        (table,),
    ).fetchall()
    return {str(r["column_name"]) for r in rows}


def migrate_home(
    dsn: str,
    *,
    namespace: str = "default",
    home: Path | None = None,
    config: Config | None = None,
    overwrite_memory: bool = False,
    progress: Progress | None = None,
) -> MigrationReport:
    """Copy the SQLite home ``home`` (default: the current one) into ``namespace``.

    Returns a :class:`MigrationReport`; ``report.ok`` is False when the counts of the
    two sides differ. ``overwrite_memory`` replaces curated memory that PostgreSQL
    already holds with different content (otherwise it is kept and a warning says so).
    Raises :class:`~memstrata.errors.ImportDataError` for an unreadable source and
    :class:`~memstrata.errors.StorageError` when PostgreSQL cannot be reached.
    """
    started = time.monotonic()
    root = Path(home) if home is not None else memstrata_home()
    cfg = config if config is not None else Config.load(root)
    db_path = root / DB_FILENAME
    with PostgresSessionStore(dsn, namespace=namespace, config=cfg) as store:
        report = MigrationReport(namespace=store.namespace)
        if db_path.exists():
            source = _open_sqlite(db_path)
            try:
                _copy_store(source, store, report, progress)
            except sqlite3.DatabaseError as exc:
                raise ImportDataError(
                    f"Reading {db_path} failed: {exc}. Run `memstrata sessions check` on it "
                    "and retry."
                ) from exc
            finally:
                source.close()
                # Sessions came with their counters: this process counts the tenant afresh.
                ranking.changed(store.namespace)
            # A copy is a bulk load: fresh planner statistics for it when the server's
            # autovacuum would not make them.
            store.keep_statistics()
        else:
            report.warnings.append(f"{db_path} does not exist: no sessions to copy.")
        _copy_memory(root, store, report, overwrite_memory)
    _copy_facts(root / FACTS_FILENAME, dsn, store.namespace, cfg, report)
    report.seconds = time.monotonic() - started
    return report


# ----------------------------------------------------------------------------- store


def _copy_store(
    source: sqlite3.Connection,
    store: PostgresSessionStore,
    report: MigrationReport,
    progress: Progress | None,
) -> None:
    source.execute("BEGIN")  # one snapshot of the source for the whole copy
    sessions = [dict(r) for r in source.execute("SELECT * FROM sessions ORDER BY started_at, id")]
    report.sqlite_sessions = len(sessions)
    report.sqlite_messages = int(source.execute("SELECT count(*) FROM messages").fetchone()[0])
    ids = [str(s["id"]) for s in sessions]
    known = set(ids)
    ns = store.namespace
    with store.connection() as conn:
        target_cols = _columns(conn, "sessions")
    columns = [c for c in sessions[0] if c in target_cols] if sessions else []
    missing = sorted(set(sessions[0]) - target_cols) if sessions else []
    if missing:
        report.warnings.append(f"Session columns with no PostgreSQL twin, not copied: {missing}.")
    _upsert_sessions(store, sessions, columns, known, report)
    done = 0
    if progress is not None:
        progress("messages", 0, report.sqlite_messages)
    for session in sessions:
        sid = str(session["id"])
        # The fingerprint of a session's rows: a re-run skips what is already there.
        mine = tuple(
            source.execute(
                f"SELECT {_FINGERPRINT} FROM messages WHERE session_id = ?", (sid,)
            ).fetchone()
        )
        count = int(mine[0])
        with store.connection() as conn:
            there = conn.execute(
                f"SELECT {_FINGERPRINT} FROM messages WHERE namespace = %s AND session_id = %s",
                (ns, sid),
            ).fetchone()
            if there is not None and _same(tuple(there.values()), mine):
                report.sessions_unchanged += 1
            else:
                _replace_messages(conn, ns, sid, source)
                report.sessions_copied += 1
        done += count
        if progress is not None:
            progress("messages", done, report.sqlite_messages)
    meta = [(str(r[0]), r[1]) for r in source.execute("SELECT key, value FROM state_meta")]
    with store.connection() as conn:
        for key, value in meta:
            conn.execute(
                "INSERT INTO state_meta (namespace, key, value) VALUES (%s, %s, %s) "
                "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value",
                (ns, pg_text(key), pg_text(value)),
            )
    report.meta_keys = len(meta)
    with store.connection() as conn:
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM sessions WHERE namespace = %(ns)s "
            "AND id = ANY(%(ids)s)) AS sessions, (SELECT count(*) FROM messages "
            "WHERE namespace = %(ns)s AND session_id = ANY(%(ids)s)) AS messages",
            {"ns": ns, "ids": ids},
        ).fetchone()
    report.postgres_sessions = int(counts["sessions"]) if counts else 0
    report.postgres_messages = int(counts["messages"]) if counts else 0


def _upsert_sessions(
    store: PostgresSessionStore,
    sessions: Sequence[dict[str, Any]],
    columns: Sequence[str],
    known: set[str],
    report: MigrationReport,
) -> None:
    if not sessions:
        return
    # Parents first as plain rows, links second: the foreign key then always finds the
    # parent, whatever order the sessions were created in.
    cols = ["namespace", *columns]
    updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c != "id")
    sql = (
        f"INSERT INTO sessions ({', '.join(cols)}) VALUES ({', '.join(['%s'] * len(cols))}) "
        f"ON CONFLICT (namespace, id) DO UPDATE SET {updates}"
    )
    rows = []
    for session in sessions:
        values = dict(session)
        parent = values.get("parent_session_id")
        if parent is not None and parent not in known:
            report.warnings.append(
                f"Session {values['id']} names a parent {parent} that is not in the source; "
                "it is copied as a root."
            )
        values["parent_session_id"] = None
        rows.append([store.namespace, *(_pg(values[c]) for c in columns)])
    links = [
        (str(s["parent_session_id"]), store.namespace, str(s["id"]))
        for s in sessions
        if s.get("parent_session_id") in known
    ]
    try:
        # The title index is unique per namespace: a migrated title that another
        # session of the namespace already holds is a conflict to resolve by hand.
        with store.connection() as conn, conn.cursor() as cur:
            cur.executemany(sql, rows)
            cur.executemany(
                "UPDATE sessions SET parent_session_id = %s WHERE namespace = %s AND id = %s",
                links,
            )
    except psycopg.errors.UniqueViolation as exc:
        raise ImportDataError(
            f"A session title being copied is already used by another session of namespace "
            f"{store.namespace!r} ({exc.diag.message_detail or exc}). Rename one of them, "
            "or migrate into a fresh namespace with --namespace, then retry."
        ) from exc


def _same(there: tuple[Any, ...], mine: tuple[Any, ...]) -> bool:
    return [None if v is None else float(v) for v in there] == [
        None if v is None else float(v) for v in mine
    ]


def _pg(value: Any) -> Any:
    return pg_text(value) if isinstance(value, str) else value


def _source_rows(source: sqlite3.Connection, session_id: str) -> Iterator[list[sqlite3.Row]]:
    cursor = source.execute(
        f"SELECT {', '.join(_MESSAGE_COLUMNS)} FROM messages WHERE session_id = ? ORDER BY id",
        (session_id,),
    )
    while True:
        rows = cursor.fetchmany(BATCH)
        if not rows:
            return
        yield rows


def _replace_messages(
    conn: psycopg.Connection[Any], ns: str, session_id: str, source: sqlite3.Connection
) -> None:
    # One transaction per session (the caller's): a run stopped midway leaves every
    # session either fully copied or untouched, and the next run completes the rest.
    conn.execute("DELETE FROM messages WHERE namespace = %s AND session_id = %s", (ns, session_id))
    # The word vector and its length in tokens are left to the table's trigger
    # (schema.m006_token_counts), which makes them from the row as the store's INSERT does.
    cols = ["namespace", "session_id", *_MESSAGE_COLUMNS, "cjk", "cjk_tokens"]
    marks = ", ".join(["%s"] * (len(cols) - 2))
    sql = f"INSERT INTO messages ({', '.join(cols)}) VALUES ({marks}, %s::tsvector, %s)"
    with conn.cursor() as cur:
        for batch in _source_rows(source, session_id):
            params = []
            for row in batch:
                values: dict[str, Any] = dict(row)
                for name in _TEXT_COLUMNS:
                    values[name] = pg_text(values[name])
                values["content"] = to_pg_content(values["content"])
                values["api_content"] = to_pg_content(values["api_content"])
                # The CJK bigram column is written with the row, as the store does.
                cjk = cjk_row(values["content"], values["tool_name"], values["tool_calls"])
                params.append([ns, session_id, *(values[c] for c in _MESSAGE_COLUMNS), *cjk])
            cur.executemany(sql, params)


# ---------------------------------------------------------------------------- memory


def _copy_memory(
    root: Path, store: PostgresSessionStore, report: MigrationReport, overwrite: bool
) -> None:
    for target in TARGETS:
        path = root / "memories" / FILE_NAMES[target]
        try:
            raw = fileio.read_text(path)
        except UnreadableFileError as exc:
            report.memory[target] = "unreadable"
            report.warnings.append(f"{FILE_NAMES[target]} was not copied: {exc}")
            continue
        if raw is None:
            report.memory[target] = "absent"
            continue
        with store.connection() as conn:
            row = conn.execute(
                "SELECT content FROM curated_memory WHERE namespace = %s AND target = %s "
                "FOR UPDATE",
                (store.namespace, target),
            ).fetchone()
            current = str(row["content"]) if row is not None else ""
            if current == raw:
                report.memory[target] = "unchanged"
                continue
            if current and not overwrite:
                report.memory[target] = "kept"
                report.warnings.append(
                    f"{FILE_NAMES[target]} differs from what namespace {store.namespace!r} "
                    "already holds in PostgreSQL, so it was kept; rerun with "
                    "--overwrite-memory to replace it with the file."
                )
                continue
            text = pg_text(raw) or ""
            conn.execute(
                "INSERT INTO curated_memory (namespace, target, content, version, updated_at) "
                "VALUES (%s, %s, %s, 1, %s) ON CONFLICT (namespace, target) DO UPDATE SET "
                "content = excluded.content, version = curated_memory.version + 1, "
                "updated_at = excluded.updated_at",
                (store.namespace, target, text, time.time()),
            )
            # Recorded like any other change of the rows, in the same transaction, so
            # `memstrata memory undo` can put back what an --overwrite-memory replaced.
            memory_history.record(
                conn,
                store.namespace,
                target=target,
                action="migrate",
                who="migrate",
                why=f"copied from {path.name}" + (", replacing the rows" if current else ""),
                before=current.encode("utf-8") if row is not None else None,
                after=text.encode("utf-8"),
            )
            report.memory[target] = "copied"


# ----------------------------------------------------------------------------- facts


def _facts_fingerprint(dump: FactDump) -> list[tuple[Any, ...]]:
    """What two copies of the same facts share, whatever their ids."""
    return sorted(
        (
            f["content"],
            f["category"],
            f["subject"],
            f["key"],
            f["value"],
            f["status"],
            f["created_at"],
        )
        for f in dump.facts
    )


def _copy_facts(path: Path, dsn: str, namespace: str, cfg: Config, report: MigrationReport) -> None:
    if not path.exists():
        report.facts = "absent"
        return
    with FactStore(path) as source:
        dump = source.dump()
    report.sqlite_facts = len(dump.facts)
    with PostgresFactStore(dsn, namespace=namespace, config=cfg) as target:
        held = target.dump()
        if not held.facts and not held.history:
            target.load(dump)
            report.facts = "copied"
        elif _facts_fingerprint(held) == _facts_fingerprint(dump):
            report.facts = "unchanged"
        else:
            report.facts = "kept"
            report.warnings.append(
                f"{path.name} differs from the facts namespace {namespace!r} already holds in "
                "PostgreSQL, so they were kept and nothing was copied; migrate into a fresh "
                "namespace with --namespace, or delete the namespace's facts first."
            )
        report.postgres_facts = target.count(status=None)
