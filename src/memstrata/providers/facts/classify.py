"""Deterministic classification of facts: category, slot, and explicit "remember that".

Writes stay cheap (SPEC decision 3), so nothing here calls a model. Three small rules:

* :func:`classify` gives a mirrored curated-memory entry a category and a subject.
  ``USER.md`` entries are about the user: ``identity`` when they state who the user is
  (a slot below, or cues such as "works as", "lives in", "名字"), ``preference`` when
  they state a liking or a habit ("prefers", "likes", "never", "喜欢"), and
  ``preference`` otherwise, since a profile mostly says how the user wants to work.
  ``MEMORY.md`` entries are the agent's notes: ``note`` when they state a convention
  ("always", "must", "use X for", "约定"), ``episodic`` otherwise.
* :func:`extract_slot` finds a structured attribute in a sentence: name, job,
  location, timezone. Only a few fixed English and Chinese phrasings are recognised.
* :func:`explicit_capture` finds a user message that starts with "remember that ..."
  (or "记住 ...") and returns the statement to store.

Known limits, by design of a regex: cues are matched as words, so negation and irony
are missed ("User does not prefer tabs" is still a preference, which is the right
category, only for the wrong reason); a fact that is both identity and preference gets
the first that matches; names are recognised only after "name is", "call me", "named"
or "我叫"; other languages fall back to the defaults. A curator can re-categorise later;
the category only decides how a fact is listed and filtered, never whether it is kept.
"""

from __future__ import annotations

import re
from typing import Final

from memstrata.providers.facts.args import MAX_VALUE_CHARS

_FLAGS: Final = re.IGNORECASE
_NAME_WORD = r"[A-Z][\w'\-]*"
_SLOT_PATTERNS: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
    (
        "name",
        re.compile(
            # Only the user's own name: "my dog is called Rex" must not rename the user.
            r"\b(?i:(?:my|the\s+user'?s|user'?s)\s+name\s+is|call\s+me|"
            r"(?:the\s+user|user|i)\s+(?:is|am)\s+(?:named|called)|(?:user\s+)?goes\s+by)\s+"
            rf"({_NAME_WORD}(?:\s+{_NAME_WORD}){{0,2}})"
        ),
    ),
    (
        "name",
        re.compile(r"(?:我叫|我的名字是|名字叫|名字是)\s*([\u4e00-\u9fff]{1,4}|[A-Za-z][\w\-]*)"),
    ),
    (
        "timezone",
        re.compile(
            r"\b(?:time\s?zone|tz)\b(?:\s+is|\s*[:=])?\s*(?:in\s+)?"
            r"((?:UTC|GMT)\s?[+\-\u2212]\s?\d{1,2}(?::?\d{2})?|[A-Z][a-z]+/[A-Za-z_]+"
            r"(?:/[A-Za-z_]+)?|UTC|GMT|[A-Z]{2,4}T)\b",
            _FLAGS,
        ),
    ),
    (
        "timezone",
        re.compile(
            r"\b((?:UTC|GMT)\s?[+\-\u2212]\s?\d{1,2}(?::?\d{2})?|[A-Z][a-z]+/[A-Z][A-Za-z_]+)"
            r"\s+(?:time\s?zone|tz)\b",
            _FLAGS,
        ),
    ),
    ("timezone", re.compile(r"时区(?:是|为)?\s*((?:UTC|GMT)\s?[+\-]\s?\d{1,2}(?::?\d{2})?)")),
    (
        "job",
        re.compile(
            r"\b(?:works?\s+as|working\s+as|is\s+employed\s+as|(?:job|profession|occupation|"
            r"role)\s+is)\s+(?:an?\s+|the\s+)?([\w./&+\- ]{2,60}?)"
            r"(?=\s+(?:at|for|in|with|since)\b|[.,;!]|$)",
            _FLAGS,
        ),
    ),
    ("job", re.compile(r"(?:职业是|工作是|是一名|是一位)\s*([\u4e00-\u9fff]{2,10})")),
    (
        "location",
        re.compile(
            r"\b(?i:lives?\s+in|living\s+in|is\s+based\s+in|based\s+in|resides\s+in|"
            r"located\s+in)\s+([A-Z][\w.'\- ]{1,60}?)(?=\s+(?:and|with|since|but)\b|[.,;!]|$)"
        ),
    ),
    ("location", re.compile(r"(?:住在|居住在|生活在)\s*([\u4e00-\u9fff]{2,8})")),
)

