"""Date awareness: dates named in a question, and the search preferring messages from then."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from helpers import local_ts as ts
from memstrata.errors import SessionStoreError
from memstrata.query.dates import find_dates, strip_dates
from memstrata.store.base import search_messages, search_sessions
from memstrata.store.sqlite.store import SessionStore


@pytest.mark.parametrize(
    ("question", "inside", "outside"),
    [
        ("What did Maria do on 7 July, 2023?", ts(2023, 7, 7), ts(2023, 7, 10)),
        ("What did Maria do on July 7th 2023?", ts(2023, 7, 7), ts(2023, 7, 10)),
        ("What did Nate cook in November 2022?", ts(2022, 11, 28), ts(2022, 12, 5)),
        ("When did Melanie go camping in June?", ts(2021, 6, 15), ts(2021, 7, 15)),
        ("How often did she swim in 2023?", ts(2023, 3, 1), ts(2024, 3, 1)),
        ("Where was John between August 11 and August 15 2023?", ts(2023, 8, 13), ts(2023, 8, 20)),
        ("what broke on 2023-07-07?", ts(2023, 7, 7), ts(2023, 7, 10)),
        ("2023年7月7日我们讨论了什么", ts(2023, 7, 7), ts(2023, 7, 10)),
        ("2023年7月的部署", ts(2023, 7, 20), ts(2023, 8, 5)),
    ],
)
def test_find_dates_reads_each_form(question: str, inside: float, outside: float) -> None:
    windows = find_dates(question)
    assert len(windows) == 1
    assert windows[0].contains(inside)
    assert not windows[0].contains(outside)


def test_find_dates_margin_and_non_dates() -> None:
    (day,) = find_dates("on 7 July, 2023")
    # One day of margin each side: time zones move a late conversation to the next day.
    assert day.contains(ts(2023, 7, 8, 6))
    assert not day.contains(ts(2023, 7, 9, 12))
    assert find_dates("You may go now") == []  # "may" the verb is not a month
    # No such day: the month and year still hold.
    (month,) = find_dates("on 31 February, 2023")
    assert month.contains(ts(2023, 2, 10)) and not month.contains(ts(2023, 3, 10))
    # A date counted from today is read against now and stays a keyword (see
    # test_dates_relative.py).
    (week,) = find_dates("last week")
    assert week.literal and week.contains(datetime.now().timestamp() - 7 * 86400)
    assert find_dates("build 2023-13-45 failed") == []  # not a date: month 13
    assert find_dates("see v2023-07-071") == []  # inside a longer identifier


def test_strip_dates_removes_only_the_dates() -> None:
    question = "What recognition did Maria receive at the shelter in August 2023?"
    stripped = strip_dates(question, find_dates(question))
    assert "August" not in stripped and "2023" not in stripped
    assert "recognition" in stripped and "shelter" in stripped
    # A date in digits is also text worth finding (logs quote it): it stays.
    iso = "release notes of 2024-01-15"
    assert strip_dates(iso, find_dates(iso)) == iso


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SessionStore]:
    """Three sessions on three dates, each mentioning a concert."""
    s = SessionStore(tmp_path / "state.db")
    talks = {
        "may": (ts(2023, 5, 8), "Maria: the concert was loud, the concert was long, concert!"),
        "july": (ts(2023, 7, 7), "Maria: I went to a concert with my church friends"),
        "sept": (ts(2023, 9, 2), "Maria: another concert tonight, the concert hall again"),
    }
    for sid, (start, text) in talks.items():
        s.create_session(sid, source="cli", started_at=start)
        s.append_messages(sid, [{"role": "user", "content": text, "timestamp": start + 5}])
    yield s
    s.close()


def test_search_sessions_prefers_the_named_date(store: SessionStore) -> None:
    question = "Which concert did Maria attend on 7 July, 2023?"
    ranked = [h["session_id"] for h in search_sessions(store, question)]
    assert ranked[0] == "july"
    # Without date awareness BM25 alone prefers the sessions that repeat "concert".
    plain = [h["session_id"] for h in search_sessions(store, question, dates=False)]
    assert plain[0] != "july"
    assert set(plain) == {"may", "july", "sept"}


def test_search_messages_prefers_the_named_date(store: SessionStore) -> None:
    hits = search_messages(store, "concert in July 2023")
    assert hits[0]["session_id"] == "july"
    # The snippet highlights the keywords, not the stripped date words.
    assert ">>>concert<<<" in hits[0]["snippet"]
    # Sorted by time, the date is not a ranking signal: plain keyword search.
    newest = search_messages(store, "concert in July 2023", sort="newest")
    assert newest[0]["session_id"] == "sept"


def test_explicit_queries_and_date_only_queries(store: SessionStore) -> None:
    # Quotes make a query explicit: its words are searched as written.
    assert search_messages(store, '"church friends" 2023')[0]["session_id"] == "july"
    # Words beside a date are searched even when they are stopwords (nothing says "in").
    assert search_sessions(store, "in July 2023") == []
    # A question made only of a date and question words finds what was written then,
    # though no message quotes the date; a filter still applies to those messages.
    question = "What did we do in July 2023?"
    assert [h["session_id"] for h in search_sessions(store, question)] == ["july"]
    found = search_messages(store, "What did we do on 7 July, 2023?")
    assert [h["session_id"] for h in found] == ["july"]
    assert search_messages(store, "on 7 July, 2023", role_filter=["assistant"]) == []
    # June of no year: June of every year the store covers; none here.
    assert search_sessions(store, "What did we do in June?") == []
    assert [h["session_id"] for h in search_sessions(store, "What did we do in July?")] == ["july"]


def test_a_month_of_no_year_fetches_that_month_newest_year_first(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "state.db") as s:
        for sid, when in {
            "june-2023": ts(2023, 6, 10),
            "july-2024": ts(2024, 7, 10),
            "june-2024": ts(2024, 6, 20),
            "june-2025-after-last": ts(2025, 1, 5),
        }.items():
            s.create_session(sid, started_at=when)
            s.append_messages(sid, [{"role": "user", "content": "hello", "timestamp": when}])
        hits = [h["session_id"] for h in search_messages(s, "What did we do in June?")]
        assert hits == ["june-2024", "june-2023"]
        assert [h["session_id"] for h in search_messages(s, "in June", limit=1)] == ["june-2024"]
        # The margin of a day each side: the 1st of July at noon is not June.
        assert "july-2024" not in hits


def test_hit_decay_is_checked(store: SessionStore) -> None:
    with pytest.raises(SessionStoreError, match="hit_decay"):
        search_sessions(store, "concert", hit_decay=0)
    with pytest.raises(SessionStoreError, match="hit_decay"):
        search_sessions(store, "concert", hit_decay=1.5)
    # 1.0 sums the best hits: the session repeating "concert" in two messages wins.
    assert search_sessions(store, "concert", hit_decay=1.0)[0]["session_id"] in {"may", "sept"}
