"""Result dicts of a full-text search: snippets, session fields and neighbouring messages.

Only the final page of a search reaches this module, so its cost is bounded by the page
size, not by the number of matching messages. Snippets are highlighted in Python:
FTS5's snippet() would need the MATCH re-run per row (a rowid lookup restarts the whole
query), and the contentless bigram index has no text to cut a snippet from anyway.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from memstrata.query.cjk import has_cjk
from memstrata.query.compile import CompiledQuery, Term

if TYPE_CHECKING:
    from memstrata.query.filters import Filters
    from memstrata.store.sqlite.fulltext import Candidate

SNIPPET_CHARS = 120
CONTEXT_CHARS = 200
_JSON_SENTINEL = "\x00json:"


def text_of(content: str | None) -> str:
    """Plain text of stored content (structured content is joined text parts)."""
    if content is None:
        return ""
    if not content.startswith(_JSON_SENTINEL):
        return content
    try:
        value = json.loads(content[len(_JSON_SENTINEL) :])
    except ValueError:
        return content[len(_JSON_SENTINEL) :]
    if isinstance(value, list):
        parts = [str(p.get("text", "")) for p in value if isinstance(p, dict) and p.get("text")]
        return " ".join(parts) if parts else "[multimodal content]"
    return str(value)


def term_needle(term: Term) -> str:
    """The lowercase text that shows a term occurs: a prefix that survives inflection for
    a Latin word (the word index is Porter-stemmed), the literal text otherwise."""
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
    conn: sqlite3.Connection,
    compiled: CompiledQuery,
    page: Sequence[Candidate],
    filters: Filters,
    *,
    context: bool = True,
) -> list[dict[str, Any]]:
    """Turn the final page of candidates into result dicts (snippets, session, context)."""
    if not page:
        return []
    ids = [c.id for c in page]
    marks = ", ".join("?" for _ in ids)
    rows = {
        int(r[0]): r
        for r in conn.execute(
            "SELECT m.id, m.session_id, m.role, m.content, m.timestamp, m.tool_name, "
            "m.tool_calls, s.source, s.model, s.started_at "
            f"FROM messages m JOIN sessions s ON s.id = m.session_id WHERE m.id IN ({marks})",
            ids,
        )
    }
    snippets = _snippets(compiled, page, rows)
    contexts = _contexts(conn, ids, filters.include_inactive) if context else {}
    out: list[dict[str, Any]] = []
    for cand in page:
        row = rows.get(cand.id)
        if row is None:  # deleted between the two reads
            continue
        hit: dict[str, Any] = {
            "id": cand.id,
            "session_id": row[1],
            "role": row[2],
            "snippet": snippets.get(cand.id, ""),
            "timestamp": row[4],
            "tool_name": row[5],
            "source": row[7],
            "model": row[8],
            "session_started": row[9],
            "score": round(cand.score, 6),
        }
        if context:
            hit["context"] = contexts.get(cand.id, [])
        out.append(hit)
    return out


def _snippets(
    compiled: CompiledQuery, page: Sequence[Candidate], rows: dict[int, Any]
) -> dict[int, str]:
    needles = highlight_needles(compiled)
    kinds = needle_kinds(needles)
    snippets: dict[int, str] = {}
    for cand in page:
        row = rows.get(cand.id)
        if row is None:
            continue
        fields = [text_of(row[3]), row[5] or "", row[6] or ""]
        lowered = [f.lower() for f in fields]
        # The first field holding a match (content, tool name, tool-call arguments).
        chosen = next(
            (f for f, low in zip(fields, lowered, strict=True) if any(n in low for n in needles)),
            fields[0] or fields[1] or fields[2],
        )
        snippets[cand.id] = _highlight(chosen, kinds, SNIPPET_CHARS)
    return snippets


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

    Overlapping or adjacent matches (the bigrams of one CJK word) become one marked span.
    Only the window is scanned for further matches: a long message costs one search per
    needle for its first match, not a walk over every occurrence.
    """
    return _highlight(text, needle_kinds(needles), width)


def needle_kinds(needles: Sequence[str]) -> list[tuple[str, bool]]:
    """Each distinct lowercase needle with whether it is Latin (matched as a word start)."""
    return [(n, not has_cjk(n) and n[:1].isalnum()) for n in {n.lower() for n in needles if n}]


def _highlight(text: str, kinds: Sequence[tuple[str, bool]], width: int) -> str:
    lower = text.lower()
    firsts = [p for p in (_next_match(lower, n, latin, 0) for n, latin in kinds) if p >= 0]
    begin = max(0, min(firsts) - width // 3) if firsts else 0
    stop = min(len(text), begin + width)
    spans: list[tuple[int, int]] = []
    for needle, latin in kinds if firsts else ():
        pos = _next_match(lower, needle, latin, begin)
        while 0 <= pos < stop:
            end = pos + len(needle)
            if latin:
                # A Latin match extends to the end of its word.
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


def _contexts(
    conn: sqlite3.Connection, ids: Sequence[int], include_inactive: bool
) -> dict[int, list[dict[str, str]]]:
    """The previous and next visible message of each hit, in two statements for the page."""
    visible = "" if include_inactive else " AND (n.active = 1 OR n.compacted = 1)"
    marks = ", ".join("?" for _ in ids)
    # Each neighbour is one step of idx_messages_session(session_id, id).
    neighbours = conn.execute(
        f"SELECT m.id, "
        f"(SELECT n.id FROM messages n WHERE n.session_id = m.session_id AND n.id < m.id"
        f"{visible} ORDER BY n.id DESC LIMIT 1), "
        f"(SELECT n.id FROM messages n WHERE n.session_id = m.session_id AND n.id > m.id"
        f"{visible} ORDER BY n.id ASC LIMIT 1) "
        f"FROM messages m WHERE m.id IN ({marks})",
        list(ids),
    ).fetchall()
    wanted = sorted({int(n) for row in neighbours for n in row[1:] if n is not None})
    texts: dict[int, dict[str, str]] = {}
    if wanted:
        marks = ", ".join("?" for _ in wanted)
        for mid, role, content in conn.execute(
            f"SELECT id, role, content FROM messages WHERE id IN ({marks})", wanted
        ):
            texts[int(mid)] = {"role": role, "content": text_of(content)[:CONTEXT_CHARS]}
    return {
        int(row[0]): [texts[int(n)] for n in row[1:] if n is not None and int(n) in texts]
        for row in neighbours
    }


def session_titles(conn: sqlite3.Connection, session_ids: list[str]) -> dict[str, str | None]:
    """Map each session id to its title (None when unset)."""
    if not session_ids:
        return {}
    marks = ", ".join("?" for _ in session_ids)
    rows = conn.execute(f"SELECT id, title FROM sessions WHERE id IN ({marks})", session_ids)
    return {str(r[0]): r[1] for r in rows}
