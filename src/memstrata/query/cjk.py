"""CJK text handling for the bigram index.

Chinese words are mostly two characters, which a trigram index cannot see, and
unicode61 keeps a whole CJK run (with any Latin glued to it) as one token. So every CJK
run is indexed as overlapping bigrams plus its last character, and the Latin or digit
parts of a chunk that also holds CJK are indexed as words of their own:

    "修改youer服务端"  ->  "修改 改 youer 服务 务端 端"

With the last character kept, every occurrence of a character ``c`` starts some token,
so a one-character query is the prefix query ``c*`` and never a table scan.
"""

from __future__ import annotations

import re

from memstrata.query.fold import fold

# Han (basic, extension A, B, compatibility), Hiragana, Katakana, Hangul syllables.
# CJK punctuation (U+3000-U+303F) separates runs instead of joining them.
_CJK_CLASS = (
    "\u4e00-\u9fff\u3400-\u4dbf\uf900-\ufaff\U00020000-\U0002a6df"
    "\u3040-\u309f\u30a0-\u30ff\uac00-\ud7af"
)
CJK_RUN = re.compile(f"[{_CJK_CLASS}]+")
_HAS_CJK = re.compile(f"[{_CJK_CLASS}]")
_CHUNK = re.compile(r"\S+")
_WORDS = re.compile(r"\w+")


def has_cjk(text: str | None) -> bool:
    """Return True when ``text`` holds at least one CJK character."""
    return bool(text) and _HAS_CJK.search(text) is not None  # type: ignore[arg-type]


def run_terms(run: str) -> list[str]:
    """Overlapping bigrams of one CJK run plus its last character."""
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)] + [run[-1]]


def cjk_terms(*parts: str | None) -> str | None:
    """Return the bigram-index text for the given column values, or None without CJK.

    The text is folded first (:func:`memstrata.query.fold.fold`: traditional characters
    simplified, full-width letters and digits in ASCII), and a chunk of full-width letters
    or digits is indexed here too, folded, so that ``API`` finds ``ＡＰＩ``.

    Registered on every SQLite connection as the deterministic SQL function the index
    triggers call (``memstrata_cjk_folded``, see
    :data:`memstrata.store.sqlite.migrations.CJK_FUNCTION`); it must never change output
    for the same input, or deleting a row would corrupt the contentless index (a change
    ships under a new name, with a migration that re-indexes the rows it changes).
    """
    return _terms(parts, folded=True)


def unfolded_cjk_terms(*parts: str | None) -> str | None:
    """What :func:`cjk_terms` returned before the index was folded: the migrations that
    re-index a row hand these tokens back to delete it."""
    return _terms(parts, folded=False)


def _terms(parts: tuple[str | None, ...], *, folded: bool) -> str | None:
    tokens: list[str] = []
    for part in parts:
        if not part:
            continue
        text = fold(part) if folded else part
        if text == part and not _HAS_CJK.search(part):
            continue
        for written, chunk in zip(_CHUNK.findall(part), _CHUNK.findall(text), strict=True):
            if not _HAS_CJK.search(chunk) and chunk == written:
                continue
            pos = 0
            for match in CJK_RUN.finditer(chunk):
                tokens.extend(_WORDS.findall(chunk[pos : match.start()]))
                tokens.extend(run_terms(match.group()))
                pos = match.end()
            tokens.extend(_WORDS.findall(chunk[pos:]))
    return " ".join(tokens) if tokens else None
