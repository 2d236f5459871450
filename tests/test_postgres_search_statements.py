"""What a search costs PostgreSQL in statements: each one a round trip, counted per query
class on a tenant larger than the ranking sample (so rare and common terms take their
own paths), and the shape of the statements that replaced others."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg")

from psycopg._connection_base import BaseConnection  # noqa: E402
from psycopg._cursor_base import BaseCursor  # noqa: E402

from helpers import PG_DSN as DSN  # noqa: E402
from memstrata.store.postgres import PostgresSessionStore  # noqa: E402

pytestmark = pytest.mark.postgres


class Statements:
    """Every statement this thread sends to the server while installed, as its SQL
    text: what a cursor sends and what a connection sends itself (``BEGIN``,
    ``COMMIT``). The store's statistics thread is not counted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: list[str] = []
        thread = threading.get_ident()
        send, prepared, command = (
            BaseCursor._execute_send,
            BaseCursor._send_query_prepared,
            BaseConnection._exec_command,
        )

        def seen(query: Any) -> None:
            if threading.get_ident() != thread:
                return
            raw = query if isinstance(query, (bytes, str)) else getattr(query, "query", query)
            self.sent.append(raw.decode() if isinstance(raw, bytes) else str(raw))

        def counted_send(cur: Any, query: Any, **kw: Any) -> Any:
            seen(query)
            return send(cur, query, **kw)

        def counted_prepared(cur: Any, name: Any, query: Any, **kw: Any) -> Any:
            seen(query)
            return prepared(cur, name, query, **kw)

        def counted_command(conn: Any, cmd: Any, *args: Any, **kw: Any) -> Any:
            seen(cmd)
            return (yield from command(conn, cmd, *args, **kw))

        monkeypatch.setattr(BaseCursor, "_execute_send", counted_send)
        monkeypatch.setattr(BaseCursor, "_send_query_prepared", counted_prepared)
        monkeypatch.setattr(BaseConnection, "_exec_command", counted_command)

    def during(self, call: Any) -> list[str]:
        """The statements ``call()`` sent."""
        self.sent = []
        call()
        return list(self.sent)


@pytest.fixture
def pg(namespace: str) -> Iterator[PostgresSessionStore]:
    """A store on a fresh tenant (conftest's ``namespace``: its rows go after the test)."""
    with PostgresSessionStore(DSN, namespace=namespace) as store:
        yield store


def test_a_snapshot_begins_in_one_statement(
    pg: PostgresSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search's snapshot is ``BEGIN ISOLATION LEVEL REPEATABLE READ`` (no SET
    TRANSACTION after a plain BEGIN), and the pooled connection's next transaction is a
    plain one again."""
    pg.create_session("s")
    pg.append_messages("s", [{"role": "user", "content": "the walrus sang"}])
    spy = Statements(monkeypatch)
    sent = spy.during(lambda: pg.search_messages("walrus", limit=5))
    assert sent[0] == "BEGIN ISOLATION LEVEL REPEATABLE READ"
    assert sent[-1] == "COMMIT"
    assert not any("SET TRANSACTION" in s for s in sent)
    with pg.connection() as conn:
        row = conn.execute("SELECT current_setting('transaction_isolation') AS level").fetchone()
        assert row is not None and row["level"] == "read committed"
    with pg.connection(snapshot=True) as conn:
        row = conn.execute("SELECT current_setting('transaction_isolation') AS level").fetchone()
        assert row is not None and row["level"] == "repeatable read"


def test_an_append_is_one_statement_of_its_own(
    pg: PostgresSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn is appended in one statement, atomic on its own: no BEGIN and COMMIT
    around it. A missing session writes nothing and leaves the connection's transactions
    as they were; inside an outer transaction an append joins it (and its rollback)."""
    from memstrata.errors import SessionNotFoundError

    spy = Statements(monkeypatch)
    pg.create_session("s")
    pg.append_messages("s", [{"role": "user", "content": "first"}])  # caches warm
    turn = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    sent = spy.during(lambda: pg.append_messages("s", turn))
    assert len(sent) == 1 and sent[0].startswith("WITH counted AS"), sent
    assert [m["content"] for m in pg.get_messages("s")] == ["first", "a", "b"]
    assert pg.get_session("s")["message_count"] == 3  # type: ignore[index]

    with pytest.raises(SessionNotFoundError):
        pg.append_messages("missing", turn)
    sent = spy.during(lambda: pg.get_messages("s"))
    assert [q for q in sent if q.startswith(("BEGIN", "COMMIT"))] == ["BEGIN", "COMMIT"], sent

    with pytest.raises(RuntimeError), pg.connection():
        pg.append_messages("s", [{"role": "user", "content": "undone"}])
        raise RuntimeError("the outer transaction fails")
    assert [m["content"] for m in pg.get_messages("s")] == ["first", "a", "b"]
    assert pg.get_session("s")["message_count"] == 3  # type: ignore[index]


