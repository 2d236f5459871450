"""Compile any user query into safe FTS5 MATCH expressions, one per full-text index.

The session store keeps three indexes over the same messages (see ``migrations.m001``):

* ``word``    - unicode61 words (with Porter stemming): the workhorse for Latin text;
* ``trigram`` - substrings of 3+ characters: identifiers, paths, partial names;
* ``cjk``     - overlapping CJK bigrams plus the Latin words glued to CJK (``cjk.py``).

Natural language is the default: ``what did Caroline paint?`` becomes
``"caroline" OR "paint"`` (stopwords and question words dropped, every term quoted, terms
ORed, best matches first by BM25). Hermes 0.19.0 joins words with an implicit AND and
finds the right conversation for 0.2 % of natural questions; OR plus BM25 lets the terms
that matter carry the ranking instead of vetoing the match.

Explicit syntax keeps its meaning when the user writes it: uppercase ``AND`` / ``OR`` /
``NOT`` between terms, ``"quoted phrases"`` and ``prefix*``. Terms without an operator
between them are still ORed. Malformed combinations are repaired, never reported: a
leading or trailing operator is dropped, ``a AND OR b`` keeps the first operator
(``a AND NOT b`` means ``a NOT b``), an unbalanced quote is a space, a lone ``*`` or
``NOT`` disappears. The output of :func:`compile_query` is always valid FTS5: every term
is a double-quoted string whose text cannot contain a quote or a control character.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Literal

from memstrata.query.cjk import CJK_RUN, has_cjk, run_terms
from memstrata.query.fold import fold

MAX_QUERY_CHARS = 2048
Index = Literal["word", "trigram", "cjk"]
INDEXES: tuple[Index, ...] = ("word", "trigram", "cjk")

# Compact English stopword list: function words plus the question words that make up
# most of a natural-language question ("when did ... go to ...?"). Dropping them keeps
# OR queries from matching every message; BM25 would down-weight them anyway, but each
# common term still costs a long posting-list scan.
_STOPWORD_TEXT = """
    a about above after again against all also am an and any are as at be been before
    being below between both but by can could did do does doing done down during each
    else ever few for from further get gets got had has have having he her here hers
    herself him himself his how i if in into is it its itself just let like me might
    more most much must my myself no nor not now of off on once only or other our ours
    ourselves out over own please same shall she should so some such than that the their
    theirs them themselves then there these they this those through to too under until
    up upon us very was we were what whatever when where whether which while who whom
    whose why will with would yet you your yours yourself yourselves
    s t d ll m re ve don didn doesn isn wasn weren won wouldn shouldn couldn aren hasn
    haven hadn
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())

_OPERATORS = frozenset({"AND", "OR", "NOT"})
# A CJK run of up to this many characters is a word or compound and must match as a
# phrase of its bigrams; a longer unbroken run is a sentence (Chinese and Japanese do not
# put spaces between words), and requiring it verbatim would be implicit AND's zero
# recall again, so in natural-language mode its bigrams are ORed and BM25 ranks the
# messages sharing the most of them first.
_CJK_PHRASE_MAX = 4
# A quoted span longer than this (in words; a CJK character counts half) is quoted text,
# searched by its words, not a phrase that must occur verbatim.
_PHRASE_MAX_WORDS = 6
# The trigram index cannot match fewer than three characters.
_TRIGRAM_MIN = 3
# Characters that make a Latin term look like code (an identifier, path, version or
# address). unicode61 splits on all of them, so the word index only sees such a term
# as a phrase of its pieces and misses it inside a longer identifier (``getUser`` in
# ``getUserById``, ``config.ts`` in ``app.config.tsx``); the trigram index matches the
# substring itself. (The search runs a natural query's trigram terms only when the word
# index finds nothing for them: substring scans are the costliest.)
_CODE_PUNCT = frozenset("_./\\:@#+-=~$%&|<>")
_CAMEL = re.compile(r"[a-z][A-Z]")
_LETTER_DIGIT = re.compile(r"(?:[^\W\d_]\d|\d[^\W\d_])")
_POSSESSIVE = re.compile(r"['\u2019]s$", re.IGNORECASE)
# Surrogates, control and format characters break SQLite binding or FTS5 strings.
_BAD_CATEGORIES = frozenset({"Cc", "Cs", "Cf", "Co", "Cn", "Zl", "Zp"})


