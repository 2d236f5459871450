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
from functools import partial

from memstrata.query.date_window import (
    DateWindow,
    day_window,
    month_index,
    month_window,
    read_forms,
    span_window,
    week_around,
    year_window,
)

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


def _window(kind: str, match: re.Match[str], now: datetime) -> DateWindow | None:
    try:
        return _read(kind, match, now)
    except (ValueError, OverflowError):  # 999 years ago: no such year
        return None


def _read(kind: str, match: re.Match[str], now: datetime) -> DateWindow | None:
    text = match.group(0)
    today = datetime(now.year, now.month, now.day)
    monday = today - timedelta(days=today.weekday())
    if kind == "days":
        return day_window(text, today + timedelta(days=_DAYS[" ".join(text.lower().split())]))
    if kind == "week":
        start = monday + timedelta(weeks=_WEEKS[" ".join(match["w"].lower().split())])
        return span_window(text, start, 7)
    if kind == "weekend":
        weeks = -1 if match["w"].lower() == "last" else 0
        return span_window(text, monday + timedelta(days=5, weeks=weeks), 2)
    if kind == "weekday":
        back = (today.weekday() - _WEEKDAYS.index(match["d"].lower())) % 7 or 7
        return day_window(text, today - timedelta(days=back))
    if kind == "month":
        return month_window(text, month_index(now) - (match["w"].lower() == "last"))
    if kind == "year":
        return year_window(text, now.year - (match["w"].lower() == "last"))
    word = " ".join(match["n"].lower().split())
    n = int(word) if word.isdigit() else _COUNTS[word]
    unit = match["u"].lower()
    if n == 0:
        return None
    if unit == "day":
        return day_window(text, today - timedelta(days=n))
    if unit == "week":
        return week_around(text, today - timedelta(weeks=n))
    if unit == "month":
        return month_window(text, month_index(now) - n)
    return year_window(text, now.year - n)


def relative_dates(
    text: str, now: datetime, taken: list[tuple[int, int]] | None = None
) -> Iterator[tuple[DateWindow, int, int]]:
    """Each English date of ``text`` counted from ``now``, with its span in ``text``, in the
    order of :data:`_FORMS` (a shorter form inside a longer one, or inside a span already
    ``taken``, is not read again: see :func:`~memstrata.query.date_window.read_forms`)."""
    return read_forms(text, _FORMS, partial(_window, now=now), [] if taken is None else taken)
