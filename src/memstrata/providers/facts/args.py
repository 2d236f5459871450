"""Validation of facts-store arguments, done before any transaction is opened.

Each function returns the cleaned value or raises
:class:`~memstrata.errors.InvalidMemoryArgument` /
:class:`~memstrata.errors.ThreatDetectedError` with a message saying what to send
instead. A fact is one line: it is rendered as one list item in the prompt, so its
whitespace is collapsed.
"""

from __future__ import annotations

import re
from typing import Final

from memstrata.errors import InvalidMemoryArgument, ThreatDetectedError
from memstrata.providers.facts.schema import CATEGORIES
from memstrata.scanner import scan as scanner

# Who wrote a fact: a provider tool, a mirror of curated memory, an explicit
# "remember that ..." captured from the user, an import, the Python API, the CLI, the
# background curator.
SOURCES: Final = ("tool", "mirror", "capture", "import", "api", "cli", "curator")
# The largest curated-memory file budget (MEMORY.md), so any mirrored entry fits.
MAX_CONTENT_CHARS: Final = 2200
MAX_VALUE_CHARS: Final = 200
# Raw input longer than this cannot collapse to MAX_CONTENT_CHARS unless it is mostly
# blank, which is no fact either.
_MAX_RAW_CHARS: Final = 16 * MAX_CONTENT_CHARS
_KEY = re.compile(r"^[a-z][a-z0-9_.]{0,47}$")
_SUBJECT = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


def clean_fact_text(content: object, *, what: str = "content") -> str:
    """One line of text, whitespace collapsed; InvalidMemoryArgument if empty or too long."""
    if not isinstance(content, str):
        raise InvalidMemoryArgument(f"{what} must be a string, got {type(content).__name__}.")
    if len(content) > _MAX_RAW_CHARS:
        # Checked before any work and before the threat scanner: a megabyte is refused
        # at once instead of being split, joined and scanned first.
        raise InvalidMemoryArgument(
            f"{what} is {len(content):,} characters; a fact holds at most "
            f"{MAX_CONTENT_CHARS:,}. Split it into several short facts, one statement each."
        )
    text = " ".join(content.split())
    if not text:
        raise InvalidMemoryArgument(f"{what} is empty: send the fact as one short sentence.")
    if len(text) > MAX_CONTENT_CHARS:
        raise InvalidMemoryArgument(
            f"{what} is {len(text):,} characters; a fact holds at most {MAX_CONTENT_CHARS:,}. "
            "Split it into several short facts, one statement each."
        )
    return text


def clean_key(key: object) -> str:
    """A slot key in canonical form (lowercase, ``_`` for spaces and hyphens)."""
    if not isinstance(key, str):
        raise InvalidMemoryArgument(f"key must be a string, got {type(key).__name__}.")
    canonical = re.sub(r"[\s-]+", "_", key.strip().lower())
    if not _KEY.match(canonical):
        raise InvalidMemoryArgument(
            f"Invalid key {key!r}: use a short lowercase name such as 'name', 'timezone' "
            "or 'job' (letters, digits, '_' and '.', at most 48 characters)."
        )
    return canonical


def clean_value(value: object) -> str:
    """A slot value: one line, non-empty, at most MAX_VALUE_CHARS characters."""
    text = clean_fact_text(value, what="value")
    if len(text) > MAX_VALUE_CHARS:
        raise InvalidMemoryArgument(
            f"value is {len(text)} characters; a slot value holds at most {MAX_VALUE_CHARS}. "
            "Store the detail as a fact without a key instead."
        )
    return text


def check_category(category: object) -> str:
    """``category`` if it is one of CATEGORIES."""
    if category not in CATEGORIES:
        raise InvalidMemoryArgument(
            f"Invalid category {category!r}. Use one of: {', '.join(CATEGORIES)}."
        )
    return str(category)


def check_subject(subject: object) -> str:
    """``subject`` if it is a short lowercase name (``user``, ``agent``, ...)."""
    if not isinstance(subject, str) or not _SUBJECT.match(subject):
        raise InvalidMemoryArgument(
            f"Invalid subject {subject!r}: use 'user' (facts about the user) or 'agent' "
            "(the agent's own notes)."
        )
    return subject


def check_source(source: object) -> str:
    """``source`` if it is one of SOURCES."""
    if source not in SOURCES:
        raise InvalidMemoryArgument(f"Invalid source {source!r}. Use one of: {', '.join(SOURCES)}.")
    return str(source)


def scan_fact(*texts: str | None) -> None:
    """Raise ThreatDetectedError when any text trips the scanner at ``strict`` scope."""
    for text in texts:
        if not text:
            continue
        findings = scanner.scan_for_threats(text, "strict")
        if findings:
            raise ThreatDetectedError(
                scanner.threat_message(findings, "Fact"),
                patterns=[f.pattern_id for f in findings],
            )
