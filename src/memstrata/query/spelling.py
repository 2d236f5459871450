"""Typos in a natural-language query: ``educaton`` searches ``education``.

A word that no message holds finds nothing, so a misspelt word in a question costs the
search its best evidence (LoCoMo's questions hold ``educaton``, ``funraiser``,
``torunament``, ``recieved``). A word is read as a typo only when all of these hold:

* it is a plain Latin word of at least :data:`MIN_LETTERS` letters (short words have
  too many neighbours to guess from) and not a stopword;
* it is not an English word (pyspellchecker's frequency list, MIT): a real word the
  store does not hold (``writing``, ``child``) is a question about something never
  said, not a typo, and correcting it to a neighbour (``waiting``, ``chili``) would
  search for something else;
* no message of the store holds it;
* an English word one edit away (a letter deleted, inserted, changed, or two swapped)
  is held by a message of the store. Of several, the commonest in English wins
  (``recieved``: ``received`` before ``relieved``), the same choice on every backend.

The store is asked once, and only when a word passed the first two rules and has an
English neighbour: a question in correct English costs a set lookup per word, and a
technical term with no English word one edit away (``kubernetes``) about 0.15 ms more
the first time (:func:`neighbours` keeps the answer).
The store answers from its word index, and from its CJK index for a Latin word glued to
CJK text (``youer`` in ``修改youer服务端``): on SQLite one lookup per word, on PostgreSQL
the tenant's ranking sample and at most one statement for the words it lacks. The word
list (127,000 words, about 12 MB) is read on the first query that holds a candidate,
once per process.

Only Latin words are corrected: CJK text, code-like terms (digits, ``_``, ``.``) and
explicit queries (operators, quotes, ``prefix*``) are searched as written.
"""

from __future__ import annotations

import functools
import gzip
import json
import logging
import re
import string
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import resources

from memstrata.query import homophones
from memstrata.query.compile import STOPWORDS, is_explicit

# Words shorter than this are never corrected: a four-letter word has dozens of English
# neighbours one edit away, and a short typo is as likely another word as a slip.
MIN_LETTERS = 5
# Nor are words longer than this: no English word of the list is more than 45 letters,
# so a longer one has no neighbour in it, and the edits of a word grow with its length
# (a pasted run of 2,000 letters made 106,000 strings of 2 KB: 0.6 s and 220 MB).
MAX_LETTERS = 46
# A query holding more candidate typos than this is not a question with a slip in it
# (a pasted foreign-language text, a list of names): it is searched as written.
MAX_TYPOS = 4
# The words of the list a query's typo can be checked against or corrected to: plain
# lowercase words of 4 letters or more (an edit of a 5-letter word is never shorter). The
# other 34,000 entries (names with an apostrophe, short words) would only cost memory.
_LISTED = re.compile(r"[a-z]{4,}")

# A word of letters alone, not part of a path, an address, a hyphenated or dotted name
# (``auth-api``, ``file.py``) or a tag; a sentence's full stop may follow it.
_WORD = re.compile(r"(?<![\w.\-/@#])[A-Za-z]+(?![\w\-/@]|\.\w)")
_LETTERS = string.ascii_lowercase
logger = logging.getLogger(__name__)
_lock = threading.Lock()
_english: dict[str, int] | None = None


def english() -> Mapping[str, int]:
    """The English words and their counts (read once per process); empty, with one
    warning, when the list cannot be read: queries are then searched as written."""
    global _english
    with _lock:
        if _english is None:
            try:
                data = resources.files("spellchecker").joinpath("resources/en.json.gz")
                counts: dict[str, int] = json.loads(gzip.decompress(data.read_bytes()))
            except (ImportError, OSError, ValueError) as exc:
                logger.warning(
                    "typo correction is off: the English word list of pyspellchecker "
                    "could not be read (%s); `pip install pyspellchecker` restores it",
                    exc,
                )
                counts = {}
            # About 12 MB held for the process's life (127,000 words and their counts),
            # read in 0.2 s; the dict is what keeps a lookup at tens of nanoseconds (a
            # candidate's 450 edits are each looked up).
            _english = {w: n for w, n in counts.items() if _LISTED.fullmatch(w)}
        return _english


