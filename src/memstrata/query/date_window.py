"""A time window named by a question, shared by the English and Chinese date readers."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

__all__ = ["DAY_MARGIN", "DateWindow", "widened"]

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
