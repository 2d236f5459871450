"""Tests for memstrata.store.sqlite.substring: substring search on a position-less trigram index."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstrata.query.compile import compile_query
from memstrata.store.base import search_messages
from memstrata.store.sqlite import substring
from memstrata.store.sqlite.store import SessionStore

MESSAGES = [
    "why does getUserById return null?",
    "the user list is empty",
    "set user_id in config.ts, not in app.config.tsx",
    "Élan GETUSER élan",
    "我想修改youer服务端的配置",
    "服务 and 端 apart",
    "payments-service is down again",
    "payments service restarted",
    "get user by id",
]
QUERIES = [
    "getUser",
    "user_id",
    "config.ts",
    "payments-service",
    '"服务端的"',
    '"élan getuser"',
    "getUser NOT null",
    "user_id AND config.ts",
    "getUser OR payments-service",
    '"user by" NOT getUserById',
    "nothing-like-this",
]


def _make(path: Path, detail: str) -> SessionStore:
    # The trigram table is recreated with an explicit detail, whatever m001 ships; the
    # index triggers name the table, so they feed the new one.
    store = SessionStore(path)
    with store.read_conn() as conn:
        conn.execute("DROP TABLE messages_fts_trigram")
        conn.execute(
            "CREATE VIRTUAL TABLE messages_fts_trigram USING fts5(content, tool_name, "
            "tool_calls, content='messages', content_rowid='id', tokenize='trigram', "
            f"detail='{detail}')"
        )
        conn.commit()
    store.create_session("a", started_at=1.0)
    store.append_messages("a", [{"role": "user", "content": m} for m in MESSAGES])
    store.append_message(
        "a",
        "assistant",
        None,
        tool_calls=[{"function": {"name": "shell", "arguments": '{"cmd": "grep getUserById"}'}}],
    )
    return store


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[SessionStore, SessionStore]]:
    """The same messages in a store with trigram positions and one without."""
    full, none = _make(tmp_path / "full.db", "full"), _make(tmp_path / "none.db", "none")
    yield full, none
    full.close()
    none.close()


def _trigram_ids(store: SessionStore, query: str) -> set[int]:
    compiled = compile_query(query)
    assert compiled.tree is not None
    with store.read_conn() as conn:
        if substring.positions_kept(conn):
            match = compiled.match["trigram"]
            if match is None:
                return set()
            sql = "SELECT rowid FROM messages_fts_trigram WHERE messages_fts_trigram MATCH ?"
            return {int(r[0]) for r in conn.execute(sql, (match,))}
        rows = substring.candidates(conn, compiled.tree, "", [], "", 1000, "newest")
        return {r[0] for r in rows}


def test_detail_is_read_from_the_schema(stores: tuple[SessionStore, SessionStore]) -> None:
    """positions_kept is True for detail='full' and False once the index keeps no positions."""
    full, none = stores
    with full.read_conn() as conn:
        assert substring.positions_kept(conn)
    with none.read_conn() as conn:
        assert not substring.positions_kept(conn)


@pytest.mark.parametrize("query", QUERIES)
def test_substring_matches_equal_phrase_matches(
    stores: tuple[SessionStore, SessionStore], query: str
) -> None:
    """Trigram AND plus the substring check finds exactly the rows a phrase MATCH finds."""
    full, none = stores
    assert _trigram_ids(none, query) == _trigram_ids(full, query)


@pytest.mark.parametrize("query", QUERIES)
def test_search_finds_the_same_messages_without_positions(
    stores: tuple[SessionStore, SessionStore], query: str
) -> None:
    """search_messages returns the same messages whether the trigram index keeps positions."""
    full, none = stores
    for sort in (None, "newest", "oldest"):
        got = {h["id"] for h in search_messages(none, query, sort=sort)}
        assert got == {h["id"] for h in search_messages(full, query, sort=sort)}, sort


def test_substring_hits_come_newest_first_and_respect_filters(
    stores: tuple[SessionStore, SessionStore],
) -> None:
    """Without BM25 the substring hits rank by recency; role filters apply in the same SQL."""
    _, none = stores
    # The word index has no "userby": only the trigram index finds these.
    assert [h["id"] for h in search_messages(none, "UserBy")] == [10, 1]
    assert [h["id"] for h in search_messages(none, "UserBy", role_filter="assistant")] == [10]
    assert [h["id"] for h in search_messages(none, "UserBy", sort="oldest")] == [1, 10]


def test_long_needles_keep_a_bounded_number_of_trigrams() -> None:
    """A long phrase is matched through at most a dozen of its trigrams, ends included."""
    compiled = compile_query("abc_defghijklmnopqrstuvwxyz" * 2)
    assert compiled.tree is not None
    rendered = substring.render(compiled.tree)
    assert rendered is not None
    assert rendered[0].count(" AND ") == 11
    assert '"abc"' in rendered[0] and '"xyz"' in rendered[0]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(needle=st.text(alphabet="getUsr_idé服务端 .-", min_size=3, max_size=8))
def test_any_quoted_substring_agrees(
    stores: tuple[SessionStore, SessionStore], needle: str
) -> None:
    """For any quoted substring both indexes report the same rows."""
    full, none = stores
    query = '"' + needle + '"'
    if compile_query(query).tree is None:
        return
    assert _trigram_ids(none, query) == _trigram_ids(full, query)
