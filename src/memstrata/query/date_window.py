"""A time window named by a question, shared by the English and Chinese date readers."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

__all__ = [
    "DAY_MARGIN",
    "DateWindow",
    "Forms",
    "day_window",
    "month_index",
    "month_window",
    "read_forms",
    "span_window",
    "week_around",
    "widened",
    "year_window",
]

# Windows are widened by a day on each side: a conversation held late in the evening in
# one time zone is the next day in another.
DAY_MARGIN = timedelta(days=1)


@dataclass(frozen=True)
class DateWindow:
    """A span of time named by a question: ``start <= t < end`` (Unix seconds).

    ``month`` set (and ``start``/``end`` None) means "that month of any year"; ``month``
    and ``day`` set, "that day of any year" (``5月2日``, ``圣诞节``).
    """

    text: str
    start: float | None = None
    end: float | None = None
    month: int | None = None
    day: int | None = None
    # Written as digits (2023-07-07, 2023年7月7日): such a string is also searched as
    # text, since logs and notes quote dates that way.
    literal: bool = False

    def contains(self, timestamp: float) -> bool:
        """True when ``timestamp`` falls inside the window."""
        if self.month is not None:
            moment = datetime.fromtimestamp(timestamp)
            if self.day is not None:
                near = (moment - DAY_MARGIN, moment, moment + DAY_MARGIN)
                return any((d.month, d.day) == (self.month, self.day) for d in near)
            # The margin applies to a bare month too: the 1st at 00:30 may be the 31st.
            return self.month in {
                (moment - DAY_MARGIN).month,
                moment.month,
                (moment + DAY_MARGIN).month,
            }
        assert self.start is not None and self.end is not None
        return self.start <= timestamp < self.end


def widened(first: datetime, last: datetime) -> tuple[float, float]:
    """The Unix-second bounds of ``first``..``last`` widened by DAY_MARGIN each side."""
    return (first - DAY_MARGIN).timestamp(), (last + DAY_MARGIN).timestamp()


# The windows a relative date names (Chinese ``上周二``, English ``last Tuesday``): worded,
# and quoted by messages in the same words, so literal (kept as keywords too).


def span_window(text: str, start: datetime, days: int) -> DateWindow:
    """``days`` days from ``start``."""
    return DateWindow(text, *widened(start, start + timedelta(days=days)), literal=True)


def week_around(text: str, day: datetime) -> DateWindow:
    """The week centred on ``day``: a count back of weeks (three weeks ago) is not said to
    the day."""
    return span_window(text, day - timedelta(days=3), 7)


def day_window(text: str, moment: datetime) -> DateWindow:
    """The calendar day of ``moment``."""
    return span_window(text, datetime(moment.year, moment.month, moment.day), 1)


def month_index(moment: datetime) -> int:
    """``moment``'s month counted from year 0 (year * 12 + month - 1): months add up."""
    return moment.year * 12 + moment.month - 1


def month_window(text: str, index: int) -> DateWindow:
    """The calendar month of :func:`month_index` ``index``."""
    year, month = divmod(index, 12)
    first = datetime(year, month + 1, 1)
    last = datetime(year + (month == 11), (month + 1) % 12 + 1, 1)
    return DateWindow(text, *widened(first, last), literal=True)


def year_window(text: str, year: int) -> DateWindow:
    return DateWindow(text, *widened(datetime(year, 1, 1), datetime(year + 1, 1, 1)), literal=True)


# A reader's forms: (kind, pattern), longest first.
Forms = Sequence[tuple[str, "re.Pattern[str]"]]


def read_forms(
    text: str,
    forms: Forms,
    window: Callable[[str, re.Match[str]], DateWindow | None],
    taken: list[tuple[int, int]],
) -> Iterator[tuple[DateWindow, int, int]]:
    """Each match of ``forms`` in ``text`` that ``window`` reads as a date, with its span,
    in the order of the forms. A match overlapping a span already ``taken`` (by a longer
    form, or by a reader before) is not read again; each match read is added to it."""
    for kind, pattern in forms:
        for match in pattern.finditer(text):
            if any(match.start() < end and start < match.end() for start, end in taken):
                continue
            found = window(kind, match)
            if found is not None:
                taken.append((match.start(), match.end()))
                yield found, match.start(), match.end()
