"""Invisible characters and the folded copy of a text that the scanner's patterns run on.

Invisible and bidi control characters are reported from the raw text
(:func:`invisible_findings`); :func:`fold` builds the matching copy: invisible characters
removed, Unicode tag characters ("ASCII smuggling") decoded and appended, NFKC, accents
dropped, Cyrillic/Greek look-alikes mapped to Latin, casefold, markdown emphasis removed,
whitespace runs collapsed. The public names are re-exported by :mod:`memstrata.scanner.scan`.
"""

from __future__ import annotations

import re
import unicodedata

from memstrata.scanner.normalize import skeleton

INVISIBLE_PREFIX = "invisible_unicode_"

# Zero-width and joiner characters, invisible math operators, the BOM used mid-text,
# bidi embeddings/overrides/isolates ("Trojan Source"), soft hyphen, Mongolian vowel
# separator, combining grapheme joiner, Hangul fillers, interlinear annotation marks.
# LRM/RLM/ALM (U+200E, U+200F, U+061C) are left out: real right-to-left text uses them,
# and they cannot reorder text the way the embedding and override controls can.
_INVISIBLE_RANGES: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x115F, 0x1160),
    (0x180E, 0x180E),
    (0x200B, 0x200D),
    (0x202A, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x2069),
    (0x3164, 0x3164),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF9, 0xFFFB),
    (0xE0000, 0xE007F),  # tag characters: invisible ASCII look-alikes
)
INVISIBLE_CODEPOINTS: frozenset[int] = frozenset(
    cp for lo, hi in _INVISIBLE_RANGES for cp in range(lo, hi + 1)
)
_INVISIBLE_RX = re.compile(
    "["
    + "".join(f"{re.escape(chr(lo))}-{re.escape(chr(hi))}" for lo, hi in _INVISIBLE_RANGES)
    + "]"
)
_TAG_FIRST = 0xE0000
_TAG_RUN_RX = re.compile("[\U000e0020-\U000e007e]+")
_TAG_ANY_RX = re.compile("[\U000e0000-\U000e007f]")
# Subdivision flags (England, Scotland, Wales) are the one legitimate use of tag
# characters: BLACK FLAG, 2-6 lowercase/digit tags, CANCEL TAG.
_FLAG_SEQUENCE_RX = re.compile(
    "\U0001f3f4[\U000e0030-\U000e0039\U000e0061-\U000e007a]{2,6}\U000e007f"
)

# Latin look-alikes from Cyrillic and Greek, applied to the matching copy only. Russian or
# Greek prose folded this way matches no English pattern, so the table costs nothing.
_CONFUSABLES = str.maketrans(
    "аеорсухіјѕԁɡһӏԛԝвкмнтАЕОРСУХІЈЅВКМНТαεοριτυνκχΑΕΟΡΙΤΥΝΚΧΒΜΗΖ",
    "aeopcyxijsdghlqwbkmhtaeopcyxijsbkmhtaeopitunkxaeopitynkxbmhz",
)
_MARKS_RX = re.compile("[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")
_UNDERSCORES_RX = re.compile(r"_+")
_WHITESPACE_TO_FOLD = ("  ", "\t", "\r", "\f", "\v", "\n ", " \n", "\n\n")
_SPACES_RX = re.compile(r"[^\S\n]{2,}|[^\S \n]")
_NEWLINES_RX = re.compile(r" ?\n\s*")


def _codepoint_id(cp: int) -> str:
    return f"{INVISIBLE_PREFIX}U+{cp:04X}"


def invisible_findings(raw: str) -> list[tuple[str, str]]:
    """``(pattern_id, description)`` per distinct invisible code point of ``raw``, in order.

    A single U+FEFF at position 0 is a byte-order mark left by an editor, not an
    injection, so it is not reported. Tag characters are reported once, under the
    first one in the text: an ASCII-smuggled sentence would otherwise yield dozens.
    """
    text = raw[1:] if raw.startswith("\ufeff") else raw
    if text.isascii() or not _INVISIBLE_RX.search(text):
        return []
    text = _FLAG_SEQUENCE_RX.sub("", text)
    found = sorted({ord(ch) for ch in _INVISIBLE_RX.findall(text)})
    findings = [
        (_codepoint_id(cp), f"invisible character U+{cp:04X} {char_name(cp)}")
        for cp in found
        if cp < _TAG_FIRST
    ]
    tags = [cp for cp in found if cp >= _TAG_FIRST]
    if tags:
        first = _TAG_ANY_RX.search(text)
        findings.append(
            (
                _codepoint_id(ord(first.group()) if first else tags[0]),
                f"Unicode tag characters (invisible ASCII, {len(tags)} distinct); "
                f"they decode to text the user cannot see",
            )
        )
    return findings


def char_name(cp: int) -> str:
    """The Unicode name of code point ``cp``; format controls without one get a generic label."""
    return unicodedata.name(chr(cp), "FORMAT CONTROL")


def fold(text: str) -> str:
    """Return the matching copy of ``text`` that every pattern runs on.

    Public so that a false positive can be investigated: patterns see this string, not
    the raw text. Each step is skipped when a cheap check shows it has nothing to do,
    which keeps plain ASCII prose at a few milliseconds per megabyte.
    """
    return finish_fold(skeleton(text))


def finish_fold(text: str) -> str:
    """The layout steps of :func:`fold` on an already normalised text."""
    if "*" in text:
        text = text.replace("*", "")
    if "_" in text:
        text = _UNDERSCORES_RX.sub(_drop_emphasis_underscores, text)
    if not text.isascii() or any(ws in text for ws in _WHITESPACE_TO_FOLD):
        text = _SPACES_RX.sub(" ", text)
        text = _NEWLINES_RX.sub("\n", text)
    return text


def _drop_emphasis_underscores(m: re.Match[str]) -> str:
    """Keep underscores inside identifiers (``api_key``), drop markdown ``_emphasis_``."""
    s, e = m.span()
    inner = s > 0 and e < len(m.string) and m.string[s - 1].isalnum() and m.string[e].isalnum()
    return m.group() if inner else ""
