"""Homophone slips in a Chinese query: ``章伟`` searches ``张伟``.

Chinese is typed by sound: a pinyin input method offers every character read ``zhang``,
and picking the wrong one (``章`` for ``张``) gives a word that looks nothing like the
one meant. A name or term mistyped so finds nothing, as an English typo did before
:mod:`memstrata.query.spelling`. A character of a natural query is read as such a slip
only when all of these hold:

* every CJK bigram it stands in (the one before it and the one after it in its run of
  Chinese text) is held by no message of the store: a character the store has seen
  beside its neighbours is what the user meant (``迁`` in ``数据库迁移`` is left alone
  whatever ``库迁`` finds, because ``迁移`` is held);
* a character of the same reading (toneless pinyin; for a character of several readings,
  either of its two usual ones) makes every one of those bigrams one that the store
  holds: it fits both its neighbours, not one of them by chance. A particle
  (:data:`PARTICLES`) goes with anything, so the bigram with one counts only when both
  neighbours are particles (``数剧吗`` is ``数据吗`` when the store holds ``数据``,
  whatever it holds of ``据吗``). Only the 3,755 commonest characters
  (GB 2312 level 1, in its order: by reading, then simplest first) are offered, as an
  input method's first page offers them;
* the query holds at most :data:`MAX_SLIPS` such characters and at most
  :data:`MAX_BIGRAMS` bigrams: a pasted passage or a conversation is searched as
  written (its unknown bigrams are a new topic, not a slip, and asking the store about
  each would cost every such search).

Function characters (particles, pronouns: :data:`FUNCTION_CHARS`) are never read as
slips nor offered. Of several replacements the first in that order wins. Slips are
corrected left to right, so a corrected character's bigrams count as held for the next.
Two slips side by side (``章维`` for ``张伟``: each one's replacement fits only the
other's) are replaced together when no single replacement fixes them: by two
homophones whose bigram the store holds and that fit the pair's outer neighbours, at
most :data:`MAX_PAIRS` pairs asked about. The store is asked five times at most: which
of the query's bigrams it holds, which of the bigrams the replacements make with one
neighbour, and, for those it holds, with the other; for slips side by side, the
replacements' bigrams with the pair's outer neighbours, then the pairs.

The price is English typo correction's: a term the store never held whose homophone it
holds (a new name, ``章伟``, when only ``张伟`` was written) finds the homophone's
messages instead of nothing; the search says what it searched, and a quoted query is
searched as written. The reading table is pypinyin's (MIT), read on the first query that
could hold a slip (about 50 ms), once per process.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import re
import threading
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from memstrata.query.cjk import CJK_RUN
from memstrata.query.fold import fold

__all__ = [
    "FUNCTION_CHARS",
    "MAX_BIGRAMS",
    "MAX_CHARS",
    "MAX_PAIRS",
    "PARTICLES",
    "MAX_SLIPS",
    "corrected",
    "may_hold_slips",
    "sounds_alike",
]

# A query with more CJK bigrams than this is a pasted text or a conversation, not a
# question typed with a slip in it: searched as written (and the store not asked).
MAX_BIGRAMS = 48
# Nor is a text longer than this (a question is shorter; a pasted page is read for
# nothing else here).
MAX_CHARS = 2_000
# More candidate slips than this: the query is about something the store never held.
MAX_SLIPS = 6
# The most pairs of homophones asked about for the query's slips side by side (see
# _correct_pairs): two readings of 15-50 common characters each make 200-2,500. On
# synthetic double slips of MADial-Bench's memories (benchmarks/homophones.py), 300
# restored 74 of 163, 500 85, 800 90 and 3,000 92, at a p95 of 5, 8, 10 and 17 ms of
# correction on SQLite; on PostgreSQL (100k messages beside nine tenants) asking about
# 480 pairs (章维: 15 x 32) took 13 ms, so 500 keeps a common name standing alone.
MAX_PAIRS = 500
# Particles end or join words whatever the word: the bigram of a character with one
# (剧吗, 制的) says nothing of the character. (A pronoun or 和 before a word does say
# something: with them counted, real words a small store lacked, 只想 after 我 and 实物
# after 和, were read as slips twice as often.)
PARTICLES = frozenset("的地得了着过吗呢吧啊呀嘛哦么")
# Function characters (the particles, pronouns, the commonest verbs and adverbs), as
# English stopwords are to typo correction: never read as a slip nor offered as a
# correction. Their homophones are each other (他/她/它, 在/再, 的/地/得, 吗/嘛), all
# everywhere, so a store holding one pairing and not the other says nothing of intent.
FUNCTION_CHARS = PARTICLES | frozenset("他她它你我您们在再是和也就都还又这那之与及或而")

logger = logging.getLogger(__name__)
_lock = threading.Lock()
_table: tuple[dict[str, frozenset[str]], dict[str, tuple[str, ...]]] | None = None


def _level_one() -> list[str]:
    """GB 2312's level-1 characters (the 3,755 commonest), in its order."""
    out = []
    for high in range(0xB0, 0xD8):
        for low in range(0xA1, 0xFF):
            try:
                out.append(bytes((high, low)).decode("gb2312"))
            except UnicodeDecodeError:
                continue  # the row's unassigned end (row 55 stops at 0xF9)
    return out