@dataclass(frozen=True)
class Term:
    """One search term with its rendering in each index (None: the index cannot see it)."""

    text: str
    word: str | None
    trigram: str | None
    cjk: str | None
    # The literal strings a snippet should highlight for this term.
    highlights: tuple[str, ...] = ()
    # What the user wrote: a quoted phrase, or a ``prefix*`` (the fallback of an explicit
    # query turns a phrase back into its words and keeps a prefix as written).
    phrase: bool = False
    prefix: bool = False

    def render(self, index: Index) -> str | None:
        """Return this term's MATCH expression for ``index``."""
        if index == "word":
            return self.word
        if index == "trigram":
            return self.trigram
        return self.cjk


@dataclass(frozen=True)
class Node:
    """A boolean query tree: ``op`` is "term", "or", "and" or "not" (first child minus rest)."""

    op: Literal["term", "or", "and", "not"]
    children: tuple[Node, ...] = ()
    term: Term | None = None

    def render(self, index: Index) -> str | None:
        """Render the tree for one index; None when that index cannot satisfy it.

        A branch the index cannot see is dropped from an OR (another index covers it),
        makes an AND unsatisfiable there, and is ignored as the excluded side of a NOT.
        """
        if self.op == "term":
            assert self.term is not None
            return self.term.render(index)
        parts = [child.render(index) for child in self.children]
        if self.op == "or":
            kept = [p for p in parts if p is not None]
            if not kept:
                return None
            return kept[0] if len(kept) == 1 else "(" + " OR ".join(kept) + ")"
        if self.op == "and":
            if any(p is None for p in parts):
                return None
            return "(" + " AND ".join(p for p in parts if p is not None) + ")"
        head, rest = parts[0], [p for p in parts[1:] if p is not None]
        if head is None:
            return None
        return "(" + " NOT ".join([head, *rest]) + ")" if rest else head

    def terms(self) -> list[Term]:
        """All terms of the tree, positive and negated, in order."""
        if self.term is not None:
            return [self.term]
        return [t for child in self.children for t in child.terms()]

    def positive_terms(self) -> list[Term]:
        """Terms that contribute to a match (the excluded side of NOT left out)."""
        if self.term is not None:
            return [self.term]
        children = self.children[:1] if self.op == "not" else self.children
        return [t for child in children for t in child.positive_terms()]


@dataclass(frozen=True)
class CompiledQuery:
    """A query compiled for every index; ``match[index]`` is None when it has nothing there."""

    text: str
    explicit: bool
    tree: Node | None
    match: dict[Index, str | None] = field(default_factory=dict)
    # For a pure OR of terms (every natural-language query): each index's alternatives
    # with their terms, so the search can leave very common terms out of the BM25 scan.
    leaves: dict[Index, tuple[tuple[str, Term], ...]] | None = None
    # An explicit query's positive words as a natural query (see compile_query).
    fallback: CompiledQuery | None = None
    # Every term is a stopword (kept, as nothing else is left): ``what did we do``.
    stopwords_only: bool = False

    @property
    def is_empty(self) -> bool:
        """True when no index has anything to search for."""
        return all(v is None for v in self.match.values())

    @property
    def highlights(self) -> list[str]:
        """Literal strings worth highlighting in a snippet, longest first."""
        if self.tree is None:
            return []
        seen = {h for t in self.tree.positive_terms() for h in t.highlights if h}
        return sorted(seen, key=lambda h: (-len(h), h))

    @property
    def lone_phrase(self) -> bool:
        """True for a query that is one quoted phrase found by the word index alone
        (``"exact words"``): its ranking is that index's, so a backend that ranks it in
        page order can fetch just the page (see ``Transaction.phrase_pages``)."""
        node = self.tree
        return (
            self.explicit
            and node is not None
            and node.op == "term"
            and node.term is not None
            and node.term.phrase
            and not node.term.prefix
            and self.match.get("word") is not None
            and all(v is None for index, v in self.match.items() if index != "word")
        )


