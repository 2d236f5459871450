"""Fuzzing the write and search paths of every backend with the same hostile text.

PostgreSQL holds text SQLite takes without a thought (a lexeme past 2,046 bytes, a NUL,
an index key past a page's third), and the CJK vector and its queries are built by the
store itself: a message that one backend stores and the other refuses is lost on the
other. Any text must be stored, and searching for it, for its words or with it as a
session query must answer, on each backend (conftest's ``store``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import yield_facts
from helpers import report_inputs
from memstrata.errors import InvalidMemoryArgument, ThreatDetectedError

# The pieces PostgreSQL's text types and the store's own tsvector and tsquery text are
# most likely to choke on, with any text between them.
_PIECES = st.sampled_from(
    [
        "数据库",
        "迁移",
        "é" * 1_100,  # 2,200 bytes: one lexeme past PostgreSQL's longest
        "y" * 2_100,
        "\x00",
        "'",
        "''",
        "\\",
        ":*",
        "<->",
        "&|!()",
        '"',
        "*",
        "NEAR(a b)",
        "a:1,2",
        "𠀀",
        "\u202e",
        "\ufeff",
    ]
)
_SEPARATORS = st.sampled_from(["", " ", ",", "，", "\n"])
_TEXT = st.lists(_PIECES | st.text(max_size=40), min_size=1, max_size=8).flatmap(
    lambda parts: _SEPARATORS.map(lambda sep: sep.join(parts))
)

_FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
INPUTS: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def _report_inputs() -> Iterator[None]:
    yield
    report_inputs(INPUTS, "test_fuzz_backends.py")


@_FUZZ
@given(text=_TEXT)
def test_any_text_is_stored_and_searched_on_every_backend(store: Any, text: str) -> None:
    """Written as a message (content and a tool call's arguments), any text is stored
    and read back, and the searches for it answer without an error."""
    INPUTS["hostile messages written and searched on each backend"] += 1
    store.create_session("s1")
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": text}}
    ids = store.append_messages(
        "s1",
        [
            {"role": "user", "content": text},
            {"role": "assistant", "content": "", "tool_calls": [call]},
        ],
    )
    assert len(ids) == 2
    assert store.get_message(ids[0]) is not None
    for query in [text, *text.split()[:4], f'"{text[:60]}"']:
        assert isinstance(store.search_messages(query), list)
    assert isinstance(store.search_sessions(text), list)


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def facts(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A facts store on each backend (as the facts contract suite opens them)."""
    yield from yield_facts(str(request.param), tmp_path / "facts")


@_FUZZ
@given(text=_TEXT)
def test_any_fact_text_is_kept_or_refused_and_searched_on_every_backend(
    facts: Any, text: str
) -> None:
    """Any text offered as a fact is stored or refused with the facts store's error
    (blank, too long, the scanner), never the database's; searching and recalling with
    it answer."""
    INPUTS["hostile facts written and searched on each backend"] += 1
    try:
        fact = facts.add(text, category="note")
    except (InvalidMemoryArgument, ThreatDetectedError):
        fact = None
    if fact is not None:
        assert facts.get(fact.id).content == fact.content
    for query in [text, *text.split()[:4]]:
        assert isinstance(facts.search(query), list)
        assert isinstance(facts.recall(query), list)