def edits(word: str) -> set[str]:
    """Every string one edit from ``word``: a letter deleted, swapped with the next,
    changed or inserted (lowercase ASCII letters)."""
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    deleted = {a + b[1:] for a, b in splits if b}
    swapped = {a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1}
    changed = {a + c + b[1:] for a, b in splits if b for c in _LETTERS}
    inserted = {a + c + b for a, b in splits for c in _LETTERS}
    return (deleted | swapped | changed | inserted) - {word}


def candidate_typos(text: str | None) -> list[str]:
    """The words of ``text`` (lowercased, first occurrence order) that could be typos:
    plain Latin words of :data:`MIN_LETTERS` to :data:`MAX_LETTERS` letters that are
    neither stopwords nor English words."""
    if not isinstance(text, str) or not text:
        return []  # what is not text has no typos; the caller's own checks reject it
    words = dict.fromkeys(m.group(0).lower() for m in _WORD.finditer(text))
    long = [w for w in words if MIN_LETTERS <= len(w) <= MAX_LETTERS and w not in STOPWORDS]
    if not long:
        return []
    known = english()
    return [w for w in long if w not in known] if known else []


def corrections(text: str | None, held: Callable[[Sequence[str]], Iterable[str]]) -> dict[str, str]:
    """The typos of ``text`` and the word each stands for (lowercase).

    ``held(words)`` returns those of ``words`` that some message of the store holds (as
    its word index reads them: ``received`` holds for a message saying ``receive``).
    """
    typos = candidate_typos(text)
    if not typos or len(typos) > MAX_TYPOS:
        return {}
    options = {w: cands for w in typos if (cands := neighbours(w))}
    if not options:
        return {}
    # One question to the store: which of the typos and their neighbours it holds.
    asked = dict.fromkeys([*options, *(c for cands in options.values() for c in cands)])
    present = set(held(list(asked)))
    out = {}
    for word, cands in options.items():
        best = next((c for c in cands if c in present), None)
        if word not in present and best is not None:
            out[word] = best
    return out


@functools.lru_cache(maxsize=4096)
def neighbours(word: str) -> tuple[str, ...]:
    """The English words one edit from ``word``, commonest first (kept for the words
    last asked about: an agent's queries repeat their terms, and each costs about 0.1 ms
    of edits to work out)."""
    known = english()
    # A stopword is never searched, so it is no correction (`youer` is not `your`). The
    # edits are looked up in the list one by one: a set operation with the list's keys
    # would build a set of all of them for each query (15 ms).
    found = (c for c in edits(word) if c in known and c not in STOPWORDS)
    return tuple(sorted(found, key=lambda c: (-known[c], c)))


def respelled(text: str, fixes: Mapping[str, str]) -> str:
    """``text`` with each whole word of ``fixes`` (any case) replaced by its correction."""
    if not fixes:
        return text
    return _WORD.sub(lambda m: fixes.get(m.group(0).lower(), m.group(0)), text)


def may_correct(text: str | None) -> bool:
    """Whether ``text`` could hold a typo or a Chinese homophone slip, by the checks that
    need no store (:func:`candidate_typos`, :func:`homophones.may_hold_slips`)."""
    return bool(candidate_typos(text)) or homophones.may_hold_slips(text)


def corrected(
    text: str, held: Callable[[Sequence[str]], Iterable[str]]
) -> tuple[str, dict[str, str]]:
    """``text`` with its English typos and Chinese homophone slips corrected
    (:mod:`memstrata.query.homophones`), and the corrections (as written -> searched)."""
    fixes = corrections(text, held)
    text, slips = homophones.corrected(respelled(text, fixes), held)
    return text, {**fixes, **slips}


def respell(
    query: str | None, held: Callable[[Sequence[str]], Iterable[str]]
) -> tuple[str | None, dict[str, str]]:
    """A natural query with its typos and homophone slips corrected, and the
    corrections; an explicit query (operators, quotes, ``prefix*``) is taken as written."""
    if not query or not may_correct(query) or is_explicit(query):
        return query, {}
    return corrected(query, held)


def searched_as(fixes: Mapping[str, str]) -> str:
    """What a search corrected, said to the user: ``Searched 'education' for 'educaton'
    (quote a word to search it as written).``; empty without corrections."""
    if not fixes:
        return ""
    pairs = ", ".join(f"{word!r} for {typo!r}" for typo, word in fixes.items())
    return f"Searched {pairs} (quote a word to search it as written)."
