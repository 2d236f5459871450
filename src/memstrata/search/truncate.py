"""Transcripts of stored conversations, and truncation around what a query matched.

A conversation becomes plain text for a summary model (and for the verbatim excerpts
returned when no summary is made)::

    [USER]: how do I rotate the nginx logs?
    [ASSISTANT]: [Called: terminal({"command": "ls /etc/logrotate.d"})]
    [TOOL:terminal]: nginx  rsyslog ...
    [ASSISTANT]: Add a logrotate rule ...

Long conversations are cut to one window chosen where the query matched, in order of
preference: every occurrence of the full phrase; places where all query terms occur
within :data:`PROXIMITY_CHARS` of each other; any single term. The window covering the
most such positions wins; it starts a quarter of its size before a position, because
what follows a match (the answer, the outcome) matters more than what led to it.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from memstrata.query.cjk import has_cjk
from memstrata.query.compile import CompiledQuery
from memstrata.query.fold import fold
from memstrata.store.hits import term_needle, text_of

EARLIER_MARK = "...[earlier conversation truncated]..."
LATER_MARK = "...[later conversation truncated]..."
# Query terms closer than this (in characters) count as one place in the text.
PROXIMITY_CHARS = 200
# Share of a window placed before the match it was built around.
LEAD_SHARE = 0.25
# Tool output longer than this keeps its head and tail (and the part around a match).
TOOL_OUTPUT_CHARS = 500
_TOOL_EDGE = 250
_TOOL_MATCH_EDGE = 150
_CALL_ARGS_CHARS = 200
# More positions than this are sampled evenly: the window choice needs their density,
# not every one of them.
_MAX_POSITIONS = 5000

Strategy = Literal["whole", "phrase", "proximity", "terms", "none"]


# ----------------------------------------------------------------------------- needles


@dataclass(frozen=True)
class Needles:
    """What to look for in a transcript: full phrases and single terms, lower case."""

    phrases: tuple[str, ...]
    terms: tuple[str, ...]

    @property
    def all(self) -> tuple[str, ...]:
        """Phrases and terms together."""
        return self.phrases + self.terms


def needles_for(compiled: CompiledQuery) -> Needles:
    """Derive the phrases and terms of a compiled query (negated terms left out).

    Terms are the stems the full-text index matched (``painting`` looks for ``paint``);
    phrases are quoted multi-word terms and, for a query of several terms, the terms in
    the order the user wrote them.
    """
    if compiled.tree is None:
        return Needles((), ())
    positive = compiled.tree.positive_terms()
    phrases: dict[str, None] = {}
    terms: dict[str, None] = {}
    for term in positive:
        text = " ".join(term.text.rstrip("*").split())
        if " " in text:
            phrases[text] = None
            for word in text.split():
                terms[word] = None
        elif text:
            terms[term_needle(term).strip()] = None
    words = [" ".join(t.text.rstrip("*").split()) for t in positive]
    if len(words) > 1 and not any(has_cjk(w) for w in words):
        phrases.setdefault(" ".join(words), None)
    return Needles(
        tuple(p for p in phrases if p),
        tuple(t for t in terms if t and t not in phrases),
    )


def _lower_same_length(text: str) -> str:
    # Positions found in the lowered text must index the original: a few characters
    # (e.g. "İ") grow when lowered, so those are kept as they are. Folded as queries are
    # (memstrata.query.fold, which keeps every position): 數據 holds a match of 数据.
    text = fold(text)
    lower = text.lower()
    if len(lower) == len(text):
        return lower
    return "".join(c if len(c.lower()) != 1 else c.lower() for c in text)


def _latin_word_char(ch: str) -> bool:
    return ch.isalnum() and not has_cjk(ch)


def find_all(lower: str, needle: str) -> list[int]:
    """Start positions of ``needle`` in ``lower``.

    A Latin needle must start a word (``paint`` in ``painting``, not in ``repaint``),
    as the word index matched it; a CJK needle matches anywhere.
    """
    out: list[int] = []
    if not needle:
        return out
    word_start = _latin_word_char(needle[0])
    pos = lower.find(needle)
    while pos >= 0:
        if not (word_start and pos > 0 and _latin_word_char(lower[pos - 1])):
            out.append(pos)
        pos = lower.find(needle, pos + 1)
    return out


def _co_occurrences(occurrences: list[list[int]], span: int) -> list[int]:
    # Scan from the rarest term: each of its occurrences with every other term within
    # `span` characters on either side is a place where the terms co-occur.
    ordered = sorted(occurrences, key=len)
    rarest, others = ordered[0], ordered[1:]
    out: list[int] = []
    for pos in rarest:
        starts = [pos]
        for positions in others:
            i = bisect.bisect_left(positions, pos - span)
            if i == len(positions) or positions[i] > pos + span:
                break
            starts.append(positions[i])
        else:
            out.append(min(starts))
    return out


def match_positions(text: str, needles: Needles) -> tuple[Strategy, list[int]]:
    """The positions to centre a window on, and the strategy that found them."""
    lower = _lower_same_length(text)
    found: list[int] = []
    for phrase in needles.phrases:
        found += find_all(lower, phrase)
    if found:
        return "phrase", sorted(found)
    occurrences = [find_all(lower, t) for t in needles.terms]
    present = [o for o in occurrences if o]
    if len(needles.terms) > 1 and len(present) == len(needles.terms):
        close = _co_occurrences(present, PROXIMITY_CHARS)
        if close:
            return "proximity", sorted(close)
    singles = sorted(p for o in present for p in o)
    return ("terms", singles) if singles else ("none", [])


# ------------------------------------------------------------------------- truncation


@dataclass(frozen=True)
class Truncation:
    """A window of a transcript: its text (with markers), bounds and how it was chosen."""

    text: str
    start: int
    end: int
    total_chars: int
    strategy: Strategy
    positions: int

    @property
    def truncated(self) -> bool:
        """True when the window is not the whole transcript."""
        return self.start > 0 or self.end < self.total_chars


def best_window(positions: Sequence[int], length: int, max_chars: int) -> int:
    """Start of the ``max_chars`` window covering the most positions.

    Candidate windows start :data:`LEAD_SHARE` of ``max_chars`` before a position,
    clamped to the text; ties go to the earliest window.
    """
    if not positions:
        return 0
    if len(positions) > _MAX_POSITIONS:
        step = len(positions) / _MAX_POSITIONS
        positions = [positions[int(i * step)] for i in range(_MAX_POSITIONS)]
    lead = int(max_chars * LEAD_SHARE)
    last_start = max(0, length - max_chars)
    best_start, best_count = 0, -1
    for pos in positions:
        start = min(max(0, pos - lead), last_start)
        count = bisect.bisect_left(positions, start + max_chars) - bisect.bisect_left(
            positions, start
        )
        if count > best_count:
            best_start, best_count = start, count
    return best_start


def _snap(text: str, start: int, end: int) -> tuple[int, int]:
    # Move the cut to a line break when one is near, so the window does not open or
    # close mid-word; never by more than a tenth of the window.
    slack = max(1, (end - start) // 10)
    if start > 0:
        nl = text.find("\n", start, start + slack)
        if nl >= 0:
            start = nl + 1
    if end < len(text):
        nl = text.rfind("\n", end - slack, end)
        if nl > start:
            end = nl
    return start, end


def truncate_around_matches(text: str, needles: Needles, max_chars: int) -> Truncation:
    """Cut ``text`` to at most ``max_chars`` (plus markers) around the query's matches.

    Text that fits is returned whole. Otherwise the window follows
    :func:`match_positions` and :func:`best_window`, and
    :data:`EARLIER_MARK` / :data:`LATER_MARK` mark the cuts. Without any match the
    window is the start of the conversation.
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be positive, got {max_chars}")
    strategy, positions = match_positions(text, needles)
    if len(text) <= max_chars:
        return Truncation(text, 0, len(text), len(text), "whole", len(positions))
    start = best_window(positions, len(text), max_chars)
    end = min(len(text), start + max_chars)
    start, end = _snap(text, start, end)
    body = text[start:end]
    parts = [EARLIER_MARK + "\n\n"] if start > 0 else []
    parts.append(body)
    if end < len(text):
        parts.append("\n\n" + LATER_MARK)
    inside = sum(1 for p in positions if start <= p < end)
    return Truncation("".join(parts), start, end, len(text), strategy, inside)


