"""Dates named in a question, as time windows a search can prefer.

"What did Maria plan on the evening of 7 July, 2023?" is asked about a conversation held
on that day: the words "7", "july" and "2023" rarely occur in the messages themselves,
but the messages' timestamps say when they were written. :func:`find_dates` reads the
calendar dates of a question (a day, a month of a year, a month of any year, a year, a
range between two days) and :func:`strip_dates` removes the worded ones from the text,
so the keyword search is not steered by numbers, and the search boosts the messages written
inside a window instead (``memstrata.store.sqlite.fulltext.search_sessions``).

Windows are in local time, as a person names dates, and widened by DAY_MARGIN on each
side: a conversation held late in the evening in one time zone is the next day in
another.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from memstrata.query.date_window import DAY_MARGIN, DateWindow, read_forms, widened
from memstrata.query.dates_relative import relative_dates
from memstrata.query.dates_zh import chinese_dates
from memstrata.query.fold import fold

__all__ = [
    "DAY_MARGIN",
    "DateWindow",
    "day_spans",
    "find_dates",
    "month_spans",
    "spans_of",
    "strip_dates",
]


_MONTHS = {
    name.lower(): i
    for i in range(1, 13)
    for name in (calendar.month_name[i], calendar.month_abbr[i])
}
_MONTHS["sept"] = 9
_MONTH = r"(?P<{0}>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<{0}>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<{0}>(?:19|20)\d\d)"


def _pattern(*parts: str) -> str:
    return r"\b" + r"[\s,]+".join(parts) + r"\b"


# Longest forms first: a day with its year must not be read as "a month of a year".
_FORMS: list[tuple[str, re.Pattern[str]]] = [
    (
        "range",
        re.compile(
            r"\bbetween\s+"
            + _pattern(_MONTH.format("m1"), _DAY.format("d1"))
            + r"\s+and\s+"
            + _pattern(_MONTH.format("m2"), _DAY.format("d2"), _YEAR.format("y")),
            re.IGNORECASE,
        ),
    ),
    # ISO 8601 and the CJK form (2023年7月7日, 2023年7月): numbers, no month names.
    ("iso_day", re.compile(r"\b(?P<y>(?:19|20)\d\d)-(?P<m>[01]\d)-(?P<d>[0-3]\d)\b")),
    ("iso_day", re.compile(r"(?P<y>(?:19|20)\d\d)年(?P<m>[01]?\d)月(?P<d>[0-3]?\d)[日号]")),
    ("iso_month", re.compile(r"(?P<y>(?:19|20)\d\d)年(?P<m>[01]?\d)月")),
    ("day", re.compile(_pattern(_DAY.format("d"), _MONTH.format("m"), _YEAR.format("y")), re.I)),
    ("day", re.compile(_pattern(_MONTH.format("m"), _DAY.format("d"), _YEAR.format("y")), re.I)),
    ("month", re.compile(_pattern(_MONTH.format("m"), _YEAR.format("y")), re.IGNORECASE)),
    # A bare month needs "in" or "of" before it: "may" is also a verb.
    ("any_year", re.compile(r"\b(?:in|of|during)\s+" + _MONTH.format("m") + r"(?![\w])", re.I)),
    ("year", re.compile(r"\b(?:in|of|during|since)\s+" + _YEAR.format("y") + r"\b", re.I)),
]


def _window(kind: str, match: re.Match[str]) -> DateWindow | None:
    groups = match.groupdict()
    text = match.group(0)
    try:
        if kind == "any_year":
            return DateWindow(text, month=_MONTHS[groups["m"].lower()])
        year = int(groups["y"])
        if kind in ("iso_day", "iso_month"):
            # Month and day are digits here; the other forms below read month names.
            month_number = int(groups["m"])
            if kind == "iso_month":
                first = datetime(year, month_number, 1)
                last = datetime(year + (month_number == 12), month_number % 12 + 1, 1)
                return DateWindow(text, *widened(first, last), literal=True)
            day = datetime(year, month_number, int(groups["d"]))
            return DateWindow(text, *widened(day, day + timedelta(days=1)), literal=True)
        if kind == "year":
            return DateWindow(text, *widened(datetime(year, 1, 1), datetime(year + 1, 1, 1)))
        if kind == "month":
            month = _MONTHS[groups["m"].lower()]
            first = datetime(year, month, 1)
            last = datetime(year + (month == 12), month % 12 + 1, 1)
            return DateWindow(text, *widened(first, last))
        if kind == "day":
            day = datetime(year, _MONTHS[groups["m"].lower()], int(groups["d"]))
            return DateWindow(text, *widened(day, day + timedelta(days=1)))
        first = datetime(year, _MONTHS[groups["m1"].lower()], int(groups["d1"]))
        last = datetime(year, _MONTHS[groups["m2"].lower()], int(groups["d2"]))
        if last < first:
            first, last = last, first
        return DateWindow(text, *widened(first, last + timedelta(days=1)))
    except ValueError:  # "31 February": not a date, leave the words to the keyword search
        return None


def find_dates(text: str, now: datetime | None = None) -> list[DateWindow]:
    """The calendar dates named in ``text``, each once, in the order found.

    Recognised: ``7 July, 2023``, ``July 7th 2023``, ``2023-07-07``, ``2023年7月7日``,
    ``July 2023``, ``2023年7月``, ``in July``, ``in 2023`` and ``between August 11 and
    August 15 2023``; in Chinese also a day or month of no year (``5月2日``, ``5月2号``,
    ``五月``), fixed-date holidays (``圣诞节``, ``元旦``, ``国庆节``…), and dates relative to
    ``now`` (default: the local time): ``去年圣诞节``, ``今年5月``, ``上周二``, ``这周五``,
    ``昨天``, ``前天``, ``上个月``, ``去年``, ``三天前``, ``上周末``; traditional characters and
    full-width digits as well (``上週二``, ``２０２３年５月``); and the English ones
    (:mod:`memstrata.query.dates_relative`: ``yesterday``, ``last week``, ``3 days ago``).
    """
    found: list[DateWindow] = []
    taken: list[tuple[int, int]] = []
    # Read in the folded text (memstrata.query.fold: ２０２３年５月 is 2023年5月, 上週二
    # 上周二), each window keeping the words as written (the same places: folding keeps
    # every position), which strip_dates takes out of the question.
    folded = fold(text)
    moment = now or datetime.now()
    # The Chinese forms first, then the English ones counted from today, then the
    # calendar ones; a span one reader took is not read by the next.
    for reader in (
        chinese_dates(folded, moment, taken),
        relative_dates(folded, moment, taken),
        read_forms(folded, _FORMS, _window, taken),
    ):
        for named, start, end in reader:
            found.append(replace(named, text=text[start:end]))
    order = {w.text: text.find(w.text) for w in found}
    return sorted(found, key=lambda w: order[w.text])


def month_spans(month: int, first: float, last: float) -> list[tuple[float, float]]:
    """The spans (Unix seconds, margins included) of ``month`` in every year from the one
    of ``first`` to the one of ``last``: "in June" said of a store written from 2023 to
    2025 means June 2023, June 2024 or June 2025."""
    spans = []
    for year in range(datetime.fromtimestamp(first).year, datetime.fromtimestamp(last).year + 1):
        start = datetime(year, month, 1)
        end = datetime(year + (month == 12), month % 12 + 1, 1)
        spans.append(widened(start, end))
    return spans


def spans_of(
    windows: Sequence[DateWindow], first: float | None = None, last: float | None = None
) -> list[tuple[float, float]]:
    """The time spans of ``windows``; a month of no year is that month in every year from
    ``first`` to ``last`` (the store's oldest and newest message), none without them."""
    spans = [(w.start, w.end) for w in windows if w.start is not None and w.end is not None]
    if first is not None and last is not None:
        for month in sorted({w.month for w in windows if w.month is not None and w.day is None}):
            spans += month_spans(month, first, last)
        for month, day in sorted(
            {(w.month, w.day) for w in windows if w.month is not None and w.day is not None}
        ):
            spans += day_spans(month, day, first, last)
    return spans


def day_spans(month: int, day: int, first: float, last: float) -> list[tuple[float, float]]:
    """The spans of ``month``/``day`` in every year from the one of ``first`` to the one
    of ``last`` (a year without that day, 29 February, is skipped)."""
    spans = []
    for year in range(datetime.fromtimestamp(first).year, datetime.fromtimestamp(last).year + 1):
        try:
            start = datetime(year, month, day)
        except ValueError:
            continue
        spans.append(widened(start, start + timedelta(days=1)))
    return spans


def strip_dates(text: str, windows: list[DateWindow], *, every: bool = False) -> str:
    """``text`` without the worded date expressions of ``windows`` (each replaced by a
    space); dates written in digits and the others marked ``literal`` stay, unless
    ``every`` (what a question says besides its dates)."""
    for window in windows:
        if every or not window.literal:
            text = text.replace(window.text, " ")
    return text


_QUESTION_WORDS = frozenset(
    ["what", "when", "where", "which", "who", "whom", "whose", "why", "how"]
)


def is_question(text: str) -> bool:
    """True when ``text`` asks something: a question mark of any script, or a leading
    question word (``what did we do in July``)."""
    if "?" in text or "？" in text:
        return True
    first = text.strip().split(maxsplit=1)
    return bool(first) and first[0].lower().strip(".,:;!") in _QUESTION_WORDS
