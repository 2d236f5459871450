"""Hybrid recall: keyword candidates re-scored by vectors, vector-only candidates gated.

Every case runs on both backends (conftest's ``store``: SQLite and PostgreSQL).
"""

from __future__ import annotations

import math

import pytest

from memstrata.errors import ConfigError
from memstrata.search.embedders import embedder_from_config, index_pending
from memstrata.store import boosts as fulltext_boosts
from memstrata.store.base import search_messages, search_sessions
from memstrata.store.contract import SessionStoreContract

# Each word pulls its text towards one concept axis; the last axis is a constant so no
# text is the zero vector.
CONCEPTS = {
    "basketball": 0,
    "hoops": 0,
    "court": 0,
    "dunk": 0,
    "bread": 1,
    "sourdough": 1,
    "baked": 1,
    "oven": 1,
    "tickets": 2,
    "expensive": 2,
}


class ConceptEmbedder:
    """A deterministic stand-in for a sentence model: shared concepts, similar vectors."""

    name = "concepts"
    dims = 4

    def __init__(self) -> None:
        self.calls = 0

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        out = []
        for text in texts:
            vector = [0.0, 0.0, 0.0, 0.3]
            for word in text.lower().replace("?", " ").split():
                if word in CONCEPTS:
                    vector[CONCEPTS[word]] += 1.0
            norm = math.sqrt(sum(x * x for x in vector))
            out.append([x / norm for x in vector])
        return out


@pytest.fixture
def store(store: SessionStoreContract) -> SessionStoreContract:
    """Three one-message sessions in a fresh store of each backend (conftest's ``store``)."""
    s = store
    talks = {
        "sport": ("user", "I shot some hoops on the court last night, one dunk too"),
        "tickets": ("assistant", "basketball tickets are expensive this season"),
        "bread": ("user", "I baked sourdough bread in the new oven"),
    }
    for i, (sid, (role, text)) in enumerate(talks.items()):
        s.create_session(sid, source="cli", started_at=1000.0 * (i + 1))
        s.append_messages(sid, [{"role": role, "content": text, "timestamp": 1000.0 * (i + 1)}])
    return s


def sessions(hits: list[dict[str, object]]) -> list[object]:
    return [h["session_id"] for h in hits]


def test_hybrid_adds_what_keywords_miss(store: SessionStoreContract) -> None:
    embedder = ConceptEmbedder()
    assert sessions(search_sessions(store, "basketball")) == ["tickets"]
    # Not indexed yet: no vectors, so hybrid gives exactly the keyword ranking.
    assert sessions(search_sessions(store, "basketball", embedder=embedder)) == ["tickets"]
    index_pending(store, embedder)
    hybrid = search_sessions(store, "basketball", embedder=embedder)
    # "sport" holds no query word but is all about the concept; "bread" stays out
    # (its similarity is below VECTOR_ONLY_MIN).
    assert sessions(hybrid) == ["tickets", "sport"]
    assert hybrid[0]["score"] > hybrid[1]["score"] > 0


def test_vectors_rerank_keyword_candidates(store: SessionStoreContract) -> None:
    store.replace_messages(
        "bread",
        [{"role": "user", "content": "my oven is expensive but the bread is good"}],
    )
    embedder = ConceptEmbedder()
    index_pending(store, embedder)
    question = "expensive basketball court"
    keyword = sessions(search_sessions(store, question))
    hybrid = sessions(search_sessions(store, question, embedder=embedder))
    assert set(keyword) == set(hybrid) == {"tickets", "sport", "bread"}
    # Vectors move the bread session (one shared word, another concept) to the end.
    assert hybrid[-1] == "bread"
    assert hybrid.index("sport") < hybrid.index("bread")


def test_vector_only_candidates_respect_filters(store: SessionStoreContract) -> None:
    embedder = ConceptEmbedder()
    index_pending(store, embedder)
    assert sessions(search_sessions(store, "basketball", embedder=embedder)) == [
        "tickets",
        "sport",
    ]
    for hits in (
        search_sessions(store, "basketball", exclude_session_ids=["sport"], embedder=embedder),
        search_sessions(store, "basketball", role_filter="assistant", embedder=embedder),
        search_sessions(store, "basketball", since=1500.0, embedder=embedder),
    ):
        assert sessions(hits) == ["tickets"]
    hits = search_messages(store, "basketball")
    assert [h["session_id"] for h in hits] == ["tickets"]  # search_messages stays keyword


def test_gate_threshold_and_deleted_sessions(store: SessionStoreContract) -> None:
    embedder = ConceptEmbedder()
    index_pending(store, embedder)
    saved = fulltext_boosts.VECTOR_ONLY_MIN
    try:
        fulltext_boosts.VECTOR_ONLY_MIN = 2.0  # nothing is that similar: rerank only
        assert sessions(search_sessions(store, "basketball", embedder=embedder)) == ["tickets"]
    finally:
        fulltext_boosts.VECTOR_ONLY_MIN = saved
    store.delete_session("sport")
    assert sessions(search_sessions(store, "basketball", embedder=embedder)) == ["tickets"]


def test_a_broken_query_embedding_is_reported(store: SessionStoreContract) -> None:
    class Broken(ConceptEmbedder):
        def embed(self, texts: list[str]) -> list[list[float]]:
            return [v[:2] for v in super().embed(texts)]

    with pytest.raises(ConfigError, match="4-dims vector"):
        search_sessions(store, "basketball", embedder=Broken())


def test_embedder_from_config() -> None:
    from memstrata.config import Config

    assert embedder_from_config(Config.load()) is None  # keyword only is the default
    config = Config.load(environ={"MEMSTRATA_SEARCH__EMBEDDER": "word2vec"})
    with pytest.raises(ConfigError, match=r"search\.embedder"):
        embedder_from_config(config)


def test_offline_embedder_end_to_end(store: SessionStoreContract) -> None:
    from memstrata.search.minilm import MiniLMEmbedder, model_zip

    try:
        model_zip()
    except ConfigError as exc:
        pytest.skip(str(exc))
    embedder = MiniLMEmbedder()
    assert index_pending(store, embedder) == 3
    hybrid = sessions(search_sessions(store, "Who played basketball?", embedder=embedder))
    # all-MiniLM-L6-v2 knows hoops and dunks are basketball; bread stays out.
    assert hybrid[:2] == ["tickets", "sport"]
    assert "bread" not in hybrid
