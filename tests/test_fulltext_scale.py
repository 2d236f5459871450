"""Tests for the large-store shortcuts of memstrata.store.sqlite.fulltext.

Each shortcut (index presence instead of reading text, the single-word AND before a
multi-word term, one BM25 statement when the index has few matches, parentless sessions
skipping the lineage walk) must give the answer the plain path gives. The bounds are
lowered with monkeypatch so a small real store takes the large-store paths.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import memstrata.store.sqlite.fulltext as ft
from helpers import traced_reads
from memstrata.query.compile import compile_query
from memstrata.query.filters import make_filters
from memstrata.store import base as store_base
from memstrata.store.base import search_messages
from memstrata.store.lineage import lineage_roots
from memstrata.store.sqlite.store import SessionStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SessionStore]:
    """Messages holding every subset of three common words, oldest first, plus filler."""
    s = SessionStore(tmp_path / "state.db")
    s.create_session("a", started_at=1.0)
    messages = [{"role": "user", "content": "kafka redis nginx all three at once"}]
    messages += [{"role": "user", "content": f"kafka and redis only {i}"} for i in range(3)]
    messages += [{"role": "assistant", "content": f"kafka lag report {i}"} for i in range(12)]
    messages += [{"role": "user", "content": f"redis eviction {i}"} for i in range(12)]
    messages += [{"role": "assistant", "content": f"nginx reload {i}"} for i in range(12)]
    messages += [{"role": "user", "content": f"filler line {i}"} for i in range(40)]
    s.append_messages("a", messages)
    yield s
    s.close()


WORDS = ("kafka", "redis", "nginx")


def _check_presence_scores(store: SessionStore, hits: list[dict[str, object]]) -> None:
    """Each hit scores by the words its text holds: equal sets score equally, and a
    message holding more of the words scores higher than one holding a subset."""
    with store.read_conn() as conn:
        texts = {int(r[0]): str(r[1]) for r in conn.execute("SELECT id, content FROM messages")}
    held = {h["id"]: frozenset(w for w in WORDS if w in texts[int(str(h["id"]))]) for h in hits}
    score = {h["id"]: float(str(h["score"])) for h in hits}
    for x in hits:
        for y in hits:
            hx, hy = held[x["id"]], held[y["id"]]
            if hx == hy:
                assert score[x["id"]] == pytest.approx(score[y["id"]])
            elif hx > hy:
                assert score[x["id"]] > score[y["id"]]


def test_presence_from_the_index_scores_as_the_text_would(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every candidate scores the IDF of the words its text holds, without reading text."""
    monkeypatch.setattr(ft, "COMMON_DF", 5)
    monkeypatch.setattr(store_base, "MESSAGE_CANDIDATES", 40)
    with traced_reads(store) as statements:
        hits = search_messages(store, "kafka redis nginx", limit=40)
    # The newest rows (the fill, ids 17-40) were settled without reading their text; a
    # text read may only serve the "every term" step.
    read = [s for s in statements if "SELECT id, content, tool_name" in s]
    ids = {int(x) for s in read for x in s.split("IN (")[1].rstrip(")").split(", ")}
    assert not ids & set(range(17, 41))
    assert hits[0]["id"] == 1  # the one message holding all three words
    assert {h["id"] for h in hits[1:4]} == {2, 3, 4}  # then those holding two
    _check_presence_scores(store, hits)


