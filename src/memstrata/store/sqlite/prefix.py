"""Prefix terms of the word index walked as the OR of the words they cover.

The word index keeps no prefix index (one would double its size), so FTS5 answers
``"repl"*`` by merging the doclists of every word starting with ``repl`` into one list
before it returns a row, even for ``ORDER BY rowid DESC LIMIT 100``: the cost of every
walk grows with the store. The OR of those words walks lazily and stops at the limit.
The words come from an ``fts5vocab`` view of the index (it reads no text) and are the
exact terms the prefix covers, so the OR matches exactly the rows the prefix matches.

Only walks (row ids, newest first) use this: ranking a prefix by ``bm25()`` must keep the
prefix as one phrase (one IDF, its hits counted together), which the OR would split.
"""

from __future__ import annotations

import re
import sqlite3

from memstrata.store.sqlite import migrations

__all__ = ["MAX_TERMS", "as_or", "prepare"]

WORD_TABLE = "messages_fts"
# The tokenizer of the word index: a prefix is stemmed and folded by it before FTS5
# matches it, so "tracing"* covers the words starting with "trace".
_TOKENIZER = migrations.WORD_TOKENIZER
_VOCAB = "memstrata_word_vocab"
_TOKENIZER_TABLE = "memstrata_tokenize"
_TOKENIZER_VOCAB = "memstrata_tokenize_vocab"
# A prefix covering more words than this is walked as written: an OR of hundreds of
# doclists costs more than the merge it replaces.
MAX_TERMS = 64
_ONE_PREFIX = re.compile(r'^"([^"]+)"\*$')


# Text -> its tokens: a pure function of the text (the tokenizer is fixed), kept across
# searches so a repeated prefix costs no tokenizing.
_TOKENIZED: dict[str, tuple[str, ...]] = {}
_TOKENIZED_MAX = 4096


def prepare(conn: sqlite3.Connection) -> None:
    """Create this connection's temporary views (a tokenizer table and the vocabularies);
    run once per connection, outside a transaction. They store nothing on disk."""
    conn.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{_TOKENIZER_TABLE} "
        f"USING fts5(x, tokenize='{_TOKENIZER}')"
    )
    conn.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{_TOKENIZER_VOCAB} "
        f"USING fts5vocab(temp, {_TOKENIZER_TABLE}, instance)"
    )
    conn.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{_VOCAB} USING fts5vocab(main, {WORD_TABLE}, row)"
    )


def _tokens(conn: sqlite3.Connection, texts: list[str]) -> list[tuple[str, ...]]:
    """The tokens the word index's tokenizer makes of each text, in order."""
    missing = [t for t in dict.fromkeys(texts) if t not in _TOKENIZED]
    if missing:
        conn.executemany(
            f"INSERT INTO temp.{_TOKENIZER_TABLE}(rowid, x) VALUES (?, ?)",
            list(enumerate(missing, 1)),
        )
        found: list[list[tuple[int, str]]] = [[] for _ in missing]
        for doc, term, offset in conn.execute(
            f"SELECT doc, term, offset FROM temp.{_TOKENIZER_VOCAB}"
        ):
            found[int(doc) - 1].append((int(offset), str(term)))
        conn.execute(f"DELETE FROM temp.{_TOKENIZER_TABLE}")
        if len(_TOKENIZED) + len(missing) > _TOKENIZED_MAX:
            _TOKENIZED.clear()
        for text, tokens in zip(missing, found, strict=True):
            _TOKENIZED[text] = tuple(term for _, term in sorted(tokens))
    return [_TOKENIZED[t] for t in texts]


def as_or(conn: sqlite3.Connection, table: str, match: str) -> str | None:
    """``match`` (one quoted prefix of one word, like ``"repl"*``) as the OR of the words
    of ``table`` it covers; None when it is not such a prefix of the word index, covers
    no word or more than MAX_TERMS, or a covered word would not match itself quoted."""
    found = _ONE_PREFIX.match(match)
    if table != WORD_TABLE or found is None:
        return None
    (tokens,) = _tokens(conn, [found.group(1)])
    if len(tokens) != 1:
        return None
    token = tokens[0]
    above = token[:-1] + chr(ord(token[-1]) + 1)
    terms = [
        str(r[0])
        for r in conn.execute(
            f"SELECT term FROM temp.{_VOCAB} WHERE term >= ? AND term < ? LIMIT ?",
            (token, above, MAX_TERMS + 1),
        )
    ]
    if not terms or len(terms) > MAX_TERMS:
        return None
    # A quoted word is tokenized again when matched: keep only a list whose every word
    # comes back as itself (a stem the stemmer would shorten again would match others).
    if _tokens(conn, terms) != [(t,) for t in terms]:
        return None
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