def _toneless(reading: str) -> str:
    """``zhāng`` -> ``zhang`` (``lǜ`` -> ``lu``: an input method types both alike)."""
    return "".join(c for c in unicodedata.normalize("NFKD", reading) if c.isascii())


def _readings() -> tuple[dict[str, frozenset[str]], dict[str, tuple[str, ...]]]:
    """Each common character's toneless readings, and each reading's characters (those
    whose first, usual, reading it is), read once per process; empty, with one warning,
    when the table cannot be read: queries are then searched as written."""
    global _table
    with _lock:
        if _table is None:
            try:
                # The table alone, not the package: importing pypinyin reads its phrase
                # tables too (0.2 s), which nothing here uses.
                spec = importlib.util.find_spec("pypinyin")
                if spec is None or not spec.submodule_search_locations:
                    raise ImportError("pypinyin is not installed")
                folder = Path(next(iter(spec.submodule_search_locations)))
                table = json.loads((folder / "pinyin_dict.json").read_text(encoding="utf-8"))
            except (ImportError, OSError, ValueError) as exc:
                logger.warning(
                    "Chinese homophone correction is off: pypinyin's reading table could "
                    "not be read (%s); reinstall memstrata to restore it",
                    exc,
                )
                _table = ({}, {})
                return _table
            readings: dict[str, frozenset[str]] = {}
            by_sound: dict[str, list[str]] = {}
            for char in _level_one():
                written = table.get(str(ord(char)))
                if not written:
                    continue
                sounds = [_toneless(r) for r in written.split(",")]
                # Its first two readings only: the table lists the usual reading first,
                # and the third and later are rare or archaic (它 tā, tuó, yí), which
                # offered 以 for 它.
                readings[char] = frozenset(sounds[:2])
                by_sound.setdefault(sounds[0], []).append(char)
            _table = (readings, {s: tuple(cs) for s, cs in by_sound.items()})
        return _table


@functools.lru_cache(maxsize=4096)
def sounds_alike(char: str) -> tuple[str, ...]:
    """The common characters usually read as ``char`` can be read, in GB 2312 order,
    ``char`` itself left out (empty for a character outside the table)."""
    readings, by_sound = _readings()
    found = dict.fromkeys(
        c
        for r in sorted(readings.get(char, ()))
        for c in by_sound.get(r, ())
        if c not in FUNCTION_CHARS
    )
    found.pop(char, None)
    return tuple(found)


def _runs(text: str) -> list[tuple[int, str]]:
    """The runs of two CJK characters or more of ``text`` (folded), with their start."""
    return [(m.start(), m.group()) for m in CJK_RUN.finditer(text) if len(m.group()) >= 2]


