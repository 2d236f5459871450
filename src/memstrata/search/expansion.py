"""Query expansion: the ``summary`` model rewrites a question into keyword sub-queries.

Optional and off by default (it costs a model call per new question; keyword search
needs none). "Which outdoor activities has John done with his colleagues?" names none
of the words the conversation used ("hiking", "team trip"); a model can guess them:

    from memstrata.llm import client_for
    from memstrata.search.expansion import expand_query

    subs = expand_query(store, client_for("summary"), question)
    hits = store.search_sessions(question, subqueries=subs)

Each sub-query is searched like the question and fused with it
(``memstrata.store.boosts.merge_subqueries``). Rewrites are cached per model and
normalised question in the store's ``query_expansions`` table, so a repeated question
costs nothing. A model failure is not fatal: the search goes on with the question alone
(:func:`expand_query` returns ``[]`` and the error is logged).
"""

from __future__ import annotations

import json
import logging
import re
from typing import TYPE_CHECKING

from memstrata.errors import LLMError, SessionStoreError, StorageError
from memstrata.llm import LLMClient
from memstrata.query.compile import MAX_QUERY_CHARS, clean_text

if TYPE_CHECKING:
    from memstrata.store.contract import SessionStoreContract

__all__ = [
    "EXPANSION_PROMPT",
    "MAX_SUBQUERIES",
    "cached_expansion",
    "expand_query",
    "parse_subqueries",
]

log = logging.getLogger(__name__)

MAX_SUBQUERIES = 4
# Each sub-query is short: a handful of keywords is what a BM25 OR-query rewards.
MAX_SUBQUERY_CHARS = 120
EXPANSION_PROMPT = (
    "You rewrite a question about past conversations into keyword searches for a "
    "full-text index. Write up to {n} short searches, one per line, no numbering: each a "
    "few words the conversation itself would likely contain (names, things, activities, "
    "synonyms of the question's words). Do not answer the question."
)


def _normalise(question: str) -> str:
    return " ".join(clean_text(question).lower().split())


def parse_subqueries(text: str, limit: int = MAX_SUBQUERIES) -> list[str]:
    """The sub-queries of a model reply: one per line, list markers and quotes dropped,
    blanks and repeats skipped, at most ``limit``."""
    out: list[str] = []
    for line in text.splitlines():
        line = re.sub(r"^\s*(?:[-*\u2022]|\d+[.)])\s*", "", line).strip().strip('"').strip()
        line = line[:MAX_SUBQUERY_CHARS]
        if line and line.lower() not in (s.lower() for s in out):
            out.append(line)
        if len(out) >= limit:
            break
    return out


def cached_expansion(store: SessionStoreContract, model: str, question: str) -> list[str] | None:
    """The cached sub-queries of ``question`` under ``model``, or None when not cached."""
    raw = store.get_cached_expansion(model, _normalise(question))
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None  # a damaged row is rewritten by the next expansion
    return [str(v) for v in value] if isinstance(value, list) else None


def expand_query(
    store: SessionStoreContract,
    llm: LLMClient,
    question: str,
    *,
    max_queries: int = MAX_SUBQUERIES,
    timeout: float | None = None,
) -> list[str]:
    """Sub-queries for ``question`` from ``llm`` (the summary model), cached in ``store``.

    Returns ``[]`` for a blank question or when the model fails (logged: expansion only
    ever adds to a search, it must not break one).
    """
    if not isinstance(question, str):
        raise SessionStoreError(f"The question must be text, not {type(question).__name__}.")
    if not 1 <= max_queries <= 10:
        raise SessionStoreError(f"max_queries must be between 1 and 10, got {max_queries!r}.")
    key = _normalise(question)
    if not key:
        return []
    model = str(getattr(llm, "model", "") or "")
    cached = cached_expansion(store, model, question)
    if cached is not None:
        return cached[:max_queries]
    messages = [
        {"role": "system", "content": EXPANSION_PROMPT.format(n=max_queries)},
        {"role": "user", "content": question[:MAX_QUERY_CHARS]},
    ]
    try:
        reply = llm.complete(messages, temperature=0.0, max_tokens=200, timeout=timeout)
    except LLMError as exc:
        log.warning("query expansion skipped: %s", exc)
        return []
    subs = parse_subqueries(reply.text, max_queries)
    try:
        store.cache_expansion(model, key, json.dumps(subs, ensure_ascii=False))
    except (StorageError, SessionStoreError) as exc:  # caching is best effort
        log.warning("query expansion not cached: %s", exc)
    return subs
