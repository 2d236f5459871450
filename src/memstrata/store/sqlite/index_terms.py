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
listed words finds the prefix's rows all the same. A structure record of the newer
format (``contentless_delete=1`` tables, which memstrata does not create) is not read:
:func:`words` then returns None and the caller asks ``fts5vocab``.
"""

from __future__ import annotations

import sqlite3

__all__ = ["words"]

_STRUCTURE_ROWID = 10
_STRUCTURE_V2 = b"\xff\x00\x00\x01"
# Bits of a %_data row id: segment id, doclist-index flag, height, page number.
_PAGE_BITS = 31 + 5 + 1
_MAIN = b"0"
# Above every byte of a UTF-8 string: ``prefix + _ABOVE`` bounds the words it starts.
_ABOVE = b"\xff"


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


def _page_terms(block: bytes) -> list[bytes]:
    """The keys a leaf page holds (whole, index byte included), in order."""
    footer = int.from_bytes(block[2:4], "big")
    out: list[bytes] = []
    pos, offset, term = footer, 0, b""
    while pos < len(block):
        delta, pos = _varint(block, pos)
        offset += delta
        if not out:
            size, at = _varint(block, offset)
            term = block[at : at + size]
        else:
            shared, at = _varint(block, offset)
            size, at = _varint(block, at)
            term = term[:shared] + block[at : at + size]
        out.append(term)
    return out


def words(conn: sqlite3.Connection, table: str, prefix: str, limit: int) -> list[str] | None:
    """The words of FTS5 table ``table``'s main index starting with ``prefix`` (an indexed
    token: already folded and stemmed), sorted, at most ``limit`` of them (``limit``
    means: that many or more); None when the index's format is one this does not read.

    Run it inside the transaction that searches, so the words and the rows agree.
    """
    segments = _segments(conn, table)
    if segments is None:
        return None
    low = _MAIN + prefix.encode()
    high = low + _ABOVE
    found: set[bytes] = set()
    for segid, first, last in segments:
        pages = [
            int(r[0]) >> 1
            for r in conn.execute(
                f"SELECT pgno FROM (SELECT pgno FROM {table}_idx WHERE segid = ?1 "
                "AND term <= ?2 ORDER BY term DESC LIMIT 1) "
                f"UNION ALL SELECT pgno FROM {table}_idx WHERE segid = ?1 "
                "AND term > ?2 AND term < ?3",
                (segid, low, high),
            )
        ]
        # A segment trimmed by an incremental merge starts at ``first``: its earlier
        # pages are gone, and the page it starts with is rewritten to start a term.
        wanted = sorted({max(p, first) for p in pages if p <= last}) or [first]
        base = segid << _PAGE_BITS
        ids = [base + p for p in wanted]
        marks = ", ".join("?" for _ in ids)
        for (block,) in conn.execute(
            f"SELECT block FROM {table}_data WHERE id IN ({marks}) ORDER BY id", ids
        ):
            for term in _page_terms(bytes(block)):
                if low <= term < high:
                    found.add(term)
        if len(found) >= limit:
            break
    return [t[len(_MAIN) :].decode() for t in sorted(found)][:limit]
