"""A transcript-shaped query is read as a whole and again by its last turn.

Session search runs on both backends (conftest's ``store``); the facts store on SQLite.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from memstrata.providers.facts.store import FactStore
from memstrata.query.transcript import (
    LAST_TURN_WEIGHT,
    SCAN_CHARS,
    WHOLE_CHARS,
    Readings,
    readings,
    turns,
)
from memstrata.search.embedders import index_pending
from memstrata.store.boosts import mix_readings

MEMORIES = {
    "garden": "We planted tomatoes in the garden, the tomatoes grew well in the sun.",
    "concert": "We went to the violin concert downtown, the orchestra played late.",
    "bike": "I fixed the bike chain on Sunday.",
    "dinner": "Dinner with my sister at the noodle place.",
}
# Two turns about the garden, then the user brings up the concert.
TRANSCRIPT = (
    'Anna: "My tomatoes in the garden are huge this year!"\n'
    'Assistant: "Tomatoes love a sunny garden."\n'
    'Anna: "Speaking of evenings, remember that violin concert?"'
)
CHINESE = (
    "小明：我家的番茄长得特别大！\n助手：它们喜欢阳光。\n小明：说起来，你还记得那场小提琴音乐会吗？"
)


def test_mix_readings_weighs_the_last_turn_and_keeps_the_scale() -> None:
    whole = {"a": 1.0, "b": 0.6}
    last = {"b": 1.0, "c": 0.4}
    mixed = mix_readings(whole, last, 0.5)
    assert mixed == pytest.approx({"a": 1 / 1.5, "b": 1.1 / 1.5, "c": 0.2 / 1.5})
    # Both readings at their best give the best score of either.
    assert mix_readings({"x": 1.0}, {"x": 1.0}, LAST_TURN_WEIGHT) == {"x": 1.0}
    assert mix_readings({"x": 0.7}, {}, 0.0) == {"x": 0.7}
    assert mix_readings({}, {}, 0.5) == {}


def test_readings_of_a_transcript_take_the_last_user_turn() -> None:
    assert readings(TRANSCRIPT) == Readings(
        TRANSCRIPT, "Speaking of evenings, remember that violin concert?"
    )
    # The assistant spoke last: the user's last turn is what they brought up.
    answered = TRANSCRIPT + '\nAssistant: "Yes, the one downtown."'
    read = readings(answered)
    assert read is not None
    assert read.last_turn == "Speaking of evenings, remember that violin concert?"
    # Full-width colons, CJK names, no quotes; an assistant called 助手.
    read = readings(CHINESE + "\n助手：当然记得。")
    assert read is not None
    assert read.last_turn == "说起来，你还记得那场小提琴音乐会吗？"
    # Angle-bracketed speakers, and a turn continued on the next line.
    bracketed = '<Bart>:"Hi there"\n<Assistant>:"Hello!"\n<Bart>:"The magic show\nat school"'
    read = readings(bracketed)
    assert read is not None
    assert read.last_turn == "The magic show\nat school"
    assert [t.speaker for t in turns(bracketed)] == ["bart", "assistant", "bart"]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "what did Anna say about the violin concert?",
        "Anna: remember the violin concert?",  # one line
        "Anna: first\nAnna: second",  # one speaker: notes, not a dialogue
        "see https://example.com/a\nand http://example.com/b",
        "10:30 meeting\n11:00 lunch",
        "上次我们讨论数据库迁移，结论是什么？",
        "todo list\n- milk\n- eggs",
        "Anna: hi\nBen: hello",  # two lines: no speaker speaks again
        "name: memstrata\nversion: 1.0\nlicence: MIT",  # a key: value listing
        "\n".join(f"line {i}: value {i}" for i in range(200)),
    ],
)
def test_other_text_is_read_once(text: str) -> None:
    assert readings(text) is None


def test_a_long_pasted_text_is_rejected_quickly() -> None:
    """No second reading, and the check costs little, for a long non-transcript text."""
    text = "\n".join(f"line {i} of a pasted log without speakers" for i in range(20_000))
    start = time.perf_counter()
    assert readings(text) is None
    assert time.perf_counter() - start < 0.5
    # With a colon on every line only the end is scanned.
    listing = "\n".join(f"key {i}: value {i}" for i in range(50_000))
    start = time.perf_counter()
    assert readings(listing) is None
    assert time.perf_counter() - start < 0.5


def test_a_long_transcript_is_read_as_a_whole_by_its_end(store: Any) -> None:
    """The keyword compile keeps a query's first characters; a long conversation's whole
    reading is its end, where what is talked about now is."""
    _seed(store)
    talk = "\n".join(f'Anna: "small talk {i}"\nAssistant: "sure {i}"' for i in range(200))
    chat = talk + '\nAnna: "we fixed the bike chain"\nAssistant: "nice"\nAnna: "and then?"'
    assert len(talk) > WHOLE_CHARS
    read = readings(chat)
    assert read is not None
    assert read.last_turn == "and then?"
    assert chat.endswith(read.whole) and len(read.whole) <= WHOLE_CHARS
    assert read.whole.startswith("Anna:") or read.whole.startswith("Assistant:")
    assert [h["session_id"] for h in store.search_sessions(chat)][:1] == ["bike"]


def test_a_long_transcript_is_read_by_its_last_turn() -> None:
    """Past SCAN_CHARS only the end is read for turns, and the last turn is there."""
    chat = "\n".join(f'Anna: "small talk {i}"\nAssistant: "sure {i}"' for i in range(2000))
    assert len(chat) > SCAN_CHARS
    read = readings(chat + '\nAnna: "the violin concert?"\nAssistant: "yes"')
    assert read is not None
    assert read.last_turn == "the violin concert?"


def _seed(store: Any) -> None:
    for sid, text in MEMORIES.items():
        store.create_session(sid, source="cli")
        store.append_message(sid, "user", text)


def test_a_transcript_finds_the_memory_its_last_turn_is_about(store: Any) -> None:
    _seed(store)
    found = [h["session_id"] for h in store.search_sessions(TRANSCRIPT, limit=4)]
    assert found[:2] == ["concert", "garden"]
    # The same words on one line are one reading: the garden's words dominate.
    flat = [h["session_id"] for h in store.search_sessions(TRANSCRIPT.replace("\n", " "))]
    assert flat[:2] == ["garden", "concert"]


def test_a_chinese_transcript_finds_the_memory_its_last_turn_is_about(store: Any) -> None:
    for sid, text in {
        "garden": "花园里的番茄长得很好，番茄喜欢阳光。",
        "concert": "我们去市中心听了小提琴音乐会。",
        "bike": "周日修好了自行车的链条。",
    }.items():
        store.create_session(sid, source="cli")
        store.append_message(sid, "user", text)
    read = {h["session_id"]: h["score"] for h in store.search_sessions(CHINESE)}
    assert max(read, key=read.__getitem__) == "concert"
    # On one line the same words are one reading: the concert stands lower against the
    # garden (the backends' BM25 differ, so their margins do).
    flat = {h["session_id"]: h["score"] for h in store.search_sessions(CHINESE.replace("\n", " "))}
    assert flat["concert"] / flat["garden"] < read["concert"] / read["garden"]


class Axes:
    """A toy embedder: one axis per topic word, so cosines follow the topics named."""

    name, dims = "axes", 3

    def __init__(self) -> None:
        self.axes = {"tomatoes": 0, "garden": 0, "violin": 1, "concert": 1}
        self.queries: list[list[str]] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            v = [0.0, 0.0, 0.5]
            for word in text.lower().replace("?", " ").replace(",", " ").split():
                if word in self.axes:
                    v[self.axes[word]] += 1.0
            norm = sum(x * x for x in v) ** 0.5
            out.append([x / norm for x in v])
        return out

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        self.queries.append(list(texts))
        return self.embed(texts)


def test_hybrid_embeds_both_readings_of_a_transcript_only(store: Any) -> None:
    _seed(store)
    embedder = Axes()
    index_pending(store, embedder)
    found = [h["session_id"] for h in store.search_sessions(TRANSCRIPT, embedder=embedder)]
    assert found[:1] == ["concert"]
    question = "what about the violin concert?"
    store.search_sessions(question, embedder=embedder)
    assert embedder.queries == [
        [TRANSCRIPT, "Speaking of evenings, remember that violin concert?"],
        [question],
    ]


def test_facts_search_reads_a_transcript_the_same_way(tmp_path: Path) -> None:
    embedder = Axes()
    with FactStore(tmp_path / "facts.db") as facts:
        ids = {facts.add(t, category="episodic", source="tool").id: k for k, t in MEMORIES.items()}
        assert [ids[f.id] for f in facts.search(TRANSCRIPT)][:2] == ["concert", "garden"]
        flat = TRANSCRIPT.replace("\n", " ")
        assert [ids[f.id] for f in facts.search(flat)][:2] == ["garden", "concert"]
        # Recall (the per-turn prefetch) ranks what its gate admits the same way.
        assert [ids[f.id] for f in facts.recall(TRANSCRIPT)][:2] == ["concert", "garden"]
        assert [ids[f.id] for f in facts.recall(flat)][:2] == ["garden", "concert"]
        facts.embedder = embedder
        facts.index_vectors(embedder)
        assert [ids[f.id] for f in facts.search(TRANSCRIPT)][:1] == ["concert"]
        assert [ids[f.id] for f in facts.recall(TRANSCRIPT)][:1] == ["concert"]
    assert [TRANSCRIPT, "Speaking of evenings, remember that violin concert?"] in embedder.queries
