"""Tests for memstrata.store.sqlite.bm25: ranking a boolean query's newest matches."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memstrata.store.sqlite.bm25 as bm25
from helpers import NATO_WORDS
from memstrata.query.compile import compile_query
from memstrata.store import base as store_base
from memstrata.store.base import search_messages
from memstrata.store.sqlite.fulltext import COLUMN_WEIGHTS
from memstrata.store.sqlite.store import SessionStore

WORDS = NATO_WORDS


def _varint(value: int) -> bytes:
    """SQLite's varint encoding (big-endian groups of 7 bits; a ninth byte holds 8)."""
    if value > 0x00FFFFFFFFFFFFFF:
        head = [((value >> (8 + 7 * i)) & 0x7F) | 0x80 for i in range(8)][::-1]
        return bytes([*head, value & 0xFF])
    groups = [value & 0x7F]
    value >>= 7
    while value:
        groups.append((value & 0x7F) | 0x80)
        value >>= 7
    return bytes(reversed(groups))


@pytest.mark.parametrize("values", [[0], [5, 127, 128], [300, 16_383, 16_384], [2**40], [2**63]])
def test_varints_decode_sqlite_encoding(values: list[int]) -> None:
    assert bm25.varints(b"".join(_varint(v) for v in values)) == values


def _store(tmp_path: Path, seed: int, rows: int = 120) -> SessionStore:
    """A store of rows holding distinct words (each at most once), lengths 1 to 9 words."""
    rng = random.Random(seed)
    store = SessionStore(tmp_path / f"s{seed}.db")
    store.create_session("s", started_at=1.0)
    messages = []
    for i in range(rows):
        words = rng.sample(WORDS, rng.randint(1, 9))
        messages.append({"role": "user", "content": " ".join(words), "timestamp": 10.0 + i})
    # Tool rows add length in the other columns, which BM25's length counts.
    messages.append(
        {
            "role": "assistant",
            "content": "alpha bravo",
            "tool_name": "run",
            "tool_calls": [{"function": {"name": "run", "arguments": '{"cmd": "ls -la"}'}}],
            "timestamp": 500.0,
        }
    )
    store.append_messages("s", messages)
    return store


QUERIES = [
    "alpha AND bravo",
    "alpha NOT charlie",
    "alpha AND bravo NOT charlie",
    "(alpha OR delta) AND echo",
    "alpha OR bravo NOT golf",
    '"alpha bravo" OR kilo NOT lima',
    "alp* AND hotel",
]


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("query", QUERIES)
def test_own_scores_equal_fts5_bm25_when_each_term_occurs_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, query: str
) -> None:
    """With every term at most once per row, counting presence is exactly FTS5's BM25."""
    compiled = compile_query(query)
    assert compiled.tree is not None and compiled.match["word"] is not None
    match = compiled.match["word"]
    with _store(tmp_path, seed) as store, store.read_conn() as conn:
        args = ", ".join(str(w) for w in COLUMN_WEIGHTS)
        expected = {
            int(r[0]): float(r[1])
            for r in conn.execute(
                f"SELECT rowid, bm25(messages_fts, {args}) FROM messages_fts "
                "WHERE messages_fts MATCH ?",
                (match,),
            )
        }
        assert expected, "the query must match something for the test to mean anything"
        monkeypatch.setattr(bm25, "EXACT_ROWS", -1)  # force the own scoring
        own = bm25.rank_newest(
            conn, "messages_fts", "word", compiled.tree, match, limit=1000, probe=1000
        )
        monkeypatch.undo()
        exact = bm25.rank_newest(
            conn,
            "messages_fts",
            "word",
            compiled.tree,
            match,
            limit=1000,
            probe=1000,
            weights=COLUMN_WEIGHTS,
        )
    assert {rid for rid, _ in own} == set(expected) == {rid for rid, _ in exact}
    for rid, score in own:
        assert score == pytest.approx(expected[rid], rel=1e-9, abs=1e-12)
    assert [s for _, s in own] == sorted(s for _, s in own)


def test_only_the_newest_matches_are_ranked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bm25, "EXACT_ROWS", -1)
    compiled = compile_query("alpha NOT charlie")
    assert compiled.tree is not None and compiled.match["word"] is not None
    with _store(tmp_path, 4) as store, store.read_conn() as conn:
        every = [
            int(r[0])
            for r in conn.execute(
                "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rowid DESC",
                (compiled.match["word"],),
            )
        ]
        ranked = bm25.rank_newest(
            conn, "messages_fts", "word", compiled.tree, compiled.match["word"], limit=7, probe=3
        )
    assert sorted(rid for rid, _ in ranked) == sorted(every[:7])


