"""Dates named in Chinese: the windows of ``5月2日``, ``去年圣诞节``, ``上周二``.

A Chinese question names a day without its year far more often than an English one
(``5月2号那天我们聊了什么？``), names holidays, and counts from today (``上周二``,
``去年圣诞节``, ``昨天``). Each form becomes a :class:`~memstrata.query.date_window.DateWindow`
as the English forms do: a day or month of no year is that day or month of every year
the store covers; a relative date is read against ``now`` (the moment the question is
asked). Every Chinese form stays in the keyword query as well (``literal``): messages
quote such dates in the same words (``我们决定下周二迁移``).

Also ``大前天``, a weekend (``上周末``), a count back from today (``三天前``,
``两个星期前``, ``半个月前``, ``三个月前``) and a year written in numerals
(``二〇二三年五月``). Lunar holidays (春节, 中秋) move with the lunar calendar and are left
to the keyword search.
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

__all__ = ["HOLIDAYS", "chinese_dates", "chinese_number"]

# Fixed-date holidays: (month, day).
HOLIDAYS: dict[str, tuple[int, int]] = {
    "圣诞节": (12, 25),
    "圣诞": (12, 25),
    "平安夜": (12, 24),
    "元旦": (1, 1),
    "情人节": (2, 14),
    "妇女节": (3, 8),
    "植树节": (3, 12),
    "愚人节": (4, 1),
    "劳动节": (5, 1),
    "五一": (5, 1),
    "儿童节": (6, 1),
    "六一": (6, 1),
    "教师节": (9, 10),
    "国庆节": (10, 1),
    "国庆": (10, 1),
    "万圣节": (10, 31),
}
_DIGITS = {
    "零": 0,
    "〇": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
_NUM = r"(?:\d{1,2}|[一二三四五六七八九十]{1,3})"
_YEARS = {"前年": -2, "去年": -1, "今年": 0, "明年": 1}
_REL_YEAR = "(?P<rel>" + "|".join(_YEARS) + ")"
_HOLIDAY = "(?P<h>" + "|".join(sorted(HOLIDAYS, key=len, reverse=True)) + ")"
_WEEKS = {"上上": -2, "上": -1, "这": 0, "本": 0, "下": 1}
_WEEKDAY = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
# 大前天 before 前天: the alternation tries them in this order at each position.
_DAYS = {"大前天": -3, "前天": -2, "昨天": -1, "昨日": -1, "今天": 0, "今日": 0}
_MONTHS_REL = {"上个月": -1, "上月": -1, "这个月": 0, "本月": 0, "下个月": 1, "下月": 1}

# A count of days, weeks, months or years (三天前, 两个星期前, 10个月前); 半 a half.
_COUNT = r"(?:\d{1,3}|[一二两三四五六七八九十百]{1,4}|半)"
_AGO_UNITS = {"天": "day", "日": "day", "周": "week", "星期": "week", "礼拜": "week"}
# A year in numerals, one digit each (二〇二三年, 二零二四年).
_NUM_YEAR = "(?P<y>[〇零一二三四五六七八九]{4})年"

# Longest forms first; a match claims its span.
_FORMS: list[tuple[str, re.Pattern[str]]] = [
    ("num_day", re.compile(_NUM_YEAR + f"(?P<m>{_NUM})月(?P<d>{_NUM})[日号]")),
    ("num_month", re.compile(_NUM_YEAR + f"(?P<m>{_NUM})月(?!份?[\\d一二三四五六七八九十])")),
    ("num_year", re.compile(_NUM_YEAR)),
    ("ago", re.compile(f"(?P<n>{_COUNT})(?P<u>天|日|周|个?星期|个?礼拜|个月|年)(?:以|之)?前")),
    ("weekend", re.compile("(?P<w>上上|上|这|本|下)(?:个)?(?:周末|礼拜末)")),
    ("rel_day", re.compile(_REL_YEAR + f"(?P<m>{_NUM})月(?P<d>{_NUM})[日号]")),
    ("rel_month", re.compile(_REL_YEAR + f"(?P<m>{_NUM})月(?!份?[\\d一二三四五六七八九十])")),
    ("rel_holiday", re.compile(_REL_YEAR + "的?" + _HOLIDAY)),
    ("day", re.compile(f"(?<![\\d年])(?P<m>{_NUM})月(?P<d>{_NUM})[日号]")),
    (
        "weekday",
        re.compile("(?P<w>上上|上|这|本|下)(?:个)?(?:周|星期|礼拜)(?P<d>[一二三四五六日天])"),
    ),
    ("week", re.compile("(?P<w>上上|上|这|本|下)(?:个)?(?:周|星期|礼拜)(?![一二三四五六日天末])")),
    ("rel_month_word", re.compile("|".join(_MONTHS_REL))),
    ("rel_days", re.compile("|".join(_DAYS))),
    ("holiday", re.compile(_HOLIDAY)),
    ("rel_year", re.compile(_REL_YEAR)),
    # A month of no year: digits or numerals before 月, not a count (3个月) nor a date
    # already read above.
    ("month", re.compile(f"(?<![\\d年个])(?P<m>{_NUM})月(?!份?[\\d一二三四五六七八九十])")),
]


def chinese_number(text: str) -> int | None:
    """1-31 written in digits or numerals (五, 十二, 二十五, 三十一); None otherwise."""
    if text.isdigit():
        return int(text)
    if "十" in text:
        tens, _, ones = text.partition("十")
        high = _DIGITS.get(tens, -1) if tens else 1
        low = _DIGITS.get(ones, -1) if ones else 0
        return high * 10 + low if high > 0 and low >= 0 else None
    if len(text) == 1 and text in _DIGITS:
        return _DIGITS[text] or None
    return None


def _window(kind: str, match: re.Match[str], now: datetime) -> DateWindow | None:
    text = match.group(0)
    groups = match.groupdict()
    year = now.year + _YEARS[groups["rel"]] if groups.get("rel") else None
    month = chinese_number(groups["m"]) if groups.get("m") else None
    day = chinese_number(groups["d"]) if kind in ("rel_day", "day", "num_day") else None
    if groups.get("y"):
        year = int("".join(str(_DIGITS[c]) for c in groups["y"]))
    try:
        if kind == "ago":
            return _ago(text, groups["n"], groups["u"], now)
        # A year named relative to now (去年) or written in numerals (二〇二三年).
        if kind in ("rel_day", "num_day"):
            assert year is not None and month is not None and day is not None
            return day_window(text, datetime(year, month, day))
        if kind in ("rel_month", "num_month"):
            assert year is not None and month is not None
            datetime(year, month, 1)  # 13月: no such month
            return month_window(text, year * 12 + month - 1)
        if kind in ("rel_year", "num_year"):
            assert year is not None
            return year_window(text, year)
        if kind == "rel_holiday":
            assert year is not None
            return day_window(text, datetime(year, *HOLIDAYS[groups["h"]]))
        if kind == "day":
            if month is None or day is None:
                return None
            datetime(2024, month, day)  # a leap year: 2月29日 is a day, 2月30日 is not
            return DateWindow(text, month=month, day=day, literal=True)
        if kind == "holiday":
            hol_month, hol_day = HOLIDAYS[groups["h"]]
            return DateWindow(text, month=hol_month, day=hol_day, literal=True)
        if kind == "month":
            if month is None or not 1 <= month <= 12:
                return None
            return DateWindow(text, month=month, literal=True)
        if kind == "rel_days":
            return day_window(text, now + timedelta(days=_DAYS[text]))
        if kind == "rel_month_word":
            return month_window(text, month_index(now) + _MONTHS_REL[text])
        monday = datetime(now.year, now.month, now.day) - timedelta(days=now.weekday())
        monday += timedelta(weeks=_WEEKS[groups["w"]])
        if kind == "weekend":
            return span_window(text, monday + timedelta(days=5), 2)
        if kind == "weekday":
            return day_window(text, monday + timedelta(days=_WEEKDAY[groups["d"]]))
        return span_window(text, monday, 7)
    except (ValueError, TypeError):  # 2月30日, 13月: not a date, the words stay keywords
        return None


def _ago(text: str, count: str, unit: str, now: datetime) -> DateWindow | None:
    """``三天前``, ``两个星期前``, ``半个月前``, ``三个月前``, ``两年前``: a day is that day; a
    week or half a month the week around the day it counts back to (a count of weeks is
    not said to the day); a month that calendar month; a year that calendar year."""
    half = count == "半"
    n = 0 if half else chinese_number(count)
    if n is None or (n == 0 and not half):
        return None
    today = datetime(now.year, now.month, now.day)
    unit = unit.removeprefix("个")
    if unit in _AGO_UNITS and not half:
        if _AGO_UNITS[unit] == "day":
            return day_window(text, today - timedelta(days=n))
        return week_around(text, today - timedelta(weeks=n))
    if unit == "月":
        if half:
            return week_around(text, today - timedelta(days=15))
        return month_window(text, month_index(now) - n)
    if unit == "年":
        return month_window(text, month_index(now) - 6) if half else year_window(text, now.year - n)
    return None  # 半天前, 半周前: too short or too vague to be a window


def chinese_dates(
    text: str, now: datetime, taken: list[tuple[int, int]] | None = None
) -> Iterator[tuple[DateWindow, int, int]]:
    """Each Chinese date of ``text`` with its span (start, end) in ``text``, in the order
    of :data:`_FORMS` (longest forms first; a shorter form inside a longer one, or inside
    a span already ``taken``, is not read again: see
    :func:`~memstrata.query.date_window.read_forms`)."""
    return read_forms(text, _FORMS, partial(_window, now=now), [] if taken is None else taken)
