"""Prefix terms of the word index walked as the OR of the words they cover.

The word index keeps no prefix index (one would double its size), so FTS5 answers
``"repl"*`` by merging the doclists of every word starting with ``repl`` into one list
before it returns a row, even for ``ORDER BY rowid DESC LIMIT 100``: the cost of every
walk grows with the store. The OR of those words walks lazily and stops at the limit.
The words are read from the index's leaf pages (:mod:`memstrata.store.sqlite.index_terms`:
an ``fts5vocab`` view lists the same words but reads every doclist of the range to count
its rows, which on a large store costs more than the walk) and are the exact terms the
prefix covers, so the OR matches exactly the rows the prefix matches. A quoted word is
stemmed again when matched, and a few stems are not fixed points of the stemmer (the
index holds ``postgres``, the stem of "postgresing", but ``"postgres"`` matches
``postgr``): such a word is written as a form the tokenizer turns back into exactly that
term (``"postgresing"``), found and checked with the tokenizer itself.

Only walks (row ids, newest first) use this: ranking a prefix by ``bm25()`` must keep the
prefix as one phrase (one IDF, its hits counted together), which the OR would split.
"""

from __future__ import annotations

import json
import re
import sqlite3

from memstrata.store.sqlite import index_terms, migrations

__all__ = ["MAX_TERMS", "WORDS_PER_PAGE", "as_or", "prepare"]

WORD_TABLE = "messages_fts"
# The tokenizer of the word index: a prefix is stemmed and folded by it before FTS5
# matches it, so "tracing"* covers the words starting with "trace".
_TOKENIZER = migrations.WORD_TOKENIZER
_VOCAB = "memstrata_word_vocab"
_TOKENIZER_TABLE = "memstrata_tokenize"
_TOKENIZER_VOCAB = "memstrata_tokenize_vocab"
# A prefix covering more words than this is walked as written. An OR of a thousand
# words walks newest first and stops at its limit; the merge it replaces reads every
# doclist of the prefix to its end, whatever the limit.
MAX_TERMS = 1024
# The OR is walked only when the prefix covers at most this many words per leaf page its
# doclists span: an OR costs about 10-50 us per word to open, FTS5's merge 20-400 us per
# page it reads (1M messages: "re"* covers 228 words over 1,021 pages, 335 ms merged
# and 1.7 ms as the OR; "任务"* 1,011 glued CJK words over 19 pages, 0.6 ms merged and
# 44 ms as the OR).
WORDS_PER_PAGE = 2
# Endings tried, in order, to write a stem the stemmer would change again as a word it
# turns into exactly that stem ("postgres" as "postgresing", "agre" as "agreed").
_ENDINGS = ("ing", "ed", "e")
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
    known = {t: _TOKENIZED[t] for t in texts if t in _TOKENIZED}
    missing = [t for t in dict.fromkeys(texts) if t not in known]
    if missing:
        # One statement (one transaction on an autocommit connection): a row per
        # statement would flush a segment of the temporary index per text.
        conn.execute(
            f"INSERT INTO temp.{_TOKENIZER_TABLE}(rowid, x) "
            "SELECT key + 1, value FROM json_each(?)",
            (json.dumps(missing, ensure_ascii=False),),
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
            known[text] = _TOKENIZED[text] = tuple(term for _, term in sorted(tokens))
    return [known[t] for t in texts]


def as_or(conn: sqlite3.Connection, table: str, match: str) -> str | None:
    """``match`` (one quoted prefix of one word, like ``"repl"*``) as the OR of the words
    of ``table`` it covers; None when it is not such a prefix of the word index, covers
    no word, more than MAX_TERMS or more than WORDS_PER_PAGE per page its doclists span,
    or a covered word has no form that matches exactly it quoted."""
    found = _ONE_PREFIX.match(match)
    if table != WORD_TABLE or found is None:
        return None
    (tokens,) = _tokens(conn, [found.group(1)])
    if len(tokens) != 1:
        return None
    token = tokens[0]
    listed = index_terms.words(conn, table, token, MAX_TERMS + 1)
    if listed is None:
        above = token[:-1] + chr(ord(token[-1]) + 1)
        terms = [
            str(r[0])
            for r in conn.execute(
                f"SELECT term FROM temp.{_VOCAB} WHERE term >= ? AND term < ? LIMIT ?",
                (token, above, MAX_TERMS + 1),
            )
        ]
    else:
        terms = listed.words
        if len(terms) > WORDS_PER_PAGE * listed.pages:
            # Many words with short doclists: FTS5's merge reads a few pages, the OR
            # would open one doclist per word.
            return None
    if not terms or len(terms) > MAX_TERMS:
        return None
    written = _written(conn, terms)
    if written is None:
        return None
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in written)


def _written(conn: sqlite3.Connection, terms: list[str]) -> list[str] | None:
    """Each term as a word that, quoted, matches exactly that term of the index: the term
    itself, or when the stemmer would change it again, the term with one of _ENDINGS that
    the tokenizer turns into it. None when a term has no such form."""
    out = list(terms)
    todo = [i for i, toks in enumerate(_tokens(conn, terms)) if toks != (terms[i],)]
    for ending in _ENDINGS:
        if not todo:
            break
        forms = [terms[i] + ending for i in todo]
        left = []
        for i, form, toks in zip(todo, forms, _tokens(conn, forms), strict=True):
            if toks == (terms[i],):
                out[i] = form
            else:
                left.append(i)
        todo = left
    return None if todo else out
