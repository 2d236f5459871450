"""MemstrataStore against LangGraph's own InMemoryStore, and inside a compiled graph.

Every case runs on LangGraph's ``InMemoryStore`` (with a semantic index, so its
``query`` ranks) and on ``MemstrataStore`` over SQLite and over PostgreSQL; a case
passes only if every store gives the same answer.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph", reason="needs memstrata[langgraph]")

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore, PutOp
from langgraph.store.memory import InMemoryStore

from conftest import PG_DSN, fresh_namespace
from memstrata.errors import SessionStoreError
from memstrata.integrations.langgraph import MemstrataStore
from memstrata.store.sqlite.store import SessionStore
from memstrata.testing import bag_of_words_embedding

DIMS = 256


def _embed(texts: list[str]) -> list[list[float]]:
    return [bag_of_words_embedding(t, DIMS) for t in texts]


@pytest.fixture(
    params=[
        "langgraph-inmemory",
        "memstrata-sqlite",
        pytest.param("memstrata-postgres", marks=pytest.mark.postgres),
    ]
)
def lg_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseStore]:
    if request.param == "langgraph-inmemory":
        yield InMemoryStore(index={"dims": DIMS, "embed": _embed})
    elif request.param == "memstrata-sqlite":
        with SessionStore(tmp_path / "state.db") as store:
            yield MemstrataStore(store)
    else:
        pytest.importorskip("psycopg")
        from helpers import drop_namespace
        from memstrata.store.postgres import PostgresSessionStore

        tenant = fresh_namespace()
        store = PostgresSessionStore(PG_DSN, namespace=tenant)
        try:
            yield MemstrataStore(store)
        finally:
            store.close()
            drop_namespace(tenant)


def _keys(items: list[Any]) -> list[tuple[tuple[str, ...], str]]:
    return [(tuple(i.namespace), i.key) for i in items]


def test_put_get_overwrite_delete(lg_store: BaseStore) -> None:
    ns = ("users", "u1", "memories")
    assert lg_store.get(ns, "tea") is None
    lg_store.put(ns, "tea", {"text": "User drinks oolong tea", "n": 1})
    got = lg_store.get(ns, "tea")
    assert got is not None
    assert (got.namespace, got.key, got.value) == (
        ns,
        "tea",
        {"text": "User drinks oolong tea", "n": 1},
    )
    assert got.created_at <= got.updated_at
    lg_store.put(ns, "tea", {"text": "User now drinks green tea", "n": 2})
    again = lg_store.get(ns, "tea")
    assert again is not None and again.value == {"text": "User now drinks green tea", "n": 2}
    assert again.updated_at >= got.updated_at
    assert len(lg_store.search(ns)) == 1
    lg_store.delete(ns, "tea")
    assert lg_store.get(ns, "tea") is None
    lg_store.delete(ns, "never-there")
    assert lg_store.search(ns) == []
    # Same key in another namespace is another item.
    lg_store.put(("a",), "k", {"v": "a"})
    lg_store.put(("b",), "k", {"v": "b"})
    assert lg_store.get(("a",), "k").value == {"v": "a"}  # type: ignore[union-attr]
    assert lg_store.get(("b",), "k").value == {"v": "b"}  # type: ignore[union-attr]


def _seed(store: BaseStore) -> None:
    store.put(
        ("users", "u1"),
        "tea",
        {"text": "User drinks oolong tea every morning", "kind": "pref", "score": 5},
    )
    store.put(
        ("users", "u1"), "cat", {"text": "User has a cat named Miso", "kind": "fact", "score": 2}
    )
    store.put(
        ("users", "u1"),
        "job",
        {
            "text": "User works as a marine biologist",
            "kind": "fact",
            "score": 8,
            "meta": {"src": "chat"},
        },
    )
    store.put(
        ("users", "u2"), "tea", {"text": "Second user dislikes tea", "kind": "pref", "score": 1}
    )
    store.put(
        ("docs",),
        "d1",
        {
            "text": "Deployment runbook for the billing service",
            "kind": "doc",
            "tags": ["ops", "billing"],
        },
    )


def test_search_without_query_filters_and_pages(lg_store: BaseStore) -> None:
    _seed(lg_store)
    users = lg_store.search(("users",), limit=10)
    assert sorted(_keys(users)) == sorted(
        [
            (("users", "u1"), "tea"),
            (("users", "u1"), "cat"),
            (("users", "u1"), "job"),
            (("users", "u2"), "tea"),
        ]
    )
    # One namespace, no query: insertion order, paged by limit and offset.
    assert [i.key for i in lg_store.search(("users", "u1"), limit=10)] == ["tea", "cat", "job"]
    assert [i.key for i in lg_store.search(("users", "u1"), limit=2)] == ["tea", "cat"]
    assert [i.key for i in lg_store.search(("users", "u1"), limit=2, offset=2)] == ["job"]
    assert lg_store.search(("users", "u1"), offset=5) == []
    assert lg_store.search(("nobody",)) == []
    every = lg_store.search((), limit=100)
    assert len(every) == 5
    assert all(i.score is None for i in every)
    cases: list[tuple[dict[str, Any], list[str]]] = [
        ({"kind": "fact"}, ["cat", "job"]),
        ({"kind": "fact", "score": 8}, ["job"]),
        ({"score": {"$gt": 4}}, ["job", "tea"]),
        ({"score": {"$gte": 2, "$lt": 8}}, ["cat", "tea"]),
        ({"kind": {"$ne": "fact"}}, ["tea"]),
        ({"meta": {"src": "chat"}}, ["job"]),
        ({"kind": "missing"}, []),
    ]
    for where, keys in cases:
        found = lg_store.search(("users", "u1"), filter=where, limit=10)
        assert sorted(i.key for i in found) == keys, where
    docs = lg_store.search((), filter={"tags": ["ops", "billing"]})
    assert [i.key for i in docs] == ["d1"]
    assert lg_store.search((), filter={"tags": ["billing"]}) == []


def test_search_with_query_ranks_the_relevant_item_first(lg_store: BaseStore) -> None:
    _seed(lg_store)
    found = lg_store.search(("users", "u1"), query="what tea does the user drink", limit=3)
    assert found[0].key == "tea"
    assert found[0].score is not None
    assert {i.key for i in found} == {"tea", "cat", "job"}
    top = lg_store.search(("users",), query="marine biologist job", limit=1)
    assert _keys(top) == [(("users", "u1"), "job")]
    filtered = lg_store.search(("users",), query="tea", filter={"kind": "pref"}, limit=5)
    assert sorted(_keys(filtered)) == [(("users", "u1"), "tea"), (("users", "u2"), "tea")]


def test_list_namespaces(lg_store: BaseStore) -> None:
    _seed(lg_store)
    lg_store.put(("users", "u1", "archive"), "old", {"text": "x"})
    assert lg_store.list_namespaces() == [
        ("docs",),
        ("users", "u1"),
        ("users", "u1", "archive"),
        ("users", "u2"),
    ]
    assert lg_store.list_namespaces(prefix=("users",)) == [
        ("users", "u1"),
        ("users", "u1", "archive"),
        ("users", "u2"),
    ]
    assert lg_store.list_namespaces(suffix=("u1",)) == [("users", "u1")]
    assert lg_store.list_namespaces(prefix=("users", "*")) == [
        ("users", "u1"),
        ("users", "u1", "archive"),
        ("users", "u2"),
    ]
    assert lg_store.list_namespaces(suffix=("*", "archive")) == [("users", "u1", "archive")]
    assert lg_store.list_namespaces(max_depth=1) == [("docs",), ("users",)]
    assert lg_store.list_namespaces(prefix=("users",), max_depth=2) == [
        ("users", "u1"),
        ("users", "u2"),
    ]
    assert lg_store.list_namespaces(limit=2, offset=1) == [
        ("users", "u1"),
        ("users", "u1", "archive"),
    ]
    assert lg_store.list_namespaces(prefix=("nope",)) == []


def test_async_api(lg_store: BaseStore) -> None:
    async def run() -> Any:
        await lg_store.aput(("async",), "k", {"text": "written asynchronously"})
        got = await lg_store.aget(("async",), "k")
        found = await lg_store.asearch(("async",), query="asynchronously")
        await lg_store.adelete(("async",), "k")
        return got, found, await lg_store.aget(("async",), "k"), await lg_store.alist_namespaces()

    got, found, gone, spaces = asyncio.run(run())
    assert got.value == {"text": "written asynchronously"}
    assert [i.key for i in found] == ["k"]
    assert gone is None
    assert ("async",) not in spaces or isinstance(lg_store, InMemoryStore)


# -- memstrata only ----------------------------------------------------------------------


def test_chinese_query_and_index_fields(tmp_path: Path) -> None:
    """Chinese recall works; index=False keeps an item out of ranking, index=[path]
    indexes only that field; a non-dict value is refused."""
    with SessionStore(tmp_path / "state.db") as sessions:
        store = MemstrataStore(sessions)
        store.put(("u",), "tea", {"text": "用户每天早上喝乌龙茶"})
        store.put(("u",), "cat", {"text": "用户养了一只叫Miso的猫"})
        store.put(("u",), "secret", {"text": "乌龙茶 乌龙茶 乌龙茶"}, index=False)
        store.put(("u",), "title", {"title": "下午茶", "body": "乌龙茶"}, index=["title"])
        found = store.search(("u",), query="用户早上喝什么？", limit=4)
        assert found[0].key == "tea"
        assert found[0].score is not None
        by_key = {i.key: i.score for i in found}
        assert by_key["secret"] is None
        with pytest.raises(SessionStoreError, match="must be a dict"):
            store.batch([PutOp(("u",), "x", "text")])  # type: ignore[arg-type]
        with pytest.raises(SessionStoreError, match="Unknown filter operator"):
            store.search(("u",), filter={"text": {"$regex": "茶"}})


def test_a_graph_recalls_a_memory_from_an_earlier_thread(tmp_path: Path) -> None:
    """A compiled graph with the store: thread 1 saves what the user said, thread 2
    (same user, fresh conversation state) finds it by meaning of the question."""

    class State(TypedDict):
        messages: Annotated[list[str], operator.add]
        recalled: str

    def remember_or_recall(
        state: State, config: RunnableConfig, *, store: BaseStore
    ) -> dict[str, Any]:
        user = config["configurable"]["user_id"]
        text = state["messages"][-1]
        if text.lower().startswith("remember"):
            store.put(
                ("memories", user),
                f"m{len(store.search(('memories', user), limit=100))}",
                {"text": text},
            )
            return {"recalled": ""}
        hits = store.search(("memories", user), query=text, limit=1)
        return {"recalled": hits[0].value["text"] if hits and hits[0].score is not None else ""}

    builder = StateGraph(State)
    builder.add_node("memory", remember_or_recall)
    builder.add_edge(START, "memory")
    builder.add_edge("memory", END)
    with SessionStore(tmp_path / "state.db") as sessions:
        graph = builder.compile(checkpointer=InMemorySaver(), store=MemstrataStore(sessions))
        one = {"configurable": {"thread_id": "t1", "user_id": "alice"}}
        graph.invoke({"messages": ["Remember: I am allergic to peanuts"]}, one)
        graph.invoke({"messages": ["Remember: my sister lives in Porto"]}, one)
        two = {"configurable": {"thread_id": "t2", "user_id": "alice"}}
        out = graph.invoke({"messages": ["Which city does my sister live in?"]}, two)
        assert out["recalled"] == "Remember: my sister lives in Porto"
        assert out["messages"] == ["Which city does my sister live in?"]
        other = {"configurable": {"thread_id": "t3", "user_id": "bob"}}
        assert graph.invoke({"messages": ["Where does my sister live?"]}, other)["recalled"] == ""
        # The memories are ordinary memstrata messages: session_search and the CLI see them.
        assert sessions.search_messages("peanuts allergic")[0]["role"] == "memory"
