"""Transcripts and truncation around matches, on conversations of 300 KB and more."""

from __future__ import annotations

import random

import pytest

from helpers import NATO_WORDS
from memstrata.query.compile import compile_query
from memstrata.search.truncate import (
    EARLIER_MARK,
    LATER_MARK,
    PROXIMITY_CHARS,
    Needles,
    best_window,
    find_all,
    format_transcript,
    match_positions,
    needles_for,
    truncate_around_matches,
)

MAX = 100_000
WORDS = NATO_WORDS


def filler(chars: int, seed: int) -> str:
    """Deterministic prose without any of the test's query terms."""
    rng = random.Random(seed)
    out: list[str] = []
    size = 0
    while size < chars:
        line = " ".join(rng.choice(WORDS) for _ in range(12)) + "\n"
        out.append(line)
        size += len(line)
    return "".join(out)[:chars]


def test_full_phrase_wins_and_the_window_sits_a_quarter_before_it() -> None:
    """A 400 KB text with the exact phrase once: the window holds it, 25 % before it."""
    text = filler(200_000, 1) + " the zanzibar relay protocol " + filler(200_000, 2)
    # Scattered single terms elsewhere must not pull the window away from the phrase.
    text = text[:50_000] + " zanzibar " + text[50_000:]
    assert len(text) >= 300_000
    cut = truncate_around_matches(text, needles_for(compile_query('"zanzibar relay"')), MAX)
    assert cut.strategy == "phrase"
    at = text.index("zanzibar relay")
    assert cut.start <= at < cut.end
    lead = at - cut.start
    assert 0.20 * MAX <= lead <= 0.26 * MAX
    assert cut.text.startswith(EARLIER_MARK) and cut.text.endswith(LATER_MARK)
    assert len(cut.text) <= MAX + len(EARLIER_MARK) + len(LATER_MARK) + 4


def test_terms_cooccurring_within_200_chars_beat_scattered_terms() -> None:
    """Without the phrase, the place where all terms are close together is chosen."""
    base = filler(500_000, 3)
    # Each term alone many times early on; together (within 200 chars) once, late.
    scattered = "".join(
        base[i * 10_000 : (i + 1) * 10_000] + (" quasar " if i % 2 else " nebula ")
        for i in range(20)
    )
    together = " quasar " + "x" * 120 + " nebula "
    text = scattered + base[200_000:400_000] + together + base[400_000:]
    assert len(text) >= 300_000
    cut = truncate_around_matches(text, needles_for(compile_query("nebula quasar")), MAX)
    assert cut.strategy == "proximity"
    at = text.index(together)
    assert cut.start <= at and at + len(together) <= cut.end


def test_single_terms_choose_the_window_covering_most_of_them() -> None:
    """Terms that never co-occur: the densest cluster of single-term hits wins."""
    base = filler(600_000, 4)
    parts = [base[:100_000], " pulsar "]  # a lone early hit
    dense_start = sum(len(p) for p in parts) + 200_000
    parts.append(base[100_000:300_000])
    for i in range(10):  # ten hits 3 KB apart, well inside one window
        parts.append(" pulsar " + base[300_000 + i * 3_000 : 303_000 + i * 3_000])
    parts.append(base[330_000:] + " magnetar ")  # the other term, alone and far away
    text = "".join(parts)
    assert len(text) >= 300_000
    needles = needles_for(compile_query("pulsar magnetar"))
    strategy, positions = match_positions(text, needles)
    assert strategy == "terms" and len(positions) == 12
    cut = truncate_around_matches(text, needles, MAX)
    inside = [p for p in positions if cut.start <= p < cut.end]
    assert len(inside) == 10
    assert cut.start >= dense_start - 0.25 * MAX - 10_000
    assert cut.positions == 10


def test_text_that_fits_is_returned_whole() -> None:
    """A short transcript is not cut and carries no markers."""
    cut = truncate_around_matches("short text about otters", Needles((), ("otter",)), 1000)
    assert cut.text == "short text about otters" and not cut.truncated


def test_no_match_keeps_the_start() -> None:
    """Without any match the window is the beginning, marked as cut at its end."""
    text = filler(300_000, 5)
    cut = truncate_around_matches(text, Needles((), ("absentword",)), MAX)
    assert cut.strategy == "none" and cut.start == 0
    assert cut.text.endswith(LATER_MARK) and not cut.text.startswith(EARLIER_MARK)


def test_window_is_clamped_to_the_end_of_the_text() -> None:
    """A match near the end moves the window back so it stays full."""
    assert best_window([999_990], 1_000_000, MAX) == 1_000_000 - MAX
    assert best_window([10], 1_000_000, MAX) == 0


def test_needles_follow_the_query_compiler() -> None:
    """Stopwords go, stems are used, quoted phrases and the word sequence are phrases."""
    needles = needles_for(compile_query("what did Caroline paint?"))
    assert needles.terms == ("carolin", "paint")  # the stem survives "Caroline's"
    assert needles.phrases == ("caroline paint",)
    quoted = needles_for(compile_query('"docker compose" networking NOT kubernetes'))
    assert "docker compose" in quoted.phrases
    assert "kubernetes" not in quoted.terms and "docker" in quoted.terms
    assert needles_for(compile_query("")).all == ()


def test_latin_needles_match_word_starts_and_cjk_anywhere() -> None:
    """'paint' matches 'painting' but not 'repaint'; CJK matches inside a run."""
    assert find_all("repaint painting paint", "paint") == [8, 17]
    assert find_all("修改服务端配置", "服务") == [2]
    assert PROXIMITY_CHARS == 200


def test_transcript_format_and_tool_output_trimming() -> None:
    """Roles, tool calls and long tool output (trimmed, keeping a buried match) render."""
    rows = [
        {"id": 1, "session_id": "a", "role": "user", "content": "find the error"},
        {
            "id": 2,
            "session_id": "a",
            "role": "assistant",
            "content": None,
            "tool_calls": '[{"function": {"name": "terminal", "arguments": "{\\"cmd\\": \\"'
            + "x" * 400
            + '\\"}"}}]',
        },
        {
            "id": 3,
            "session_id": "b",
            "role": "tool",
            "tool_name": "terminal",
            "content": "a" * 3000 + " SEGFAULT at 0xdead " + "b" * 3000,
        },
    ]
    transcript = format_transcript(rows, Needles((), ("segfault",)))
    text = transcript.text
    assert "[SESSION a]\n[USER]: find the error" in text
    assert "[ASSISTANT]: [Called: terminal(" in text and "...)]" in text
    assert "[SESSION b]\n[TOOL:terminal]: aaa" in text
    assert "SEGFAULT at 0xdead" in text and "...[truncated]..." in text
    assert len(text) < 2_000
    start = text.index("[TOOL:")
    assert transcript.message_ids_between(start, start + 10) == [3]
    assert transcript.message_ids_between(0, len(text)) == [1, 2, 3]


@pytest.mark.parametrize("bad", [0, -5])
def test_max_chars_must_be_positive(bad: int) -> None:
    """A non-positive window size is a programming error."""
    with pytest.raises(ValueError):
        truncate_around_matches("text", Needles((), ()), bad)
