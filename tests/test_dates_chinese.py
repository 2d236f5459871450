"""Date awareness in Chinese: 5月2日, 5月2号, 去年圣诞节 and 上周二 read as the English forms
are, on both backends."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import local_ts as ts
from memstrata.query.dates import find_dates, spans_of
from memstrata.query.dates_zh import chinese_number

# A Friday.
NOW = datetime(2026, 12, 4, 15, 0)


@pytest.mark.parametrize(
    ("question", "inside", "outside"),
    [
        ("5月2日我们去了哪里？", ts(2024, 5, 2), ts(2024, 5, 5)),
        ("5月2号那天聊了什么", ts(2021, 5, 2), ts(2021, 6, 2)),
        ("十二月二十五日", ts(2023, 12, 25), ts(2023, 12, 28)),
        ("去年圣诞节你送了我什么？", ts(2025, 12, 25), ts(2024, 12, 25)),
        ("上周二开会说了什么？", ts(2026, 11, 24), ts(2026, 12, 1)),
        ("上星期二", ts(2026, 11, 24), ts(2026, 11, 27)),
        ("这周一", ts(2026, 11, 30), ts(2026, 11, 23)),
        ("昨天的会议", ts(2026, 12, 3), ts(2026, 12, 1)),
        ("今年5月的旅行", ts(2026, 5, 20), ts(2025, 5, 20)),
        ("去年5月2日", ts(2025, 5, 2), ts(2026, 5, 2)),
        ("上个月的账单", ts(2026, 11, 15), ts(2026, 10, 15)),
        ("元旦晚会", ts(2024, 1, 1), ts(2024, 1, 4)),
        ("五月份的事", ts(2022, 5, 15), ts(2022, 6, 15)),
        ("大前天说了什么", ts(2026, 12, 1), ts(2026, 12, 3)),
        ("上周末去哪了", ts(2026, 11, 28), ts(2026, 12, 5)),
        ("上个周末", ts(2026, 11, 29), ts(2026, 11, 25)),
        ("三天前的bug", ts(2026, 12, 1), ts(2026, 11, 27)),
        ("10天前", ts(2026, 11, 24), ts(2026, 11, 30)),
        ("两个星期前的会议", ts(2026, 11, 20), ts(2026, 12, 1)),
        ("一周前", ts(2026, 11, 27), ts(2026, 11, 15)),
        ("半个月前", ts(2026, 11, 19), ts(2026, 12, 2)),
        ("3个月前", ts(2026, 9, 15), ts(2026, 3, 15)),  # a count back, not March
        ("两年前的旅行", ts(2024, 6, 1), ts(2025, 6, 1)),
        ("二〇二三年五月", ts(2023, 5, 20), ts(2024, 5, 20)),
        ("二零二四年三月五日", ts(2024, 3, 5), ts(2024, 3, 9)),
        # Traditional characters and full-width digits read as simplified and ASCII.
        ("上週二開會說了什麼？", ts(2026, 11, 24), ts(2026, 12, 1)),
        ("去年聖誕節", ts(2025, 12, 25), ts(2024, 12, 25)),
        ("２０２３年５月２日", ts(2023, 5, 2), ts(2023, 5, 6)),
        ("５月２号", ts(2021, 5, 2), ts(2021, 5, 6)),
    ],
)
def test_each_chinese_form(question: str, inside: float, outside: float) -> None:
    windows = find_dates(question, now=NOW)
    assert len(windows) == 1, windows
    assert windows[0].contains(inside)
    assert not windows[0].contains(outside)
    # Messages quote Chinese dates in the same words: they stay keywords too.
    assert windows[0].literal


def test_non_dates_and_counts_are_left_alone() -> None:
    assert find_dates("3个月", now=NOW) == []  # a count of months, not a month
    assert find_dates("半天前", now=NOW) == []  # too short to be a window
    assert find_dates("0天前", now=NOW) == []
    assert find_dates("2月30日", now=NOW) == []  # no such day
    assert find_dates("13月", now=NOW) == []
    assert find_dates("我们讨论数据库迁移", now=NOW) == []
    # The year-qualified form is read once, as the existing CJK form.
    (window,) = find_dates("2023年7月7日我们讨论了什么", now=NOW)
    assert window.contains(ts(2023, 7, 7)) and not window.contains(ts(2024, 7, 7))


def test_a_day_of_no_year_spans_every_year_of_the_store() -> None:
    (window,) = find_dates("5月2日", now=NOW)
    spans = spans_of([window], ts(2022, 1, 1), ts(2024, 6, 1))
    assert len(spans) == 3
    assert all(
        start < ts(y, 5, 2) < end for (start, end), y in zip(spans, (2022, 2023, 2024), strict=True)
    )
    (leap,) = find_dates("2月29日", now=NOW)
    assert len(spans_of([leap], ts(2022, 1, 1), ts(2024, 6, 1))) == 1  # only 2024 has one


@given(st.integers(min_value=1, max_value=31))
def test_chinese_numerals_read_as_digits(n: int) -> None:
    digits = "一二三四五六七八九"
    tens, ones = divmod(n, 10)
    numeral = (
        ("" if tens < 2 else digits[tens - 1])
        + ("十" if tens else "")
        + (digits[ones - 1] if ones else "")
    )
    assert chinese_number(numeral) == n
    assert chinese_number(str(n)) == n


def _seed(store: Any, when: float) -> None:
    # Two sessions about the same thing; only the first was written on the day asked
    # about, and its message is the weaker keyword match (longer).
    store.create_session("then", source="cli", started_at=when)
    store.append_messages(
        "then", [{"role": "user", "content": "我收到了一本书作为礼物，很开心", "timestamp": when}]
    )
    later = when + 90 * 86400
    store.create_session("other", source="cli", started_at=later)
    store.append_messages(
        "other", [{"role": "user", "content": "我收到了一本书作为礼物", "timestamp": later}]
    )


def _first(store: Any, question: str, **options: Any) -> str:
    return str(store.search_sessions(question, limit=2, **options)[0]["session_id"])


def test_search_prefers_the_named_chinese_day(store: Any) -> None:
    """A day of no year and a holiday boost the messages written then, on both backends."""
    _seed(store, ts(2025, 12, 25))
    for question in (
        "圣诞节那天我收到了什么礼物？",
        "12月25日我收到了什么礼物？",
        "12月25号的礼物",
    ):
        assert _first(store, question) == "then", question
        assert _first(store, question, dates=False) == "other", question


def test_search_reads_relative_chinese_dates(store: Any) -> None:
    """上周二 is the Tuesday of last week, counted from the moment of the question."""
    today = datetime.now().replace(hour=12, minute=0, second=0, microsecond=0)
    tuesday = today - timedelta(days=today.weekday() + 7 - 1)
    _seed(store, tuesday.timestamp())
    assert _first(store, "上周二我收到了什么礼物？") == "then"
    assert _first(store, "上周二我收到了什么礼物？", dates=False) == "other"


def test_search_reads_a_count_back_and_traditional_dates(store: Any) -> None:
    """三天前 is the day three days before the question; 上週二 (traditional) is 上周二."""
    today = datetime.now().replace(hour=12, minute=0, second=0, microsecond=0)
    _seed(store, (today - timedelta(days=3)).timestamp())
    assert _first(store, "三天前我收到了什么礼物？") == "then"
    assert _first(store, "三天前我收到了什么礼物？", dates=False) == "other"


def test_a_window_keeps_the_words_as_written() -> None:
    """Read folded, a date keeps the question's own characters, so it is taken out of
    (or kept in) the question as written."""
    (window,) = find_dates("２０２３年５月２日我们讨论了什么", now=NOW)
    assert window.text == "２０２３年５月２日"
    (window,) = find_dates("上週二開會", now=NOW)
    assert window.text == "上週二"