def test_a_filter_below_the_walks_falls_back_to_the_text(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows the per-term walks did not reach (a filter skipped rows) are read and checked."""
    monkeypatch.setattr(ft, "COMMON_DF", 5)
    monkeypatch.setattr(store_base, "MESSAGE_CANDIDATES", 10)
    with traced_reads(store) as statements:
        # The newest user rows are older than the newest 10 rows of "nginx" (assistant
        # rows): its walk does not reach them, so their text settles it.
        hits = search_messages(store, "kafka redis nginx", role_filter="user", limit=10)
    assert [s for s in statements if "SELECT id, content, tool_name" in s]
    assert hits and all(h["role"] == "user" for h in hits)
    assert hits[0]["id"] == 1
    _check_presence_scores(store, hits)


def test_multi_word_terms_are_checked_after_the_single_word_and(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``auth-api`` (a phrase) joins the AND through the text of the single-word matches."""
    monkeypatch.setattr(ft, "COMMON_DF", 5)
    monkeypatch.setattr(store_base, "MESSAGE_CANDIDATES", 4)
    with SessionStore(tmp_path / "s.db") as s:
        s.create_session("a", started_at=1.0)
        s.append_messages(
            "a",
            [{"role": "user", "content": "raise the timeout for auth-api to 30s"}]
            + [{"role": "user", "content": f"timeout on auth and api {i}"} for i in range(10)]
            + [{"role": "user", "content": f"auth-api deploy {i}"} for i in range(10)]
            + [{"role": "user", "content": f"timeout again {i}"} for i in range(10)]
            + [{"role": "user", "content": f"filler {i}"} for i in range(30)],
        )
        # The single-word AND ("timeout") overflows 2k rows, yet the oldest message, the
        # only one holding both terms, is found by the whole AND and ranks first.
        hits = search_messages(s, "timeout auth-api", limit=4)
        assert hits[0]["id"] == 1
        monkeypatch.setattr(store_base, "MESSAGE_CANDIDATES", 40)
        # Complete (fewer than 2k rows): checked on the text, same answer.
        assert search_messages(s, "timeout auth-api", limit=4)[0]["id"] == 1
        # "auth and api" in one message is not the phrase: those rows rank below.
        ranked = [h["id"] for h in search_messages(s, "timeout auth-api", limit=40)]
        assert ranked.index(1) == 0 and set(ranked[1:]) >= set(range(2, 12))


def test_one_bm25_statement_when_the_index_has_few_matches(store: SessionStore) -> None:
    """A filter that leaves fewer than k rows of a complete list does not re-run the query."""
    with store.read_conn() as conn:
        statements: list[str] = []
        conn.set_trace_callback(statements.append)
        filters = make_filters(role_filter="assistant")
        found = ft.collect_candidates(conn, compile_query("kafka"), filters, k=14)
        conn.set_trace_callback(None)
        roles = dict(conn.execute("SELECT id, role FROM messages").fetchall())
    assert len([s for s in statements if "bm25(messages_fts," in s]) == 1
    # 16 rows hold "kafka" (all within the 2k list), 12 of them assistant rows.
    assert sorted(c.id for c in found) == list(range(5, 17))
    assert all(roles[c.id] == "assistant" for c in found)


def test_lineage_roots_walks_only_children(tmp_path: Path) -> None:
    """Parentless sessions are their own root; children walk up to theirs; cycles end."""
    with SessionStore(tmp_path / "s.db") as s:
        for sid, parent in (("r", None), ("c1", "r"), ("c2", "c1"), ("lone", None)):
            s.create_session(sid, started_at=1.0, parent_session_id=parent)
        s.create_session("x", started_at=1.0)
        s.create_session("y", started_at=1.0, parent_session_id="x")
        with s.write() as conn:
            # Damaged data: a parent loop must not run away.
            conn.execute("UPDATE sessions SET parent_session_id = 'y' WHERE id = 'x'")
        with s._transaction() as tx:
            roots = lineage_roots(tx, ["r", "c1", "c2", "lone", "missing", "y"])
    assert roots["r"] == roots["c1"] == roots["c2"] == "r"
    assert roots["lone"] == "lone" and roots["missing"] == "missing"
    assert roots["y"] in {"x", "y"}


def test_a_filter_that_drops_every_ranked_row_runs_the_exact_query(
    store: SessionStore,
) -> None:
    """When the best 2k rows are all filtered out, older matching rows are still found."""
    filters = make_filters(role_filter="user")
    with store.read_conn() as conn:
        # "kafka" is in 16 rows: the 12 newest are assistant rows. With k=3 the ranked
        # list holds 6 rows, possibly all assistant ones; the user rows must still come.
        found = ft.collect_candidates(conn, compile_query("kafka lag OR kafka"), filters, k=3)
        roles = dict(conn.execute("SELECT id, role FROM messages").fetchall())
    assert found and all(roles[c.id] == "user" for c in found)


def test_a_dense_term_is_checked_as_a_word_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A term in over a tenth of the rows is checked on text, where ``run`` must start a
    word: ``truncate`` does not hold it."""
    monkeypatch.setattr(ft, "COMMON_DF", 5)
    monkeypatch.setattr(store_base, "MESSAGE_CANDIDATES", 40)
    with SessionStore(tmp_path / "s.db") as s:
        s.create_session("a", started_at=1.0)
        s.append_messages(
            "a",
            # The row counts are estimated from the newest matches: "run" is spread over the
            # newest rows (dense), "deploy" sits among the oldest (not dense).
            [{"role": "user", "content": "run the deploy again tonight"}]
            + [{"role": "user", "content": f"truncate then deploy {i}"} for i in range(8)]
            + [
                {"role": "user", "content": f"run step {i}" if i % 5 == 0 else f"filler {i}"}
                for i in range(150)
            ],
        )
        with traced_reads(s) as statements:
            hits = search_messages(s, "run deploy", limit=40)
    # The dense term was not walked in the AND.
    assert not [x for x in statements if '"run" AND' in x or 'AND "run"' in x]
    assert hits[0]["id"] == 1
    truncates = [h for h in hits if "truncate" in str(h["snippet"])]
    assert truncates and all(h["score"] < hits[0]["score"] for h in truncates)


def _phrase_store(path: Path, copies: int) -> SessionStore:
    """Common words "auth" and "api"; the phrase "auth api" in ``copies`` rows (twice in
    the first)."""
    s = SessionStore(path)
    s.create_session("a", started_at=1.0)
    messages = [{"role": "user", "content": "auth api and again auth api here"}]
    messages += [{"role": "user", "content": f"the auth api call {i}"} for i in range(copies - 1)]
    messages += [{"role": "user", "content": f"auth only {i}"} for i in range(15)]
    messages += [{"role": "assistant", "content": f"api only {i}"} for i in range(15)]
    messages += [{"role": "user", "content": f"api before auth {i}"} for i in range(5)]
    s.append_messages("a", messages)
    return s


def _page(store: SessionStore, query: str, **kw: object) -> list[tuple[object, object]]:
    return [(h["id"], h["score"]) for h in search_messages(store, query, limit=10, **kw)]


@pytest.mark.parametrize("copies", [3, 8])
def test_a_phrase_in_few_rows_is_ranked_without_its_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, copies: int
) -> None:
    """A phrase whose words are in few rows is ranked in one statement, as the probe and
    then bm25() would rank it; one found in more than COMMON_DF rows takes the probe."""
    monkeypatch.setattr(ft, "COMMON_DF", 5)
    with _phrase_store(tmp_path / "s.db", copies) as s:
        with traced_reads(s) as statements:
            fast = _page(s, '"auth api"')
            fast_user = _page(s, '"auth api"', role_filter="user")
        probes = [x for x in statements if "ORDER BY rowid DESC" in x and "auth api" in x]
        monkeypatch.setattr(ft, "_rare_phrase", lambda *a, **kw: None)
        assert fast == _page(s, '"auth api"')
        assert fast_user == _page(s, '"auth api"', role_filter="user")
    # The phrase's rows first, then its words' rows; ranked by bm25() (the row holding
    # the phrase twice on top) when it is rare, newest first when it is common.
    assert fast[0][0] == (1 if copies <= 5 else copies)
    assert {mid for mid, _ in fast[:copies]} == set(range(1, copies + 1))
    assert bool(probes) == (copies > 5)


@pytest.mark.parametrize("copies", [12, 13, 30])
def test_a_phrase_probe_walks_newest_first_only_as_far_as_the_page(
    tmp_path: Path, copies: int
) -> None:
    """With ``head``, a phrase's probe walks its newest ``head`` rows newest first and the
    rest from the oldest row up: the same exact count up to the probe, an estimate above
    it, and the newest rows kept for the later steps."""
    with _phrase_store(tmp_path / "s.db", copies) as s, s.read_conn() as conn:
        total = int(conn.execute("SELECT max(id) FROM messages").fetchone()[0])
        plain = ft.bm25.density_count(ft.bm25.Walks(conn), "messages_fts", '"auth api"', total, 12)
        walks = ft.bm25.Walks(conn)
        seen: list[str] = []
        conn.set_trace_callback(seen.append)
        headed = ft.bm25.density_count(walks, "messages_fts", '"auth api"', total, 12, head=4)
        kept = walks.newest("messages_fts", '"auth api"', 4)
        conn.set_trace_callback(None)
    if copies <= 12:
        assert headed == plain == (float(copies), True)
    else:
        assert not headed[1] and not plain[1]
        assert headed[0] == pytest.approx(copies, rel=0.5)
    backwards = [x for x in seen if "rowid DESC" in x]
    forwards = [x for x in seen if "rowid < " in x]
    assert len(backwards) == 1 and "LIMIT 4" in backwards[0]
    assert len(forwards) == 1 and "LIMIT 9" in forwards[0]  # 13 rows in all, 4 of them read
    # The newest rows, newest first; the later step asked for them without a statement.
    assert kept == list(range(copies, copies - 4, -1))
    assert len([x for x in seen if "MATCH" in x]) == 2


def test_a_common_lone_phrase_gives_the_page_the_full_probe_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above the probe, a lone phrase's page (its newest matches, filters applied) is the
    one the newest-first probe of every row gave."""
    monkeypatch.setattr(ft, "COMMON_DF", 12)
    monkeypatch.setattr(ft, "_rare_phrase", lambda *a, **kw: None)
    with _phrase_store(tmp_path / "s.db", 30) as s:
        with traced_reads(s) as statements:
            pages = [_page(s, '"auth api"', offset=o) for o in (0, 5, 20)]
            pages.append(_page(s, '"auth api"', role_filter="user"))
        assert [x for x in statements if "rowid < " in x]
        real = ft.bm25.density_count
        monkeypatch.setattr(
            ft.bm25,
            "density_count",
            lambda conn, table, match, newest, probe, head=None: real(
                conn, table, match, newest, probe
            ),
        )
        again = [_page(s, '"auth api"', offset=o) for o in (0, 5, 20)]
        again.append(_page(s, '"auth api"', role_filter="user"))
    assert pages == again
    assert [mid for mid, _ in pages[0]] == list(range(30, 20, -1))


def test_a_lone_phrase_reads_only_its_page_from_the_word_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query that is one quoted phrase joins only its page of rows with their messages
    (not the wider candidate set a search ranks), and each page is the one the wide
    search gives: bm25() first, equal scores to the newer row, filters applied."""
    from memstrata.store.sqlite.transaction import SQLiteTransaction

    monkeypatch.setattr(ft, "COMMON_DF", 40)  # 30 rows hold the phrase: rare
    with _phrase_store(tmp_path / "s.db", 30) as s:
        with traced_reads(s) as statements:
            first = _page(s, '"auth api"')
        joins = [x for x in statements if x.startswith("SELECT m.id, m.session_id, m.timestamp")]
        assert len(joins) == 1
        assert len(joins[0].split("IN (")[1].split(")")[0].split(",")) == 10
        # The row holding the phrase twice, then the equal rows newest first.
        assert [mid for mid, _ in first] == [1, *range(30, 21, -1)]
        kinds: list[dict[str, object]] = [{}, {"role_filter": "user"}, {"sort": "relevance"}]
        paged = {
            (i, offset): _page(s, '"auth api"', offset=offset, **kw)
            for i, kw in enumerate(kinds)
            for offset in (0, 5, 10, 25)
        }
        monkeypatch.setattr(SQLiteTransaction, "phrase_pages", False)
        assert first == _page(s, '"auth api"')
        for (i, offset), page in paged.items():
            assert page == _page(s, '"auth api"', offset=offset, **kinds[i])


def test_a_prefix_is_walked_once_per_search(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The density probe, the newest matches and each term's presence share one walk of a
    prefix term (without a prefix index each walk merges every term it covers)."""
    # Both prefixes are in 16 rows: common; the probe (13 rows) reaches past a page.
    monkeypatch.setattr(ft, "COMMON_DF", 12)
    monkeypatch.setattr(store_base, "MESSAGE_CANDIDATES", 5)
    with traced_reads(store) as statements:
        shared = _page(store, "kaf* OR redi*")
    walks = [x for x in statements if "FROM messages_fts WHERE" in x and "rowid DESC" in x]
    # One walk per prefix (as the OR of the words it covers), however many steps read it.
    assert len([x for x in walks if "kafka" in x]) == 1
    assert len([x for x in walks if '"redi"' in x]) == 1  # the stem of redis
    monkeypatch.setattr(
        ft.bm25.Walks,
        "newest",
        lambda self, table, match, limit: _plain_walk(self, table, match, limit),
    )
    assert shared == _page(store, "kaf* OR redi*")
    assert shared[0][0] in (1, 2, 3, 4)  # holds both


def _plain_walk(walks: ft.bm25.Walks, table: str, match: str, limit: int) -> list[int]:
    rows = walks.conn.execute(
        f"SELECT rowid FROM {table} WHERE {table} MATCH ? ORDER BY rowid DESC LIMIT ?",
        (match, limit),
    )
    return [int(r[0]) for r in rows]


def test_a_prefix_walks_as_the_or_of_the_words_it_covers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The OR of the covered words matches the rows the prefix matches; the prefix is
    stemmed first ("tracing"* covers the words of "trace"*), a stem the stemmer would
    shorten again is written as a word that tokenizes back to it, and a prefix of two
    tokens, of too many words, or of more words than pages its doclists span (on this
    small store: every prefix, unless the bound is lifted) is left as written."""
    from memstrata.store.sqlite import prefix

    with SessionStore(tmp_path / "s.db") as s:
        s.create_session("a", started_at=1.0)
        words = ["trace", "traces", "tracing", "traceback", "tracer", "track", "trade"]
        # Indexed as "postgres", "agre", "releas", "failed": quoted, each of them would
        # be stemmed again ("postgr", "agr", ...) and match other words or none.
        words += ["postgresing", "postgres", "postgresql", "agreed", "agr", "releasing"]
        words += ["faileding", "failed", "fail"]
        s.append_messages(
            "a", [{"role": "user", "content": f"{w} {i}"} for i, w in enumerate(words)]
        )
        s.append_messages(
            "a", [{"role": "user", "content": f"zz{i:04d}"} for i in range(prefix.MAX_TERMS + 1)]
        )
        s.append_messages("a", [{"role": "user", "content": f"yy{i:03d}"} for i in range(300)])
        with s.read_conn() as conn:

            def rows(match: str) -> set[int]:
                found = conn.execute(
                    "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?", (match,)
                )
                return {int(r[0]) for r in found}

            # A few pages hold every word here: FTS5's merge of them is the cheaper walk.
            assert prefix.as_or(conn, "messages_fts", '"yy"*') is None
            monkeypatch.setattr(prefix, "WORDS_PER_PAGE", 10**6)
            for written in (
                '"trac"*', '"tracing"*', '"trace"*', '"tr"*', '"postg"*', '"postgres"*',
                '"agr"*', '"ag"*', '"releas"*', '"fail"*', '"yy"*', '"y"*',
            ):  # fmt: skip
                as_or = prefix.as_or(conn, "messages_fts", written)
                assert as_or is not None and "*" not in as_or
                assert rows(as_or) == rows(written) != set()
            assert prefix.as_or(conn, "messages_fts", '"tracing"*').count(" OR ") == 2
            assert prefix.as_or(conn, "messages_fts", '"postg"*') == (
                '"postgr" OR "postgresing" OR "postgresql"'
            )
            assert prefix.as_or(conn, "messages_fts", '"yy"*').count(" OR ") == 299
            assert prefix.as_or(conn, "messages_fts", '"auth-ap"*') is None
            assert prefix.as_or(conn, "messages_fts", '"zz"*') is None  # MAX_TERMS + 1 words
            assert prefix.as_or(conn, "messages_fts_cjk", '"trac"*') is None
            assert prefix.as_or(conn, "messages_fts", '"qqq"*') is None


def test_the_and_walk_stops_once_k_rows_hold_the_checked_terms(
    tmp_path: Path,
) -> None:
    """The newest matches whose text holds the checked terms, read in one walk that stops
    after k of them: the rows the full 2k walk would keep, in the same order."""
    with SessionStore(tmp_path / "s.db") as s:
        s.create_session("a", started_at=1.0)
        s.append_messages(
            "a",
            [
                {"role": "user", "content": f"kafka lag {'on run' if i % 3 else 'idle'} {i}"}
                for i in range(30)
            ],
        )
        with s.read_conn() as conn:
            texts = ft.message_texts(conn, list(range(1, 31)))
            filters = make_filters()
            held, walked = ft._newest_holding(conn, "word", '"kafka"', ["run"], filters, 4)
            # Newest first: ids 30, 29, 27, 26 hold "run" (every third row does not).
            expected = [i for i in range(30, 0, -1) if "run" in texts[i].split()][:4]
            assert [r[0] for r in held] == expected
            assert walked == 30 - expected[-1] + 1  # stopped at the 4th holder
            # No row holds the needle: the whole 2k window is walked, nothing kept.
            none, walked = ft._newest_holding(conn, "word", '"kafka"', ["zebra"], filters, 4)
            assert none == [] and walked == 8
            # Fewer matches than 2k: the walk says so (the caller then trusts the answer).
            few, walked = ft._newest_holding(conn, "word", '"kafka"', ["run"], filters, 40)
            assert walked == 30 and len(few) == 20


def _many_terms_store(path: Path) -> SessionStore:
    """300 rows of 1-6 words of 60 (English) or of 2-4 of 30 Chinese words, each word in
    a few dozen rows, half of them assistant rows."""
    import random

    rng = random.Random(7)
    words = [f"w{i:02d}x" for i in range(60)]
    zh = ["数据", "迁移", "集群", "备份", "周二", "结论", "讨论", "公园", "看花", "服务"]
    zh += ["端口", "日志", "重启", "配置", "证书", "缓存", "索引", "队列", "分片", "副本"]
    zh += ["延迟", "告警", "回滚", "发布", "灰度", "权限", "密钥", "网关", "限流", "熔断"]
    s = SessionStore(path)
    s.create_session("a", started_at=1.0)
    messages = []
    for i in range(300):
        if i % 3 == 0:
            text = "".join(rng.sample(zh, rng.randint(2, 4)))
        else:
            text = " ".join(rng.sample(words, rng.randint(1, 6)))
        messages.append({"role": "user" if i % 2 else "assistant", "content": text})
    s.append_messages("a", messages)
    return s


@pytest.mark.parametrize(
    "query",
    [
        " ".join(f"w{i:02d}x" for i in range(0, 60, 2)),
        "数据迁移集群备份周二结论讨论公园看花服务端口日志重启配置证书缓存索引",
    ],
)
def test_an_or_of_many_rare_terms_is_ranked_in_parts_as_one_or(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, query: str
) -> None:
    """A query of more rare terms than a part holds is scored as the sum of its parts'
    bm25(), which is the whole OR's: the same rows in the same order, filters applied."""
    monkeypatch.setattr(ft, "COMMON_DF", 60)  # every term is in fewer rows: rare
    monkeypatch.setattr(ft, "_OR_PART", 4)
    kinds: list[dict[str, object]] = [{}, {"role_filter": "user"}, {"offset": 5}]
    with _many_terms_store(tmp_path / "s.db") as s:
        with traced_reads(s) as statements:
            parted = [_page(s, query, **kw) for kw in kinds]
        assert [x for x in statements if "UNION ALL" in x]
        monkeypatch.setattr(ft, "_OR_PART", 10**6)
        with traced_reads(s) as statements:
            whole = [_page(s, query, **kw) for kw in kinds]
        assert not [x for x in statements if "UNION ALL" in x]
    for got, want in zip(parted, whole, strict=True):
        assert len(got) == 10
        assert [mid for mid, _ in got] == [mid for mid, _ in want]
        assert [score for _, score in got] == pytest.approx([score for _, score in want])
