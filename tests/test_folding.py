"""Chinese folding: traditional and simplified characters, full-width and ASCII letters and
digits find each other, in the session store and the facts store on both backends, and
the migrations re-index what was written before folding."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import PG_DSN
from memstrata.providers.facts.store import FactStore
from memstrata.query.cjk import cjk_terms, unfolded_cjk_terms
from memstrata.query.compile import compile_query
from memstrata.query.fold import FOLDING, fold, folds
from memstrata.store.sqlite import SessionStore
from memstrata.store.sqlite import migrations as sqlite_migrations
from memstrata.store.sqlite.migrations import CJK_FUNCTION, UNFOLDED_CJK_FUNCTION

TRADITIONAL = "我們決定下週二把數據庫遷移到新的集群，先做備份。"
SIMPLIFIED = "简体记录：数据库备份在周五完成。"
FULL_WIDTH = "ＡＰＩ密钥存放在Vault里，编号１２３４。"


def test_fold_maps_one_character_to_one() -> None:
    assert fold("數據庫遷移") == "数据库迁移"
    assert fold("ＡＰＩ１２３ｘ") == "API123x"
    # Punctuation stays: folded, full-width quotes or minus signs would become syntax.
    assert fold("（注意）＂引号＂－号") == "（注意）＂引号＂－号"
    assert fold("plain English, 简体") == "plain English, 简体"
    assert folds("數據") and folds("ＡＰＩ") and not folds("数据") and not folds(None)
    assert len(set(FOLDING)) == len(FOLDING) > 3000


@given(st.text())
def test_fold_keeps_length_and_is_idempotent(text: str) -> None:
    folded = fold(text)
    assert len(folded) == len(text)
    assert fold(folded) == folded


# Text drawn from the folding table's own characters (traditional characters beyond the
# Basic Multilingual Plane among them), other Chinese, ASCII and full-width forms.
_FOLDING_TEXT = st.text(
    st.sampled_from(FOLDING) | st.sampled_from("数据库迁移 ,。Ab１２ＡＰ𠀀😀") | st.characters()
)


@given(_FOLDING_TEXT)
def test_fold_is_the_whole_table_applied(text: str) -> None:
    """fold skips the table when a scan finds nothing to fold: its answer is still the
    table's, character by character, whatever plane a character is in."""
    table = {ord(c): ord(fold(c)) for c in set(text)}
    assert fold(text) == text.translate(table)
    assert fold(text) == "".join(fold(c) for c in text)
    assert all(fold(c) != c for c in FOLDING)


def test_cjk_index_text_is_folded() -> None:
    assert cjk_terms("數據庫") == "数据 据库 库"
    assert unfolded_cjk_terms("數據庫") == "數據 據庫 庫"
    # A chunk of full-width letters holds no CJK but is indexed here, folded.
    assert cjk_terms("ＡＰＩ key") == "API"
    assert unfolded_cjk_terms("ＡＰＩ key") is None
    assert cjk_terms("plain english") is None


def test_queries_are_folded() -> None:
    assert compile_query("數據庫遷移").match == compile_query("数据库迁移").match
    assert compile_query("ＡＰＩ").match == compile_query("API").match


def seed(store: Any) -> None:
    for sid, text in (("tw", TRADITIONAL), ("cn", SIMPLIFIED), ("fw", FULL_WIDTH)):
        store.create_session(sid, source="cli")
        store.append_messages(sid, [{"role": "user", "content": text}])
    store.create_session("en", source="cli")
    store.append_messages("en", [{"role": "user", "content": "The API key rotates monthly."}])


def sessions(store: Any, query: str) -> list[str]:
    return [h["session_id"] for h in store.search_messages(query, limit=10)]


def test_traditional_and_simplified_find_each_other(store: Any) -> None:
    seed(store)
    # Simplified question, traditional message; traditional question, both scripts.
    assert sessions(store, "上次数据库迁移的结论是什么？")[:1] == ["tw"]
    assert set(sessions(store, "數據庫備份")[:2]) == {"tw", "cn"}
    # The snippet marks the message as written where the folded question matched.
    [hit] = [h for h in store.search_messages("数据库迁移", limit=5) if h["session_id"] == "tw"]
    assert ">>>數據庫遷移<<<" in hit["snippet"]


def test_full_width_and_ascii_find_each_other(store: Any) -> None:
    seed(store)
    assert set(sessions(store, "api")) >= {"fw", "en"}
    assert set(sessions(store, "ＡＰＩ")) >= {"fw", "en"}
    assert sessions(store, "１２３４")[:1] == ["fw"] == sessions(store, "1234")[:1]


def test_facts_fold_too(facts: Any) -> None:
    facts.add("記憶體不足導致服務重啟，快取已調小。")
    facts.add("用户的显卡是ＲＴＸ４０９０。")
    assert [f.content for f in facts.search("服务重启")] == ["記憶體不足導致服務重啟，快取已調小。"]
    assert [f.content for f in facts.search("rtx4090")] == ["用户的显卡是ＲＴＸ４０９０。"]


# -- migrations: stores written before folding ----------------------------------------------


def before_folding(conn: sqlite3.Connection, prefix: str) -> None:
    """The CJK index triggers (names starting with ``prefix``) as an earlier version made
    them: calling the function of the unfolded tokens."""
    rows = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name LIKE ?",
        (prefix + "%",),
    ).fetchall()
    assert len(rows) == 3
    for name, sql in rows:
        conn.execute(f"DROP TRIGGER {name}")
        conn.execute(sql.replace(CJK_FUNCTION, UNFOLDED_CJK_FUNCTION))


