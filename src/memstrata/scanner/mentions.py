"""Quoted mentions: an attack phrase that a note quotes in order to talk about it.

Security notes quote attacks ("the deck quotes 'You are DAN' as a classic example",
"安全培训里举了“忽略之前的指令”这种例子"). :func:`blank_quoted_mentions` blanks every
quoted span that sits in a sentence naming what it is (an example, an attack, a phrase,
a test, a training; in the seven languages the scanner reads), so instruction patterns
do not fire on the quotation. Secret values are still looked for in the full text: a
quoted key is a key.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from itertools import islice

from memstrata.scanner.patterns_intent import merged_spans, sentence_span

__all__ = ["MAX_QUOTES", "blank_quoted_mentions"]

# Quoted spans examined per text; a note has a handful, a text with thousands is no note.
MAX_QUOTES = 256

_QUOTED_RX = re.compile(
    r"(?<!\w)'[^'\n]{1,300}?'(?!\w)|\"[^\"\n]{1,300}?\"|“[^”\n]{1,300}?”|‘[^’\n]{1,300}?’"
    r"|«[^»\n]{1,300}?»|„[^“”\n]{1,300}?[“”]|「[^」\n]{1,300}?」|『[^』\n]{1,300}?』|`[^`\n]{1,300}?`"
)
_MENTION_RX = re.compile(
    r"example|\bquot|phrase|such as|\blike\b|attack|injection|jailbreak|training"
    r"|\btests?\b|sample|classic|recogni|pattern|\bstrings?\b|\bcite|\bcita|ejemplo|exemple"
    r"|beispiel|пример|фраз|атак|例|举|引用|紹介|攻撃|攻击|注入|phishing|awareness|workshop"
    r"|charla|formation|тренинг|研修|培训|explain|dangerous|risky|\bwhy\b|blocks?\b|\bwaf\b"
)

_ADDRESSY_RX = re.compile(r"\S*[/.@:]\S*")


def blank_quoted_mentions(text: str) -> str:
    """``text`` with quoted spans in sentences that talk about them replaced by spaces."""
    if not any(q in text for q in "'\"“‘«„「『`"):
        return text
    # The rest stays as written past MAX_QUOTES: more findings, never fewer.
    quotes = list(islice(_QUOTED_RX.finditer(text), MAX_QUOTES))
    spans = [sentence_span(text, m.start(), m.end()) for m in quotes]
    hits = _mention_hits(text, spans)
    parts: list[str] = []
    pos = 0
    for m, (start, end) in zip(quotes, spans, strict=True):
        if not (_holds_hit(hits, start, m.start()) or _holds_hit(hits, m.end(), end)):
            continue
        parts.append(text[pos : m.start() + 1])
        parts.append(" " * (m.end() - m.start() - 2))
        pos = m.end() - 1
    if not parts:
        return text
    parts.append(text[pos:])
    return "".join(parts)


def _mention_hits(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The mention words in the sentences around the quotes, each sentence read once.

    Sentences of neighbouring quotes overlap; reading them merged keeps the work linear in
    the text rather than in quotes times sentence length. Host names and paths
    ("evil.example", "attacker.io") are blanked first: they say nothing about intent.
    """
    hits: list[tuple[int, int]] = []
    for lo, hi in merged_spans(spans):
        segment = _ADDRESSY_RX.sub(lambda m: " " * len(m.group()), text[lo:hi])
        hits.extend((lo + h.start(), lo + h.end()) for h in _MENTION_RX.finditer(segment))
    return hits


def _holds_hit(hits: list[tuple[int, int]], start: int, end: int) -> bool:
    """Whether a hit lies wholly inside ``text[start:end]`` (hits are sorted, disjoint)."""
    i = bisect_left(hits, (start, -1))
    return i < len(hits) and hits[i][1] <= end