def clean_text(query: str) -> str:
    """Cap ``query`` at MAX_QUERY_CHARS and replace characters FTS5 cannot take with spaces."""
    query = query[:MAX_QUERY_CHARS]
    return "".join(
        " " if unicodedata.category(ch) in _BAD_CATEGORIES or ch.isspace() else ch for ch in query
    )


def _quote(text: str) -> str:
    # Terms never contain '"' (the lexer consumes them), but doubling is the FTS5 escape.
    return '"' + text.replace('"', '""') + '"'


def _has_token(text: str) -> bool:
    # unicode61 token characters are letters and numbers; a string without any would be
    # an empty phrase, which matches nothing and would veto an AND.
    return any(ch.isalnum() for ch in text)


def _looks_like_code(raw: str) -> bool:
    inner = raw.strip("".join(_CODE_PUNCT))
    return (
        any(ch in _CODE_PUNCT for ch in inner)
        or bool(_CAMEL.search(raw))
        or bool(_LETTER_DIGIT.search(raw))
    )


def _strip_edges(chunk: str) -> str:
    """Drop punctuation around a word (``(foo),`` -> ``foo``) but keep ``C++`` and ``C#``."""
    start, end = 0, len(chunk)
    while start < end and not chunk[start].isalnum():
        start += 1
    while end > start and not chunk[end - 1].isalnum():
        end -= 1
    core = chunk[start:end]
    tail = chunk[end:]
    # A language name's trailing symbols are part of it: C++, C#, F#.
    if core and tail[:1] in ("+", "#"):
        keep = len(tail) - len(tail.lstrip("+#"))
        core += tail[:keep]
    return _POSSESSIVE.sub("", core)


def cjk_phrase(chunk: str) -> tuple[list[str], bool]:
    """Tokens of the bigram index that ``chunk`` (a word holding CJK) must match in order.

    Returns ``(tokens, prefix)``; ``prefix`` makes the last token a prefix query. The
    index holds each CJK run as its bigrams followed by its last character, so:
    a 1-character run at the end of the chunk is the prefix ``c*`` (every occurrence of
    ``c`` starts some token); a run followed by more text in the chunk keeps its
    last-character token, because the index has it between the run and the next word.
    A natural-language run longer than _CJK_PHRASE_MAX characters is not a phrase: the
    caller ORs its bigrams, so it gets an empty list here and uses :func:`cjk_bigrams`.
    """
    segments: list[tuple[bool, str]] = []
    pos = 0
    for match in CJK_RUN.finditer(chunk):
        segments += [(False, w) for w in re.findall(r"\w+", chunk[pos : match.start()])]
        segments.append((True, match.group()))
        pos = match.end()
    segments += [(False, w) for w in re.findall(r"\w+", chunk[pos:])]
    tokens: list[str] = []
    prefix = False
    for i, (is_cjk, seg) in enumerate(segments):
        last = i == len(segments) - 1
        if not is_cjk:
            tokens.append(seg.lower())
        elif len(seg) == 1:
            tokens.append(seg)
            prefix = last
        elif last:
            tokens.extend(run_terms(seg)[:-1])
        else:
            tokens.extend(run_terms(seg))
    return tokens, prefix


def _render_tokens(tokens: list[str], prefix: bool) -> str:
    return _quote(" ".join(tokens)) + ("*" if prefix else "")


