"""Smoke tests of benchmarks/facts_recall.py, benchmarks/recall_postgres.py,
benchmarks/embedder_speed.py and benchmarks/pg_statement_times.py on tiny data (no timing)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "facts_recall.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_facts_recall", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_facts_recall"] = module
    spec.loader.exec_module(module)
    return module


def _sample() -> dict[str, object]:
    return {
        "sample_id": "tiny",
        "observation": {
            "session_1_observation": {
                "Ana": [
                    ["Ana adopted a grey cat named Pixel.", "D1:3"],
                    ["Ana runs a bakery in Porto.", ["D1:5", "D1:6"]],
                ],
                "Ben": [["Ben is learning the cello.", "D1:8"]],
            }
        },
        "qa": [
            {"question": "What is the name of Ana's cat?", "evidence": ["D1:3"], "category": 4},
            {"question": "Where is Ana's bakery?", "evidence": ["D1:6; D1:5"], "category": 1},
            {"question": "Which instrument does Ben play?", "evidence": ["D1:8"], "category": 4},
            {"question": "Adversarial one", "evidence": ["D1:3"], "category": 5},
        ],
    }


def test_loader_reads_observations_and_evidence_leniently(
    bench: ModuleType, tmp_path: Path
) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps([_sample()]), encoding="utf-8")
    (conv,) = bench.load(path, None)
    assert [(text[:8], speaker) for text, speaker, _ in conv.facts] == [
        ("Ana adop", "Ana"),
        ("Ana runs", "Ana"),
        ("Ben is l", "Ben"),
    ]
    assert conv.facts[1][2] == {"D1:5", "D1:6"}
    assert [q[2] for q in conv.questions] == [{"D1:3"}, {"D1:5", "D1:6"}, {"D1:8"}]


def test_scores_count_a_hit_only_for_evidence_facts(bench: ModuleType) -> None:
    scores = bench.Scores()
    scores.add(4, [{"D1:1"}, {"D1:3"}], {"D1:3"})
    scores.add(4, [], {"D1:3"})
    mean = scores.mean()
    assert (mean["R@1"], mean["R@5"], scores.empty) == (0.0, 0.5, 1)


def test_main_writes_a_report(bench: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps([_sample()]), encoding="utf-8")
    out = tmp_path / "report.md"
    assert bench.main([str(path), "--ablations", "--output", str(out)]) == 0
    report = out.read_text(encoding="utf-8")
    # Search finds every fact (the names match); recall misses the cello question: it
    # shares no topic word with its fact ("instrument", "play" against "cello").
    assert "| search (default: keyword) | 3 | 1.000 | 1.000 |" in report
    assert "| recall (default: keyword, gated) | 3 | 0.667 | 0.667 |" in report
    assert "| recall (default: keyword, gated) | 1/3 (33.3%) | 0/30 (0.0%) |" in report
    assert "chit-chat with a fact" in report and "ablation: no stemming" in report


@pytest.mark.postgres
def test_postgres_rows_score_like_sqlite_on_the_tiny_file(
    bench: ModuleType, tmp_path: Path
) -> None:
    """`--postgres DSN` adds the shipped systems on PostgresFactStore, with the same hits."""
    from conftest import PG_DSN

    path = tmp_path / "tiny.json"
    path.write_text(json.dumps([_sample()]), encoding="utf-8")
    out = tmp_path / "report.md"
    assert bench.main([str(path), "--postgres", PG_DSN, "--output", str(out)]) == 0
    report = out.read_text(encoding="utf-8")
    assert "| search (default: keyword) [postgres] | 3 | 1.000 | 1.000 |" in report
    assert "| recall (default: keyword, gated) [postgres] | 3 | 0.667 | 0.667 |" in report
    assert "PostgresFactStore" in report


def _tiny_locomo(folder: Path) -> Path:
    """A LoCoMo-format file of one conversation: two sessions, three messages, two
    questions."""
    sample = {
        "sample_id": "tiny",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a grey cat named Pixel."},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "Lovely! I started the cello."},
            ],
            "session_2_date_time": "2:00 pm on 9 June, 2023",
            "session_2": [
                {"speaker": "Ana", "dia_id": "D2:1", "text": "My bakery in Porto opened today."},
            ],
        },
        "qa": [
            {"question": "What is the name of Ana's cat?", "evidence": ["D1:1"], "category": 4},
            {"question": "Where is Ana's bakery?", "evidence": ["D2:1"], "category": 4},
        ],
    }
    path = folder / "tiny.json"
    path.write_text(json.dumps([sample]), encoding="utf-8")
    return path


RECALL_PG = Path(__file__).resolve().parent.parent / "benchmarks" / "recall_postgres.py"


@pytest.mark.postgres
def test_recall_postgres_measures_every_option_on_both_backends(tmp_path: Path) -> None:
    """benchmarks/recall_postgres.py --expansion on a tiny conversation: each option has a
    row per backend and a line per metric in the comparison."""
    from conftest import PG_DSN

    path = _tiny_locomo(tmp_path)
    out = tmp_path / "report.md"
    run = subprocess.run(
        [
            sys.executable,
            str(RECALL_PG),
            str(path),
            "--dsn",
            PG_DSN,
            "--expansion",
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    report = out.read_text(encoding="utf-8")
    options = (
        "default (dates on)",
        "dates off",
        "speaker awareness",
        "query expansion (fake rewrites)",
    )
    for option in options:
        for backend in ("sqlite", "postgres"):
            assert f"| {option} [{backend}] | 2 | 0 |" in report
        assert f"| {option} | NDCG@5 |" in report
    assert "| default (dates on) | R@5 | 1.000 | 1.000 | +0.000 |" in report


EMBEDDER_SPEED = Path(__file__).resolve().parent.parent / "benchmarks" / "embedder_speed.py"


def test_embedder_speed_reports_indexing_and_query_figures(tmp_path: Path) -> None:
    """benchmarks/embedder_speed.py with MiniLM on a tiny LoCoMo file and a tiny MADial
    folder: every message indexed, a row of figures per embedder."""
    from memstrata.errors import ConfigError
    from memstrata.search.minilm import model_zip

    try:
        model_zip()
    except ConfigError as exc:
        pytest.skip(str(exc))
    locomo = _tiny_locomo(tmp_path)
    madial = tmp_path / "madial"
    madial.mkdir()
    memory = {"m": {"id": 1, "user-id": 1, "time": "2024-05-01", "event": "Bart 养了一只猫",
                    "scene": "家里", "emotion": "开心"}}  # fmt: skip
    (madial / "tiny-memory.jsonl").write_text(json.dumps(memory, ensure_ascii=False) + "\n")
    dialogue = {"id": 2, "user-id": 1, "relevant-id": [1], "test-turn": [2],
                "dialogue": ["Bart: 我的猫今天很乖", "Assistant: 真好", "Bart: 是啊"]}  # fmt: skip
    (madial / "tiny-dialogue.jsonl").write_text(json.dumps(dialogue, ensure_ascii=False) + "\n")
    out = tmp_path / "speed.md"
    run = subprocess.run(
        [sys.executable, str(EMBEDDER_SPEED), str(locomo), str(madial),
         "--embedders", "minilm", "--repeats", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    report = out.read_text(encoding="utf-8")
    assert "fresh SQLite store of the first LoCoMo conversation (3 messages)" in report
    assert "2 LoCoMo questions and 1 MADial zh dialogues" in report
    row = next(line for line in report.splitlines() if line.startswith("| all-MiniLM-L6-v2 |"))
    rate = float(row.split("|")[2])
    assert rate > 0


FOLD_MIGRATION = Path(__file__).resolve().parent.parent / "benchmarks" / "fold_migration.py"
STATEMENT_TIMES = Path(__file__).resolve().parent.parent / "benchmarks" / "pg_statement_times.py"


@pytest.mark.postgres
def test_pg_statement_times_lists_each_class_and_its_statements(namespace: str) -> None:
    """benchmarks/pg_statement_times.py on a tenant of a few messages: a line per class
    with the search's figures, and the statements it sent (the probe among them)."""
    from conftest import PG_DSN
    from memstrata.store.postgres import PostgresSessionStore

    with PostgresSessionStore(PG_DSN, namespace=namespace) as store:
        store.create_session("s1", source="cli")
        rows = [{"role": "user", "content": f"the deploy of auth-api failed {i}"} for i in range(5)]
        store.append_messages("s1", rows)
    run = subprocess.run(
        [sys.executable, str(STATEMENT_TIMES), "--dsn", PG_DSN, "--namespace", namespace,
         "--classes", "word", "--rounds", "1"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("word: search p50 ")
    assert any("per search, mean" in line and "MATERIALIZED" in line for line in lines[1:])


@pytest.mark.postgres
def test_fold_migration_reports_both_backends_and_both_corpora(tmp_path: Path) -> None:
    """benchmarks/fold_migration.py on a small store: the migration re-indexes no row of
    the simplified corpus and every Chinese message of the traditional one, on both
    backends, and the report says so beside its baseline."""
    from conftest import PG_DSN

    out = tmp_path / "fold.md"
    run = subprocess.run(
        [sys.executable, str(FOLD_MIGRATION), "--messages", "600", "--pg-dsn", PG_DSN,
         "--out", str(out)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    rows = [line.split(" | ") for line in out.read_text(encoding="utf-8").splitlines()]
    table = [r for r in rows if r[0] in ("| SQLite", "| PostgreSQL")]
    assert [(r[0], r[1]) for r in table] == [
        ("| SQLite", "as generated (simplified)"),
        ("| SQLite", "every Chinese message traditional"),
        ("| PostgreSQL", "as generated (simplified)"),
        ("| PostgreSQL", "every Chinese message traditional"),
    ]
    changed = [int(r[2].replace(",", "")) for r in table]
    assert changed[0] == changed[2] and changed[1] == changed[3] > changed[0]
