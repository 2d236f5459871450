"""English dates counted from today: ``yesterday``, ``last week``, ``three days ago``.

"What did we decide yesterday about the deploy?" is the commonest question an agent's
memory is asked, and its answer was written yesterday whatever words it used. Each form
becomes a :class:`~memstrata.query.date_window.DateWindow` read against ``now`` (the
moment of the question), as the Chinese forms of :mod:`memstrata.query.dates_zh` are:

* ``today``, ``yesterday``, ``the day before yesterday``, ``tonight``, ``this morning``;
* ``last week``, ``this week``, ``the week before last``, ``last weekend``, ``this
  weekend`` (weeks from Monday, a weekend its Saturday and Sunday);
* ``last month``, ``this month``, ``last year``, ``this year``;
* ``last Tuesday``: the most recent Tuesday before today;
* ``3 days ago``, ``two weeks ago``, ``a month ago``, ``a couple of years ago``: a day is
  that day, a week the week around the day it counts back to, a month or a year that
  calendar month or year.

Every form stays in the keyword query too (``literal``): messages say "last week" in the
same words. A bare weekday ("on Tuesday") may be next Tuesday and is left to the words.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta

from memstrata.query.date_window import DateWindow, widened

__all__ = ["relative_dates"]

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_COUNTS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "a couple of": 2,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
}
_COUNT = r"(?P<n>\d{1,3}|" + "|".join(sorted(_COUNTS, key=len, reverse=True)) + ")"
_DAYS = {
    "the day before yesterday": -2,
    "yesterday": -1,
    "today": 0,
    "tonight": 0,
    "this morning": 0,
    "this afternoon": 0,
    "this evening": 0,
}

# "The last week of June", "the last year has been hard": "last" after "the" is the final
# or the past span, not the one before this.
_NOT_THE = r"(?<!\bthe )"

# Longest forms first; a match claims its span.
_FORMS: list[tuple[str, re.Pattern[str]]] = [
    ("ago", re.compile(rf"\b{_COUNT}\s+(?P<u>day|week|month|year)s?\s+ago\b", re.I)),
    ("days", re.compile(r"\b(?:" + "|".join(_DAYS) + r")\b", re.I)),
    ("week", re.compile(_NOT_THE + r"\b(?P<w>the week before last|last week|this week)\b", re.I)),
    ("weekend", re.compile(_NOT_THE + r"\b(?P<w>last|this)\s+weekend\b", re.I)),
    ("weekday", re.compile(_NOT_THE + r"\blast\s+(?P<d>" + "|".join(_WEEKDAYS) + r")\b", re.I)),
    ("month", re.compile(_NOT_THE + r"\b(?P<w>last|this)\s+month\b", re.I)),
    ("year", re.compile(_NOT_THE + r"\b(?P<w>last|this)\s+year\b", re.I)),
]
_WEEKS = {"the week before last": -2, "last week": -1, "this week": 0}


def _day(text: str, day: datetime) -> DateWindow:
    return DateWindow(text, *widened(day, day + timedelta(days=1)), literal=True)


def _month(text: str, index: int) -> DateWindow:
    """The calendar month ``index`` (year * 12 + month - 1)."""
    year, month = divmod(index, 12)
    first = datetime(year, month + 1, 1)
    last = datetime(year + (month == 11), (month + 1) % 12 + 1, 1)
    return DateWindow(text, *widened(first, last), literal=True)


def _year(text: str, year: int) -> DateWindow:
    return DateWindow(text, *widened(datetime(year, 1, 1), datetime(year + 1, 1, 1)), literal=True)


def _window(kind: str, match: re.Match[str], now: datetime) -> DateWindow | None:
    text = match.group(0)
    today = datetime(now.year, now.month, now.day)
    this_month = now.year * 12 + now.month - 1
    monday = today - timedelta(days=today.weekday())
    if kind == "days":
        return _day(text, today + timedelta(days=_DAYS[" ".join(text.lower().split())]))
    if kind == "week":
        start = monday + timedelta(weeks=_WEEKS[" ".join(match["w"].lower().split())])
        return DateWindow(text, *widened(start, start + timedelta(days=7)), literal=True)
    if kind == "weekend":
        saturday = monday + timedelta(days=5, weeks=-1 if match["w"].lower() == "last" else 0)
        return DateWindow(text, *widened(saturday, saturday + timedelta(days=2)), literal=True)
    if kind == "weekday":
        back = (today.weekday() - _WEEKDAYS.index(match["d"].lower())) % 7 or 7
        return _day(text, today - timedelta(days=back))
    if kind == "month":
        return _month(text, this_month - (match["w"].lower() == "last"))
    if kind == "year":
        return _year(text, now.year - (match["w"].lower() == "last"))
    word = " ".join(match["n"].lower().split())
    n = int(word) if word.isdigit() else _COUNTS[word]
    unit = match["u"].lower()
    if n == 0:
        return None
    if unit == "day":
        return _day(text, today - timedelta(days=n))
    if unit == "week":
        start = today - timedelta(weeks=n, days=3)
        return DateWindow(text, *widened(start, start + timedelta(days=7)), literal=True)
    if unit == "month":
        return _month(text, this_month - n)
    return _year(text, now.year - n)


def relative_dates(text: str, now: datetime) -> Iterator[tuple[DateWindow, int, int]]:
    """Each English date of ``text`` counted from ``now``, with its span in ``text``, in the
    order of :data:`_FORMS` (a shorter form inside a longer one is not read again)."""
    taken: list[tuple[int, int]] = []
    for kind, pattern in _FORMS:
        for match in pattern.finditer(text):
            if any(match.start() < end and start < match.end() for start, end in taken):
                continue
            try:
                window = _window(kind, match, now)
            except (ValueError, OverflowError):  # 999 years ago: no such year
                window = None
            if window is not None:
                taken.append((match.start(), match.end()))
                yield window, match.start(), match.end()