def add(store: PostgresSessionStore, sid: str, texts: list[str]) -> None:
    store.create_session(sid)
    store.append_messages(sid, [{"role": "user", "content": t} for t in texts])


# More rows than the ranking sample (COMMON_DF), so "deploy" is common and takes the
# walk, the planted words are rare and come from their probes.
FILLER = [f"routine status update {i} for the deploy pipeline" for i in range(560)]
PLANTED = [
    "the walrus ate the config again",
    "We decided to raise the deploy timeout to 30 seconds for auth-api.",
    "The logs show a quantum flux capacitor right after the restart.",
    "数据库迁移之后回滚失败了，这个问题明天再看",
    "修改youer服务端的配置，麻烦确认一下。",
    "The deploy of mod5_x.cfg/path5 broke.",
]


@pytest.fixture
def tenant(pg: PostgresSessionStore) -> PostgresSessionStore:
    add(pg, "filler", FILLER)
    add(pg, "planted", PLANTED)
    pg.keep_statistics()  # the statistics pass a bulk write starts, done before counting
    return pg


COUNT = "sum(message_count)"  # the statement that counts the tenant's size
# The probe statement: with the sample of the tenant's newest rows, or (for terms the
# ranking sample holds in none of them) through the indexes alone.
PROBES = ("WITH s AS MATERIALIZED", "WITH p AS MATERIALIZED (SELECT ARRAY(")


