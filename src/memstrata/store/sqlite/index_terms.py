"""The words of an FTS5 index that start with a prefix, read from its leaf pages.

An ``fts5vocab`` view lists the same words, but counts the rows of each one as it goes:
it reads every doclist of the range to its end. ``"token"*`` covers a word held by a
million messages of a ten-million store, so listing its words that way reads megabytes,
more than walking the prefix itself. The words alone are cheaper to reach:

- the structure record (``%_data`` row 10) lists the segments of the index;
- ``%_idx`` holds, per segment, a separator key for every leaf page that starts a term,
  so the pages that can hold a word of the prefix are the page a seek for the prefix
  lands on plus the pages whose separator falls inside the prefix's range; pages in
  between carry only the rest of a long doclist and are skipped;
- each leaf page ends with the offsets of the terms it holds, so its terms are read
  without decoding a doclist.

The format is FTS5's documented on-disk one (``fts5_index.c``): a page starts with two
big-endian 16-bit fields, the second the offset of that footer; the first term on a page
is stored whole (``varint length, bytes``), the next ones against their predecessor
(``varint shared, varint new, bytes``); keys of the main index start with ``"0"``. A
segment may list a word whose every row was deleted since (a delete is a marker in a
newer segment until segments merge): matching it matches no row, so a walk of the
listed words finds the prefix's rows all the same. Words a connection inserted in its own
open transaction are still in FTS5's memory, not on the pages: this lists the committed
index (memstrata searches on reader connections, never inside a write). A structure
record of the newer format (``contentless_delete=1`` tables, which memstrata does not
create) is not read: :func:`words` then returns None and the caller asks ``fts5vocab``.
"""

from __future__ import annotations

import sqlite3
from typing import NamedTuple

__all__ = ["Listing", "words"]

_STRUCTURE_ROWID = 10
_STRUCTURE_V2 = b"\xff\x00\x00\x01"
# Bits of a %_data row id: segment id, doclist-index flag, height, page number.
_PAGE_BITS = 31 + 5 + 1
_MAIN = b"0"
# Above every byte of a UTF-8 string: ``prefix + _ABOVE`` bounds the words it starts.
_ABOVE = b"\xff"


