"""SQLite primitives of a search: candidates, messages by date, and the rows hits show.

Candidates come from the three FTS5 indexes (:mod:`memstrata.store.sqlite.fulltext`);
the rest reads ``messages`` (and ``sessions`` for a source filter) by id or timestamp on
their indexes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from memstrata.query.compile import CompiledQuery, word_term
from memstrata.query.filters import Filters
from memstrata.store.backend import Candidate, HitRow, Order, Transaction
from memstrata.store.hits import text_of
from memstrata.store.sqlite.fulltext import (
    collect_candidates,
    filter_sql,
    index_hit,
    joined_sessions,
    message_texts,
)
from memstrata.store.sqlite.sessions import chunks, marks


class SearchRows(Transaction):
    """The search primitives of a SQLite transaction."""

    conn: sqlite3.Connection
    # A lone phrase is ranked by bm25() and equal scores go to the newer row (see
    # memstrata.store.sqlite.fulltext), the order of the final sort.
    phrase_pages = True

    def candidates(
        self, compiled: CompiledQuery, filters: Filters, k: int, order: Order
    ) -> list[Candidate]:
        if compiled.is_empty:
            return []
        return collect_candidates(self.conn, compiled, filters, k=k, order=order)

    def held_words(self, words: Sequence[str]) -> list[str]:
        # A lookup of each index that can find the word: the word index, and the CJK
        # index for CJK text and a Latin word glued to it (`youer` in `修改youer服务端`);
        # a CJK bigram has no word rendering, so it costs one lookup. A lookup of a word
        # no row holds reads one b-tree page (a Chinese question with a slip asks about
        # a few hundred bigrams: about 15 us each).
        held = []
        for word in words:
            term = word_term(word)
            if term is not None and any(index_hit(self.conn, i, term) for i in ("word", "cjk")):
                held.append(word)
        return held

    def written_between(
        self, spans: Sequence[tuple[float, float]], filters: Filters, k: int
    ) -> list[Candidate]:
        where, params = filter_sql(filters)
        inside = " OR ".join("(m.timestamp >= ? AND m.timestamp < ?)" for _ in spans)
        rows = self.conn.execute(
            f"SELECT m.id, m.session_id, m.timestamp FROM messages m{joined_sessions(filters)} "
            f"WHERE ({inside}){where} ORDER BY m.timestamp DESC LIMIT ?",
            [*(bound for span in spans for bound in span), *params, k],
        )
        return [Candidate(int(r[0]), str(r[1]), float(r[2])) for r in rows]

    def timestamp_range(self) -> tuple[float | None, float | None]:
        # Two statements: SQLite reads a lone min() or max() from the index's ends.
        first = self.conn.execute("SELECT min(timestamp) FROM messages").fetchone()[0]
        last = self.conn.execute("SELECT max(timestamp) FROM messages").fetchone()[0]
        return first, last

    def hit_rows(
        self, message_ids: Sequence[int], filters: Filters, *, context: bool
    ) -> dict[int, HitRow]:
        # The neighbours' ids ride along with the hit rows (each one step of
        # idx_messages_session(session_id, id)); their texts are one more statement.
        visible = "" if filters.include_inactive else " AND (n.active = 1 OR n.compacted = 1)"
        neighbours = (
            f", (SELECT n.id FROM messages n WHERE n.session_id = m.session_id AND n.id < m.id"
            f"{visible} ORDER BY n.id DESC LIMIT 1), "
            f"(SELECT n.id FROM messages n WHERE n.session_id = m.session_id AND n.id > m.id"
            f"{visible} ORDER BY n.id ASC LIMIT 1)"
            if context
            else ""
        )
        rows = self.conn.execute(
            "SELECT m.id, m.session_id, m.role, m.content, m.timestamp, m.tool_name, "
            f"m.tool_calls, s.source, s.model, s.started_at{neighbours} "
            "FROM messages m JOIN sessions s ON s.id = m.session_id "
            f"WHERE m.id IN ({marks(len(message_ids))})",
            list(message_ids),
        ).fetchall()
        texts = self._neighbour_texts([n for r in rows for n in r[10:]]) if context else {}
        return {
            int(r[0]): HitRow(
                id=int(r[0]),
                session_id=str(r[1]),
                role=str(r[2]),
                text=text_of(r[3]),
                tool_name=r[5],
                tool_calls=r[6],
                timestamp=float(r[4]),
                source=r[7],
                model=r[8],
                session_started=r[9],
                context=tuple(texts[int(n)] for n in r[10:] if n is not None and int(n) in texts),
            )
            for r in rows
        }

    def _neighbour_texts(self, ids: Sequence[int | None]) -> dict[int, dict[str, str]]:
        """Role and text of the neighbouring messages of a page of hits, in one statement."""
        wanted = sorted({int(n) for n in ids if n is not None})
        if not wanted:
            return {}
        return {
            int(mid): {"role": role, "content": text_of(content)}
            for mid, role, content in self.conn.execute(
                f"SELECT id, role, content FROM messages WHERE id IN ({marks(len(wanted))})",
                wanted,
            )
        }

    def texts(self, message_ids: Sequence[int]) -> dict[int, str]:
        return message_texts(self.conn, message_ids)

    def passing(self, message_ids: Sequence[int], filters: Filters) -> list[Candidate]:
        where, params = filter_sql(filters)
        out: list[Candidate] = []
        for part in chunks(message_ids):
            rows: Any = self.conn.execute(
                f"SELECT m.id, m.session_id, m.timestamp FROM messages m"
                f"{joined_sessions(filters)} WHERE m.id IN ({marks(len(part))}){where}",
                [*part, *params],
            )
            out += [Candidate(int(r[0]), str(r[1]), float(r[2])) for r in rows]
        return out
