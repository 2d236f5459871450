"""The embedder seam: vector storage, the indexing step, the OpenAI and offline embedders."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from memstrata.errors import ConfigError, LLMNotConfiguredError, SessionStoreError
from memstrata.llm import OpenAIClient
from memstrata.search.embedders import (
    Embedder,
    decode_vector,
    encode_vector,
    index_pending,
    pending_count,
)
from memstrata.search.openai_embedder import OpenAIEmbedder
from memstrata.store.base import BaseSessionStore
from memstrata.store.rank import stored_vectors
from memstrata.store.sqlite.store import SessionStore
from memstrata.store.vectors import VECTOR_RECENT, VECTOR_SCAN, cosines
from memstrata.testing import FakeLLMServer


class CountingEmbedder:
    """A deterministic embedder that records what it was asked to embed."""

    name = "counting"
    dims = 4

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [[float(len(t)), 1.0, float(t.count("a")), 0.5] for t in texts]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SessionStore]:
    s = SessionStore(tmp_path / "state.db")
    s.create_session("s1", source="cli", started_at=1000.0)
    s.append_messages(
        "s1",
        [
            {"role": "user", "content": "alpha beta", "timestamp": 1001.0},
            {"role": "assistant", "content": "", "timestamp": 1002.0},
            {"role": "user", "content": "gamma banana", "timestamp": 1003.0},
        ],
    )
    s.create_session("s2", source="cli", started_at=2000.0)
    s.append_messages("s2", [{"role": "user", "content": "delta", "timestamp": 2001.0}])
    yield s
    s.close()


def vector_rows(store: SessionStore) -> list[tuple[int, int]]:
    with store.read_conn() as conn:
        return [
            (int(r[0]), len(r[1]))
            for r in conn.execute("SELECT message_id, vector FROM message_vectors ORDER BY 1")
        ]


def test_encode_decode_round_trip() -> None:
    vector = [0.25, -1.5, 3.0, 1e-3]
    blob = encode_vector(vector)
    assert len(blob) == 16
    assert decode_vector(blob) == pytest.approx(vector)


def test_appending_computes_no_vector(store: SessionStore) -> None:
    # Writes stay cheap: vectors come from the explicit indexing step only.
    assert vector_rows(store) == []
    assert pending_count(store, "counting") == 4


def test_index_pending_embeds_each_message_once(store: SessionStore) -> None:
    embedder = CountingEmbedder()
    assert isinstance(embedder, Embedder)
    progress: list[int] = []
    assert index_pending(store, embedder, batch=2, progress=progress.append) == 4
    assert progress == [2, 4]
    # The empty message is marked (empty blob) but never sent to the embedder.
    assert [t for call in embedder.calls for t in call] == ["alpha beta", "gamma banana", "delta"]
    assert [size for _, size in vector_rows(store)] == [16, 0, 16, 16]
    assert pending_count(store, "counting") == 0
    assert index_pending(store, embedder) == 0
    assert len(embedder.calls) == 2
    # Stored vectors are unit length, so a dot product is the cosine.
    with store.read_conn() as conn:
        blob = conn.execute("SELECT vector FROM message_vectors WHERE message_id = 1").fetchone()[0]
    assert math.isclose(sum(x * x for x in decode_vector(blob)), 1.0, rel_tol=1e-5)


def test_index_pending_limit_then_resume(store: SessionStore) -> None:
    embedder = CountingEmbedder()
    assert index_pending(store, embedder, limit=1) == 1
    assert pending_count(store, "counting") == 3
    assert index_pending(store, embedder) == 3


def test_deleting_messages_and_sessions_deletes_vectors(store: SessionStore) -> None:
    index_pending(store, CountingEmbedder())
    assert len(vector_rows(store)) == 4
    store.delete_session("s2")  # cascades to its messages, whose trigger drops vectors
    assert [mid for mid, _ in vector_rows(store)] == [1, 2, 3]
    with store.write() as conn:
        conn.execute("DELETE FROM messages WHERE id = 1")
        # Editing a message's text makes its vector stale: it is dropped for re-indexing.
        conn.execute("UPDATE messages SET content = 'new words' WHERE id = 3")
    assert [mid for mid, _ in vector_rows(store)] == [2]
    assert pending_count(store, "counting") == 1


def test_bad_embedders_get_clear_errors(store: SessionStore) -> None:
    class WrongDims(CountingEmbedder):
        dims = 3

    class TooFew(CountingEmbedder):
        def embed(self, texts: list[str]) -> list[list[float]]:
            return super().embed(texts)[:-1]

    with pytest.raises(ConfigError, match="declares 3 dims"):
        index_pending(store, WrongDims())
    with pytest.raises(ConfigError, match="one per text"):
        index_pending(store, TooFew())
    with pytest.raises(ConfigError, match="not an embedder"):
        index_pending(store, object())  # type: ignore[arg-type]
    with pytest.raises(SessionStoreError, match="batch"):
        index_pending(store, CountingEmbedder(), batch=0)
    assert vector_rows(store) == []  # nothing half-written


def vector_scores(
    store: BaseSessionStore,
    model: str,
    query: list[float],
    *,
    message_ids: Sequence[int] = (),
    session_ids: Sequence[str] = (),
    scan: int = VECTOR_SCAN,
    recent: int = VECTOR_RECENT,
) -> dict[int, float]:
    """Cosines of ``query`` with the vectors a search would compare (the store's read side)."""
    with store._transaction() as tx:
        blobs = stored_vectors(tx, model, message_ids, session_ids, scan, recent)
    return cosines(blobs, query)


def test_vector_scores_scan_and_candidates(store: SessionStore) -> None:
    index_pending(store, CountingEmbedder())
    query = CountingEmbedder().embed(["gamma banana"])[0]
    everything = vector_scores(store, "counting", query)
    assert set(everything) == {1, 3, 4}  # the empty message has no vector
    assert max(everything, key=lambda k: everything[k]) == 3
    assert everything[3] == pytest.approx(1.0, abs=1e-5)
    # With no scan only the named candidates are compared.
    only = vector_scores(store, "counting", query, message_ids=[1], scan=0, recent=0)
    assert set(only) == {1}
    # A candidate session's messages are compared; the store's newest one too.
    by_session = vector_scores(store, "counting", query, session_ids=["s1"], recent=1)
    assert set(by_session) == {1, 3, 4}
    assert set(vector_scores(store, "counting", query, session_ids=["s2"], recent=0)) == {4}
    assert vector_scores(store, "other-model", query) == {}
    assert vector_scores(store, "counting", [0.0, 0.0, 0.0, 0.0]) == {}


@pytest.fixture(scope="module")
def embed_server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(embedding_dimensions=16, embedding_mode="bow") as fake:
        yield fake


def test_openai_embedder_over_http(store: SessionStore, embed_server: FakeLLMServer) -> None:
    client = OpenAIClient("chat", base_url=embed_server.base_url, embedding_model="emb-small")
    embedder = OpenAIEmbedder(client)
    assert (embedder.name, embedder.dims) == ("openai:emb-small", 16)
    assert index_pending(store, embedder) == 4
    sims = vector_scores(store, embedder.name, embedder.embed(["banana gamma"])[0])
    assert max(sims, key=lambda k: sims[k]) == 3  # shares both words
    paths = [r.path for r in embed_server.requests]
    assert all(p.endswith("/embeddings") for p in paths) and len(paths) >= 2


def test_openai_embedder_needs_a_model(embed_server: FakeLLMServer) -> None:
    with pytest.raises(ConfigError, match="embedding model"):
        OpenAIEmbedder(OpenAIClient("chat", base_url=embed_server.base_url))
    assert issubclass(LLMNotConfiguredError, Exception)


def test_vectors_table_is_created_by_migration(tmp_path: Path) -> None:
    SessionStore(tmp_path / "m.db").close()
    conn = sqlite3.connect(tmp_path / "m.db")
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()
    assert {"message_vectors", "message_vectors_ad", "message_vectors_au"} <= names
    assert "query_expansions" in names


# --- the offline embedder ------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm() -> object:
    from memstrata.search.minilm import MiniLMEmbedder, model_zip

    try:
        model_zip()
    except ConfigError as exc:
        pytest.skip(str(exc))
    return MiniLMEmbedder()


def test_minilm_tokenizer_matches_bert(minilm: object) -> None:
    tokenizer = minilm.tokenizer  # type: ignore[attr-defined]
    # Reference ids of bert-base-uncased's vocabulary (the model's): accents stripped,
    # punctuation split, unknown words cut into word pieces.
    assert tokenizer.encode("Hello, unaffable world! naïve") == [
        101, 7592, 1010, 14477, 20961, 3468, 2088, 999, 15743, 102,
    ]  # fmt: skip
    assert len(tokenizer.encode("word " * 500)) == 128


def test_minilm_embeddings_match_the_reference(minilm: object) -> None:
    vectors = minilm.embed(  # type: ignore[attr-defined]
        ["A man is eating food.", "A man is eating a piece of bread.", "A man is riding a horse."]
    )
    assert all(len(v) == 384 for v in vectors)

    def cos(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True))

    # sentence-transformers' published similarity for this pair is 0.7553.
    assert cos(vectors[0], vectors[1]) == pytest.approx(0.7553, abs=2e-3)
    assert cos(vectors[0], vectors[2]) < 0.4


