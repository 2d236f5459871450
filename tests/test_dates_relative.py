"""English dates counted from today (yesterday, last week, 3 days ago): read against the
moment of the question, kept as keywords, and preferred by the search on both backends."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from helpers import local_ts as ts
from memstrata.query.dates import find_dates
from memstrata.store.rank import dated_query

# A Monday.
NOW = datetime(2026, 12, 7, 15, 0)


@pytest.mark.parametrize(
    ("question", "inside", "outside"),
    [
        ("What did we decide yesterday?", ts(2026, 12, 6), ts(2026, 12, 4)),
        ("the day before yesterday", ts(2026, 12, 5), ts(2026, 12, 7, 20)),
        ("What did I say this morning?", ts(2026, 12, 7, 9), ts(2026, 12, 5)),
        ("the bug we fixed last week", ts(2026, 12, 2), ts(2026, 12, 9)),
        ("this week", ts(2026, 12, 9), ts(2026, 12, 3)),
        ("the week before last", ts(2026, 11, 25), ts(2026, 12, 2)),
        ("where did we go last weekend", ts(2026, 12, 5), ts(2026, 12, 2)),
        ("last Tuesday's meeting", ts(2026, 12, 1), ts(2026, 12, 4)),
        ("last Monday", ts(2026, 11, 30), ts(2026, 12, 7)),  # not today
        ("the bill of last month", ts(2026, 11, 15), ts(2026, 10, 15)),
        ("our trip last year", ts(2025, 6, 1), ts(2026, 6, 1)),
        ("3 days ago", ts(2026, 12, 4), ts(2026, 12, 1)),
        ("three days ago", ts(2026, 12, 4), ts(2026, 12, 1)),
        ("two weeks ago", ts(2026, 11, 23), ts(2026, 12, 3)),
        ("a month ago", ts(2026, 11, 10), ts(2026, 10, 10)),
        ("a couple of years ago", ts(2024, 8, 1), ts(2025, 8, 1)),
    ],
)
def test_each_form(question: str, inside: float, outside: float) -> None:
    (window,) = find_dates(question, now=NOW)
    assert window.contains(inside) and not window.contains(outside)
    # Messages say "last week" in the same words: the date stays a keyword.
    assert window.literal


def test_what_is_not_a_date_counted_from_today() -> None:
    assert find_dates("the meeting on Tuesday", now=NOW) == []  # may be next Tuesday
    assert find_dates("0 days ago", now=NOW) == []
    assert find_dates("the last weekend of the quarter was busy", now=NOW) == []
    assert find_dates("Yesterday's Enterprises", now=NOW)[0].text == "Yesterday"


def test_a_question_about_the_day_alone() -> None:
    """ "What did we do yesterday?" names nothing but a day: the search also fetches
    what was written then; "yesterday's deploy" searches its words as well."""
    _, windows, date_only = dated_query("What did we do yesterday?")
    assert len(windows) == 1 and date_only
    compiled, windows, date_only = dated_query("What broke in yesterday's deploy?")
    assert len(windows) == 1 and not date_only
    assert "yesterday" in (compiled.match.get("word") or "")


def _seed(store: Any, when: float) -> None:
    """Two sessions about the deploy: one written ``when``, one five weeks before."""
    long_ago = when - 35 * 86400
    store.create_session("then", source="cli", started_at=when)
    store.append_messages(
        "then", [{"role": "user", "content": "we rolled the deploy back", "timestamp": when}]
    )
    store.create_session("other", source="cli", started_at=long_ago)
    store.append_messages(
        "other",
        [{"role": "user", "content": "the deploy of the deploy job", "timestamp": long_ago}],
    )


def _first(store: Any, question: str, **options: Any) -> str:
    return str(store.search_sessions(question, limit=2, **options)[0]["session_id"])


def test_search_prefers_what_was_written_then(store: Any) -> None:
    yesterday = datetime.now().replace(hour=12, minute=0, second=0, microsecond=0)
    _seed(store, (yesterday - timedelta(days=1)).timestamp())
    assert _first(store, "What did we decide about the deploy yesterday?") == "then"
    assert _first(store, "What did we decide about the deploy yesterday?", dates=False) == "other"
    # A question about the day alone finds what was written then, whatever its words.
    assert _first(store, "What did we do yesterday?") == "then"
