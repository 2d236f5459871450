"""Threat scanner for text that ends up in a system prompt or a model's context.

``scan_for_threats(text, scope)`` returns the findings, each naming its pattern. Scopes
are cumulative: ``all`` is applied everywhere, ``context`` adds patterns for context
files and tool results, ``strict`` adds patterns for curated memory.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Literal

Scope = Literal["all", "context", "strict"]
SCOPES: tuple[Scope, ...] = ("all", "context", "strict")
MAX_SCAN_CHARS = 65_536


@dataclass(frozen=True)
class ThreatFinding:
    """One scanner hit: the pattern id and a human-readable description."""

    pattern_id: str
    description: str


_PATTERNS: list[tuple[Scope, str, str, re.Pattern[str]]] = [
    (
        "all",
        "prompt_injection",
        "asks the model to ignore its previous instructions",
        re.compile(r"\bignore\s+(?:\w+\s+){0,4}?(?:previous|prior|above)\s+instructions\b", re.I),
    ),
]


def scan_for_threats(text: str, scope: Scope = "strict") -> list[ThreatFinding]:
    """Return the threats found in ``text`` at ``scope``, in pattern order."""
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}; use one of {', '.join(SCOPES)}")
    level = SCOPES.index(scope)
    folded = unicodedata.normalize("NFKC", text[:MAX_SCAN_CHARS])
    return [
        ThreatFinding(pid, desc)
        for pscope, pid, desc, rx in _PATTERNS
        if SCOPES.index(pscope) <= level and rx.search(folded)
    ]