def make_term(raw: str, *, phrase: bool = False, prefix: bool = False) -> Node | None:
    """Build the query node for one user term; None when nothing searchable is left.

    ``phrase`` marks text the user quoted; ``prefix`` a trailing ``*``.
    """
    text = raw.strip() if phrase else _strip_edges(raw)
    if not text or not _has_token(text):
        return None
    lower = text.lower()
    if not has_cjk(text):
        quoted = _quote(lower)
        word = quoted + ("*" if prefix else "")
        # Latin words glued to CJK (``修改youer服务端``) live only in the bigram index.
        cjk = word if " " not in lower else None
        trigram = None
        if (
            not prefix
            and len(lower) >= _TRIGRAM_MIN
            and (_looks_like_code(text) or text[-1] in "+#")
        ):
            trigram = quoted
        term = Term(lower, word, trigram, cjk, (lower,), phrase=phrase, prefix=prefix)
        return Node("term", term=term)

    # CJK: the bigram index does the work; the trigram index adds exact substring
    # matching for quoted phrases that mix scripts or spaces.
    chunks = lower.split()
    trigram = _quote(lower) if phrase and len(lower) >= _TRIGRAM_MIN else None
    if len(chunks) > 1:
        if phrase:
            cjk_parts = [cjk_phrase(c) for c in chunks]
            # Only a single chunk can be a contiguous phrase in the bigram index; a quoted
            # multi-word CJK phrase is matched there as AND of its words, exactly by trigram.
            rendered = [_render_tokens(t, p) for t, p in cjk_parts if t]
            cjk = "(" + " AND ".join(rendered) + ")" if len(rendered) > 1 else rendered[0]
            term = Term(lower, None, trigram, cjk, tuple(chunks), phrase=True)
            return Node("term", term=term)
        nodes = [make_term(c, prefix=prefix and i == len(chunks) - 1) for i, c in enumerate(chunks)]
        kept = tuple(n for n in nodes if n is not None)
        return Node("or", kept) if kept else None
    if not phrase and not prefix:
        return _natural_cjk(lower)
    tokens, tail_prefix = cjk_phrase(lower)
    cjk = _render_tokens(tokens, tail_prefix or prefix)
    highlights = (lower.rstrip("*"),)
    term = Term(lower, None, trigram, cjk, highlights, phrase=phrase, prefix=prefix)
    return Node("term", term=term)


def word_term(word: str) -> Term | None:
    """The term a lookup of one word asks about ("does the store hold it?", as typo and
    homophone correction ask of a query's words and their neighbours): make_term's
    term, or None when the word makes none or several.

    A CJK bigram, what a homophone lookup asks about by the dozen, is its own term in
    the bigram index (as :func:`_natural_cjk` makes it) without make_term's passes over
    the text: about 24 us of Python a word, a third of a Chinese question's search.
    """
    if len(word) == 2 and CJK_RUN.fullmatch(word):
        return Term(word, None, None, _quote(word), (word,))
    node = make_term(word)
    return node.term if node is not None else None


def _natural_cjk(chunk: str) -> Node | None:
    """A chunk holding CJK, as natural text: the OR of its pieces, none of them required.

    Each CJK run is its overlapping bigrams (a row holding more of them ranks higher; a
    3-4 character run, a word or compound, adds its phrase, so the exact word ranks
    highest); the Latin or digit words glued to it are words of their own. A lone CJK
    character beside other pieces is left out (mostly a particle, and its prefix query
    matches a large share of the index); alone it is the prefix query ``c*``.
    """
    kids: list[Node] = []
    pos = 0
    singles: list[str] = []
    for match in CJK_RUN.finditer(chunk):
        kids += _latin_nodes(chunk[pos : match.start()])
        run = match.group()
        pos = match.end()
        if len(run) == 1:
            singles.append(run)
            continue
        grams = list(dict.fromkeys(run_terms(run)[:-1]))
        kids += [Node("term", term=Term(g, None, None, _quote(g), (g,))) for g in grams]
        if 2 < len(run) <= _CJK_PHRASE_MAX:
            rendered = _render_tokens(run_terms(run)[:-1], False)
            kids.append(Node("term", term=Term(run, None, None, rendered, (run,))))
    kids += _latin_nodes(chunk[pos:])
    if not kids:
        kids = [
            Node("term", term=Term(c, None, None, _render_tokens([c], True), (c,)))
            for c in dict.fromkeys(singles)
        ]
    if not kids:
        return None
    return kids[0] if len(kids) == 1 else Node("or", tuple(kids))


