"""Normalisation: the one matching form of a text that every pattern and fence check sees.

:func:`skeleton` undoes the disguises that leave a text readable to a model but unreadable
to a regex, in this order:

1. Unicode tag characters ("ASCII smuggling") are decoded and appended;
2. every default-ignorable and format character goes (zero-width characters, U+200E/U+200F,
   bidi controls, variation selectors, Mongolian free variation selectors, Hangul fillers,
   the soft hyphen): a model reads through them, so a pattern must too;
3. NFKC (full-width and mathematical letters, ligatures, circled letters);
4. combining marks are dropped (accents, Hebrew points on Latin letters, dots above),
   except the kana voicing marks, which change a Japanese word;
5. case folding;
6. look-alike letters are mapped to ASCII: small capitals, dotless ı, Armenian, Coptic,
   Cherokee and Lisu letters everywhere, Cyrillic and Greek letters only inside a word
   that also holds an ASCII letter (so Russian and Greek prose stay themselves and the
   Russian patterns can read them). The table comes from Unicode's confusables data as
   shipped by ``confusable-homoglyphs``, with ``anyascii`` for the letters it does not list;
7. obfuscated addresses ("x [at] y [dot] com", "x arroba y punto com") are rewritten
   as ``x@y.com``.

:func:`decoded_views` adds the texts a model could be asked to decode: letters spelled
out one by one ("i.g.n.o.r.e", "i g n o r e"), leetspeak, ROT13, reversed text, and
base64 blobs. Each is built with C-level string operations, and ROT13 and reversed
views are only built when they read more like English than the text itself, so a
megabyte of ordinary prose costs a few milliseconds here.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import re
import unicodedata
from importlib import resources

__all__ = [
    "decoded_views",
    "fold_char",
    "ignorable_pattern",
    "skeleton",
]

# Default_Ignorable_Code_Point (Unicode DerivedCoreProperties) that are not format (Cf)
# characters; every Cf character is added at first use.
_IGNORABLE_RANGES: tuple[tuple[int, int], ...] = (
    (0x034F, 0x034F),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)
_KANA_VOICING = frozenset({0x3099, 0x309A})
# Scripts whose letters stand in for Latin ones in a disguise and carry no language a
# pattern reads: mapped everywhere.
_ALWAYS_BLOCKS: tuple[tuple[int, int], ...] = (
    (0x0080, 0x02FF),  # Latin-1, Latin Extended-A/B, IPA (dotless i, small capitals)
    (0x0530, 0x058F),  # Armenian
    (0x10A0, 0x10FF),  # Georgian
    (0x13A0, 0x13FF),  # Cherokee
    (0x1D00, 0x1DBF),  # phonetic extensions (small capitals)
    (0x1E00, 0x1EFF),  # Latin Extended Additional
    (0x2C60, 0x2CFF),  # Latin Extended-C, Coptic
    (0xA4D0, 0xA4FF),  # Lisu
    (0xA720, 0xA7FF),  # Latin Extended-D
    (0xAB30, 0xAB6F),  # Latin Extended-E
)
# Greek and Cyrillic: mapped only inside a word that also holds an ASCII letter.
_MIXED_BLOCKS: tuple[tuple[int, int], ...] = ((0x0370, 0x03FF), (0x0400, 0x052F))
_TAG_RUN_RX = re.compile("[\U000e0020-\U000e007e]+")
_FLAG_SEQUENCE_RX = re.compile(
    "\U0001f3f4[\U000e0030-\U000e0039\U000e0061-\U000e007a]{2,6}\U000e007f"
)


def _class(codepoints: list[int]) -> str:
    """A regex character class for ``codepoints`` (sorted), written as ranges."""
    parts: list[str] = []
    start = prev = -2
    for cp in [*codepoints, -1]:
        if cp == prev + 1:
            prev = cp
            continue
        if start >= 0:
            parts.append(
                re.escape(chr(start)) + ("-" + re.escape(chr(prev)) if prev > start else "")
            )
        start = prev = cp
    return "[" + "".join(parts) + "]"


@functools.cache
def _unicode_tables() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """(ignorable characters, combining marks to drop), built once from unicodedata."""
    ignorable = {cp for lo, hi in _IGNORABLE_RANGES for cp in range(lo, hi + 1)}
    marks: list[int] = []
    for cp in range(0x110000):
        cat = unicodedata.category(chr(cp))
        if cat == "Cf":
            ignorable.add(cp)
        elif cat in ("Mn", "Me") and cp not in _KANA_VOICING and cp not in ignorable:
            marks.append(cp)
    return re.compile(_class(sorted(ignorable))), re.compile(_class(marks))


def ignorable_pattern() -> re.Pattern[str]:
    """The regex of default-ignorable and format characters (shared with the fences)."""
    return _unicode_tables()[0]


def _ascii_of(char: str, homoglyphs: dict[str, list[dict[str, str]]]) -> str | None:
    """The ASCII letter or digit ``char`` passes for, or None."""
    for entry in homoglyphs.get(char, ()):
        target = entry.get("c", "")
        if len(target) == 1 and target.isascii() and target.isalnum():
            return target.lower()
    if unicodedata.category(char)[0] != "L":
        return None
    import anyascii  # only needed while the table is built

    guess = anyascii.anyascii(char).lower()
    return guess if len(guess) == 1 and guess.isalpha() else None


@functools.cache
def _confusable_tables() -> tuple[dict[int, str], dict[int, str], re.Pattern[str]]:
    """(always table, mixed-word table, regex of characters the always table maps)."""
    with resources.files("confusable_homoglyphs").joinpath("confusables.json").open("rb") as f:
        homoglyphs: dict[str, list[dict[str, str]]] = json.load(f)
    always: dict[int, str] = {}
    mixed: dict[int, str] = {}
    for blocks, table in ((_ALWAYS_BLOCKS, always), (_MIXED_BLOCKS, mixed)):
        for lo, hi in blocks:
            for cp in range(lo, hi + 1):
                char = chr(cp)
                if char.casefold() != char:
                    continue  # text is case-folded before mapping
                target = _ascii_of(char, homoglyphs)
                if target is not None:
                    table[cp] = target
    return always, mixed, re.compile(_class(sorted(always)) + "+")


# Dash punctuation (U+2010 hyphen, U+2011 non-breaking hyphen, en and em dashes, minus).
_DASH_RX = re.compile("[\u2010-\u2015\u2212\u2e3a\u2e3b\ufe58\ufe63\uff0d]")
_MIXED_WORD_RX = re.compile(r"\w*(?:[a-z][\u0370-\u052f]|[\u0370-\u052f][a-z])\w*")
_TLDS = r"com|net|org|io|ru|cn|de|fr|es|jp|uk|co|me|xyz|info|biz|app|dev|top|site|online|email"
_AT_WORD = r"at|arroba|arobase|собака|アット|艾特"
_DOT_WORD = r"dot|punto|point|punkt|точка|ドット|点"
_AT_HINT_RX = re.compile(rf"(?:\b|[\[({{<])(?:{_AT_WORD})(?:\b|[\])}}>])")
_DOT_HINT_RX = re.compile(rf"(?:\b|[\[({{<])(?:{_DOT_WORD})(?:\b|[\])}}>])")
_ADDRESS_RX = re.compile(
    rf"(?<![\w.+-])([\w.+-]{{1,64}}) ?[\[({{<]? ?(?:{_AT_WORD}) ?[\])}}>]? ?([\w-]{{1,63}})"
    rf"((?: ?[\[({{<]? ?(?:{_DOT_WORD}) ?[\])}}>]? ?[\w-]{{1,63}}){{0,3}})"
    rf" ?[\[({{<]? ?(?:{_DOT_WORD}) ?[\])}}>]? ?({_TLDS})\b"
)
_DOT_SPLIT_RX = re.compile(rf" ?[\[({{<]? ?(?:{_DOT_WORD}) ?[\])}}>]? ?")
_SPACES_RX = re.compile(r"[^\S\n]+")


def _rewrite_address(m: re.Match[str]) -> str:
    middle = "".join("." + part for part in _DOT_SPLIT_RX.split(m.group(3)) if part)
    return f"{m.group(1)}@{m.group(2)}{middle}.{m.group(4)}"


def skeleton(text: str) -> str:
    """The normalised, case-folded matching form of ``text`` (see the module doc)."""
    if not text.isascii():
        ignorable, marks = _unicode_tables()
        if max(text) >= "\U000e0000":
            text = _FLAG_SEQUENCE_RX.sub("", text)
            smuggled = "\n".join(
                "".join(chr(ord(c) - 0xE0000) for c in run) for run in _TAG_RUN_RX.findall(text)
            )
            if smuggled:
                text = f"{text}\n{smuggled}"
        text = ignorable.sub("", text)
        text = unicodedata.normalize("NFKC", text)
        if not text.isascii():
            decomposed = unicodedata.normalize("NFD", text)
            stripped = marks.sub("", decomposed)
            text = unicodedata.normalize("NFC", stripped) if stripped != decomposed else text
    text = text.casefold()
    if not text.isascii():
        text = _DASH_RX.sub("-", text)
        always, mixed, always_rx = _confusable_tables()
        text = always_rx.sub(lambda m: m.group().translate(always), text)
        if not text.isascii():
            text = _MIXED_WORD_RX.sub(lambda m: m.group().translate(mixed), text)
    if _AT_HINT_RX.search(text) and _DOT_HINT_RX.search(text):
        text = _ADDRESS_RX.sub(_rewrite_address, text)
    return text


def fold_char(char: str) -> str:
    """What one character reads as after normalisation, Greek and Cyrillic included."""
    text = skeleton(char)
    if len(text) == 1 and not text.isascii():
        _, mixed, _ = _confusable_tables()
        text = text.translate(mixed)
    return text


# --------------------------------------------------------------------------------------
# Decoded views.

# Letters spelled out one by one: "i.g.n.o.r.e a.l.l" (joined within a word by a mark,
# words split by a space) or "i g n o r e  a l l" (joined by a space, words split by two).
_SPELLED_HINT_RX = re.compile(r"(?<!\w)\w(?:[ .·•*_\-|/]\w(?!\w)){3}")
_SPELLED_MARK_RX = re.compile(r"(?<!\w)\w(?:[.·•*_\-|/]\w(?!\w))+")
_SPELLED_SPACE_RX = re.compile(r"(?<!\w)\w(?: \w(?!\w))+")
_SPELL_SEP_RX = re.compile(r"[ .·•*_\-|/]")
_LEET = bytes.maketrans(b"43105789@$!|", b"aeiostbgasil")
_LEET_HINT_RX = re.compile(r"[a-z][0134578@$][a-z]|\b[0134578][a-z]{2,}|[a-z]{2,}[0134578]\b")
_ROT13 = bytes.maketrans(
    b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    b"nopqrstuvwxyzabcdefghijklmNOPQRSTUVWXYZABCDEFGHIJKLM",
)
_BASE64_RX = re.compile(r"(?<![\w+/])[A-Za-z0-9+/]{16,}={0,2}(?![\w+/=])")
_COMMON_WORDS = (" the ", " and ", " to ", " you ", " all ", " your ", " of ", " is ", " this ")
_SMALL = 4096
_BLANK_RUNS_RX = re.compile(r"[^\S\n]{3,}")
_MAX_BLOBS = 32
_MAX_BLOB_CHARS = 65_536


def _english_score(text: str) -> int:
    return sum(text.count(w) for w in _COMMON_WORDS)


def _translate_ascii(text: str, table: bytes) -> str:
    """Apply a byte table to the ASCII characters of ``text`` (UTF-8 leaves the rest alone)."""
    return text.encode("utf-8", "surrogatepass").translate(table).decode("utf-8", "surrogatepass")


def _join_spelled(m: re.Match[str]) -> str:
    return _SPELL_SEP_RX.sub("", m.group())


def decoded_views(raw: str, normal: str) -> list[tuple[str, str]]:
    """``(name, text)`` for every decoding of ``raw`` worth scanning, ``normal`` being its
    :func:`skeleton`. Only views that differ from ``normal`` are returned."""
    views: list[tuple[str, str]] = []
    # Runs of blanks carry nothing but the spelled-out word breaks; fold them first.
    compact = _BLANK_RUNS_RX.sub("  ", normal) if "   " in normal else normal
    small = len(compact) <= _SMALL
    if _SPELLED_HINT_RX.search(compact):
        spelled = _SPELLED_SPACE_RX.sub(_join_spelled, _SPELLED_MARK_RX.sub(_join_spelled, compact))
        views.append(("spelled-out letters", _SPACES_RX.sub(" ", spelled)))
    if _LEET_HINT_RX.search(compact):
        views.append(("leetspeak", _translate_ascii(compact, _LEET)))
    base = _english_score(compact)
    rot = _translate_ascii(compact, _ROT13)
    if small or _english_score(rot) > base:
        views.append(("ROT13", rot))
    backwards = compact[::-1]
    if small or _english_score(backwards) > base:
        views.append(("reversed text", backwards))
    decoded = _base64_payloads(raw)
    if decoded:
        views.append(("base64", skeleton("\n".join(decoded))))
    return views


def _base64_payloads(raw: str) -> list[str]:
    """The readable texts hidden in base64 blobs of ``raw`` (at most a few)."""
    found: list[str] = []
    for m in _BASE64_RX.finditer(raw):
        blob = m.group()
        if len(blob) > _MAX_BLOB_CHARS or not any(c.isdigit() or c.isupper() for c in blob):
            continue
        try:
            data = base64.b64decode(blob + "=" * (-len(blob) % 4), validate=True)
            text = data.decode("utf-8")
        except (binascii.Error, ValueError):
            continue
        printable = sum(c.isprintable() or c in "\n\t" for c in text)
        if text and printable >= 0.95 * len(text) and any(c.isalpha() for c in text):
            found.append(text)
            if len(found) >= _MAX_BLOBS:
                break
    return found