# Hiragana and katakana letters (not the middle dot or the long-vowel mark, which
# Chinese text borrows for foreign names): a query holding one is Japanese, whose kanji
# are not typed by Mandarin readings.
_KANA = re.compile("[\u3041-\u3096\u30a1-\u30fa\u31f0-\u31ff\uff66-\uff9d]")


def may_hold_slips(text: str | None) -> bool:
    """Whether ``text`` could hold a slip (a run of two CJK characters or more, within
    :data:`MAX_BIGRAMS`, in at most :data:`MAX_CHARS`, and no kana: Japanese is typed by
    other readings): a check without the store, before asking it, whose work stops at
    the first bigram past the bound (folding keeps a character CJK or not, so the text
    is read as written)."""
    if not isinstance(text, str) or len(text) > MAX_CHARS or text.isascii():
        return False
    if _KANA.search(text):
        return False
    bigrams = 0
    for run in CJK_RUN.finditer(text):
        bigrams += len(run.group()) - 1
        if bigrams > MAX_BIGRAMS:
            return False
    return bigrams > 0


def _sides(folded: str, at: int, start: int, end: int) -> list[int]:
    """The neighbours (their places) whose bigram with the character at ``at`` counts as
    evidence, within its run ``[start, end)``: a particle goes with anything, so a
    bigram with one (``剧吗``) says nothing, unless both neighbours are particles."""
    near = [n for n in (at + 1, at - 1) if start <= n < end]
    kept = [n for n in near if folded[n] not in PARTICLES]
    return kept or near


def _pair(chars: Sequence[str], at: int, near: int, option: str) -> str:
    """The bigram ``option`` (standing at ``at``) makes with its neighbour at ``near``."""
    return option + chars[near] if near > at else chars[near] + option


def corrected(
    text: str, held: Callable[[Sequence[str]], Iterable[str]]
) -> tuple[str, dict[str, str]]:
    """``text`` with its slips replaced, and the corrections (the bigram as written ->
    the bigram searched). ``held(words)`` returns those of ``words`` (CJK bigrams here)
    that some message of the store holds; it is asked at most five times."""
    if not may_hold_slips(text):
        return text, {}
    folded = fold(text)
    runs = _runs(folded)
    present: set[str] = set()
    asked: set[str] = set()

    def ask(words: Iterable[str]) -> None:
        # The store asked only about bigrams it was not asked about before (the pairs'
        # outer bigrams include one side's first-neighbour bigrams), and never about none.
        new = [w for w in dict.fromkeys(words) if w not in asked]
        if new:
            asked.update(new)
            present.update(held(new))

    ask(r[i : i + 2] for _, r in runs for i in range(len(r) - 1))
    # The candidates: each one's place and the neighbours its replacement must fit.
    slips: list[tuple[int, list[int]]] = []
    for start, run in runs:
        end = start + len(run)
        for at in range(start, end):
            near = [n for n in (at - 1, at + 1) if start <= n < end]
            touching = [_pair(folded, at, n, folded[at]) for n in near]
            if (
                folded[at] not in FUNCTION_CHARS
                and not any(b in present for b in touching)
                and sounds_alike(folded[at])
            ):
                slips.append((at, _sides(folded, at, start, end)))
    if not slips or len(slips) > MAX_SLIPS:
        return text, {}
    # The bigrams each replacement makes with its first neighbour, then, for those the
    # store holds, with its second (a few, where asking both at once was hundreds).
    ask(_pair(folded, at, sides[0], o) for at, sides in slips for o in sounds_alike(folded[at]))
    ask(
        _pair(folded, at, sides[1], o)
        for at, sides in slips
        if len(sides) > 1
        for o in sounds_alike(folded[at])
        if _pair(folded, at, sides[0], o) in present
    )
    chars = list(folded)
    fixes: dict[str, str] = {}
    _correct_singles(text, folded, chars, slips, present, fixes)
    _correct_pairs(text, folded, chars, runs, slips, present, ask, fixes)
    if not fixes:
        return text, {}
    out = list(text)
    for i, (was, now) in enumerate(zip(folded, chars, strict=True)):
        if was != now:
            out[i] = now
    return "".join(out), fixes