def _latin_nodes(text: str) -> list[Node]:
    nodes = (make_term(w) for w in re.findall(r"\w+", text))
    return [n for n in nodes if n is not None]


# A lexeme is an operator, a quoted phrase or a plain chunk; the lexer never fails.
@dataclass(frozen=True)
class _Lexeme:
    kind: Literal["op", "phrase", "word"]
    text: str
    prefix: bool = False


def _lex(query: str) -> list[_Lexeme]:
    out: list[_Lexeme] = []
    i, n = 0, len(query)
    while i < n:
        ch = query[i]
        if ch.isspace():
            i += 1
            continue
        if ch == '"':
            close = query.find('"', i + 1)
            if close == -1:  # unbalanced quote: a space
                i += 1
                continue
            body = query[i + 1 : close]
            star = close + 1 < n and query[close + 1] == "*"
            i = close + (2 if star else 1)
            phrase = _short_phrase(body)
            if phrase is not None:
                out.append(_Lexeme("phrase", phrase, prefix=star))
            else:
                # Quotes around a sentence or a pasted message are the text's own
                # punctuation, not a request for that exact text: its words are searched.
                out += _word_lexemes(body.replace("*", " "))
            continue
        j = i
        while j < n and not query[j].isspace() and query[j] != '"':
            j += 1
        chunk = query[i:j]
        i = j
        if chunk in _OPERATORS:
            out.append(_Lexeme("op", chunk))
            continue
        out += _word_lexemes(chunk)
    return out


def _word_lexemes(text: str) -> list[_Lexeme]:
    """The word lexemes of unquoted text: punctuation of any script separates them."""
    out: list[_Lexeme] = []
    for chunk in text.split():
        prefix = chunk.endswith("*") and _has_token(chunk.rstrip("*"))
        # Any other FTS5 syntax character is plain punctuation inside a term.
        body = _split_punctuation(re.sub(r"[*^{}()\[\]]", " ", chunk))
        pieces = body.split()
        for k, piece in enumerate(pieces):
            out.append(_Lexeme("word", piece, prefix=prefix and k == len(pieces) - 1))
    return out


def _is_separator(text: str, i: int) -> bool:
    """True when ``text[i]`` is punctuation that ends a term.

    Punctuation and symbols of every script separate terms (``迁移，结论``, ``why?then``),
    except what makes a Latin term code-like (``config.ts``, ``user_id``, ``C++``, ``a/b``)
    and an apostrophe inside a word (``don't``); beside a CJK character even those
    separate, since CJK text does not build identifiers from them.
    """
    ch = text[i]
    if ch.isalnum() or ch.isspace():
        return False
    if not unicodedata.category(ch).startswith(("P", "S")):
        return False  # combining marks and the like belong to their letter
    prev = text[i - 1] if i > 0 else ""
    nxt = text[i + 1] if i + 1 < len(text) else ""
    if ch in _CODE_PUNCT:
        return has_cjk(prev) or has_cjk(nxt)
    if ch in "'’":
        return not (prev.isalpha() and nxt.isalpha()) or has_cjk(prev + nxt)
    return True


def _split_punctuation(text: str) -> str:
    return "".join(" " if _is_separator(text, i) else ch for i, ch in enumerate(text))


