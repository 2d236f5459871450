"""One redaction for every secret memstrata may print, log or send to a model.

Three shapes of secret, handled in text and in structured values alike:

* a **secret-like key** holding a value: ``api_key``, ``mem0.qdrant_api_key``,
  ``token``, ``password``, ``client_secret``, ``Authorization`` ... in ``key=value``,
  ``key: value``, ``"key": "value"`` (JSON) and libpq ``password=...`` forms;
* a **DSN** with a password: ``postgresql://user:pass@host/db`` (the password may hold
  ``@``, ``:`` or ``/``; the host is what follows the *last* ``@`` of the authority);
* a **known key format**: provider keys (``sk-...``), GitHub, Slack, AWS, Google tokens,
  JWTs and PEM private keys, wherever they appear.

:func:`redact_text` handles free text, :func:`redact_value` one setting, and
:func:`redact_data` any JSON-shaped value, so ``config show``, ``config show --json``,
``config set``, error messages and compression summaries all hide the same things.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["MASK", "is_secret_key", "redact_data", "redact_dsn", "redact_text", "redact_value"]

MASK: Final = "[REDACTED]"

# Candidates for a secret-like key inside free text; is_secret_key decides.
_KEY_CANDIDATES: Final = (
    r"api[_-]?key|apikey|secret|token|passw(?:or)?d|passwd|pwd|passphrase|credentials?"
    r"|private[_-]?key|access[_-]?key|auth(?:orization)?|cookie|session[_-]?key|signature"
)
# Words of a key name that make it secret, and pairs of words that do (api_key,
# qdrant_api_key, apiKey, X-Auth-Token, PGPASSWORD, client_secret, private_key ...).
_WORDS: Final = frozenset(
    {
        "password", "passwd", "pwd", "passphrase", "secret", "secrets", "token", "apikey",
        "credential", "credentials", "authorization", "auth", "cookie", "signature",
    }
)  # fmt: skip
_SUFFIXES: Final = ("password", "passwd", "secret", "token", "apikey")
_PAIRS: Final = frozenset(
    {("api", "key"), ("private", "key"), ("access", "key"), ("secret", "key"), ("session", "key")}
)
# Names that hold a secret word but count or configure things (max_tokens, token_budget).
_NOT_SECRET: Final = re.compile(
    r"(?i)(?:max|min|num|total|input|output|prompt|completion|cached|reasoning|context)"
    r"[_-]?tokens?|tokens?[_-]?(?:count|limit|budget|usage|estimate)s?|tokenizer|"
    r"^require[_-]?token$"
)


def _words(name: str) -> list[str]:
    words: list[str] = []
    for part in re.split(r"[^A-Za-z0-9]+", name):
        words += re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", part)
    return [w.lower() for w in words]


_URL_PASSWORD: Final = re.compile(
    # scheme://user:PASSWORD@host — greedy up to the last "@" before the path, so a
    # password holding "@" is hidden whole.
    r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@?#]*:)(?P<secret>[^\s/]*)@"
    r"(?=[^\s@/]*(?:[/?#\s\"',]|$))"
)
_KNOWN_FORMATS: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    (
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)",
            re.S,
        ),
        "[REDACTED PRIVATE KEY]",
    ),
    (re.compile(r"\b(?:sk|rk|pk)-(?:[A-Za-z0-9_-]*-)?[A-Za-z0-9_-]{16,}"), MASK),
    (re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}"), MASK),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"), MASK),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), MASK),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), MASK),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{30,}"), MASK),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), MASK),
)
# Authorization: Bearer xxx / Basic xxx / token xxx (an HTTP header or a curl -H line).
_AUTH_HEADER: Final = re.compile(
    r"(?i)(\b(?:proxy-)?authorization\s*[:=]\s*[\"']?)(?:(bearer|basic|token|digest)\s+)?"
    r"([^\s\"',;]+)"
)
_SCHEME_TOKEN: Final = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{12,}")
# key = value, key: value, "key": "value", key='value with spaces'.
_ASSIGNMENT: Final = re.compile(
    r"""(?ix)
    (?P<key>["']?\b[\w.-]*?(?:"""
    + _KEY_CANDIDATES
    + r""")[\w.-]*["']?)
    (?P<sep>\s*[:=]\s*)
    (?:
        (?P<q>["'])(?P<quoted>(?:\\.|(?!(?P=q)).)*)(?P=q)
      | (?P<bare>[^\s"',;}{)\]]+)
    )
    """
)


def is_secret_key(name: str) -> bool:
    """True when a setting or field called ``name`` holds a secret.

    ``llm.api_key``, ``mem0.qdrant_api_key``, ``mcp.token``, ``password``, ``apiKey``,
    ``X-Auth-Token``, ``PGPASSWORD`` are secret; ``max_tokens``, ``token_budget``,
    ``mcp.require_token``, ``author`` are not.
    """
    last = name.rsplit(".", 1)[-1]
    if _NOT_SECRET.search(last):
        return False
    words = _words(last)
    if any(w in _WORDS or w.endswith(_SUFFIXES) for w in words):
        return True
    return any(pair in _PAIRS for pair in itertools.pairwise(words))


def redact_dsn(text: str) -> str:
    """``text`` with every URL password and libpq ``password=`` value hidden."""
    text = _URL_PASSWORD.sub(lambda m: f"{m['head']}{MASK}@", text)
    return re.sub(r"(?i)(\bpassword\s*=\s*)(?:'(?:\\.|[^'])*'|\S+)", lambda m: m[1] + MASK, text)


def _assignment(match: re.Match[str]) -> str:
    key = match["key"].strip("\"'")
    value = match["quoted"] if match["quoted"] is not None else match["bare"]
    if not is_secret_key(key) or not value or value == MASK or value.startswith("[REDACTED"):
        return match[0]
    # A number is a count or a limit (max_tokens=128000), not a secret.
    if re.fullmatch(r"[\d.]+", value):
        return match[0]
    if value.lower() in ("true", "false", "none", "null", "bearer", "basic", "token", "digest"):
        return match[0]
    quote = match["q"] or ""
    return f"{match['key']}{match['sep']}{quote}{MASK}{quote}"


def redact_text(text: str) -> str:
    """``text`` with every secret it shows replaced by ``[REDACTED]``."""
    for pattern, replacement in _KNOWN_FORMATS:
        text = pattern.sub(replacement, text)
    text = redact_dsn(text)
    text = _AUTH_HEADER.sub(
        lambda m: m[1] + (f"{m[2]} " if m[2] else "") + (MASK if m[3] != MASK else m[3]), text
    )
    text = _SCHEME_TOKEN.sub(lambda m: f"{m[1]} {MASK}", text)
    return _ASSIGNMENT.sub(_assignment, text)


def redact_value(key: str, value: Any) -> Any:
    """One setting's value as it may be shown: masked when ``key`` is secret-like and
    set, its secrets redacted when it is text (a DSN keeps all but its password)."""
    if is_secret_key(key):
        if isinstance(value, str) and not value:
            return value
        return MASK if value not in (None, False) else value
    if isinstance(value, str):
        return redact_text(value)
    return redact_data(value)


def redact_data(value: Any) -> Any:
    """A JSON-shaped value (mappings, lists, text) with every secret in it redacted."""
    if isinstance(value, Mapping):
        return {str(k): redact_value(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_data(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value