class Listing(NamedTuple):
    """The words of a prefix, and how many leaf pages its range spans over all segments
    (the pages FTS5 reads to merge the doclists of every word of the prefix)."""

    words: list[str]
    pages: int


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A SQLite varint at ``pos``: (value, position after it)."""
    value = 0
    for i in range(8):
        byte = buf[pos + i]
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value, pos + i + 1
    return (value << 8) | buf[pos + 8], pos + 9


def _segments(conn: sqlite3.Connection, table: str) -> list[tuple[int, int, int]] | None:
    """(segment id, first page, last page) of every segment; None for a format not read."""
    row = conn.execute(
        f"SELECT block FROM {table}_data WHERE id = ?", (_STRUCTURE_ROWID,)
    ).fetchone()
    if row is None or row[0] is None:
        return []
    buf = bytes(row[0])
    if buf[4:8] == _STRUCTURE_V2:
        return None
    levels, pos = _varint(buf, 4)
    _, pos = _varint(buf, pos)  # segments in all
    _, pos = _varint(buf, pos)  # write counter
    out: list[tuple[int, int, int]] = []
    for _ in range(levels):
        _, pos = _varint(buf, pos)  # segments in an ongoing merge
        count, pos = _varint(buf, pos)
        for _ in range(count):
            segid, pos = _varint(buf, pos)
            first, pos = _varint(buf, pos)
            last, pos = _varint(buf, pos)
            out.append((segid, first, last))
    return out


def _page_words(block: bytes, low: bytes, high: bytes) -> tuple[list[bytes], bool]:
    """The keys (index byte included) of a leaf page in ``[low, high)``, in order, and
    whether the page holds a key at or above ``high`` (no later page then holds one below
    it). Keys are read in order only up to there: each is stored against the previous."""
    found: list[bytes] = []
    pos, end = int.from_bytes(block[2:4], "big"), len(block)
    offset, term, first = 0, b"", True
    while pos < end:
        # Varints below 128 (nearly all of them here) are one byte.
        delta = block[pos]
        if delta < 0x80:
            pos += 1
        else:
            delta, pos = _varint(block, pos)
        offset += delta
        if first:
            size, at = _varint(block, offset)
            term, first = block[at : at + size], False
        else:
            shared = block[offset]
            if shared < 0x80:
                at = offset + 1
            else:
                shared, at = _varint(block, offset)
            size = block[at]
            if size < 0x80:
                at += 1
            else:
                size, at = _varint(block, at)
            term = term[:shared] + block[at : at + size]
        if term >= high:
            return found, True
        if term >= low:
            found.append(term)
    return found, False


def words(conn: sqlite3.Connection, table: str, prefix: str, limit: int) -> Listing | None:
    """The words of FTS5 table ``table``'s main index starting with ``prefix`` (an indexed
    token: already folded and stemmed), sorted; when there are ``limit`` or more, only
    ``limit`` of them (reading stops there). With them, the number of leaf pages from
    the page holding the prefix's first word to the first page past its range, summed
    over the segments holding one of its words. None when the index's format is one
    this does not read.

    Run it inside the transaction that searches, so the words and the rows agree.
    """
    segments = _segments(conn, table)
    if segments is None:
        return None
    low = _MAIN + prefix.encode()
    high = low + _ABOVE
    if not segments:
        return Listing([], 0)
    # One statement for every segment: the page a seek for ``low`` lands on, then the
    # pages starting inside the range, in page order. A segment trimmed by an incremental
    # merge starts at its first page (no earlier page is read).
    marks = ", ".join(f"(?{3 * i + 3}, ?{3 * i + 4}, ?{3 * i + 5})" for i in range(len(segments)))
    sql = (
        f"WITH seg(segid, first, last) AS (VALUES {marks}), "
        "pages(segid, pgno) AS ("
        f"SELECT segid, (SELECT pgno >> 1 FROM {table}_idx i WHERE i.segid = seg.segid "
        "AND i.term <= ?1 ORDER BY i.term DESC LIMIT 1) FROM seg "
        f"UNION SELECT i.segid, i.pgno >> 1 FROM seg JOIN {table}_idx i "
        "ON i.segid = seg.segid AND i.term > ?1 AND i.term < ?2) "
        "SELECT p.segid, max(p.pgno, seg.first), d.block FROM pages p "
        "JOIN seg ON seg.segid = p.segid "
        f"JOIN {table}_data d ON d.id = (p.segid << {_PAGE_BITS}) + max(p.pgno, seg.first) "
        "WHERE p.pgno <= seg.last ORDER BY d.id"
    )
    params: list[object] = [low, high]
    for segment in segments:
        params.extend(segment)
    # Per segment, the first page starting at or above ``high`` (else its last page): the
    # doclists of the prefix's words end there.
    ends = dict(
        conn.execute(
            f"WITH seg(segid, first, last) AS (VALUES {marks}) "
            f"SELECT segid, coalesce((SELECT pgno >> 1 FROM {table}_idx i "
            "WHERE i.segid = seg.segid AND i.term >= ?2 ORDER BY i.term LIMIT 1), last) FROM seg",
            params,
        ).fetchall()
    )
    found: set[bytes] = set()
    starts: dict[int, int] = {}
    done: set[int] = set()
    for segid, page, block in conn.execute(sql, params):
        if segid in done:
            continue
        on_page, past = _page_words(bytes(block), low, high)
        if on_page:
            found.update(on_page)
            starts.setdefault(segid, page)
        if past:
            done.add(segid)
        if len(found) >= limit:
            break
    pages = sum(max(ends[segid] - start, 0) + 1 for segid, start in starts.items())
    return Listing([t[len(_MAIN) :].decode() for t in sorted(found)][:limit], pages)