def _short_phrase(body: str) -> str | None:
    """The phrase a quoted ``body`` asks for, or None when it is text to search by words.

    A phrase is short (at most _PHRASE_MAX_WORDS words, a CJK character counting half)
    and holds no separating punctuation inside (punctuation at its edges is dropped):
    ``"support group"`` is a phrase; ``"Hey, you know what? ..."`` is a quoted sentence.
    """
    core = " ".join(body.split())
    while core and _is_separator(core, 0):
        core = core[1:].lstrip()
    while core and _is_separator(core, len(core) - 1):
        core = core[:-1].rstrip()
    if any(_is_separator(core, i) for i in range(len(core))):
        return None
    words = core.split()
    cjk_chars = sum(len(r) for r in CJK_RUN.findall(body))
    latin_words = len([w for w in words if not has_cjk(w)])
    if latin_words + cjk_chars / 2 > _PHRASE_MAX_WORDS:
        return None
    return core


def _build(lexemes: list[_Lexeme]) -> Node | None:
    """Turn lexemes into a tree with FTS5 precedence (NOT > AND > OR; implicit OR)."""
    items: list[Node | str] = []
    for lex in lexemes:
        if lex.kind == "op":
            items.append(lex.text)
            continue
        node = make_term(lex.text, phrase=lex.kind == "phrase", prefix=lex.prefix)
        if node is not None:
            items.append(node)
    # Repair: collapse operator runs, drop leading and trailing operators.
    ops_then_operand: list[tuple[str, Node]] = []
    pending: list[str] = []
    for item in items:
        if isinstance(item, str):
            pending.append(item)
            continue
        if not ops_then_operand:
            # A leading NOT has nothing to subtract from: drop its operand too.
            if "NOT" in pending[:1]:
                pending = []
                continue
            ops_then_operand.append(("OR", item))
        else:
            op = "NOT" if "NOT" in pending else (pending[0] if pending else "OR")
            ops_then_operand.append((op, item))
        pending = []
    if not ops_then_operand:
        return None
    or_groups: list[list[tuple[str, Node]]] = [[]]
    for op, node in ops_then_operand:
        if op == "OR" and or_groups[-1]:
            or_groups.append([])
        or_groups[-1].append((op, node))
    alternatives: list[Node] = []
    for group in or_groups:
        conjuncts: list[list[Node]] = []
        for op, node in group:
            if op == "NOT" and conjuncts:
                conjuncts[-1].append(node)
            else:
                conjuncts.append([node])
        factors = [c[0] if len(c) == 1 else Node("not", tuple(c)) for c in conjuncts]
        alternatives.append(factors[0] if len(factors) == 1 else Node("and", tuple(factors)))
    return alternatives[0] if len(alternatives) == 1 else Node("or", tuple(alternatives))


def is_explicit(query: str | None) -> bool:
    """Whether ``query`` uses explicit syntax (operators, a quoted phrase, ``prefix*``), as
    :func:`compile_query` reads it, without compiling its terms (what typo correction
    asks of every query it might correct)."""
    return _explicit(_lex(fold(clean_text(query or ""))))


def _explicit(lexemes: list[_Lexeme]) -> bool:
    return any(lex.kind == "op" or lex.kind == "phrase" or lex.prefix for lex in lexemes)


def compile_query(query: str | None, *, stopwords: Iterable[str] | None = None) -> CompiledQuery:
    """Compile a user query for every index; never raises for any string.

    ``stopwords`` overrides the built-in STOPWORDS (pass ``()`` to keep every word).
    When every term is a stopword, the terms are kept: ``the who`` still searches.
    An explicit query (operators, a quoted phrase, ``prefix*``) also carries its
    ``fallback``: its positive terms as natural words, for a search that finds too little.
    """
    # Folded as the CJK index is (memstrata.query.fold): 數據庫 searches 数据库, ＡＰＩ API.
    text = fold(clean_text(query or ""))
    lexemes = _lex(text)
    explicit = _explicit(lexemes)
    stop = STOPWORDS if stopwords is None else frozenset(w.lower() for w in stopwords)
    filtered = [lex for lex in lexemes if not _is_stop(lex, stop)]
    stopwords_only = not any(lex.kind != "op" for lex in filtered)
    if stopwords_only:
        filtered = lexemes
    tree = _build(_dedupe(filtered))
    compiled = _compiled(text.strip(), explicit, tree)
    if stopwords_only and tree is not None:
        compiled = replace(compiled, stopwords_only=True)
    if explicit and tree is not None:
        fallback = _fallback_tree(tree, stop)
        if fallback is not None and fallback != tree:
            compiled = replace(compiled, fallback=_compiled(compiled.text, False, fallback))
    return compiled


