"""Speaker awareness, sub-query fusion and the decayed session score."""

from __future__ import annotations

import pytest

from memstrata.store.base import search_sessions
from memstrata.store.boosts import merge_subqueries, speaker_of
from memstrata.store.contract import SessionStoreContract
from memstrata.store.rank import Candidate, aggregate_sessions


@pytest.mark.parametrize(
    ("line", "speaker"),
    [
        ("Caroline: I went to the group", "caroline"),
        ("  Mary Ann: hello", "mary ann"),
        ("Note: this is not a speaker line but looks like one", "note"),
        ("The plan for today, as discussed: go", None),  # more than three words
        ("no colon here", None),
        ("12: numbers do not speak", None),
    ],
)
def test_speaker_of(line: str, speaker: str | None) -> None:
    assert speaker_of(line) == speaker


@pytest.fixture
def store(store: SessionStoreContract) -> SessionStoreContract:
    """Two sessions in a fresh store of each backend (conftest's ``store``)."""
    s = store
    talks = {
        # Melanie talks about pottery in this one; Caroline only mentions it.
        "mel": "Melanie: my pottery class made me so happy",
        "car": "Caroline: Melanie, I saw pottery today and thought of the class",
    }
    for i, (sid, text) in enumerate(talks.items()):
        s.create_session(sid, source="cli", started_at=1000.0 * (i + 1))
        s.append_messages(sid, [{"role": "user", "content": text, "timestamp": 1000.0 * (i + 1)}])
    return s


def test_speaker_awareness_prefers_the_named_speaker(store: SessionStoreContract) -> None:
    question = "What class does Melanie take with pottery?"
    plain = search_sessions(store, question)
    aware = search_sessions(store, question, speakers=True)
    assert aware[0]["session_id"] == "mel"
    by_id = {h["session_id"]: h["score"] for h in plain}
    boosted = {h["session_id"]: h["score"] for h in aware}
    # Only Melanie's own line is boosted (x1.25); Caroline's line naming her is not.
    assert boosted["mel"] == pytest.approx(by_id["mel"] * 1.25, rel=1e-4)
    assert boosted["car"] == pytest.approx(by_id["car"], rel=1e-4)


def test_merge_subqueries_adds_weighted_best_scores() -> None:
    found = {1: Candidate(1, "a", 1.0, {}, 1.0)}
    extra = [
        [Candidate(1, "a", 1.0, {}, 0.4), Candidate(2, "b", 2.0, {}, 1.0)],
        [Candidate(1, "a", 1.0, {}, 0.8)],
    ]
    merge_subqueries(found, extra, 0.5)
    assert found[1].score == pytest.approx(1.0 + 0.5 * 0.8)  # the best sub-query score
    assert found[2].score == pytest.approx(0.5)  # found only by a sub-query


def test_decayed_session_score() -> None:
    cands = [
        Candidate(1, "many", 1.0, {}, 0.5),
        Candidate(2, "many", 1.0, {}, 0.5),
        Candidate(3, "many", 1.0, {}, 0.5),
        Candidate(4, "one", 1.0, {}, 1.0),
    ]
    roots = {"many": "many", "one": "one"}
    # 0.5 + 0.3 + 0.18 = 0.98 < 1.0: one strong hit beats three weak ones...
    decayed = aggregate_sessions(cands, roots)
    assert [sid for sid, _ in decayed] == ["one", "many"]
    # ...while a plain sum of three (decay 1) lets volume win.
    summed = aggregate_sessions(cands, roots, top_hits=3, decay=1.0)
    assert [sid for sid, _ in summed] == ["many", "one"]
