"""session_search on PostgreSQL: the SQLite answers, from a PostgresSessionStore."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

psycopg = pytest.importorskip("psycopg")

from helpers import PG_DSN as DSN  # noqa: E402
from helpers import drop_namespace, make_config  # noqa: E402
from memstrata.errors import SessionNotFoundError, SessionStoreError  # noqa: E402
from memstrata.search.recall import session_search  # noqa: E402
from memstrata.store.postgres import PostgresSessionStore  # noqa: E402
from memstrata.store.sqlite.store import SessionStore  # noqa: E402
from memstrata.testing import FakeLLMServer, Reply  # noqa: E402

pytestmark = pytest.mark.postgres

START = 1_767_225_600.0


@pytest.fixture
def pg(namespace: str) -> Iterator[PostgresSessionStore]:
    """A store on a fresh tenant (conftest's ``namespace``: its rows go after the test)."""
    with PostgresSessionStore(DSN, namespace=namespace) as store:
        yield store


@pytest.fixture
def lite(memstrata_home: Path) -> Iterator[SessionStore]:
    with SessionStore(memstrata_home / "state.db") as store:
        yield store


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        fake.set_default(Reply.text("They raised worker_connections to 4096 in nginx."))
        yield fake


def add_session(store: Any, sid: str, texts: list[str], *, start: float, **kwargs: Any) -> None:
    store.create_session(sid, source=kwargs.pop("source", "cli"), started_at=start, **kwargs)
    roles = ("user", "assistant")
    store.append_messages(
        sid,
        [
            {"role": roles[i % 2], "content": t, "timestamp": start + 60 * (i + 1)}
            for i, t in enumerate(texts)
        ],
    )


def load_corpus(store: Any) -> None:
    """Three past conversations, a compressed one, and the current conversation."""
    add_session(
        store,
        "nginx",
        [
            "Our nginx proxy drops connections under load, 502 errors everywhere.",
            "Raise worker_connections to 4096 and check the upstream keepalive.",
            "That fixed the nginx 502 errors, thanks.",
        ],
        start=START,
        title="nginx tuning",
    )
    add_session(
        store,
        "garden",
        ["Which tomatoes grow well on a balcony?", "Cherry tomatoes in deep pots do well."],
        start=START + 3_600,
    )
    long_texts = [f"Filler line {i} about the weekly report." for i in range(40)]
    long_texts[25] = "The flamingo deployment key is stored in the vault under ops/flamingo."
    add_session(store, "long", long_texts, start=START + 7_200)
    # The current conversation: its start was compressed away into "earlier".
    add_session(
        store,
        "earlier",
        [
            "The staging database password rotation failed with ORA-28001.",
            "We fixed ORA-28001 with ALTER PROFILE app_profile on staging.",
        ],
        start=START + 10_000,
    )
    store.end_session("earlier", "compression", ended_at=START + 10_500)
    add_session(
        store,
        "current",
        ["Summary: a password issue was handled.", "Live context mentions quokkaword here."],
        start=START + 10_600,
        parent_session_id="earlier",
        lineage_kind="compression",
    )
    # A delegate of the current conversation: its live rows are context too.
    add_session(
        store,
        "helper",
        ["Sub-agent looked up quokkaword details."],
        start=START + 10_700,
        parent_session_id="current",
        lineage_kind="delegate",
        source="subagent",
    )


def comparable(result: dict[str, Any]) -> dict[str, Any]:
    """A result without message ids (each backend numbers its own rows)."""
    drop = {"match_message_id", "match_message_ids", "excerpt_message_ids", "snippet"}
    out = {k: v for k, v in result.items() if k != "results"}
    out["results"] = [
        {k: v for k, v in r.items() if k not in drop} for r in result.get("results", [])
    ]
    return out


@pytest.mark.parametrize(
    ("query", "filters"),
    [
        ("nginx 502 errors", {}),
        ("how did we fix ORA-28001?", {}),
        ("tomatoes balcony", {}),
        ("flamingo vault", {}),
        ("nginx OR tomatoes", {"role_filter": "assistant"}),
        ("nginx OR tomatoes", {"since": START + 1_000, "limit": 5}),
        ("tomatoes OR flamingo", {"source": "cli,telegram", "limit": 1}),
    ],
)
def test_discover_answers_like_sqlite(
    pg: PostgresSessionStore,
    lite: SessionStore,
    memstrata_home: Path,
    query: str,
    filters: dict[str, Any],
) -> None:
    load_corpus(pg)
    load_corpus(lite)
    cfg = make_config(memstrata_home)
    got = session_search(pg, query, current_session_id="current", config=cfg, **filters)
    expected = session_search(lite, query, current_session_id="current", config=cfg, **filters)
    assert got["count"] >= 1
    assert comparable(got) == comparable(expected)


def test_current_live_context_is_hidden_but_what_compression_removed_is_found(
    pg: PostgresSessionStore, memstrata_home: Path
) -> None:
    load_corpus(pg)
    cfg = make_config(memstrata_home)
    hidden = session_search(pg, "quokkaword", current_session_id="current", config=cfg)
    assert hidden["count"] == 0
    # Without a current session the same words are found.
    assert session_search(pg, "quokkaword", config=cfg)["count"] == 1
    found = session_search(pg, "ORA-28001", current_session_id="current", config=cfg)
    (first,) = found["results"]
    assert first["session_id"] == "earlier"
    assert first["current_conversation"] is True
    assert "ALTER PROFILE app_profile" in first["excerpt"]


def test_recent_read_and_scroll_match_sqlite(
    pg: PostgresSessionStore, lite: SessionStore, memstrata_home: Path
) -> None:
    load_corpus(pg)
    load_corpus(lite)
    recent_pg = session_search(pg, "", current_session_id="current", limit=5)
    recent_lite = session_search(lite, "", current_session_id="current", limit=5)
    assert recent_pg == recent_lite
    assert [r["session_id"] for r in recent_pg["results"]] == ["long", "garden", "nginx"]

    read_pg = session_search(pg, session_id="long")
    read_lite = session_search(lite, session_id="long")
    strip = [{k: v for k, v in m.items() if k != "id"} for m in read_pg["messages"]]
    assert strip == [{k: v for k, v in m.items() if k != "id"} for m in read_lite["messages"]]
    assert read_pg["truncated"] is True and read_pg["omitted_messages"] == 10
    assert read_pg["message_count"] == 40

    anchor = next(m["id"] for m in pg.get_messages("long") if "flamingo" in str(m["content"]))
    scroll = session_search(pg, session_id="long", around_message_id=anchor, window=3)
    assert scroll["mode"] == "scroll"
    assert [m.get("anchor", False) for m in scroll["messages"]] == [False] * 3 + [True] + [
        False
    ] * 3
    assert "flamingo deployment key" in scroll["messages"][3]["content"]
    assert (scroll["messages_before"], scroll["messages_after"]) == (22, 11)


def test_bad_drill_downs_fail_with_the_sqlite_errors(
    pg: PostgresSessionStore, memstrata_home: Path
) -> None:
    load_corpus(pg)
    with pytest.raises(SessionNotFoundError):
        session_search(pg, session_id="no-such-session")
    with pytest.raises(SessionStoreError, match="already in your context"):
        session_search(pg, session_id="current", current_session_id="current")
    with pytest.raises(SessionStoreError, match="does not exist"):
        session_search(pg, session_id="nginx", around_message_id=2**40)
    other = next(m["id"] for m in pg.get_messages("garden"))
    with pytest.raises(SessionStoreError, match="is not in session nginx"):
        session_search(pg, session_id="nginx", around_message_id=other)
    with pytest.raises(SessionStoreError, match="needs session_id"):
        session_search(pg, around_message_id=other)


def test_other_namespaces_are_never_searched(pg: PostgresSessionStore) -> None:
    load_corpus(pg)
    other_ns = f"t-search-{uuid.uuid4().hex[:12]}"
    try:
        with PostgresSessionStore(DSN, namespace=other_ns) as other:
            assert session_search(other, "nginx", summarize=False)["count"] == 0
            assert session_search(other, "")["count"] == 0
            with pytest.raises(SessionNotFoundError):
                session_search(other, session_id="nginx")
    finally:
        drop_namespace(other_ns)


def test_summary_through_the_model_then_from_the_cache(
    pg: PostgresSessionStore, server: FakeLLMServer, memstrata_home: Path
) -> None:
    load_corpus(pg)
    cfg = make_config(memstrata_home, server)
    first = session_search(pg, "nginx 502", current_session_id="current", limit=1, config=cfg)
    (hit,) = first["results"]
    assert hit["summary"] == "They raised worker_connections to 4096 in nginx."
    assert hit["summary_origin"] == "model"
    assert first["summaries"]["made"] == 1
    (body,) = server.chat_requests
    assert "[USER]: Our nginx proxy drops connections" in body["messages"][1]["content"]
    with pg.connection() as conn:
        rows = conn.execute(
            "SELECT tip_session_id, message_count FROM summary_cache WHERE namespace = %s",
            (pg.namespace,),
        ).fetchall()
    assert [(r["tip_session_id"], r["message_count"]) for r in rows] == [("nginx", 3)]

    again = session_search(pg, "Nginx 502?", current_session_id="current", limit=1, config=cfg)
    assert again["results"][0]["summary_origin"] == "cache"
    assert again["summaries"]["cached"] == 1
    assert len(server.chat_requests) == 1  # nothing sent the second time

    # The conversation grows: the cached summary no longer applies.
    pg.append_message("nginx", "user", "nginx 502 again after the upgrade")
    grown = session_search(pg, "nginx 502", current_session_id="current", limit=1, config=cfg)
    assert grown["results"][0]["summary_origin"] == "model"
    assert len(server.chat_requests) == 2


def test_a_failed_summary_falls_back_to_the_original_text(
    pg: PostgresSessionStore, server: FakeLLMServer, memstrata_home: Path
) -> None:
    load_corpus(pg)
    server.set_default(Reply.error(500, "model exploded"))
    cfg = make_config(memstrata_home, server)
    result = session_search(pg, "tomatoes", config=cfg)
    (hit,) = result["results"]
    assert "summary" not in hit and "Cherry tomatoes" in hit["excerpt"]
    assert result["summaries"]["failed"] == 1
    with pg.connection() as conn:
        count = conn.execute(
            "SELECT count(*) AS n FROM summary_cache WHERE namespace = %s", (pg.namespace,)
        ).fetchone()
    assert count is not None and count["n"] == 0


def _dated_sessions(store: Any) -> None:
    """Three sessions on three dates, each mentioning a concert (as the SQLite test)."""
    talks = {
        "may": (datetime(2023, 5, 8, 12), "Maria: the concert was loud, the concert was long"),
        "july": (datetime(2023, 7, 7, 12), "Maria: I went to a concert with my church friends"),
        "sept": (datetime(2023, 9, 2, 12), "Maria: another concert tonight, the concert hall"),
    }
    for sid, (when, text) in talks.items():
        start = when.timestamp()
        store.create_session(sid, source="cli", started_at=start)
        store.append_messages(sid, [{"role": "user", "content": text, "timestamp": start + 5}])


@pytest.mark.parametrize(
    ("call", "question", "expected"),
    [
        ("sessions", "Which concert did Maria attend on 7 July, 2023?", "july"),
        ("messages", "concert in July 2023", "july"),
        ("sessions", "What did we do in July 2023?", ["july"]),
        ("messages", "What did we do on 7 July, 2023?", ["july"]),
        ("sessions", "What did we do in July?", ["july"]),
        ("sessions", "What did we do in June?", []),
    ],
)
def test_dates_in_a_question_are_evidence_on_both_backends(
    pg: PostgresSessionStore, lite: SessionStore, call: str, question: str, expected: Any
) -> None:
    """A named date boosts what was written then, and a question made only of a date
    fetches it: the same answers from PostgreSQL as from SQLite."""
    answers = []
    for store in (lite, pg):
        _dated_sessions(store)
        if call == "sessions":
            ids = [h["session_id"] for h in store.search_sessions(question)]
        else:
            ids = [h["session_id"] for h in store.search_messages(question)]
        answers.append(ids[0] if isinstance(expected, str) and ids else ids)
    assert answers == [expected, expected]


def test_dates_can_be_turned_off_on_postgres(pg: PostgresSessionStore) -> None:
    _dated_sessions(pg)
    question = "Which concert did Maria attend on 7 July, 2023?"
    assert pg.search_sessions(question)[0]["session_id"] == "july"
    # Without date awareness the ranking is keywords alone: the words of the date find
    # nothing, and the sessions repeating "concert" come first.
    assert pg.search_sessions(question, dates=False)[0]["session_id"] != "july"


def test_sessions_group_by_lineage_as_on_sqlite(
    pg: PostgresSessionStore, lite: SessionStore
) -> None:
    """With by_lineage, a compression child and its parent are reported once, and a
    delegate keeps its own entry: the same groups on both backends."""
    grouped = []
    for store in (lite, pg):
        store.create_session("root", started_at=1.0)
        store.append_message("root", "user", "we chose postgres for billing")
        store.create_session(
            "child", parent_session_id="root", lineage_kind="compression", started_at=2.0
        )
        store.append_message("child", "user", "postgres billing migration is done")
        store.create_session("other", started_at=3.0)
        store.append_message("other", "user", "postgres is also used for search")
        flat = store.search_sessions("postgres billing")
        assert len(flat) == 3
        rows = store.search_sessions("postgres billing", by_lineage=True)
        grouped.append([(r["lineage_root"], r["hit_count"]) for r in rows])
    assert grouped[0] == grouped[1] == [("root", 2), ("other", 1)]


def test_a_substring_matches_its_text_literally_whatever_its_case(
    pg: PostgresSessionStore,
) -> None:
    """A code identifier cut inside, so only a substring finds it: found whatever the
    case it was written in, and its dots and underscores are themselves (``x.c`` is not
    ``xac``)."""
    add_session(
        pg,
        "s",
        [
            "Renamed the helper to VENRIXTOR_CACHE in lib/venrix.py.",
            "The deploy of mod5_x.cfg/path5 broke.",
            "The deploy of mod5axbcfg/path5 went fine.",
        ],
        start=START,
    )
    found = pg.search_messages("xtor_cache", limit=5)
    assert [h["snippet"] for h in found] == [
        "Renamed the helper to VENRI>>>XTOR_CACHE<<< in lib/venrix.py."
    ]
    hits = pg.search_messages("od5_x.cf", limit=5)
    assert [h["snippet"] for h in hits] == ["The deploy of m>>>od5_x.cfg<<</path5 broke."]


@settings(max_examples=150, deadline=None)
@given(
    needle=st.text(alphabet="aBz_.%*+?()[]{}|^$\\ '\"ÄäΣσ序-", min_size=1, max_size=8),
    text=st.text(alphabet="aBz_.%*+?()[]{}|^$\\ '\"ÄäΣσ序-xyz", max_size=30),
)
def test_the_substring_pattern_is_the_text_itself_case_aside(needle: str, text: str) -> None:
    """The regular expression a substring term becomes matches a text exactly when the
    server finds the term's text in it, both lowercased."""
    from memstrata.store.postgres.search import substring_pattern

    with psycopg.connect(DSN) as conn:
        row = conn.execute(
            "SELECT %s ~* %s AS regex, strpos(lower(%s), lower(%s)) > 0 AS plain",
            (text, substring_pattern(needle), text, needle),
        ).fetchone()
    assert row is not None and row[0] == row[1], (needle, text)
