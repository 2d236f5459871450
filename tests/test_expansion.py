"""Query expansion: sub-queries from the summary model over real HTTP, cached in the store,
on both backends (conftest's ``store``: SQLite and PostgreSQL)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from memstrata.errors import SessionStoreError, StorageError
from memstrata.llm import OpenAIClient
from memstrata.search.expansion import cached_expansion, expand_query, parse_subqueries
from memstrata.store.base import search_sessions
from memstrata.store.contract import SessionStoreContract
from memstrata.testing import FakeLLMServer, Reply

QUESTION = "What outdoor activities has John done with his colleagues?"


@pytest.fixture
def store(store: SessionStoreContract) -> SessionStoreContract:
    """Three sessions in a fresh store of each backend (conftest's ``store``)."""
    s = store
    talks = {
        "hike": "we went hiking on the ridge trail with the team from work",
        "office": "my colleagues organised a quiz about activities of the company",
        "food": "dinner was lovely, the pasta especially",
    }
    for i, (sid, text) in enumerate(talks.items()):
        s.create_session(sid, source="cli", started_at=1000.0 * (i + 1))
        s.append_messages(sid, [{"role": "user", "content": text, "timestamp": 1000.0 * (i + 1)}])
    return s


@pytest.fixture
def client(server: FakeLLMServer) -> Iterator[OpenAIClient]:
    llm = OpenAIClient("summary-model", base_url=server.base_url, max_retries=0)
    yield llm
    llm.close()


def test_parse_subqueries() -> None:
    reply = '1. hiking trail\n- "team trip"\n\n* hiking trail\n2) camping weekend\nkayak\nextra'
    assert parse_subqueries(reply, 4) == ["hiking trail", "team trip", "camping weekend", "kayak"]
    assert parse_subqueries("", 4) == []


def test_expand_query_asks_once_then_reads_the_cache(
    store: SessionStoreContract, server: FakeLLMServer, client: OpenAIClient
) -> None:
    server.on(r"colleagues", "hiking trail\nteam trip outdoors")
    assert expand_query(store, client, QUESTION) == ["hiking trail", "team trip outdoors"]
    body = server.chat_requests[0]
    assert body["messages"][0]["role"] == "system"
    assert "keyword searches" in body["messages"][0]["content"]
    assert body["messages"][1]["content"] == QUESTION
    # Same question, other spacing and case: answered from the cache, no request.
    again = expand_query(
        store, client, "  what OUTDOOR activities has John done with his colleagues?"
    )
    assert again == ["hiking trail", "team trip outdoors"]
    assert len(server.chat_requests) == 1
    assert cached_expansion(store, "summary-model", QUESTION) == again
    assert cached_expansion(store, "other-model", QUESTION) is None


def test_a_cache_that_cannot_be_written_leaves_the_expansion(
    store: SessionStoreContract,
    server: FakeLLMServer,
    client: OpenAIClient,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Caching is best effort: a store that refuses the write (read-only, a server
    limit) still gets the sub-queries, and the log says they were not cached."""

    def refuse(*args: object) -> None:
        raise StorageError("the database is read-only")

    monkeypatch.setattr(store, "cache_expansion", refuse)
    server.on(r"colleagues", "hiking trail")
    with caplog.at_level(logging.WARNING, logger="memstrata.search.expansion"):
        assert expand_query(store, client, QUESTION) == ["hiking trail"]
    assert "not cached" in caplog.text


def test_expansion_finds_what_the_question_alone_misses(
    store: SessionStoreContract, server: FakeLLMServer, client: OpenAIClient
) -> None:
    plain = [h["session_id"] for h in search_sessions(store, QUESTION)]
    assert plain[0] == "office"  # shares "colleagues" and "activities"
    assert "hike" not in plain  # "hiking", "team", "work": no word in common
    server.on(r"colleagues", "hiking trail team\nwork outing")
    subs = expand_query(store, client, QUESTION)
    expanded = [h["session_id"] for h in search_sessions(store, QUESTION, subqueries=subs)]
    # The question's own match stays first (sub-queries count EXPANSION_WEIGHT); the
    # session only the rewrite could find follows.
    assert expanded == ["office", "hike"]


def test_model_failure_means_no_expansion(
    store: SessionStoreContract,
    server: FakeLLMServer,
    client: OpenAIClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server.script(Reply.server_error(500))
    with caplog.at_level(logging.WARNING, logger="memstrata.search.expansion"):
        assert expand_query(store, client, QUESTION) == []
    assert "query expansion skipped" in caplog.text
    # A failure is not cached: the next call asks again.
    server.on(r"colleagues", "hiking")
    assert expand_query(store, client, QUESTION) == ["hiking"]


def test_bad_input(
    store: SessionStoreContract, client: OpenAIClient, server: FakeLLMServer
) -> None:
    assert expand_query(store, client, "   ") == []
    assert server.chat_requests == []
    with pytest.raises(SessionStoreError, match="text"):
        expand_query(store, client, None)  # type: ignore[arg-type]
    with pytest.raises(SessionStoreError, match="max_queries"):
        expand_query(store, client, QUESTION, max_queries=0)
    with pytest.raises(SessionStoreError, match="list of query strings"):
        search_sessions(store, QUESTION, subqueries="hiking")
