"""Reading a transcript-shaped query as a whole and by its last turn.

A query pasted from a conversation (``Name: "…"`` or ``Name：…``, one turn a line) is
about the whole conversation and most of all about where it stands now: the memory an
assistant needs is the one the last turn brings up, which the earlier turns dilute (a
dozen turns of small talk outweigh one sentence naming the event). So such a query is
searched twice, as a whole and as its last turn (the last turn of someone other than an
assistant when the assistant spoke last), and each message's scores under the two
readings are mixed: ``(whole + LAST_TURN_WEIGHT * last) / (1 + LAST_TURN_WEIGHT)``
(:func:`memstrata.store.boosts.mix_readings`), for keyword scores and for cosines alike.

Only text that looks like a transcript gets the second reading (:func:`readings`): at
least :data:`MIN_TURNS` lines that open with a speaker, from at least two speakers, one
of whom speaks more than once (a ``key: value`` listing names each key once). A
question, a keyword list or a pasted paragraph is searched once, as before: a text of
one line or no colon is refused before any scan, and only the last
:data:`SCAN_CHARS` characters of a longer text are read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from memstrata.query.compile import MAX_QUERY_CHARS

__all__ = [
    "ASSISTANT_NAMES",
    "LAST_TURN_WEIGHT",
    "MIN_TURNS",
    "Readings",
    "SCAN_CHARS",
    "WHOLE_CHARS",
    "Turn",
    "readings",
    "turns",
]

# Weight of the last-turn reading against the whole (1.0): the whole conversation still
# decides most of the order, the last turn breaks ties toward what is said now. Measured
# on MADial-Bench zh in benchmarks/results/recall.md.
LAST_TURN_WEIGHT: Final = 0.5
# A query is read as a transcript only when this many of its lines open with a speaker.
MIN_TURNS: Final = 3
# A transcript longer than this is read as a whole by its end (from a line start): the
# keyword compile keeps the first MAX_QUERY_CHARS characters of a query, which for a
# long conversation would be its oldest turns.
WHOLE_CHARS: Final = MAX_QUERY_CHARS
# Only the end of a long text is read for its turns: the last turn is there, and the
# check's cost stays bounded whatever is pasted. (The whole reading's keyword search
# reads the start: memstrata.query.compile.MAX_QUERY_CHARS.)
SCAN_CHARS: Final = 8000
# Speakers whose turn is the assistant's answer, not what the user brings up: when one
# of them spoke last, the last turn of another speaker is read instead.
ASSISTANT_NAMES: Final = frozenset(
    {
        "assistant",
        "ai",
        "bot",
        "chatbot",
        "model",
        "system",
        "agent",
        "助手",
        "助理",
        "机器人",
        "客服",
    }
)
# A turn opens with its speaker (one to three words, or a CJK name, optionally in
# angle brackets) and an ASCII or full-width colon; what follows is the turn's text.
_TURN = re.compile(
    r"^\s*<?([^\W\d_][\w .'-]{0,40}?)>?\s*[:：]\s*(?!//)(.*)$",
    re.UNICODE,
)
_SPEAKER_CHARS = 24
_QUOTES = "\"'“”‘’「」『』"


@dataclass(frozen=True)
class Turn:
    """One turn of a transcript: its speaker (lower case) and its text, unquoted."""

    speaker: str
    text: str


@dataclass(frozen=True)
class Readings:
    """The two readings of a transcript-shaped query: the whole text and its last turn."""

    whole: str
    last_turn: str


def turns(text: str) -> list[Turn]:
    """The turns of a transcript, in order ([] when ``text`` has no speaker lines).

    A line that does not open with a speaker continues the turn before it.
    """
    out: list[Turn] = []
    for line in text.splitlines():
        match = _TURN.match(line)
        speaker = match.group(1).strip() if match else ""
        if match and speaker and len(speaker) <= _SPEAKER_CHARS and len(speaker.split()) <= 3:
            out.append(Turn(speaker.lower(), match.group(2).strip()))
        elif out and line.strip():
            last = out[-1]
            out[-1] = Turn(last.speaker, f"{last.text}\n{line.strip()}")
    return [Turn(t.speaker, t.text.strip().strip(_QUOTES).strip()) for t in out]


def readings(query: str | None) -> Readings | None:
    """The whole and last-turn readings of ``query`` when it is shaped like a transcript
    (:data:`MIN_TURNS` speaker lines or more, two speakers or more, a speaker who
    speaks again), else None. The whole reading of a transcript longer than
    :data:`WHOLE_CHARS` is its end.

    The last turn is the last one spoken by someone not in :data:`ASSISTANT_NAMES`
    (the very last turn when everyone is); None as well when that turn is the whole
    text or holds nothing to search.
    """
    if not query or "\n" not in query.strip() or (":" not in query and "：" not in query):
        return None
    found = turns(_tail(query, SCAN_CHARS))
    speakers = [t.speaker for t in found]
    if len(found) < MIN_TURNS or len(set(speakers)) < 2 or len(set(speakers)) == len(speakers):
        return None
    users = [t for t in found if t.speaker not in ASSISTANT_NAMES]
    last = (users or found)[-1].text
    if not last or last == query.strip():
        return None
    return Readings(_tail(query, WHOLE_CHARS), last)


def _tail(text: str, chars: int) -> str:
    """``text`` when it fits in ``chars``, else its end from the first line start there."""
    if len(text) <= chars:
        return text
    return text[-chars:].split("\n", 1)[-1]
