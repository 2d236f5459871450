"""Search hits as dicts: snippets, session fields and neighbouring messages.

Only the final page of a search reaches this module, so its cost is bounded by the page
size, not by the number of matching messages. Snippets are highlighted in Python on
both backends: FTS5's snippet() would need the MATCH re-run per row, PostgreSQL's
``ts_headline`` parses the whole row again, and the CJK bigram indexes have no text to
cut a snippet from anyway.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from memstrata.query.cjk import has_cjk
from memstrata.query.compile import CompiledQuery, Term
from memstrata.query.fold import fold
from memstrata.store.codec import JSON_SENTINEL

if TYPE_CHECKING:
    from memstrata.query.filters import Filters
    from memstrata.store.backend import Candidate, HitRow, Transaction

SNIPPET_CHARS = 120
CONTEXT_CHARS = 200


def text_of(content: Any) -> str:
    """Plain text of content, stored (SQLite encoding) or decoded: structured content is
    its text parts joined ("[multimodal content]" when it has none)."""
    if content is None:
        return ""
    value = content
    if isinstance(content, str):
        if not content.startswith(JSON_SENTINEL):
            return content
        try:
            value = json.loads(content[len(JSON_SENTINEL) :])
        except ValueError:
            return content[len(JSON_SENTINEL) :]
    if isinstance(value, list):
        parts = [str(p.get("text", "")) for p in value if isinstance(p, dict) and p.get("text")]
        return " ".join(parts) if parts else "[multimodal content]"
    return str(value)


def term_needle(term: Term) -> str:
    """The lowercase text that shows a term occurs: a prefix that survives inflection for
    a Latin word (the word index is stemmed), the literal text otherwise."""
    text = term.text.rstrip("*")
    if has_cjk(text):
        return text
    words: list[str] = re.findall(r"\w+", text)
    if not words:
        return text
    last = words[-1]
    for suffix in ("ing", "ed", "es", "s", "e", "y"):
        if last.endswith(suffix) and len(last) - len(suffix) >= 3:
            last = last[: -len(suffix)]
            break
    return text[: text.rfind(words[-1])] + last


def hit_dicts(
    tx: Transaction,
    compiled: CompiledQuery,
    page: Sequence[Candidate],
    filters: Filters,
    *,
    context: bool = True,
) -> list[dict[str, Any]]:
    """Turn the final page of candidates into result dicts (snippets, session, context)."""
    if not page:
        return []
    rows = tx.hit_rows([c.id for c in page], filters, context=context)
    kinds = _snippet_kinds(compiled)
    out: list[dict[str, Any]] = []
    for cand in page:
        row = rows.get(cand.id)
        if row is None:  # deleted between the two reads
            continue
        hit: dict[str, Any] = {
            "id": cand.id,
            "session_id": row.session_id,
            "role": row.role,
            "snippet": _snippet(row, kinds),
            "timestamp": row.timestamp,
            "tool_name": row.tool_name,
            "source": row.source,
            "model": row.model,
            "session_started": row.session_started,
            "score": round(cand.score, 6),
        }
        if context:
            hit["context"] = [
                {"role": n["role"], "content": n["content"][:CONTEXT_CHARS]} for n in row.context
            ]
        out.append(hit)
    return out


def _snippet(row: HitRow, kinds: Sequence[tuple[str, bool]]) -> str:
    fields = [row.text, row.tool_name or "", row.tool_calls or ""]
    # Folded as queries are (memstrata.query.fold), same length: 數據 shows a match of 数据.
    lowered = [fold(f).lower() for f in fields]
    # The first field holding a match (content, tool name, tool-call arguments).
    chosen = next(
        (f for f, low in zip(fields, lowered, strict=True) if any(n in low for n, _ in kinds)),
        fields[0] or fields[1] or fields[2],
    )
    return _highlight(chosen, kinds, SNIPPET_CHARS)


def _snippet_kinds(compiled: CompiledQuery) -> list[tuple[str, bool]]:
    """:func:`needle_kinds` of the query's needles, where the needle of a term a
    substring search serves (a code identifier, a phrase mixing scripts) is marked
    wherever it occurs, as that search finds it (``xtor_cach`` in ``VENRIXTOR_CACHE``),
    not only where a word starts."""
    kinds = needle_kinds(highlight_needles(compiled))
    if compiled.tree is None:
        return kinds
    inside = {term_needle(t).lower() for t in compiled.tree.positive_terms() if t.trigram}
    return [(needle, latin and needle not in inside) for needle, latin in kinds]


def highlight_needles(compiled: CompiledQuery) -> list[str]:
    """The lowercase strings a snippet marks for ``compiled``, longest first."""
    if compiled.tree is None:
        return []
    needles = {term_needle(t) for t in compiled.tree.positive_terms()}
    needles |= set(compiled.highlights)
    return sorted((n for n in needles if n.strip()), key=lambda n: (-len(n), n))


def _next_match(lower: str, needle: str, latin: bool, start: int) -> int:
    """Position of the next occurrence of ``needle`` at or after ``start`` (-1: none).

    A Latin needle must start a word ("paint" marks "painting", not "repaint").
    """
    pos = lower.find(needle, start)
    while latin and pos > 0 and _is_latin_alnum(lower[pos - 1]):
        pos = lower.find(needle, pos + 1)
    return pos


def highlight(text: str, needles: Sequence[str], width: int = SNIPPET_CHARS) -> str:
    """A window of ``text`` around the first needle, matches wrapped in >>> <<<.

    A needle that starts with a Latin letter or digit is marked where a word starts; any
    needle that ends with one is marked to the end of its word.

    Overlapping or adjacent matches (the bigrams of one CJK word) become one marked span.
    Only the window is scanned for further matches: a long message costs one search per
    needle for its first match, not a walk over every occurrence.
    """
    return _highlight(text, needle_kinds(needles), width)


def needle_kinds(needles: Sequence[str]) -> list[tuple[str, bool]]:
    """Each distinct lowercase needle with whether it is Latin (matched as a word start)."""
    folded = {fold(n).lower() for n in needles if n}
    return [(n, not has_cjk(n) and n[:1].isalnum()) for n in folded]


def _highlight(text: str, kinds: Sequence[tuple[str, bool]], width: int) -> str:
    # Matched in the folded text, cut from the text as written (folding keeps positions).
    lower = fold(text).lower()
    firsts = [p for p in (_next_match(lower, n, latin, 0) for n, latin in kinds) if p >= 0]
    begin = max(0, min(firsts) - width // 3) if firsts else 0
    stop = min(len(text), begin + width)
    spans: list[tuple[int, int]] = []
    for needle, latin in kinds if firsts else ():
        pos = _next_match(lower, needle, latin, begin)
        while 0 <= pos < stop:
            end = pos + len(needle)
            if latin or _is_latin_alnum(needle[-1]):
                # A Latin match extends to the end of its word (a needle ending in a
                # Latin letter marked inside a word too, as "xtor_cach" in "xtor_cache").
                while end < len(lower) and _is_latin_alnum(lower[end]):
                    end += 1
            spans.append((pos, end))
            pos = _next_match(lower, needle, latin, pos + 1)
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    out = ["..." if begin > 0 else ""]
    cursor = begin
    for start, end in merged:
        start, end = max(start, begin), min(end, stop)
        if end <= start:
            continue
        out += [text[cursor:start], ">>>", text[start:end], "<<<"]
        cursor = end
    out += [text[cursor:stop], "..." if stop < len(text) else ""]
    return "".join(out)


def _is_latin_alnum(ch: str) -> bool:
    # CJK characters are alphanumeric too, but a Latin word glued to CJK ends there.
    return ch.isalnum() and not has_cjk(ch)