_IDENTITY_CUES: Final = re.compile(
    r"\b(?:name|pronouns?|works?\s+(?:as|at|for)|job|profession|occupation|"
    r"lives?\s+in|based\s+in|born|birthday|years\s+old|native|time\s?zone|nationality|"
    r"i\s+am\s+an?|is\s+an?\s+\w+\s+(?:engineer|developer|designer|scientist|manager|"
    r"student|teacher|researcher|writer|doctor))\b|名字|职业|工作是|住在|时区|生日|母语",
    _FLAGS,
)
_PREFERENCE_CUES: Final = re.compile(
    r"\b(?:prefers?|preferred|preference|likes?|loves?|enjoys?|hates?|dislikes?|"
    r"favou?rite|rather|wants?|would\s+like|always|never|avoid|don'?t|do\s+not|style)\b|"
    r"喜欢|偏好|讨厌|更喜欢|习惯|不要|总是|从不",
    _FLAGS,
)
_CONVENTION_CUES: Final = re.compile(
    r"\b(?:always|never|must|should|convention|rule|policy|by\s+default|prefer(?:s|red)?|"
    r"don'?t|do\s+not|avoid|use\s+\S+(?:\s+\S+)?\s+(?:for|to|instead))\b|约定|规范|必须|总是|不要",
    _FLAGS,
)

_CAPTURE: Final = re.compile(
    r"^\s*(?:please\s+|pls\s+)?(?:remember|don'?t\s+forget|do\s+not\s+forget)"
    r"(?:\s+that\b|\s*[:,]|\s+this\s*:)\s*(.+)$|"
    r"^\s*(?:请)?(?:记住|记一下|别忘了)\s*[:：,，]?\s*(.+)$",
    _FLAGS | re.DOTALL,
)
# End of the first sentence: Latin punctuation before a space, or CJK punctuation.
_SENTENCE_END: Final = re.compile(r"(?<=[.!;])\s|[。！；\n]")
MAX_CAPTURE_CHARS: Final = 300


def extract_slot(text: str) -> tuple[str, str] | None:
    """The first ``(key, value)`` slot stated in ``text``, or None.

    >>> extract_slot("User's name is Alice Chen and she works as a data engineer")
    ('name', 'Alice Chen')
    """
    for key, pattern in _SLOT_PATTERNS:
        match = pattern.search(text)
        if match:
            value = " ".join(match.group(1).split()).strip(" .,'")
            if value and len(value) <= MAX_VALUE_CHARS:
                return key, value
    return None


def classify(target: str, content: str) -> tuple[str, str]:
    """``(category, subject)`` for a curated-memory entry of ``target`` ("memory"/"user").

    Anything else (an explicit capture, an import) is classified as a user statement.
    """
    if target == "memory":
        return ("note" if _CONVENTION_CUES.search(content) else "episodic"), "agent"
    if extract_slot(content) is not None:
        return "identity", "user"
    if _PREFERENCE_CUES.search(content):
        return "preference", "user"
    if _IDENTITY_CUES.search(content):
        return "identity", "user"
    return ("preference" if target == "user" else "episodic"), "user"


def explicit_capture(message: str) -> str | None:
    """The statement a user asked to remember ("remember that X" -> "X"), or None.

    Only the first sentence after the cue is kept, and only when it is a statement of
    3 to MAX_CAPTURE_CHARS characters: "remember that bug? it's back" is a question,
    not a request to store anything.
    """
    match = _CAPTURE.match(message)
    if match is None:
        return None
    rest = (match.group(1) or match.group(2) or "").strip()
    first = _SENTENCE_END.split(rest, maxsplit=1)[0].strip()
    first = first.rstrip(" .!;。！；")
    if "?" in first or "？" in first or not 3 <= len(first) <= MAX_CAPTURE_CHARS:
        return None
    return " ".join(first.split())