def test_a_store_without_vectors_is_refused() -> None:
    with pytest.raises(SessionStoreError, match="not a session store"):
        index_pending(object(), CountingEmbedder())  # type: ignore[arg-type]
    with pytest.raises(SessionStoreError, match="not a session store"):
        pending_count(object(), "counting")  # type: ignore[arg-type]


def test_sessions_embed_command_fills_the_vectors(
    memstrata_home: Path, embed_server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from click.testing import CliRunner

    from memstrata.cli import cli
    from memstrata.providers.facts.store import FactStore

    with SessionStore(memstrata_home / "state.db") as s:
        s.create_session("c1", source="cli")
        s.append_messages(
            "c1", [{"role": "user", "content": f"note {n} about bananas"} for n in range(5)]
        )
    facts = FactStore(memstrata_home / "facts.db")
    facts.add("The user grows bananas on the balcony")
    facts.close()
    runner = CliRunner()
    refused = runner.invoke(cli, ["sessions", "embed"])
    assert refused.exit_code == 1 and "search.embedder" in refused.output
    for key, value in {
        "SEARCH__EMBEDDER": "openai",
        "LLM__EMBEDDING_MODEL": "emb-small",
        "LLM__BASE_URL": embed_server.base_url,
        "LLM__API_KEY": "test",
    }.items():
        monkeypatch.setenv(f"MEMSTRATA_{key}", value)
    first = runner.invoke(cli, ["sessions", "embed", "--limit", "2", "--json"])
    assert first.exit_code == 0, first.output
    assert json.loads(first.output) == {
        "embedder": "openai:emb-small",
        "embedded": 2,
        "pending": 3,
        "facts_embedded": 1,
        "facts_pending": 0,
    }
    rest = runner.invoke(cli, ["sessions", "embed", "--json"])
    assert json.loads(rest.output) == {
        "embedder": "openai:emb-small",
        "embedded": 3,
        "pending": 0,
        "facts_embedded": 0,
        "facts_pending": 0,
    }


@pytest.mark.postgres
def test_sessions_embed_command_works_under_a_dsn(
    memstrata_home: Path, embed_server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL keeps vectors too: `sessions embed` fills them and hybrid recall reads them."""
    import json

    from click.testing import CliRunner

    from conftest import PG_DSN, fresh_namespace
    from memstrata.cli import cli
    from memstrata.store.postgres import PostgresSessionStore

    tenant = fresh_namespace()
    for key, value in {
        "STORE__DSN": PG_DSN,
        "STORE__NAMESPACE": tenant,
        "SEARCH__EMBEDDER": "openai",
        "LLM__EMBEDDING_MODEL": "emb-small",
        "LLM__BASE_URL": embed_server.base_url,
        "LLM__API_KEY": "test",
    }.items():
        monkeypatch.setenv(f"MEMSTRATA_{key}", value)
    with PostgresSessionStore(PG_DSN, namespace=tenant) as pg:
        try:
            pg.create_session("c1", source="cli")
            pg.append_messages("c1", [{"role": "user", "content": f"note {n}"} for n in range(3)])
            done = CliRunner().invoke(cli, ["sessions", "embed", "--json"])
            assert done.exit_code == 0, done.output
            report = json.loads(done.output)
            assert (report["embedded"], report["pending"]) == (3, 0)
            assert pg.count_unvectored("openai:emb-small") == 0
        finally:
            pg.delete_namespace()
