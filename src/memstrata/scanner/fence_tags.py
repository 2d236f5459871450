"""Look-alikes of the ``<memory-context>`` fence tags.

One regex matches every spelling of the open and close tags that a model would still
read as the tag: spaces around the brackets or the slash, an attribute, any case,
full-width or other look-alike brackets and letters, other dashes, and ignorable
characters anywhere inside. The fence scrubber (:mod:`memstrata.prompt.fencing`)
rewrites matches to the exact tag before removing fences; the threat scanner refuses
them at write time. Both use this one definition.
"""

from __future__ import annotations

import functools
import re
from typing import Final

from memstrata.scanner.normalize import fold_char, ignorable_pattern

__all__ = [
    "CLOSE_BRACKETS",
    "MAX_TAG_CHARS",
    "OPEN_BRACKETS",
    "SLASHES",
    "could_start_tag",
    "lookalike_tag_rx",
]

OPEN_BRACKETS: Final = "<＜﹤‹〈⟨《❮⧼"
CLOSE_BRACKETS: Final = ">＞﹥›〉⟩》❯⧽"
SLASHES: Final = "/／⁄∕⧸"
_DASHES: Final = "-‐‑‒–—―−－﹣﹘_⁃ "
# Longer than any look-alike tag the pattern below can match.
MAX_TAG_CHARS: Final = 512
# Code points that may stand in for a tag letter: Latin-1 to CJK punctuation (accented,
# IPA, Greek, Cyrillic, Armenian, Coptic, letterlike symbols, circled letters), full-width
# forms, mathematical letters, enclosed letters.
_LOOKALIKE_RANGES: Final = (
    (0x80, 0x3000),
    (0xFF00, 0xFFEF),
    (0x1D400, 0x1D7FF),
    (0x1F100, 0x1F1FF),
)


@functools.cache
def lookalike_tag_rx() -> re.Pattern[str]:
    """The regex of every look-alike of the open and close tags (group 1: the slash)."""
    letters = set("memorycntx")
    classes: dict[str, list[str]] = {c: [c, c.upper()] for c in letters}
    for lo, hi in _LOOKALIKE_RANGES:
        for cp in range(lo, hi):
            char = chr(cp)
            folded = fold_char(char)
            if folded in letters:
                classes[folded].append(char)
    ignorable = ignorable_pattern().pattern
    gap = f"(?:{ignorable}){{0,8}}"
    blank = f"(?:[^\\S\\n]|{ignorable}){{0,20}}"

    def word(text: str) -> str:
        return gap.join("[" + re.escape("".join(classes[c])) + "]" for c in text)

    dash = f"(?:[{re.escape(_DASHES)}]{blank})?"
    source = (
        f"[{re.escape(OPEN_BRACKETS)}]{blank}([{re.escape(SLASHES)}]{blank})?"
        f"{word('memory')}{blank}{dash}{word('context')}"
        f"(?:[^\\S\\n][^\\n{re.escape(OPEN_BRACKETS + CLOSE_BRACKETS)}]{{0,200}})?"
        f"{blank}[{re.escape(CLOSE_BRACKETS)}]"
    )
    return re.compile(source)


def could_start_tag(text: str, pos: int) -> bool:
    """Whether the text after an open bracket at ``pos - 1`` can still become a tag.

    A superset of the true prefixes: holding a little more than needed is safe, letting
    a possible tag go is not.
    """
    ignorable = ignorable_pattern()
    matched = 0
    slash_seen = False
    for char in text[pos : pos + MAX_TAG_CHARS]:
        if ignorable.match(char):
            continue
        if matched == len(_NAME):
            return True  # an attribute or the close bracket: decided at the bracket
        if char in " \t" and matched in (0, _SPLIT):
            continue
        if matched == 0 and not slash_seen and char in SLASHES:
            slash_seen = True
            continue
        if matched == _SPLIT and char in _DASHES:
            continue
        if char.lower() == _NAME[matched] or fold_char(char) == _NAME[matched]:
            matched += 1
            continue
        return False
    return True


_NAME: Final = "memorycontext"
_SPLIT: Final = len("memory")
