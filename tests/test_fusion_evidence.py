"""Fusion weighs evidence, not indexes: what a message matched counts by its rarity,
whichever index found it, on both backends."""

from __future__ import annotations

from typing import Any

import pytest

from memstrata.query.compile import compile_query
from memstrata.query.filters import Filters

# Ten rare bigrams of one Chinese clause, and an English name that one other message holds.
CLAUSE = "量子计算实验室搬迁"
NAME_ONLY = "Rosalind mentioned something yesterday."
CHINESE = "下个月量子计算实验室搬迁到东区大楼。"
QUESTION = f"Rosalind {CLAUSE}"


def seed(store: Any) -> None:
    """The Chinese answer, the name alone, and filler that neither matches."""
    # The name's message is the newer: a tie between the two would rank it first.
    store.create_session("chinese", source="cli")
    store.append_messages("chinese", [{"role": "user", "content": CHINESE}])
    store.create_session("name", source="cli")
    store.append_messages("name", [{"role": "user", "content": NAME_ONLY}])
    store.create_session("filler", source="cli")
    store.append_messages(
        "filler",
        [
            {"role": "user", "content": f"Filler line {i} about the weather and lunch."}
            for i in range(12)
        ]
        + [{"role": "user", "content": f"今天第{i}次开会讨论午饭吃什么。"} for i in range(12)],
    )


def test_ten_rare_chinese_bigrams_outrank_one_english_name(store: Any) -> None:
    """The message holding the whole clause ranks above the one holding only the name."""
    seed(store)
    assert len([t for _, t in compile_query(QUESTION).leaves["cjk"]]) >= 8  # type: ignore[index]
    sessions = [h["session_id"] for h in store.search_sessions(QUESTION, limit=5)]
    assert sessions[:2] == ["chinese", "name"]
    messages = store.search_messages(QUESTION, limit=5)
    assert messages[0]["session_id"] == "chinese"


def test_scores_share_one_scale(store: Any) -> None:
    """The best message scores 1.0 and a weaker one keeps its share below it."""
    seed(store)
    ranked = store.rank(QUESTION, Filters()).candidates
    assert ranked[0].score == pytest.approx(1.0)
    by_session = {c.session_id: c.score for c in ranked}
    assert 0 < by_session["name"] < 0.5


def test_a_message_found_by_two_indexes_adds_both(tmp_path: Any) -> None:
    """On SQLite a message matching the word index and the bigram index gets both
    indexes' evidence, and beats a message that matches only one of them."""
    from memstrata.store.sqlite.store import SessionStore

    with SessionStore(tmp_path / "state.db") as store:
        store.create_session("both", source="cli")
        store.append_messages("both", [{"role": "user", "content": "Rosalind 说量子计算很难"}])
        store.create_session("one", source="cli")
        store.append_messages("one", [{"role": "user", "content": "Rosalind called again."}])
        store.create_session("filler", source="cli")
        store.append_messages(
            "filler",
            [
                {"role": "user", "content": f"filler {i} 无关的句子" if i % 2 else f"noise {i}"}
                for i in range(10)
            ],
        )
        ranked = store.rank("Rosalind 量子计算", Filters()).candidates
        assert ranked[0].session_id == "both"
        assert set(ranked[0].bm25) == {"word", "cjk"}