def test_estimated_counts_keep_the_ranking_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a small probe the counts are estimates; the best rows stay the best rows."""
    compiled = compile_query("alpha AND bravo NOT charlie")
    assert compiled.tree is not None and compiled.match["word"] is not None
    match = compiled.match["word"]
    with _store(tmp_path, 5, rows=600) as store, store.read_conn() as conn:
        monkeypatch.setattr(bm25, "EXACT_ROWS", -1)
        estimated = bm25.rank_newest(
            conn, "messages_fts", "word", compiled.tree, match, limit=1000, probe=20
        )
        exact = bm25.rank_newest(
            conn, "messages_fts", "word", compiled.tree, match, limit=1000, probe=1000
        )
    # A pure AND: every row holds every positive term, so the IDFs scale all scores
    # alike and the order (by length, then newest) is the same.
    assert [rid for rid, _ in estimated] == [rid for rid, _ in exact]


def test_density_count_is_exact_below_the_probe_and_close_above(tmp_path: Path) -> None:
    with _store(tmp_path, 6, rows=2000) as store, store.read_conn() as conn:
        newest = int(conn.execute("SELECT max(id) FROM messages").fetchone()[0])
        true = int(
            conn.execute(
                "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'alpha'"
            ).fetchone()[0]
        )
        assert bm25.density_count(conn, "messages_fts", "alpha", newest, true) == (true, True)
        estimate, exact = bm25.density_count(conn, "messages_fts", "alpha", newest, 100)
    assert not exact and estimate == pytest.approx(true, rel=0.3)


def test_search_ranks_a_large_boolean_query_without_bm25(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through search_messages: the excluded side stays out, a short row of both terms wins."""
    import memstrata.store.sqlite.fulltext as ft

    monkeypatch.setattr(bm25, "EXACT_ROWS", -1)
    monkeypatch.setattr(ft, "BOOLEAN_RANKED", 50)
    monkeypatch.setattr(store_base, "MESSAGE_CANDIDATES", 20)
    with SessionStore(tmp_path / "s.db") as s:
        s.create_session("a", started_at=1.0)
        filler = [
            {"role": "user", "content": f"deploy the staging cluster step {i}", "timestamp": 1.0}
            for i in range(200)
        ]
        s.append_messages(
            "a",
            [
                *filler[:100],
                {"role": "user", "content": "deploy staging", "timestamp": 2.0},
                {"role": "user", "content": "deploy staging in the desert", "timestamp": 3.0},
                *filler[100:],
            ],
        )
        short, desert = 101, 102  # ids: 100 filler rows come first
        # The short row is older than the 50 newest matches: not ranked.
        hits = [h["id"] for h in search_messages(s, "deploy AND staging", limit=5)]
        assert short not in hits and min(hits) > 152
        monkeypatch.setattr(ft, "BOOLEAN_RANKED", 150)
        hits = [h["id"] for h in search_messages(s, "deploy AND staging", limit=5)]
        assert hits[0] == short
        hits = [h["id"] for h in search_messages(s, "deploy NOT desert", limit=20)]
        assert desert not in hits and hits[0] == short


def test_rank_newest_on_an_empty_match(tmp_path: Path) -> None:
    compiled = compile_query("zulu AND yankee")
    assert compiled.tree is not None and compiled.match["word"] is not None
    with _store(tmp_path, 7) as store, store.read_conn() as conn:
        assert isinstance(conn, sqlite3.Connection)
        for exact_rows in (-1, 10**9):
            bm25.EXACT_ROWS, saved = exact_rows, bm25.EXACT_ROWS
            try:
                ranked = bm25.rank_newest(
                    conn,
                    "messages_fts",
                    "word",
                    compiled.tree,
                    compiled.match["word"],
                    limit=10,
                    probe=5,
                )
            finally:
                bm25.EXACT_ROWS = saved
            assert ranked == []


@pytest.fixture(scope="module")
def busy_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionStore]:
    """Rows of the word list, some Chinese, and a tool call: enough for every index."""
    store = _store(tmp_path_factory.mktemp("busy"), 8, rows=300)
    store.create_session("zh", started_at=2.0)
    store.append_messages(
        "zh",
        [
            {"role": "user", "content": "修改服务端配置 alpha 服务", "timestamp": 600.0},
            {"role": "user", "content": "部署youer服务端 bravo", "timestamp": 601.0},
        ],
    )
    yield store
    store.close()


_PIECES = [*NATO_WORDS[:6], "AND", "OR", "NOT", '"', "*", "(", ")", "服务", "alp*", "-", ":"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.lists(st.sampled_from(_PIECES), min_size=1, max_size=8).map(" ".join),
        st.text(max_size=40),
    )
)
def test_own_scoring_never_raises_and_keeps_to_the_matches(
    busy_store: SessionStore, query: str
) -> None:
    """Whatever the query, the own-scoring path (forced) answers without an error, with
    at most a page of distinct hits."""
    import memstrata.store.sqlite.fulltext as ft

    saved = bm25.EXACT_ROWS, ft.BOOLEAN_RANKED, store_base.MESSAGE_CANDIDATES
    bm25.EXACT_ROWS, ft.BOOLEAN_RANKED, store_base.MESSAGE_CANDIDATES = -1, 40, 20
    try:
        hits = search_messages(busy_store, query, limit=10)
    finally:
        bm25.EXACT_ROWS, ft.BOOLEAN_RANKED, store_base.MESSAGE_CANDIDATES = saved
    ids = [h["id"] for h in hits]
    assert len(ids) == len(set(ids)) <= 10