def _is_stop(lex: _Lexeme, stop: frozenset[str]) -> bool:
    """A plain word that carries no evidence: a stopword, or a lone CJK character (mostly
    a particle: ``的``, ``吗``; and its prefix query matches a large share of the index)."""
    if lex.kind != "word" or lex.prefix:
        return False
    word = _strip_edges(lex.text).lower()
    return word in stop or (len(word) == 1 and has_cjk(word))


def _compiled(text: str, explicit: bool, tree: Node | None) -> CompiledQuery:
    match: dict[Index, str | None] = {
        index: tree.render(index) if tree is not None else None for index in INDEXES
    }
    leaves: dict[Index, tuple[tuple[str, Term], ...]] | None = None
    if tree is not None and _only_or(tree):
        leaves = {}
        for index in INDEXES:
            rendered = ((t.render(index), t) for t in tree.terms())
            leaves[index] = tuple({r: t for r, t in rendered if r is not None}.items())
    return CompiledQuery(text=text, explicit=explicit, tree=tree, match=match, leaves=leaves)


def _fallback_tree(tree: Node, stop: frozenset[str]) -> Node | None:
    """The words of an explicit query: its positive terms ORed (a phrase as its words, a
    prefix kept), minus what it excludes with NOT."""
    nodes: list[Node] = []
    for term in tree.positive_terms():
        if term.phrase:
            words = [lex for lex in _word_lexemes(term.text) if not _is_stop(lex, stop)]
            nodes += [n for n in (make_term(lex.text) for lex in words) if n is not None]
        else:
            nodes.append(Node("term", term=term))
    if not nodes:
        return None
    either = nodes[0] if len(nodes) == 1 else Node("or", tuple(nodes))
    negated = [t for t in tree.terms() if t not in tree.positive_terms()]
    if not negated:
        return either
    return Node("not", (either, *(Node("term", term=t) for t in negated)))


def _only_or(node: Node) -> bool:
    return node.op == "term" or (node.op == "or" and all(_only_or(c) for c in node.children))


def _dedupe(lexemes: list[_Lexeme]) -> list[_Lexeme]:
    # Repeating a term in an OR adds nothing but cost; only plain words are deduplicated
    # so operators keep their operands.
    seen: set[tuple[str, bool]] = set()
    out: list[_Lexeme] = []
    for i, lex in enumerate(lexemes):
        key = (_strip_edges(lex.text).lower(), lex.prefix)
        neighbours_ops = (i > 0 and lexemes[i - 1].kind == "op") or (
            i + 1 < len(lexemes) and lexemes[i + 1].kind == "op"
        )
        if lex.kind == "word" and not neighbours_ops:
            if key in seen:
                continue
            seen.add(key)
        out.append(lex)
    return out


def plain_or_query(query: str | None) -> str | None:
    """The baseline: every word of the query quoted and ORed, no stopwords, word index only."""
    words = [
        _strip_edges(w).lower() for w in re.split(r"[\s\"*^{}()\[\]]+", clean_text(query or ""))
    ]
    kept = list(dict.fromkeys(w for w in words if w and _has_token(w) and not has_cjk(w)))
    return " OR ".join(_quote(w) for w in kept) if kept else None
