"""Tests for memstrata.store.sqlite.index_terms: the words of an FTS5 index read from its
leaf pages must be the words an ``fts5vocab`` view lists, on an index of one segment and
on one of many (appends, deletes, incremental merges), plus only words whose rows were
all deleted (they match no row)."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

from memstrata.store.sqlite import index_terms


def _vocab(conn: sqlite3.Connection, prefix: str) -> list[str]:
    above = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    return [
        str(r[0])
        for r in conn.execute(
            "SELECT term FROM temp.v WHERE term >= ? AND term < ? ORDER BY term",
            (prefix, above),
        )
    ]


def _rows(conn: sqlite3.Connection, word: str) -> int:
    found = conn.execute("SELECT count(*) FROM t WHERE t MATCH ?", ('"' + word + '"',))
    return int(found.fetchone()[0])


def test_the_words_of_a_prefix_are_those_fts5vocab_lists(tmp_path: Path) -> None:
    rng = random.Random(7)
    conn = sqlite3.connect(tmp_path / "t.db")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(a, b, tokenize='unicode61')")
    conn.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, t, row)")
    # Small pages, no automatic merges: many segments, doclists over many pages, and
    # segments left half merged (trimmed at their start) by the 'merge' steps below.
    for option, value in (("pgsz", 256), ("automerge", 0), ("crisismerge", 64)):
        conn.execute("INSERT INTO t(t, rank) VALUES (?, ?)", (option, value))
    letters = "abcdeé中"

    def word() -> str:
        return "".join(rng.choice(letters) for _ in range(rng.randint(1, 7)))

    # Long doclists (these words are in every row) span pages without a term.
    common = ["token", "tokenize", "tokens", "aaa"]
    rowid = 0
    prefixes = ["tok", "token", "a", "ab", "e", "é", "中", "zz", "tokenizer"]
    prefixes += sorted({word()[: rng.randint(1, 3)] for _ in range(60)})
    for batch in range(24):
        rows = []
        for _ in range(rng.randint(1, 2500)):
            rowid += 1
            text = " ".join([word() for _ in range(5)] + rng.sample(common, 2))
            rows.append((rowid, text, word()))
        conn.executemany("INSERT INTO t(rowid, a, b) VALUES (?, ?, ?)", rows)
        conn.commit()
        if batch % 5 == 2:
            conn.execute("DELETE FROM t WHERE rowid % 7 = ?", (batch % 7,))
            conn.commit()
        if batch % 6 == 4:
            conn.execute("INSERT INTO t(t, rank) VALUES ('merge', -6)")
            conn.commit()
    segments = index_terms._segments(conn, "t")
    assert segments is not None and len(segments) > 10
    assert any(first > 1 for _, first, _ in segments)
    extra = 0
    for p in prefixes:
        listed = _vocab(conn, p)
        listing = index_terms.words(conn, "t", p, 10**6)
        assert listing is not None
        read = listing.words
        assert read == sorted(set(read)) and (listing.pages >= 1) == bool(read)
        assert set(listed) <= set(read), p
        for gone in set(read) - set(listed):
            extra += 1
            assert _rows(conn, gone) == 0
        # A limit stops early but never leaves out a word when there are fewer.
        few = index_terms.words(conn, "t", p, len(read) + 1)
        assert few is not None and few.words == read
        if len(read) > 3:
            capped = index_terms.words(conn, "t", p, 3)
            assert capped is not None
            assert len(capped.words) == 3 and set(capped.words) <= set(read)
    assert extra > 0  # deleted words were met and checked
    conn.execute("INSERT INTO t(t) VALUES ('optimize')")
    conn.commit()
    assert len(index_terms._segments(conn, "t") or []) == 1
    for p in prefixes:
        listing = index_terms.words(conn, "t", p, 10**6)
        assert listing is not None and listing.words == _vocab(conn, p)
    # "token": the words in every row, each doclist over many pages; "zz": no word (the
    # page before its range carries the end of the "tokens" doclist: not counted).
    spans = {p: index_terms.words(conn, "t", p, 10**6) for p in ("token", "zz", "ab")}
    assert spans["token"] is not None and spans["token"].pages > 100
    assert spans["zz"] is not None and spans["zz"] == ([], 0)
    assert spans["ab"] is not None and spans["ab"].pages < len(spans["ab"].words)
    conn.close()


def test_an_empty_index_has_no_words(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "t.db")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(a)")
    assert index_terms.words(conn, "t", "a", 10) == ([], 0)
    conn.execute("INSERT INTO t(a) VALUES ('alpha beta')")
    conn.execute("DELETE FROM t")
    conn.commit()
    listing = index_terms.words(conn, "t", "b", 10)
    assert listing is not None and listing.words in ([], ["beta"])
    conn.close()