def _correct_singles(
    text: str,
    folded: str,
    chars: list[str],
    slips: Sequence[tuple[int, list[int]]],
    present: set[str],
    fixes: dict[str, str],
) -> None:
    """Replace, in ``chars``, each slip whose homophone fits every neighbour it counts."""
    for at, sides in slips:
        # Left to right: a slip corrected before this one may have made its bigrams held
        # (or its neighbour another character, whose bigrams were not asked about).
        if any(_pair(chars, at, n, chars[at]) in present for n in sides):
            continue
        best = next(
            (
                o
                for o in sounds_alike(folded[at])
                if all(_pair(chars, at, n, o) in present for n in sides)
            ),
            None,
        )
        if best is None:
            continue
        chars[at] = best
        # Reported as the bigram with the first neighbour that counts ("章伟" -> "张伟"),
        # as the user wrote it.
        low = min(at, sides[0])
        fixes[text[low : low + 2]] = "".join(chars[low : low + 2])


def _correct_pairs(
    text: str,
    folded: str,
    chars: list[str],
    runs: Sequence[tuple[int, str]],
    slips: Sequence[tuple[int, list[int]]],
    present: set[str],
    ask: Callable[[Iterable[str]], None],
    fixes: dict[str, str],
) -> None:
    """Replace two slips side by side (``章维`` for ``张伟``) that no single replacement
    fixes: each one's homophone fits only the other's, never asked about.

    A pair is replaced by two homophones whose bigram the store holds and that fit the
    pair's outer neighbours (those that count as for one slip: a particle does not). A
    pair with no such neighbour is read only where a name or term starts its run of
    Chinese (``章维`` alone, ``章维的电话``): after a particle (``为什么受伤的``) its one
    bigram of evidence is a common word the store has not seen as often as a slip.
    The store is asked twice more at most: the outer bigrams, then the pairs left, at
    most MAX_PAIRS of them in the whole query (a pair with no outer neighbour to narrow
    it, a name standing alone, is all its homophones' combinations).
    """
    places = {at for at, _ in slips}
    pairs: list[tuple[int, list[int]]] = []
    for start, run in runs:
        end = start + len(run)
        for at in range(start, end - 1):
            if (
                at in places
                and at + 1 in places
                and chars[at] == folded[at]
                and chars[at + 1] == folded[at + 1]
            ):
                outer = [n for n in (at - 1, at + 2) if start <= n < end]
                kept = [n for n in outer if chars[n] not in PARTICLES]
                if kept or at == start:
                    pairs.append((at, kept))
    if not pairs:
        return

    def fits(at: int, near: int, option: str) -> str:
        # The bigram of the pair's character next to ``near``, replaced by ``option``.
        return _pair(chars, at if near < at else at + 1, near, option)

    ask(
        fits(at, n, o)
        for at, outer in pairs
        for n in outer
        for o in sounds_alike(folded[at if n < at else at + 1])
    )
    options: list[tuple[int, list[str], list[str]]] = []
    for at, outer in pairs:
        sides = [
            [
                o
                for o in sounds_alike(folded[at + i])
                if all(fits(at, n, o) in present for n in outer if (n > at) == bool(i))
            ]
            for i in (0, 1)
        ]
        options.append((at, sides[0], sides[1]))
    combined = {x + y: None for _, xs, ys in options for x in xs for y in ys}
    if len(combined) > MAX_PAIRS:
        return
    ask(combined)
    for at, xs, ys in options:
        if chars[at] != folded[at] or chars[at + 1] != folded[at + 1]:
            continue  # a pair overlapping one corrected just before
        best = next(((x, y) for x in xs for y in ys if x + y in present), None)
        if best is None:
            continue
        chars[at], chars[at + 1] = best
        fixes[text[at : at + 2]] = "".join(best)
