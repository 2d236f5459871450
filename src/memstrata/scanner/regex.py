"""The scanner's regex vocabulary and the machinery its pattern table is built from.

Regexes are kept as source strings and compiled on first use (:func:`_compile`), so
importing the scanner costs little. The underscore names are the shared vocabulary of
the ``scanner_patterns*`` table modules, not API; :mod:`memstrata.scanner.scan` re-exports
the public names (``Scope``, ``SCOPES``, ``ThreatPattern``, the window sizes).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

Scope = Literal["all", "context", "strict"]
SCOPES: tuple[Scope, ...] = ("all", "context", "strict")
MAX_SCAN_CHARS = 65_536
# Longer than any match a pattern can make on folded text (the longest is well under
# 2,000 characters), so a payload that straddles two windows is whole in one of them.
SCAN_OVERLAP_CHARS = 4_096


@dataclass(frozen=True)
class ThreatPattern:
    """One entry of the pattern table: id, the narrowest scope that applies it, and why."""

    pattern_id: str
    scope: Scope
    description: str
    alternatives: tuple[_Alt, ...] = field(repr=False, compare=False)

    def matches(
        self, folded: str, *, prefilter: bool = True, _found: _Anchors | None = None
    ) -> bool:
        """Whether any alternative matches ``folded`` (the output of :func:`fold`).

        ``prefilter=False`` runs every regex even when its anchors are absent; the
        result is the same, only slower (tests use it to check the anchors).
        """
        found = _Anchors(folded) if _found is None else _found
        return any(
            (not prefilter or a.present(found)) and a.search(folded) for a in self.alternatives
        )


# --------------------------------------------------------------------------------------
# Regex vocabulary. Patterns are written for folded text: lower case, one space or one
# newline between words. ``_S`` is a short separator that does not cross a sentence end
# (a period is allowed only inside a word, as in paths and host names); ``_f(n)`` is at
# most ``n`` short words of filler. Word and separator classes are disjoint, so
# backtracking has one way to split and stays bounded.

_S = r"(?:[^\w.!?]|[.!?](?=\w)){1,6}"
# Any character of one sentence: a period counts only inside a word (paths, host names).
_SENT = r"(?:[^.!?\n]|[.!?](?=\w))"
_T = r"\w{1,30}"


def _f(n: int) -> str:
    return rf"(?:{_T}{_S}){{0,{n}}}"


def _w(words: str) -> str:
    """A non-capturing alternation of ``|``-separated phrases; a space means ``_S``."""
    return "(?:" + words.replace(" ", _S) + ")"


# Start of an instruction: line start, after sentence or list punctuation, or after a
# phrase that makes the next verb an order to the model.
_IMP = (
    r"(?:^|(?<=[.!?:;>\-(\[])\s?|\b"
    + _w(
        r"you must|you should|you will|you shall|you need to|you have to"
        r"|you are to|always|periodically|then|also|please|silently|quietly"
        r"|secretly|immediately|now"
    )
    + _S
    + ")"
)
_PRIOR = _w(
    r"previous|prior|above|earlier|preceding|foregoing|original|initial|all"
    r"|any|every|your|these|those|my|the|system|developer"
)
_INSTRUCTIONS = _w(
    r"instructions?|prompts?|directions|directives|guidelines|guidance"
    r"|commands|orders|programming|system prompt"
)
_URLISH = (
    r"(?:https?://|www\.|\b[\w.-]{1,60}@[\w-]{1,60}\.[a-z]{2,10}\b"
    r"|\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b|\bwebhooks?\b|\bpaste\w{0,10}\b|\bngrok\b"
    r"|\b[\w-]{1,60}\.(?:com|net|org|io|xyz|ru|cn|top|site|app|dev|me|sh|cc|tk|info|biz"
    r"|link|click|online)\b)"
)
_SEND = _w(
    r"send|post|upload|forward|transmit|submit|exfiltrate|leak|e-?mail|mail"
    r"|share|sync|copy|push|pipe|beam|dump|write|include|append|attach"
    r"|deliver|relay|ship|export"
)
_CREDENTIAL_PATH = (
    r"(?:\.env\b(?![.-](?:example|sample|template|dist|local\.example))"
    r"|\.ssh/(?![\w.-]{0,60}\.pub\b)|\bid_(?:rsa|dsa|ecdsa|ed25519)\b(?!\.pub)"
    r"|\.aws/credentials|\.netrc\b|\.git-credentials|\.pgpass\b|\.npmrc\b|\.pypirc\b"
    r"|\.docker/config\.json|\.kube/config|/etc/(?:shadow|passwd|sudoers)\b"
    r"|\bcredentials\.json\b|\.(?:bash|zsh)_history\b|\bsecrets?\.(?:ya?ml|json|toml|txt)\b"
    r"|\.gnupg\b|\bwallet\.dat\b|\bgh/hosts\.ya?ml\b|\.config/gcloud\b|\.azure/|\.vault-token\b"
    r"|\.terraformrc\b|\.(?:cargo|gem)/credentials\b|\bapplication_default_credentials\b)"
)
# Anchors shared by several alternatives (see _Alt): substrings every match contains.
_CREDENTIAL_PATH_ANCHORS = (
    ".env .ssh id_ .aws .netrc .git-cred .pgpass .npmrc .pypirc .docker .kube /etc/ "
    "credentials _history secret .gnupg wallet hosts.y gcloud .azure .vault-token "
    ".terraformrc"
)
_SENSITIVE_ANCHORS = (
    "key secret token credential creds password passphrase env cookie session seed "
    "mnemonic card bank personal financ medical .ssh .aws .netrc address phone contact "
    "birth passport"
)
_SEND_ANCHORS = (
    "send post upload forward transmit submit exfiltrate leak mail share sync copy "
    "push pipe beam dump write include append attach deliver relay ship export"
)
_C2_ANCHORS = (
    "cobalt sliver havoc mythic metasploit msfconsole msfvenom meterpreter brainworm "
    "poshc2 covenant brute nighthawk empire"
)
_CONTEXT_ANCHORS = "conversation chat transcript message context prompt memor everything user"
_PATH_PREFIX = r"[~/\w.\-%\\$]{0,80}?"
_CREDENTIAL_VAR = r"\$\{?\w{0,30}(?:key|token|secret|passw|pwd|cred|auth|cookie)\w{0,30}\}?"
_SENSITIVE = _w(
    r"api ?keys?|keys|secrets?|tokens?|credentials|creds|passwords?"
    r"|passphrases?|private keys?|ssh keys?|env(?:ironment)? (?:variables"
    r"|vars|file)|cookies|session (?:tokens?|cookies|ids?)|seed phrases?"
    r"|mnemonic|credit cards?|card numbers?|bank details|personal (?:data"
    r"|information|info|details)|finances|financial (?:data|details"
    r"|information)|medical records|\.env|\.ssh|\.aws|\.netrc|e-?mail address(?:es)?"
    r"|phone numbers?|home address(?:es)?|contacts|contact details|date of birth|passport"
)
_CONTEXT_DATA = _w(
    r"conversations?|chat (?:history|logs?|transcripts?|messages)"
    r"|transcripts?|(?:conversation|message|chat) history|context window"
    r"|system prompt|memory (?:entries|files?|contents|notes)|memories"
    r"|everything (?:the user|i|you) (?:says?|said|tells? you|told you"
    r"|types?|writes?)|all (?:user )?messages|user'?s? (?:messages|inputs"
    r"|prompts|questions|files)"
)
_C2_TARGET = (
    r"(?:\bc2\b|\bc&c\b|\bcnc\b|command" + _S + r"(?:and|&)" + _S + r"control|\bmothership\b"
    r"|\bbotnet\b|\bhive\b|\bswarm\b|https?://\d{1,3}\.|\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b"
    r"|\b(?:controller|server|panel) at https?://)"
)
_C2_FRAMEWORK = _w(
    r"cobalt ?strike|sliver|havoc|mythic|metasploit|msfconsole|msfvenom"
    r"|meterpreter|brainworm|poshc2|covenant|brute ratel|nighthawk"
    r"|empire (?:c2|agent|stager|listener)"
)
_MODIFY = _w(
    r"edit|modify|change|update|overwrite|rewrite|append|add|write|insert"
    r"|prepend|replace|delete|remove|alter|patch"
)
_STEALTH = _w("silently|secretly|quietly|covertly|discreetly")
_MOD_PURPOSE = (
    r"(?::|"
    + _S
    + _w(
        "to (?:say|include|read|state|disable|remove|allow|skip|turn|add|always|never|grant"
        "|approve|permit|set|trust|ignore|bypass)|saying|so (?:that|future|all)"
        "|with (?:the )?(?:line|text|rule|instruction)|and (?:set|disable|remove|turn|add|grant"
        "|allow)|without (?:telling|asking|informing)|for (?:all )?future sessions|permanently"
        "|that|which"
    )
    + ")"
)


def _config_mod(files: str) -> str:
    """Writes to an agent's configuration: shell redirection, sed -i, or a modify verb
    that comes with stealth, a stated purpose or the quoted text to insert.

    A plain "update AGENTS.md when you add a package" does not match.
    """
    target = rf"['\"`]?{_PATH_PREFIX}{files}"
    return (
        rf"(?:>>?|\btee\b(?: -a)?|\bsed -i\b[^\n]{{0,160}}?|\b(?:cp|mv|ln -sf?)\b[^\n]{{0,80}}?)"
        rf" ?{target}"
        rf"|{_STEALTH}{_S}{_f(2)}{_MODIFY}\b{_S}{_f(3)}{target}"
        rf"|\b{_MODIFY}\b(?:{_S}to)?{_S}{_f(3)}{target}{_MOD_PURPOSE}"
        rf"|\b{_MODIFY}\b{_S}['\"][^'\"\n]{{1,200}}['\"]{_S}(?:to|into|in){_S}{_f(1)}{target}"
        rf"|\b(?:{_MODIFY}|create|make|generate)\b{_S}{_f(2)}{target}{_S}{_f(4)}(?:with{_S}(?:the"
        rf"{_S})?(?:line|text|rule|instruction)s?|containing|that{_S}says|saying)\b"
    )


_AGENT_FILES = (
    r"(?:\b(?:agents|claude|gemini|copilot-instructions)\.md\b|\.cursorrules\b|\.clinerules\b"
    r"|\.windsurfrules\b|\.cursor/rules\b|\.aider\.conf)"
)
_HERMES_FILES = r"(?:\bsoul\.md\b|\.hermes/config\.ya?ml\b)"
_MEMSTRATA_FILES = r"(?:\.memstrata/[\w./-]{0,60}|\bmemory\.md\b|\buser\.md\b)"


@dataclass(frozen=True)
class _Alt:
    """One alternative of a pattern: literal anchors that every match contains, and a search.

    ``anchors`` is an AND of OR-groups of substrings of the folded text. Checking them
    with ``in`` costs about a millisecond per megabyte, so an alternative whose anchors
    are absent is skipped without running its regex. A test checks that the prefilter
    never changes a result.
    """

    anchors: tuple[tuple[str, ...], ...]
    search: Callable[[str], bool]

    def present(self, found: _Anchors) -> bool:
        return all(any(found[a] for a in group) for group in self.anchors)


class _Anchors(dict[str, bool]):
    """Memo of ``anchor in text`` for one scan: many alternatives share anchors."""

    __slots__ = ("chars", "text")

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = _distinct_chunks(text)
        # An anchor with a character the text lacks is absent without reading the text.
        self.chars = frozenset(self.text) if len(self.text) >= _ANCHOR_TEXT_MIN else None

    def __missing__(self, anchor: str) -> bool:
        if self.chars is not None and not self.chars.issuperset(anchor):
            found = self[anchor] = False
        else:
            found = self[anchor] = anchor in self.text
        return found


# Anchors hold no whitespace, so an anchor occurs in a text exactly when it occurs in one
# of the text's whitespace-separated chunks, and a run of one character longer than any
# anchor can be cut to that length without removing an occurrence. Checking the distinct
# chunks, runs cut, costs the same as the text for prose and far less for the repeated
# units adversarial inputs are made of (hundreds of anchors each read the text once).
_ANCHOR_TEXT_MIN = 4_096
_RUN_RX = re.compile(r"(.)\1{64,}", re.S)


def _distinct_chunks(text: str) -> str:
    if len(text) < _ANCHOR_TEXT_MIN:
        return text
    joined = "\n".join(set(text.split()))
    return _RUN_RX.sub(lambda m: m.group(1) * 64, joined)


_STEP = MAX_SCAN_CHARS - SCAN_OVERLAP_CHARS


@functools.cache
def _compile(source: str, flags: int = re.M) -> re.Pattern[str]:
    """Compile ``source`` once, on first use.

    Compiling the whole table costs about half a second, which every importer (each CLI
    command) would pay; a scan compiles only the regexes whose anchors occur. The cache
    makes a concurrent first use compile at most twice, with identical results.
    """
    return re.compile(source, flags)


class _WindowedRegex:
    """A regex searched in overlapping windows of ``MAX_SCAN_CHARS``, compiled lazily."""

    __slots__ = ("source",)

    def __init__(self, source: str) -> None:
        self.source = source

    def __call__(self, text: str) -> bool:
        rx = _compile(self.source)
        n = len(text)
        for start in range(0, max(n - SCAN_OVERLAP_CHARS, 1), _STEP):
            if rx.search(text, start, min(n, start + MAX_SCAN_CHARS)):
                return True
        return False

    def __repr__(self) -> str:
        return f"_WindowedRegex({self.source[:60]!r}...)"


def _anchors(spec: str) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(group.split()) for group in spec.split(" & "))


def _a(anchors: str, regex: str) -> _Alt:
    """A regex alternative; ``anchors`` is space-separated, `` & `` joins groups."""
    return _Alt(_anchors(anchors), _WindowedRegex(regex))


def _p(pattern_id: str, scope: Scope, description: str, *alternatives: _Alt) -> ThreatPattern:
    return ThreatPattern(pattern_id, scope, description, alternatives)
