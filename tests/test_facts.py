"""FactStore on its SQLite file: the file, its indexes, its schema and concurrent writers.

What every facts backend does is checked by the shared suite (tests/test_facts_contract.py).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstrata.errors import (
    NoMatchError,
    SchemaError,
)
from memstrata.providers.facts.store import FACTS_FILENAME, FactStore


@pytest.fixture
def store(tmp_path: Path) -> FactStore:
    with FactStore(tmp_path / "facts.db") as opened:
        yield opened  # type: ignore[misc]


def test_open_creates_file_in_home_with_wal_and_migrations(memstrata_home: Path) -> None:
    """FactStore.open() creates <home>/facts.db in WAL mode with its migration recorded."""
    with FactStore.open() as store:
        store.add("User likes hiking")
    conn = sqlite3.connect(memstrata_home / FACTS_FILENAME)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert [r[0] for r in conn.execute("SELECT name FROM _migrations")] == [
        "m001_facts",
        "m002_fact_vectors",
        "m003_folded_cjk_index",
    ]
    conn.close()


def test_add_search_and_reopen(tmp_path: Path) -> None:
    """A stored fact is found by a stemmed word after the store is closed and reopened."""
    with FactStore(tmp_path / "f.db") as store:
        fact = store.add("User prefers dark roast coffee", category="preference")
        assert fact.status == "live" and fact.source == "api" and fact.subject == "user"
    with FactStore(tmp_path / "f.db") as store:
        found = store.search("preferring coffee")
        assert [f.id for f in found] == [fact.id]
        assert found[0].score is not None and found[0].score > 0


def test_purge_erases_text_from_table_index_and_history(store: FactStore) -> None:
    """purge=True removes the row, its index entries and its text in history."""
    fact = store.add("User's bank PIN hint is the cat's birthday")
    store.forget(fact.id, purge=True)
    with pytest.raises(NoMatchError):
        store.get(fact.id)
    changes = store.history(fact.id)
    assert [(c.action, c.before, c.after) for c in changes] == [("purge", None, None)]
    conn = sqlite3.connect(store.path)
    hits = conn.execute("SELECT count(*) FROM facts_fts WHERE facts_fts MATCH 'birthday'")
    assert hits.fetchone()[0] == 0
    conn.execute("INSERT INTO facts_fts(facts_fts) VALUES ('integrity-check')")
    conn.close()


def test_recall_answers_a_long_dialogue_by_one_of_its_sentences(store: FactStore) -> None:
    """A pasted dialogue is answered when one of its sentences is about a fact, and its
    facts come back in the order a search for the same words gives them."""
    magic = store.add("Bart在元旦晚会上表演了魔术，观众都很喜欢。", category="episodic")
    store.add("Bart在圣诞节晚会上跳舞，感觉非常开心。", category="episodic")
    for other in (
        "Bart在考试前深呼吸，想象自己是宇航员。",
        "那天晚上Bart看了星星，觉得很特别。",
        "Bart很期待暑假，建议全家去海边。",
        "Bart的眼睛不舒服，没有去现场。",
        "Bart穿上了妈妈买的新衣服。",
        "Bart和爸爸一起去钓鱼，钓到了一条大鱼。",
    ):
        store.add(other, category="episodic")
    dialogue = (
        'Bart: "嘿，你知道吗？元旦晚会我要表演魔术！"\n'
        'Assistant: "真是太棒了！我可以想象现场观众都被你的魔术吸引，眼睛都不眨一下。"\n'
        'Bart: "我也会有点紧张呢，你有没有什么建议可以让我不那么紧张？"\n'
        'Assistant: "当然有，试着在表演前深呼吸，想象自己是那个无所畏惧的魔术师！"\n'
        'Bart: "对了，我要穿什么好呢？我特别期待那天晚上，我想让它变得很特别！"'
    )
    recalled = [f.id for f in store.recall(dialogue, limit=10)]
    # Read as a transcript, the last turn ("那天晚上 ... 很特别") brings up the night of
    # the stars as much as the dialogue brings up the magic show: both lead.
    assert magic.id in recalled[:2]
    searched = [f.id for f in store.search(dialogue.replace('"', " "))]
    assert recalled == [i for i in searched if i in recalled]
    # Each sentence alone is still gated: an unrelated one is not answered.
    assert store.recall("我也会有点紧张呢，你觉得我应该怎么办呢？") == []


@pytest.fixture(scope="module")
def fuzz_store(tmp_path_factory: pytest.TempPathFactory) -> FactStore:
    with FactStore(tmp_path_factory.mktemp("fuzz") / "f.db") as opened:
        opened.add('A "quoted" fact about C++ AND NOT stars* in 数据库')
        yield opened  # type: ignore[misc]


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=80))
def test_search_and_recall_never_raise(fuzz_store: FactStore, text: str) -> None:
    """Any query string, operators and quotes included, searches without an error."""
    fuzz_store.search(text)
    fuzz_store.recall(text)


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    """A database migrated by a newer version is refused with an upgrade hint."""
    path = tmp_path / "f.db"
    FactStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO _migrations(name, applied_at) VALUES ('m999_future', 0)")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaError, match="pip install -U memstrata"):
        FactStore(path)


_WORKER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from memstrata.providers.facts.store import FactStore

    path, tag = Path(sys.argv[1]), sys.argv[2]
    with FactStore(path, busy_timeout_ms=20000) as store:
        for i in range(30):
            store.add(f"fact {tag} number {i} about 数据库 replication")
            store.upsert_slot("editor", f"{tag}-{i}")
    """
)


def test_two_processes_writing_at_once_keep_the_store_consistent(tmp_path: Path) -> None:
    """Concurrent writers in two processes lose nothing and leave one live slot value."""
    path = tmp_path / "shared.db"
    FactStore(path).close()
    procs = [
        subprocess.Popen([sys.executable, "-c", _WORKER, str(path), tag]) for tag in ("a", "b")
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    with FactStore(path) as store:
        assert store.count(category="episodic") == 60
        slots = store.slots(categories=("identity",))
        assert len(slots) == 1 and slots[0].key == "editor"
        assert store.count(category="identity", status="superseded") == 59
        assert len(store.search("数据库", limit=100)) == 60
        # 60 adds + 60 slot adds + 59 supersedes.
        assert len(store.history(limit=1000)) == 179
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    for table in ("facts_fts", "facts_fts_trigram"):
        conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
    conn.close()
