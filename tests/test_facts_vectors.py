"""Hybrid recall for the facts store: vectors stored off the write path, fused and gated."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from memstrata.config import Config
from memstrata.errors import ConfigError, StorageError
from memstrata.llm import OpenAIClient
from memstrata.memory.files import FileMemory
from memstrata.providers.facts.provider import FactsProvider
from memstrata.providers.facts.store import FactStore
from memstrata.providers.facts.vectors import RECALL_VECTOR_MIN, fuse_recall, fuse_search
from memstrata.providers.manager import MemoryManager
from memstrata.search.openai_embedder import OpenAIEmbedder
from memstrata.testing import FakeLLMServer, Reply, facts_contract
from memstrata.testing.facts_contract import Concepts

# Chit-chat a user sends that says nothing about any stored fact: the shared suite's, and more.
CHITCHAT = [
    *facts_contract.CHITCHAT,
    "is it better to use tabs or spaces?",
    "how do I reverse a linked list in C?",
    "run the unit tests again please",
    "give me a regex for an email address",
]
FACTS = [
    *facts_contract.PEOPLE_FACTS,
    "Caroline's friends and family are her rocks.",
    "Caroline plans to continue her education in counselling.",
]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[FactStore]:
    with FactStore(tmp_path / "facts.db") as opened:
        yield opened


def _vector_ids(store: FactStore) -> set[int]:
    conn = sqlite3.connect(store.path)
    try:
        return {int(r[0]) for r in conn.execute("SELECT fact_id FROM fact_vectors")}
    finally:
        conn.close()


def test_add_never_embeds_and_index_vectors_fills_in_batches(store: FactStore) -> None:
    """Writes cost no embedder call; indexing embeds the pending facts batch by batch."""
    embedder = Concepts()
    store.embedder = embedder
    ids = [store.add(f"note {n} about the oven").id for n in range(5)]
    assert embedder.calls == [] and store.pending_vectors() == 5
    seen: list[int] = []
    assert store.index_vectors(batch=2, progress=seen.append) == 5
    assert [len(c) for c in embedder.calls] == [2, 2, 1] and seen == [2, 4, 5]
    assert store.pending_vectors() == 0 and _vector_ids(store) == set(ids)
    assert store.index_vectors() == 0  # nothing left: no call
    assert len(embedder.calls) == 3


def test_forgetting_superseding_or_purging_a_fact_drops_its_vector(store: FactStore) -> None:
    """A retired, replaced or purged fact loses its vector; it cannot come back by meaning."""
    store.embedder = Concepts()
    kept = store.add("I bake bread in the oven")
    gone = store.add("shot some hoops and a dunk")
    slot = store.upsert_slot("sport", "basketball hoops")
    purged = store.add("basketball practice on tuesdays")
    store.index_vectors()
    assert _vector_ids(store) == {kept.id, gone.id, slot.id, purged.id}
    store.forget(gone.id)
    newer = store.upsert_slot("sport", "baking")
    store.forget(purged.id, purge=True)
    assert _vector_ids(store) == {kept.id}
    assert store.pending_vectors() == 1  # the new slot value, embedded on the next run
    store.index_vectors()
    assert _vector_ids(store) == {kept.id, newer.id}
    assert [f.id for f in store.search("dunk basketball")] == []
    assert gone.id not in [f.id for f in store.recall("basketball hoops dunk")]


def test_search_and_recall_find_by_meaning_only_with_an_embedder(store: FactStore) -> None:
    """A fact sharing no word with the query joins through its vector; keyword-only does not."""
    hoops = store.add("shot some hoops, one dunk")
    tickets = store.add("bought basketball tickets for Friday")
    store.add("bread is in the oven")
    assert [f.id for f in store.search("basketball")] == [tickets.id]
    assert [f.id for f in store.recall("basketball tonight?")] == [tickets.id]
    store.embedder = Concepts()
    # Vectors not indexed yet: keyword results, unchanged.
    assert [f.id for f in store.search("basketball")] == [tickets.id]
    store.index_vectors()
    assert [f.id for f in store.search("basketball")] == [tickets.id, hoops.id]
    assert [f.id for f in store.recall("basketball tonight?")] == [tickets.id, hoops.id]
    assert [f.id for f in store.recall("basketball", exclude=[hoops.id])] == [tickets.id]
    store.embedder = None
    assert [f.id for f in store.search("basketball")] == [tickets.id]


def test_fusion_keeps_keyword_order_and_bars_weak_vector_only_facts() -> None:
    """Vectors re-score keyword hits; a fact the keywords missed needs a high cosine."""
    fused = fuse_search({1: 1.0, 2: 0.5}, {1: 0.2, 2: 0.9, 3: 0.45, 4: 0.7})
    assert set(fused) == {1, 2, 4} and fused[2] > fused[1]
    gated = fuse_recall({1: 3.0}, {1: 0.5, 2: RECALL_VECTOR_MIN - 0.01, 3: 0.95}, exclude=[3])
    assert set(gated) == {1}
    assert set(fuse_recall({}, {5: RECALL_VECTOR_MIN})) == {5}


def test_fusion_reads_cosines_relative_to_the_facts_compared() -> None:
    """As the session search does: a cosine counts by where it stands among the facts
    compared, so a model whose cosines all sit high (e5) still tells facts apart."""
    fused = fuse_search({1: 1.0, 2: 0.9}, {1: 0.80, 2: 0.90, 3: 0.85})
    assert fused == pytest.approx({1: 1.0, 2: 1.9, 3: 0.5})
    gated = fuse_recall({1: 2.0, 2: 1.8}, {1: 0.80, 2: 0.90, 3: 0.85})
    assert gated == pytest.approx({1: 1.0, 2: 1.9, 3: 0.5})


def test_recall_gate_stays_quiet_on_chitchat(store: FactStore) -> None:
    """Unrelated chat messages recall nothing, while a real question still does."""
    for text in FACTS:
        store.add(text, subject="caroline" if text.startswith("Caroline") else "melanie")
    answered = {m: [f.content for f in store.recall(m)] for m in CHITCHAT}
    assert {m: found for m, found in answered.items() if found} == {}
    found = store.recall("What did Melanie paint last year? A lake sunrise?")
    assert found and found[0].content == "Melanie painted a lake sunrise last year."
    # The known limit: half the topic words of a short message matching is a match.
    assert [f.content for f in store.recall("why is the sky blue?")] == [
        "Melanie finds blue a calming colour."
    ]


@pytest.fixture(scope="module")
def embed_server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(embedding_dimensions=64, embedding_mode="bow") as fake:
        yield fake


def test_openai_embedder_over_http_feeds_hybrid_search(
    store: FactStore, embed_server: FakeLLMServer
) -> None:
    """Vectors from /v1/embeddings (real HTTP to the fake server) are stored and fused."""
    client = OpenAIClient("chat", base_url=embed_server.base_url, embedding_model="emb-small")
    store.embedder = OpenAIEmbedder(client)
    fact = store.add("User keeps a sourdough starter named Clint")
    store.add("User deploys with a blue-green rollout")
    before = len(embed_server.requests)
    assert store.index_vectors() == 2
    assert len(embed_server.requests) == before + 1  # one request for the batch
    found = store.search("sourdough starter")
    assert found[0].id == fact.id and found[0].score is not None and found[0].score > 1.0
    assert all(r.path.endswith("/embeddings") for r in embed_server.requests)


def test_a_failing_embedder_leaves_keyword_results(
    store: FactStore, embed_server: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    """An embedding endpoint that errors at query time costs the vectors, not the search."""
    client = OpenAIClient(
        "chat", base_url=embed_server.base_url, embedding_model="emb-small", max_retries=0
    )
    store.embedder = OpenAIEmbedder(client, dims=64)
    fact = store.add("User keeps a sourdough starter named Clint")
    store.index_vectors()
    embed_server.script(Reply.server_error(503), endpoint="embeddings")
    with caplog.at_level(logging.WARNING, logger="memstrata.providers.facts.store"):
        found = store.search("sourdough")
    assert [f.id for f in found] == [fact.id]
    assert "embedder failed" in caplog.text


def test_bad_embedders_and_arguments_are_refused(store: FactStore, tmp_path: Path) -> None:
    """Errors say what an embedder needs, and indexing without one says how to set it."""
    with pytest.raises(ConfigError, match=r"search\.embedder"):
        store.index_vectors()
    with pytest.raises(ConfigError, match="not an embedder"):
        FactStore(tmp_path / "x.db", embedder=object())  # type: ignore[arg-type]

    class Wrong(Concepts):
        def embed(self, texts: list[str]) -> list[list[float]]:
            return [[1.0, 0.0] for _ in texts]

    store.add("one fact")
    with pytest.raises(ConfigError, match="declares 3 dims"):
        store.index_vectors(Wrong())
    with pytest.raises(StorageError, match="batch"):
        store.index_vectors(Concepts(), batch=0)


def test_provider_embeds_lazily_and_recalls_by_meaning(
    tmp_path: Path, embed_server: FakeLLMServer
) -> None:
    """With search.embedder = openai, the provider embeds after the turn, never in prefetch."""
    home = tmp_path / "home"
    settings = {
        "SEARCH__EMBEDDER": "openai",
        "LLM__EMBEDDING_MODEL": "emb-small",
        "LLM__BASE_URL": embed_server.base_url,
        "LLM__API_KEY": "test",
    }
    config = Config.load(home, environ={f"MEMSTRATA_{k}": v for k, v in settings.items()})
    manager = MemoryManager(memory=FileMemory(home))
    provider = FactsProvider(config=config)
    assert manager.add_provider(provider)
    assert manager.initialize_all("s1", home=home) == []
    assert provider.store.embedder is not None
    provider.store.add("User keeps a sourdough starter named Clint")
    assert provider.store.pending_vectors() == 1
    before = len(embed_server.requests)
    recall = manager.prefetch_all("how is the sourdough starter doing", session_id="s1")
    assert "sourdough starter named Clint" in recall  # by its keywords
    # No vector is stored yet, so prefetch made no call at all and wrote nothing.
    assert len(embed_server.requests) == before
    assert provider.store.pending_vectors() == 1
    manager.sync_all("how is the sourdough doing", "Fine.")
    assert manager.flush_pending(10)
    assert provider.store.pending_vectors() == 0
    before = len(embed_server.requests)
    recall = manager.prefetch_all("how is the sourdough starter doing", session_id="s1")
    assert "sourdough starter named Clint" in recall
    assert len(embed_server.requests) == before + 1  # the query's vector only
    manager.shutdown_all()


# --- the offline embedder ------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm() -> object:
    from memstrata.search.minilm import MiniLMEmbedder, model_zip

    try:
        model_zip()
    except ConfigError as exc:
        pytest.skip(str(exc))
    return MiniLMEmbedder()


def test_minilm_hybrid_finds_a_paraphrase_and_stays_quiet_on_chitchat(
    store: FactStore, minilm: object
) -> None:
    """The offline model bridges a paraphrase keywords miss; chit-chat still recalls nothing."""
    for text in FACTS:
        store.add(text, subject="caroline" if text.startswith("Caroline") else "melanie")
    target = store.add("Caroline is afraid of spiders.", subject="caroline")
    question = "Which creepy crawlies scare her?"
    assert target.id not in [f.id for f in store.search(question)]
    store.embedder = minilm  # type: ignore[assignment]
    assert store.index_vectors() == len(FACTS) + 1
    assert store.search(question)[0].id == target.id
    answered = {m: [f.content for f in store.recall(m)] for m in CHITCHAT}
    assert {m: found for m, found in answered.items() if found} == {}