def test_the_state_is_read_once_and_candidates_once(
    tenant: PostgresSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One statement per search reads the tenant's state (its newest row), also when the
    search looks twice (an explicit query that finds too little searches again for its
    words: one snapshot, one state); the size counted a moment ago is not counted again;
    the candidates are read with their scoring columns, never by id first and then
    again to be scored."""
    spy = Statements(monkeypatch)
    for query, searches in (
        ("walrus", 1),
        ("What did we decide about the deploy timeout for auth-api?", 1),
        ("walrus AND config", 2),
        ("deploy NOT walrus", 1),
        ("od5_x.cf", 1),
    ):
        tenant.search_messages(query, limit=20)  # caches warm
        sent = spy.during(lambda q=query: tenant.search_messages(q, limit=20))
        planned = sum(s.startswith("SELECT current_setting(") for s in sent)  # the planner
        assert planned == searches, (query, sent)
        assert sum(s.startswith("SELECT current_schema()") for s in sent) == 1, (query, sent)
        assert not any(COUNT in s for s in sent), (query, sent)
        assert not any("message_count" in s for s in sent if s.startswith(PROBES)), sent
        read = [s for s in sent if "m.session_id, m.timestamp" in s]
        assert read, (query, sent)
        assert all("ts_filter(" in s or "::text AS word" in s for s in read), (query, read)
        assert not any(s.startswith("SELECT id, ts_filter(") for s in sent), (query, sent)


def sized(store: PostgresSessionStore) -> tuple[int, int]:
    """The tenant's size as a search reads it, and its sessions' counters summed."""
    from memstrata.store.postgres import ranking

    with store.connection() as conn:
        _, total, _ = ranking.sample(conn, store.namespace)
        row = conn.execute(
            "SELECT sum(message_count) AS n FROM sessions WHERE namespace = %s",
            (store.namespace,),
        ).fetchone()
    assert row is not None
    return total, int(row["n"])


def test_outside_a_snapshot_each_search_reads_the_state(
    tenant: PostgresSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside a READ COMMITTED transaction (a search joining a write()), rows other
    connections commit between two searches count: each search reads the state itself."""
    tenant.search_messages("walrus AND config", limit=20)
    spy = Statements(monkeypatch)
    with tenant.write():
        sent = spy.during(lambda: tenant.search_messages("walrus AND config", limit=20))
    assert sum(s.startswith("SELECT current_setting(") for s in sent) == 2, sent
    assert sum(s.startswith("SELECT current_schema()") for s in sent) == 2, sent


def test_the_size_follows_appends_without_counting_and_deletes_by_counting(
    tenant: PostgresSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows appended since the size was counted, by this store or another process's,
    are added to it (the sample reads them anyway); a rewind, a deleted message or a
    deleted session makes this process count afresh; so does a count older than
    RECOUNT_S, which is how another process's deletes are seen."""
    from memstrata.store.postgres import ranking

    spy = Statements(monkeypatch)
    assert sized(tenant) == (566, 566)
    with PostgresSessionStore(DSN, namespace=tenant.namespace) as other:
        add(other, "elsewhere", ["one more", "and another"])
    tenant.append_messages("planted", [{"role": "user", "content": "a third"}])
    sent = spy.during(lambda: tenant.search_messages("walrus", limit=5))
    assert not any(COUNT in s for s in sent), sent
    assert sized(tenant) == (569, 569)

    first = tenant.get_messages("planted")[0]["id"]
    for change in (
        lambda: tenant.delete_messages([first]),
        lambda: tenant.delete_session("elsewhere"),
    ):
        change()
        sent = spy.during(lambda: tenant.search_messages("walrus", limit=5))
        assert sum(COUNT in s for s in sent) == 1, sent
        total, counters = sized(tenant)
        assert total == counters
    assert sized(tenant) == (566, 566)

    # Another process deletes (not the newest row, whose going is seen at once): seen
    # once the count is RECOUNT_S old.
    script = (
        "import sys\n"
        "from memstrata.store.postgres import PostgresSessionStore\n"
        "with PostgresSessionStore(sys.argv[1], namespace=sys.argv[2]) as store:\n"
        "    store.delete_session('filler')\n"
    )
    subprocess.run([sys.executable, "-c", script, DSN, tenant.namespace], check=True)
    assert sized(tenant) == (566, 6)
    monkeypatch.setattr(ranking, "RECOUNT_S", 0.0)
    assert sized(tenant) == (6, 6)


def probe_plan(store: PostgresSessionStore, query: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The executed plan (EXPLAIN ANALYZE, VERBOSE, JSON) of ``query``'s probe statement,
    run again in the search's snapshot with its planner settings."""
    captured: list[tuple[str, Any]] = []
    original = psycopg.Connection.execute

    def execute(conn: Any, sql: Any, params: Any = None, **kw: Any) -> Any:
        if isinstance(sql, str) and sql.startswith(PROBES):
            captured.append((sql, params))
        return original(conn, sql, params, **kw)

    monkeypatch.setattr(psycopg.Connection, "execute", execute)
    store.search_messages(query, limit=20)
    monkeypatch.undo()
    assert len(captured) == 1, captured
    sql, params = captured[0]
    with store.connection() as conn:
        conn.execute("SET LOCAL enable_seqscan = off")
        row = conn.execute("EXPLAIN (ANALYZE, VERBOSE, FORMAT JSON) " + sql, params).fetchone()
    assert row is not None
    return next(iter(row.values()))[0]["Plan"]


def substring_tests(plan: Any) -> list[int]:
    """The loops of every plan node that evaluates a substring test (``~*``)."""
    fields = ("Output", "Filter", "Index Cond", "Recheck Cond", "Join Filter")
    loops = []
    if any("~*" in str(plan.get(f, "")) for f in fields):
        loops.append(int(plan.get("Actual Loops", 0)))
    for child in plan.get("Plans", ()):
        loops += substring_tests(child)
    return loops


def test_a_substring_is_tested_only_when_the_indexes_found_nothing(
    tenant: PostgresSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An identifier the word index knows: no row is tested for its substring; cut
    inside, so that only a substring finds it: its rows are, and the search finds it."""
    known = substring_tests(probe_plan(tenant, "mod5_x.cfg", monkeypatch))
    assert known and all(n == 0 for n in known), known
    cut = substring_tests(probe_plan(tenant, "od5_x.cf", monkeypatch))
    assert any(n > 0 for n in cut), cut
    hits = tenant.search_messages("od5_x.cf", limit=5)
    assert [h["session_id"] for h in hits] == ["planted"]


def test_the_substring_test_comes_last_in_a_terms_or() -> None:
    """A term's predicate ORs its word, CJK and substring tests in that order: a row one
    of the index tests finds is never tested for the substring (OR stops at its first
    true arm)."""
    from memstrata.query.compile import compile_query
    from memstrata.store.postgres.search import SUBSTRING, term_sql

    tree = compile_query("mod5_x.cfg").tree
    assert tree is not None
    (term,) = tree.positive_terms()
    rendered = term_sql(term)
    kinds = [
        "substring" if SUBSTRING in sql else "cjk" if "m.cjk" in sql else "word"
        for sql, _ in rendered.arms
    ]
    assert kinds == ["word", "cjk", "substring"]
    assert rendered.pred.index(SUBSTRING) > rendered.pred.index("m.cjk @@")
    assert rendered.pred.index(SUBSTRING) > rendered.pred.index("m.tsv @@")


# One query per class of benchmarks/corpus.py (and identifiers), on the tenant above.
QUERIES = {
    "word": "walrus",
    "question": "What did we decide about the deploy timeout for auth-api?",
    "phrase": '"quantum flux capacitor"',
    "prefix": "walr*",
    "boolean": "walrus AND config",
    "cjk3": "数据库",
    "cjk2": "问题",
    "glued": "youer",
    "identifiers": "od5_x.cf",
}
# Statements per search_messages call, BEGIN and COMMIT included, caches warm: before
# the snapshot began in one statement, the tenant's size was read once per snapshot
# and candidates were read with their scoring columns, they were word 10, question 11,
# phrase 16 (an explicit phrase that finds too little searches again for its words),
# prefix 10, boolean 17 (the same), CJK 10, glued 10, identifiers 10; boolean was 13
# before a bounded read carried the scoring columns of its matches.
STATEMENTS = {
    "word": 8,
    "question": 9,
    "phrase": 12,
    "prefix": 8,
    "boolean": 12,
    "cjk3": 8,
    "cjk2": 8,
    "glued": 8,
    "identifiers": 8,
}


def test_statements_per_query_class(
    tenant: PostgresSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each statement is a round trip and a plan: a search of each class sends exactly
    these (more is a regression; fewer, a table to bring up to date here and in
    docs/postgres.md)."""
    spy = Statements(monkeypatch)
    counts = {}
    for cls, query in QUERIES.items():
        assert tenant.search_messages(query, limit=20), query  # each finds its plant
        counts[cls] = len(spy.during(lambda q=query: tenant.search_messages(q, limit=20)))
    assert counts == STATEMENTS


def test_a_typo_is_checked_against_the_sample_first(
    tenant: PostgresSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The words a typo is corrected against (memstrata.query.spelling): those the
    tenant's ranking sample holds are held without a statement (a GIN lookup reads a
    common word's whole posting list, even for one row); only the others are looked up,
    all in one statement, and a Latin word glued to CJK text is held by the CJK index."""
    spy = Statements(monkeypatch)
    with tenant._transaction(snapshot=True) as tx:
        words = ["routine", "status", "pipeline"]
        tx.held_words(words)  # the sample and the words' lexemes read: caches warm
        assert spy.during(lambda: tx.held_words(words)) == []
        sent = spy.during(
            lambda: tx.held_words(["status", "walrus", "youer", "educaton", "wlarus"])
        )
        # One statement for the words the sample lacks, whatever their number: each
        # index's predicate once, over an array of the words (store.postgres.held).
        lookups = [q for q in sent if "EXISTS" in q]
        assert len(lookups) == 1 and lookups[0].count("unnest") == 2, sent
        assert tx.held_words(["status", "walrus", "youer", "educaton", "wlarus"]) == [
            "status",
            "walrus",
            "youer",
        ]
    assert tenant.rank("what did the wlarus eat").corrections == {"wlarus": "walrus"}


def test_a_homophone_slip_costs_a_few_lookups_of_fixed_shape(
    tenant: PostgresSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Chinese question with a slip (迁 typed 前) asks the store about its bigrams the
    ranking sample lacks, then about the bigrams its homophones make with one neighbour,
    then with the other for those held: at most three statements, each one subquery per
    index over an array (store.postgres.held), never one per bigram (a UNION of 510
    subqueries took 110 ms to plan)."""
    spy = Statements(monkeypatch)
    question = "数据库前移之后回滚失败了吗"
    tenant.respell(question)  # caches warm (the lexemes, the reading table)
    sent = spy.during(lambda: tenant.respell(question))
    lookups = [q for q in sent if "EXISTS" in q]
    assert 1 <= len(lookups) <= 3, sent
    assert all(q.count("unnest") == 1 for q in lookups), lookups
    assert tenant.respell(question) == ("数据库迁移之后回滚失败了吗", {"前移": "迁移"})