# ------------------------------------------------------------------------- transcripts


@dataclass(frozen=True)
class Transcript:
    """A conversation as text; ``offsets`` maps each message id to where its block starts."""

    text: str
    offsets: tuple[tuple[int, int], ...]

    def message_ids_between(self, start: int, end: int) -> list[int]:
        """Ids of the messages whose blocks overlap ``[start, end)``."""
        starts = [o for o, _ in self.offsets]
        first = max(0, bisect.bisect_right(starts, start) - 1)
        out: list[int] = []
        for offset, message_id in self.offsets[first:]:
            if offset >= end:
                break
            out.append(message_id)
        return out


def _trim_tool_output(text: str, needles: Iterable[str]) -> str:
    if len(text) <= TOOL_OUTPUT_CHARS:
        return text
    head, tail = text[:_TOOL_EDGE], text[-_TOOL_EDGE:]
    middle = text[_TOOL_EDGE:-_TOOL_EDGE]
    lower = _lower_same_length(middle)
    # A match hidden in the cut part is kept: trimming must not lose what was searched.
    hits = [p for p in (lower.find(n) for n in needles if n) if p >= 0]
    if hits:
        at = min(hits)
        lo, hi = max(0, at - _TOOL_MATCH_EDGE), min(len(middle), at + _TOOL_MATCH_EDGE)
        return f"{head}...[truncated]...{middle[lo:hi]}...[truncated]...{tail}"
    return f"{head}...[truncated]...{tail}"


