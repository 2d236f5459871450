"""Smoke tests for the benchmark corpus generator (no timing)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

CORPUS_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "corpus.py"


@pytest.fixture(scope="module")
def corpus() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_corpus", CORPUS_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_corpus"] = module
    spec.loader.exec_module(module)
    return module


def _dump(sessions: list[Any]) -> str:
    return json.dumps(
        [(s.id, s.source, s.started_at, s.turns) for s in sessions], ensure_ascii=False
    )


def test_same_seed_gives_the_same_corpus(corpus: ModuleType) -> None:
    """Two runs with the same size and seed produce identical sessions."""
    first = _dump(list(corpus.generate(400)))
    assert first == _dump(list(corpus.generate(400)))
    assert first != _dump(list(corpus.generate(400, seed=corpus.SEED + 1)))


def test_corpus_has_exactly_n_messages_in_realistic_sessions(corpus: ModuleType) -> None:
    """The sessions hold exactly n messages, each session within the size bounds."""
    sessions = list(corpus.generate(1500))
    assert sum(len(s.messages) for s in sessions) == 1500
    for s in sessions[:-1]:
        assert corpus.SESSION_MIN <= len(s.messages) <= corpus.SESSION_MAX
    roles = {m["role"] for s in sessions for m in s.messages}
    assert roles == {"user", "assistant", "tool"}
    calls = [c for s in sessions for m in s.messages for c in m["tool_calls"] or ()]
    assert calls and all(isinstance(json.loads(c["function"]["arguments"]), dict) for c in calls)


def test_corpus_mixes_chinese_and_glued_latin(corpus: ModuleType) -> None:
    """About a tenth of the messages hold Chinese, some with Latin glued to it."""
    sessions = list(corpus.generate(2000))
    stats = corpus.describe(sessions)
    assert 0.05 <= stats["chinese_share"] <= 0.2
    glued = re.compile(r"[\u4e00-\u9fff][a-z]{3,}|[a-z]{3,}[\u4e00-\u9fff]")
    assert any(glued.search(m["content"] or "") for s in sessions for m in s.messages)
    assert stats["vocabulary_size"] >= 2000


def test_every_query_class_has_planted_hits(corpus: ModuleType) -> None:
    """Every query of every class has its planted text somewhere in a small corpus."""
    texts = [corpus.indexed_text(m) for s in corpus.generate(300) for m in s.messages]
    queries = corpus.queries()
    assert list(queries) == list(corpus.QUERY_CLASSES)
    for plant in corpus.PLANTS:
        assert any(plant.needle in t for t in texts), plant
    for cls in corpus.QUERY_CLASSES:
        assert len(set(queries[cls])) == corpus.QUERIES_PER_CLASS
        assert any(p.query_class == cls for p in corpus.PLANTS)


def test_planted_text_answers_its_query(corpus: ModuleType) -> None:
    """Each planted needle contains the terms its query asks for."""
    for p in corpus.PLANTS:
        if p.query_class in ("word", "cjk3", "cjk2", "glued"):
            assert p.query in p.needle
        elif p.query_class == "phrase":
            assert p.query.strip('"') == p.needle
        elif p.query_class == "prefix":
            assert p.needle.startswith(p.query.rstrip("*"))
        elif p.query_class == "boolean":
            positive = p.query.split(" NOT ")[0].replace(" AND ", " ").replace(" OR ", " ")
            assert all(w in p.needle for w in positive.split())
        else:
            assert p.query_class == "question" and p.needle.endswith(".")


def test_a_build_for_later_runs_leaves_the_committed_results_alone(tmp_path: Path) -> None:
    """`store.py --build-only --db-dir D` reports beside its databases, not over
    benchmarks/results/store.md (another run's committed figures)."""
    import subprocess

    results = CORPUS_PATH.parent / "results" / "store.md"
    before = results.read_bytes()
    build = ["--sizes", "1000", "--build", "bulk", "--db-dir", str(tmp_path), "--build-only"]
    done = subprocess.run(
        [sys.executable, str(CORPUS_PATH.parent / "store.py"), *build],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert results.read_bytes() == before
    assert (tmp_path / "store-build.md").is_file()
    assert (tmp_path / "memstrata-1000-bulk.db").is_file()


def test_recall_misses_counts_what_a_missing_session_shares(tmp_path: Path) -> None:
    """benchmarks/recall_misses.py on a tiny LoCoMo-format file: a question whose gold
    session says none of its words (`martial arts` against `kickboxing`) is a miss that
    shares no content word."""
    import subprocess

    turns = ["I love kickboxing on Mondays."] + [
        f"The weather on day {i} was fine." for i in range(7)
    ]
    conversation: dict[str, Any] = {"speaker_a": "John", "speaker_b": "Maria"}
    for n, text in enumerate(turns, start=1):
        conversation[f"session_{n}"] = [{"speaker": "John", "dia_id": f"D{n}:1", "text": text}]
        conversation[f"session_{n}_date_time"] = f"1:56 pm on {n} May, 2023"
    qa = [{"question": "Which martial arts are practised?", "answer": "kickboxing"}]
    qa[0].update(evidence=["D1:1"], category=1)
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps([{"sample_id": "t", "conversation": conversation, "qa": qa}]))
    done = subprocess.run(
        [sys.executable, str(CORPUS_PATH.parent / "recall_misses.py"), str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "gold sessions missing from the top 5: 1" in done.stdout
    assert "no content word shared: 1 (100%)" in done.stdout


def test_homophones_benchmark_recovers_a_slip(tmp_path: Path) -> None:
    """benchmarks/homophones.py on a tiny MADial-format folder: the memory's span asked
    with a homophone slip is found once corrected, and nothing clean is changed."""
    import subprocess

    memories = {
        "1": {
            "id": 1,
            "user-id": 1,
            "time": "2024-05-02",
            "event": "张伟教我做蛋糕，我们一起烤了巧克力蛋糕",
            "scene": "家里",
            "emotion": "开心",
        },
        "2": {
            "id": 2,
            "user-id": 1,
            "time": "2024-05-03",
            "event": "我在公园里看到很多漂亮的花朵和蝴蝶",
            "scene": "公园",
            "emotion": "放松",
        },
    }
    dialogue = {
        "id": 0,
        "user-id": 1,
        "relevant-id": [1],
        "test-turn": [2],
        "dialogue": [
            '<Bart>:"我想再做一次蛋糕。"',
            '<Assistant>:"好主意！"',
            '<Bart>:"你还记得吗？"',
        ],
    }
    (tmp_path / "tiny-memory.jsonl").write_text(
        json.dumps(memories, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (tmp_path / "tiny-dialogue.jsonl").write_text(
        json.dumps(dialogue, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    out = tmp_path / "homophones.md"
    done = subprocess.run(
        [
            sys.executable,
            str(CORPUS_PATH.parent / "homophones.py"),
            str(tmp_path),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = out.read_text(encoding="utf-8")
    assert "| clean, correction on |" in report
    # The slipped windows: found by none but one as typed, by every one corrected.
    windows = report.split("## windows of 2-3 characters")[1]
    assert "| slip, correction off | 0.250 | 0.250 | 3 |" in windows
    assert "| slip, correction on | 1.000 | 1.000 | 0 |" in windows
    assert "Clean queries changed by correction (wrong corrections): 0 of" in report
