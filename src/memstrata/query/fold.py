"""Folding of Chinese text before it is indexed or searched, as case folding is for English.

Two spellings of one word that a reader takes for the same word should find each other:

* traditional and simplified characters: ``數據庫`` and ``数据库`` (a user in Taipei and a
  tool's output from Shanghai; text pasted from either), folded to the simplified form;
* full-width letters and digits, which Chinese input methods type in their full-width
  mode: ``ＡＰＩ１２３`` and ``API123``, folded to ASCII.

Folding maps one character to one character, so a folded text has the length of the
original and a position found in it is the position in the original (snippets cut the
original at the places the folded one matched). Full-width punctuation is left as it is:
folded to ASCII, ``＂`` or ``－`` would become query syntax. Folding twice is folding once.

The CJK bigram index holds folded text (:func:`memstrata.query.cjk.cjk_terms`) and every
query is folded (:func:`memstrata.query.compile.compile_query`); the word index holds the
text as written, which a folded query of ASCII letters matches. The table is part of what
the indexes hold: changing it re-indexes every stored row that it folds differently.
"""

from __future__ import annotations

import re

from memstrata.query.zh_variants import SIMPLIFIED, TRADITIONAL

__all__ = ["FOLDING", "fold", "folds"]

_FULL_WIDTH = {
    **{0xFF10 + i: ord("0") + i for i in range(10)},
    **{0xFF21 + i: ord("A") + i for i in range(26)},
    **{0xFF41 + i: ord("a") + i for i in range(26)},
}
_TABLE: dict[int, int] = {
    **{ord(t): ord(s) for t, s in zip(TRADITIONAL, SIMPLIFIED, strict=True)},
    **_FULL_WIDTH,
}
# Every character folding changes, in one string (a character class for a database).
FOLDING = "".join(chr(c) for c in sorted(_TABLE))
# Whether a text holds a character folding changes, in one C pass of a character class:
# translate looks every character up in the table (about 65 ns a character of Chinese
# text, where there is usually nothing to fold: 6.4 us for a message of 100 characters,
# against 0.6 us for this scan). The class holds the table's characters of the Basic
# Multilingual Plane and every character beyond it: listing the few beyond it too makes
# the class a list the engine tries one by one (40 us for the same message).
_FOLDABLE = re.compile(
    "["
    + re.escape("".join(chr(c) for c in sorted(_TABLE) if c <= 0xFFFF))
    + "\U00010000-\U0010ffff]"
)


def fold(text: str) -> str:
    """``text`` with traditional characters simplified and full-width letters and digits
    in ASCII; every other character as it is."""
    # Most text an agent stores is ASCII, which nothing folds, and most Chinese text is
    # simplified already: checked in one C pass each, they skip translate's table lookup
    # of every character (3 us of every ASCII message indexed, 6 us of a Chinese one).
    if text.isascii() or _FOLDABLE.search(text) is None:
        return text
    return text.translate(_TABLE)


def folds(text: str | None) -> bool:
    """Whether :func:`fold` changes ``text``."""
    return bool(text) and fold(text) != text  # type: ignore[arg-type]