def test_sqlite_stores_written_before_folding_are_reindexed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store whose CJK index holds unfolded tokens (as every store written before) is
    re-indexed when it opens: the folded question finds the traditional message, and
    deleting that message takes its tokens out of the index (a contentless index handed
    other tokens than it was given would keep them)."""
    path = tmp_path / "state.db"
    with monkeypatch.context() as old:
        old.setattr(sqlite_migrations, "cjk_terms", unfolded_cjk_terms)
        with SessionStore(path) as store:
            seed(store)
    with sqlite3.connect(path) as conn:
        terms = conn.execute("SELECT count(*) FROM messages_fts_cjk WHERE terms MATCH '數據'")
        assert terms.fetchone()[0] == 1  # written unfolded
        before_folding(conn, "messages_fts_cjk_")
        conn.execute("DELETE FROM _migrations WHERE name = 'm005_folded_cjk_index'")
    with SessionStore(path) as store:
        assert sessions(store, "数据库迁移")[:1] == ["tw"]
        assert "fw" in sessions(store, "api")
        assert store.check_indexes() == []
        store.delete_session("tw")
        store.delete_session("fw")
        assert "tw" not in sessions(store, "数据库")
    with sqlite3.connect(path) as conn:
        sqlite_migrations.register_functions(conn)
        for token in ("迁移", "遷移", "集群", "api"):  # only in the deleted messages
            found = conn.execute(
                "SELECT count(*) FROM messages_fts_cjk WHERE terms MATCH ?", (f'"{token}"',)
            )
            assert found.fetchone()[0] == 0, token
        conn.execute("INSERT INTO messages_fts_cjk(messages_fts_cjk) VALUES ('integrity-check')")


def test_sqlite_facts_written_before_folding_are_reindexed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "facts.db"
    with monkeypatch.context() as old:
        old.setattr(sqlite_migrations, "cjk_terms", unfolded_cjk_terms)
        with FactStore(path) as facts:
            fact = facts.add("記憶體不足導致服務重啟")
    with sqlite3.connect(path) as conn:
        before_folding(conn, "facts_fts_cjk_")
        conn.execute("DELETE FROM _migrations WHERE name = 'm003_folded_cjk_index'")
    with FactStore(path) as facts:
        assert [f.id for f in facts.search("记忆体不足")] == [fact.id]
        facts.forget(fact.id)
    with sqlite3.connect(path) as conn:
        sqlite_migrations.register_functions(conn)
        # Purged or kept for its history, the fact's index rows are the folded ones.
        gone = conn.execute("SELECT count(*) FROM facts_fts_cjk WHERE terms MATCH '\"記憶\"'")
        assert gone.fetchone()[0] == 0


@pytest.mark.postgres
def test_postgres_rows_written_before_folding_are_refolded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The migrations m009 (messages) and f002 (facts) write the CJK vectors of rows
    written before folding again, in every tenant of the schema."""
    from memstrata.providers.facts.postgres import PostgresFactStore
    from memstrata.store.postgres import PostgresSessionStore
    from memstrata.store.postgres import messages as pg_messages

    schema = f"fold_{uuid.uuid4().hex[:10]}"
    dsn = f"{PG_DSN}?options=-csearch_path%3D{schema},public"
    with psycopg.connect(PG_DSN, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    try:
        with monkeypatch.context() as old:
            old.setattr(pg_messages, "cjk_terms", unfolded_cjk_terms)
            with PostgresSessionStore(dsn, namespace="a") as store:
                seed(store)
            with PostgresFactStore(dsn, namespace="a") as facts:
                facts.add("記憶體不足導致服務重啟")
        with psycopg.connect(dsn, autocommit=True) as conn:
            before = conn.execute("SELECT count(*) FROM messages WHERE cjk @@ '數據'").fetchone()
            assert before is not None and before[0] == 1
            conn.execute("DELETE FROM _migrations WHERE name = 'm009_folded_cjk_vectors'")
            conn.execute("DELETE FROM _facts_migrations WHERE name = 'f002_folded_cjk_vectors'")
        with PostgresSessionStore(dsn, namespace="a") as store:
            assert sessions(store, "数据库迁移")[:1] == ["tw"]
            assert "fw" in sessions(store, "api")
        with PostgresFactStore(dsn, namespace="a") as facts:
            assert [f.content for f in facts.search("记忆体不足")] == ["記憶體不足導致服務重啟"]
        with psycopg.connect(dsn, autocommit=True) as conn:
            # Each row's vector and length are what a writer of today writes.
            rows = conn.execute(
                "SELECT content, tool_name, tool_calls, cjk::text, cjk_tokens FROM messages"
            ).fetchall()
            for content, tool_name, tool_calls, vector, tokens in rows:
                written, length = pg_messages.cjk_row(content, tool_name, tool_calls)
                cast = conn.execute("SELECT %s::tsvector::text", [written]).fetchone()
                assert cast is not None and (vector, tokens) == (cast[0], length)
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def test_a_process_of_an_earlier_version_cannot_write_unfolded_tokens(tmp_path: Path) -> None:
    """After the migration the triggers call a function an earlier version does not
    have: its write fails, and nothing is written, instead of indexing unfolded tokens
    that a later delete (folded) could not take out of the contentless index."""
    path = tmp_path / "state.db"
    with SessionStore(path) as store:
        seed(store)
    conn = sqlite3.connect(path)
    try:
        # An earlier version's connection registers only the function it knows.
        conn.create_function(UNFOLDED_CJK_FUNCTION, 3, unfolded_cjk_terms, deterministic=True)
        with pytest.raises(sqlite3.OperationalError, match=f"no such function: {CJK_FUNCTION}"):
            conn.execute(
                "INSERT INTO messages(session_id, role, content, timestamp) "
                "VALUES ('tw', 'user', '數據庫', 1.0)"
            )
        assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 4
    finally:
        conn.close()