def _calls(raw: Any) -> list[str]:
    if not raw:
        return []
    value = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            return [raw[:_CALL_ARGS_CHARS]]
    if not isinstance(value, list):
        value = [value]
    out: list[str] = []
    for call in value:
        if not isinstance(call, Mapping):
            continue
        function = call.get("function", call)
        name = str(function.get("name", "?")) if isinstance(function, Mapping) else "?"
        args = function.get("arguments", "") if isinstance(function, Mapping) else ""
        args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        args = " ".join(args.split())
        if len(args) > _CALL_ARGS_CHARS:
            args = args[: _CALL_ARGS_CHARS - 3] + "..."
        out.append(f"{name}({args})")
    return out


_BLANKS = re.compile(r"\n{3,}")


def message_block(row: Mapping[str, Any], needles: Iterable[str] = ()) -> str:
    """One stored message as transcript text (``content`` as stored or decoded)."""
    role = str(row.get("role") or "unknown")
    content = row.get("content")
    text = text_of(content)
    text = text.strip()
    if "\n\n\n" in text:
        text = _BLANKS.sub("\n\n", text)
    if role == "tool":
        name = row.get("tool_name") or "tool"
        return f"[TOOL:{name}]: {_trim_tool_output(text, needles)}"
    lines: list[str] = []
    if text:
        lines.append(f"[{role.upper()}]: {text}")
    for call in _calls(row.get("tool_calls")):
        lines.append(f"[{role.upper()}]: [Called: {call}]")
    return "\n".join(lines) if lines else f"[{role.upper()}]:"


def format_transcript(
    rows: Sequence[Mapping[str, Any]], needles: Needles | None = None
) -> Transcript:
    """Render message rows (``id, session_id, role, content, tool_name, tool_calls``).

    Blocks are separated by a blank line; when the rows span several sessions (a
    conversation continued after compression), a ``[SESSION id]`` line marks each switch.
    """
    wanted = needles.all if needles is not None else ()
    parts: list[str] = []
    offsets: list[tuple[int, int]] = []
    length = 0
    sessions = {row.get("session_id") for row in rows}
    current: object = object()
    for row in rows:
        block = message_block(row, wanted)
        if len(sessions) > 1 and row.get("session_id") != current:
            current = row.get("session_id")
            block = f"[SESSION {current}]\n{block}"
        if parts:
            length += 2
        offsets.append((length, int(row["id"])))
        parts.append(block)
        length += len(block)
    return Transcript("\n\n".join(parts), tuple(offsets))
