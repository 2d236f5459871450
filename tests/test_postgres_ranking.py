"""PostgreSQL ranks search candidates with SQLite's BM25 (memstrata.store.postgres.ranking).

The unit tests read tsvector and tsquery text as the server writes it; the others fill a
SQLite file and a PostgreSQL tenant with the same rows and compare the scores of the
same queries, which must agree to rounding for a tenant of at most SAMPLE_ROWS rows
(the statistics are exact there, as FTS5's).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg")

from helpers import PG_DSN as DSN  # noqa: E402
from helpers import drop_namespace, tokens_sql, write_turns  # noqa: E402
from memstrata.store import bm25  # noqa: E402
from memstrata.store.postgres import PostgresSessionStore, ranking  # noqa: E402
from memstrata.store.postgres.schema import word_vector  # noqa: E402
from memstrata.store.sqlite.store import SessionStore  # noqa: E402

ROWS = [
    "Caroline painted a sunset over the lake for the art show.",
    "Melanie ran a charity race for mental health last Saturday.",
    "The art show opens next week; Caroline will show three paintings.",
    "We talked about the lake house and the boat, the boat, the boat.",
    "A very long message about nothing much: " + "words and more words, " * 20 + "paint.",
    "元旦晚会上我表演了魔术，大家都很喜欢。",
    "我们决定下周二把数据库迁移到新的集群，先做备份。",
    "今天天气很好，我们去公园散步，然后在湖边画画。",
    "Caroline 说她想去北京看长城，她很喜欢画画。",
]

QUERIES = [
    "What did Caroline paint for the art show?",
    "boat lake",
    "charity race mental health",
    "元旦晚会表演了什么魔术？",
    "上次我们讨论数据库迁移，结论是什么？",
    "Caroline 喜欢画画吗？",
    "paint*",
    "sho*",
    "lak* OR boa*",
    '"art sho"*',
]


def test_bm25_is_fts5s_formula() -> None:
    assert bm25.idf(100, 10) == pytest.approx(math.log(90.5 / 10.5))
    assert bm25.idf(10, 9) == 1e-6  # floored: a term in most rows counts a little
    assert bm25.gain(0, 10, 10) == 0.0
    # tf 1 in a row of average length: (k1 + 1) / (1 + k1).
    assert bm25.gain(1, 10, 10) == pytest.approx(1.0)
    assert bm25.gain(2, 10, 10) == pytest.approx(2 * 2.2 / (2 + 1.2))
    # Longer rows weigh a term less.
    assert bm25.gain(1, 40, 10) < bm25.gain(1, 10, 10) < bm25.gain(1, 5, 10)


def test_vectors_and_phrases_read_as_the_server_writes_them() -> None:
    vector = ranking.parse_vector("'art':2,4 'art-show':1 'it''s':7 'show':3")
    assert vector == {"'art'": "2,4", "'art-show'": "1", "'it''s'": "7", "'show'": "3"}
    assert ranking.vector_length(vector) == 5
    assert ranking.text_length("'art':2,4 'art-show':1 'it''s':7 'show':3") == 5
    # A lexeme with a space (never written by the store) is read all the same.
    assert ranking.parse_vector("'a b':1,3 'c':2") == {"'a b'": "1,3", "'c'": "2"}
    phrase = ranking.phrase_patterns("'art-show' <-> 'art' <2> 'show'")
    assert phrase == ((("'art-show'", 0, False), ("'art'", 1, False), ("'show'", 3, False)),)
    assert ranking.term_frequency(vector, ranking.phrase_patterns("'art'")) == 2
    assert ranking.term_frequency(vector, ranking.phrase_patterns("'art' <-> 'show'")) == 1
    assert ranking.term_frequency(vector, ranking.phrase_patterns("'show' <-> 'art'")) == 1
    assert ranking.term_frequency(vector, ranking.phrase_patterns("'ar':*")) == 3
    both = ranking.phrase_patterns("('art' <-> 'show') & ('it''s')")
    assert len(both) == 2 and ranking.term_frequency(vector, both) == 1
    assert ranking.term_frequency(vector, ranking.phrase_patterns("'boat'")) == 0
    # A phrase the row lacks a word of, or holds out of order, counts nothing; a prefix
    # inside a phrase still matches; an AND of groups counts its fewest.
    assert ranking.term_frequency(vector, ranking.phrase_patterns("'art' <-> 'boat'")) == 0
    assert ranking.term_frequency(vector, ranking.phrase_patterns("'boat' <-> 'art'")) == 0
    assert ranking.term_frequency(vector, ranking.phrase_patterns("'art' <-> 'art'")) == 0
    assert ranking.term_frequency(vector, ranking.phrase_patterns("'art' <-> 'sh':*")) == 1
    fewest = ranking.phrase_patterns("('art') & ('show')")
    assert ranking.term_frequency(vector, fewest) == 1
    assert ranking.term_frequency(vector, ranking.phrase_patterns("('art') & ('boat')")) == 0


def test_a_sample_counts_the_postings_a_gin_scan_reads() -> None:
    """Every lexeme of a phrase is read, and every lexeme a prefix covers."""
    sample = ranking.Sample(total=3)
    sample.update(
        [
            (3, "'art':1 'show':2", None),
            (2, "'art':1 'artist':3", None),
            (1, "'boat':1", "'修改':1 '改':2"),
        ]
    )
    side = sample.word
    assert side.postings(ranking.phrase_patterns("'art'")) == 2
    assert side.postings(ranking.phrase_patterns("'art' <-> 'show'")) == 3
    assert side.postings(ranking.phrase_patterns("'art':*")) == 3
    assert side.postings(ranking.phrase_patterns("'kite'")) == 0
    assert sample.cjk.postings(ranking.phrase_patterns("'修改' <-> '改'")) == 2


def fill(store: Any, rows: list[str], start: int = 0) -> None:
    for i, text in enumerate(rows, start=start):
        store.create_session(f"s{i}", started_at=1_700_000_000.0 + i)
        store.append_messages(
            f"s{i}", [{"role": "user", "content": text, "timestamp": 1_700_000_000.0 + i}]
        )


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[SessionStore, PostgresSessionStore]]:
    namespace = f"t-rank-{uuid.uuid4().hex[:12]}"
    try:
        with (
            SessionStore(tmp_path / "state.db") as lite,
            PostgresSessionStore(DSN, namespace=namespace) as pg,
        ):
            yield lite, pg
    finally:
        drop_namespace(namespace)


def scores(store: Any, query: str) -> dict[int, float]:
    return {c.id: round(c.score, 9) for c in store.rank(query, dates=False).candidates}


@pytest.mark.postgres
def test_postgres_scores_equal_sqlites(pair: tuple[SessionStore, PostgresSessionStore]) -> None:
    lite, pg = pair
    fill(lite, ROWS)
    fill(pg, ROWS)
    lite_ids = [m["id"] for s in range(len(ROWS)) for m in lite.get_messages(f"s{s}")]
    pg_ids = [m["id"] for s in range(len(ROWS)) for m in pg.get_messages(f"s{s}")]
    to_lite = dict(zip(pg_ids, lite_ids, strict=True))
    for query in QUERIES:
        want = scores(lite, query)
        got = {to_lite[i]: s for i, s in scores(pg, query).items()}
        assert want and got.keys() == want.keys(), query
        for rid, score in want.items():
            assert got[rid] == pytest.approx(score, abs=1e-6), (query, rid)


@pytest.mark.postgres
def test_a_rows_lengths_are_written_with_it_and_read_by_ranking(
    pair: tuple[SessionStore, PostgresSessionStore],
) -> None:
    _, pg = pair
    # Past PostgreSQL's bounds too: a lexeme's 257th position, a token past 16383.
    edge = [
        "数据" * 300,
        "boat " * 300,
        "迁移数据库 " + "word " * 17_000 + "迁移",
        "",
    ]
    fill(pg, ROWS + edge)
    with psycopg.connect(DSN) as conn:
        rows = conn.execute(
            f"SELECT tsv_tokens, {tokens_sql('tsv')} AS w, "
            f"cjk_tokens, {tokens_sql('cjk')} AS c, tsv = {word_vector()} AS same "
            "FROM messages WHERE namespace = %s",
            (pg.namespace,),
        ).fetchall()
    assert len(rows) == len(ROWS) + len(edge)
    assert all(r[0] == r[1] and r[2] == r[3] and r[4] for r in rows), rows
    assert sum(r[2] is not None for r in rows) == 6  # the rows with CJK
    queries = [*QUERIES, "boat", "数据", "迁移 word"]
    written = {q: scores(pg, q) for q in queries}
    assert all(written.values())

    def counted(sql: str) -> dict[str, dict[int, float]]:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(sql, (pg.namespace,))
        return {q: scores(pg, q) for q in queries}

    # Rows written before the counts existed (NULL) are counted from their vectors.
    assert (
        counted("UPDATE messages SET tsv_tokens = NULL, cjk_tokens = NULL WHERE namespace = %s")
        == written
    )
    # And the stored counts are what ranking reads: wrong ones change the scores.
    assert counted("UPDATE messages SET tsv_tokens = 1, cjk_tokens = 1 WHERE namespace = %s") != (
        written
    )


@pytest.mark.postgres
def test_statistics_follow_the_rows_written_since(
    pair: tuple[SessionStore, PostgresSessionStore],
) -> None:
    lite, pg = pair
    fill(lite, ROWS[:4])
    fill(pg, ROWS[:4])
    before = scores(pg, "Caroline art show lake")
    assert before
    # More rows change every term's rarity and the average length: the kept sample
    # takes the new rows, and the scores are those of a sample read afresh.
    fill(lite, ROWS[4:], start=4)
    fill(pg, ROWS[4:], start=4)
    kept = scores(pg, "Caroline art show lake")
    ranking._samples.clear()
    assert scores(pg, "Caroline art show lake") == kept
    assert kept != before
    assert list(kept.values()) == pytest.approx(
        list(scores(lite, "Caroline art show lake").values()), abs=1e-6
    )


@pytest.mark.postgres
def test_a_large_tenant_keeps_its_newest_rows_as_statistics(
    pair: tuple[SessionStore, PostgresSessionStore],
) -> None:
    _, pg = pair
    pg.create_session("old", started_at=1_600_000_000.0)
    pg.append_messages("old", [{"role": "user", "content": "the zanzibar ferry timetable"}])
    pg.create_session("bulk", started_at=1_700_000_000.0)
    filler = [
        {"role": "user", "content": f"routine status update number {i} for the ferry team"}
        for i in range(ranking.SAMPLE_ROWS + 100)
    ]
    pg.append_messages("bulk", filler)
    found = pg.search_sessions("When does the zanzibar ferry leave?")
    assert found and found[0]["session_id"] == "old"
    with pg.connection() as conn:
        sample, total, _ = ranking.sample(conn, pg.namespace)
    assert sample.rows == ranking.SAMPLE_ROWS and not sample.complete
    assert sample.total == total == ranking.SAMPLE_ROWS + 101


@pytest.mark.postgres
def test_postings_per_row_as_a_walk_weighs_a_gin_scan(
    pair: tuple[SessionStore, PostgresSessionStore],
) -> None:
    """Per row of the sample, every lexeme of the terms; a phrase (a CJK word's bigrams)
    is not estimated (infinite), as its scan also rereads rows holding its lexemes."""
    from memstrata.query.compile import compile_query
    from memstrata.store.postgres.schema import TS_CONFIG
    from memstrata.store.postgres.search import cjk_tsquery

    _, pg = pair
    write_turns(pg, "s", ["walrus and kite", "walrus alone", "数据库迁移", "nothing here"])
    with pg.connection() as conn:
        sample, _, _ = ranking.sample(conn, pg.namespace)
        words = list(compile_query("walrus kite").tree.positive_terms())  # type: ignore[union-attr]
        assert ranking.postings(conn, words, sample, TS_CONFIG, cjk_tsquery) == 3 / 4
        cjk = list(compile_query("迁移数据").tree.positive_terms())  # type: ignore[union-attr]
        assert ranking.postings(conn, cjk, sample, TS_CONFIG, cjk_tsquery) == float("inf")
