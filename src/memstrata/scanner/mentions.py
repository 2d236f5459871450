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

from memstrata.scanner.patterns_intent import sentence_span

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
    parts: list[str] = []
    pos = 0
    for seen, m in enumerate(_QUOTED_RX.finditer(text)):
        if seen >= MAX_QUOTES:
            break  # the rest stays as written: more findings, never fewer
        start, end = sentence_span(text, m.start(), m.end())
        # Host names and paths ("evil.example", "attacker.io") say nothing about intent.
        outside = _ADDRESSY_RX.sub(" ", text[start : m.start()] + " " + text[m.end() : end])
        if not _MENTION_RX.search(outside):
            continue
        parts.append(text[pos : m.start() + 1])
        parts.append(" " * (m.end() - m.start() - 2))
        pos = m.end() - 1
    if not parts:
        return text
    parts.append(text[pos:])
    return "".join(parts)
