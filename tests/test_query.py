"""Tests for memstrata.query.compile: natural and explicit queries compiled for each index."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstrata.query.compile import (
    INDEXES,
    MAX_QUERY_CHARS,
    STOPWORDS,
    clean_text,
    compile_query,
    make_term,
    plain_or_query,
    word_term,
)
from memstrata.store.sqlite import migrations, substring
from memstrata.store.sqlite.store import SessionStore

TABLES = {"word": "messages_fts", "trigram": "messages_fts_trigram", "cjk": "messages_fts_cjk"}

CORPUS = [
    "How do I deploy the docker container to staging?",
    "Edit my-app.config.ts and set P2.2 to true; C++ and C# both work",
    "我想修改youer服务端的配置",
    "好的，服务端配置在 config/user_ids.py 里",
    "getUserById returns null when the cache is cold",
    "Caroline went to the LGBTQ support group yesterday",
]


@pytest.fixture(scope="module", params=["positions", "no-positions"])
def conn(request: pytest.FixtureRequest) -> Iterator[sqlite3.Connection]:
    """A small migrated database holding CORPUS, shared by the property test; once with
    the shipped trigram index and once with one that keeps no positions."""
    db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    migrations.register_functions(db)
    migrations.migrate(db)
    if request.param == "no-positions":
        db.execute("DROP TABLE messages_fts_trigram")
        db.execute(
            migrations.FTS_TABLES["messages_fts_trigram"].replace(
                "tokenize='trigram'", "tokenize='trigram', detail='none'"
            )
        )
    db.execute("INSERT INTO sessions(id, source, started_at) VALUES ('s', 'cli', 0)")
    for i, text in enumerate(CORPUS):
        db.execute(
            "INSERT INTO messages(session_id, role, content, timestamp) VALUES ('s', 'user', ?, ?)",
            (text, i),
        )
    yield db
    db.close()


def matches(conn: sqlite3.Connection, query: str) -> dict[str, set[int]]:
    """Rowids each index returns for the compiled query."""
    compiled = compile_query(query)
    out: dict[str, set[int]] = {}
    for index in INDEXES:
        expr = compiled.match[index]
        table = TABLES[index]
        if expr is not None and index == "trigram" and not substring.positions_kept(conn):
            assert compiled.tree is not None
            rows = substring.candidates(conn, compiled.tree, "", [], "", 1000, "newest")
            out[index] = {r[0] for r in rows}
            continue
        out[index] = (
            set()
            if expr is None
            else {
                r[0]
                for r in conn.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH ?", (expr,))
            }
        )
    return out


def found(conn: sqlite3.Connection, query: str) -> set[int]:
    """Union of the rowids of every index."""
    return set().union(*matches(conn, query).values())


def test_natural_question_drops_stopwords_and_ors_terms() -> None:
    """A question becomes the OR of its quoted content words, without `?` or stopwords."""
    compiled = compile_query("When did Caroline go to the LGBTQ support group?")
    assert compiled.match["word"] == '("caroline" OR "go" OR "lgbtq" OR "support" OR "group")'
    assert not compiled.explicit


def test_possessive_and_edge_punctuation_are_stripped() -> None:
    """`Caroline's` and `(docker),` search for the bare words."""
    assert compile_query("Caroline's (docker),").match["word"] == '("caroline" OR "docker")'


def test_only_stopwords_are_kept() -> None:
    """A query made only of stopwords still searches for them."""
    assert compile_query("the who").match["word"] == '("the" OR "who")'


@pytest.mark.parametrize(
    ("query", "row"),
    [("foo-bar", None), ("P2.2", 1), ("my-app.config.ts", 1), ("C++", 1), ("C#", 1)],
)
def test_punctuated_terms_never_error(
    conn: sqlite3.Connection, query: str, row: int | None
) -> None:
    """Hyphenated, dotted and symbol terms compile to valid FTS5 and find their message."""
    hits = found(conn, query)
    if row is not None:
        assert row + 1 in hits


def test_code_terms_use_the_trigram_index(conn: sqlite3.Connection) -> None:
    """A partial identifier the word index cannot see is found as a substring."""
    assert matches(conn, "user_id")["trigram"] == {4}
    assert matches(conn, "getUser")["word"] == set()
    assert matches(conn, "getUser")["trigram"] == {5}
    assert compile_query("docker").match["trigram"] is None


def test_explicit_operators_keep_their_meaning(conn: sqlite3.Connection) -> None:
    """Uppercase AND and NOT constrain the match instead of being ORed."""
    assert found(conn, "docker AND staging") == {1}
    assert found(conn, "docker AND caroline") == set()
    assert found(conn, "support NOT caroline") == set()
    assert found(conn, "docker OR caroline") == {1, 6}


def test_phrase_and_prefix(conn: sqlite3.Connection) -> None:
    """Quoted phrases match in order and `prefix*` matches word starts."""
    assert found(conn, '"support group"') == {6}
    assert found(conn, '"group support"') == set()
    assert found(conn, "deplo*") == {1}
    assert compile_query("deplo*").explicit


@pytest.mark.parametrize(
    ("query", "word"),
    [
        ("docker AND OR staging", '("docker" AND "staging")'),
        ("docker AND NOT staging", '("docker" NOT "staging")'),
        ("AND docker OR", '"docker"'),
        ("NOT docker", None),
        ("docker NOT", '"docker"'),
        ('"unbalanced phrase', '("unbalanced" OR "phrase")'),
        ("*", None),
        ("***docker", '"docker"'),
        ("TODO: fix {test} (now) ^x", '("todo" OR "fix" OR "test" OR "x")'),
    ],
)
def test_malformed_syntax_is_repaired(query: str, word: str | None) -> None:
    """Dangling, doubled and unbalanced syntax is repaired into a valid query."""
    assert compile_query(query).match["word"] == word


def test_cjk_two_chars_is_a_token_and_one_char_a_prefix(conn: sqlite3.Connection) -> None:
    """A 2-character CJK word is one bigram; a single character is a prefix query."""
    assert compile_query("服务").match["cjk"] == '"服务"'
    assert compile_query("服").match["cjk"] == '"服"*'
    assert matches(conn, "服务")["cjk"] == {3, 4}
    assert matches(conn, "端")["cjk"] == {3, 4}
    assert matches(conn, "配")["cjk"] == {3, 4}


def test_cjk_three_chars_ors_its_bigrams_and_its_phrase(conn: sqlite3.Connection) -> None:
    """A 3-character CJK word is its bigrams ORed, plus its phrase so the word ranks first;
    quoted, it must match as the phrase."""
    assert compile_query("服务端").match["cjk"] == '("服务" OR "务端" OR "服务 务端")'
    assert matches(conn, "服务端")["cjk"] == {3, 4}
    assert matches(conn, '"端服务"')["cjk"] == set()
    assert compile_query('"服务端"').match["cjk"] == '"服务 务端"'


def test_cjk_punctuation_separates_terms(conn: sqlite3.Connection) -> None:
    """A CJK sentence with a comma is searched by the bigrams of both clauses, not as one
    verbatim phrase: a two-clause question finds a message sharing words with either."""
    expr = compile_query("我想去公园，看看花。").match["cjk"]
    assert expr is not None and "，" not in expr and '"公园"' in expr and '"看花"' in expr
    assert matches(conn, "修改什么，服务端的配置在哪里？")["cjk"] == {3, 4}
    assert not compile_query("上次我们讨论数据库迁移，结论是什么？").explicit


@pytest.mark.parametrize(
    ("query", "word"),
    [
        ("why?then", '("why" OR "then")'),
        ("deploy,docker;staging!", '("deploy" OR "docker" OR "staging")'),
        ("«docker» — staging…", '("docker" OR "staging")'),
        ("config.ts don't", '("config.ts" OR "don\'t")'),
    ],
)
def test_punctuation_of_any_script_separates_words(query: str, word: str) -> None:
    """Sentence punctuation splits terms; code punctuation and apostrophes stay inside."""
    assert compile_query(query).match["word"] == word


def test_long_quoted_text_is_searched_by_its_words(conn: sqlite3.Connection) -> None:
    """Quotes around a sentence (a pasted message, a dialogue turn) are not a phrase."""
    compiled = compile_query('Bart: "嘿，你知道吗？服务端的配置在哪里？"')
    assert not compiled.explicit
    assert matches(conn, 'Bart: "嘿，你知道吗？服务端的配置在哪里？"')["cjk"] == {3, 4}
    pasted = compile_query('"the cache is cold again and nobody knows why it happened"')
    assert not pasted.explicit
    assert compile_query('"support group"').explicit


def test_explicit_query_carries_its_words_as_fallback() -> None:
    """A phrase, AND or prefix query carries the OR of its positive words; NOT stays NOT."""
    compiled = compile_query('"group support" AND docker')
    assert compiled.explicit and compiled.fallback is not None
    assert compiled.fallback.match["word"] == '("group" OR "support" OR "docker")'
    negated = compile_query('"group support" NOT caroline')
    assert negated.fallback is not None
    assert negated.fallback.match["word"] == '(("group" OR "support") NOT "caroline")'
    assert compile_query("docker NOT caroline").fallback is None
    assert compile_query("docker staging").fallback is None


def test_long_cjk_run_ors_its_bigrams(conn: sqlite3.Connection) -> None:
    """An unbroken CJK sentence is searched by its bigrams, not verbatim."""
    expr = compile_query("我想知道服务端配置").match["cjk"]
    assert expr is not None and " OR " in expr
    assert matches(conn, "我想知道服务端配置")["cjk"] == {3, 4}


def test_latin_glued_to_cjk_is_found(conn: sqlite3.Connection) -> None:
    """`youer` finds `修改youer服务端` through the bigram index."""
    assert matches(conn, "youer")["cjk"] == {3}
    assert matches(conn, "修改youer")["cjk"] == {3}
    assert matches(conn, "youer服")["cjk"] == {3}


def test_length_is_capped() -> None:
    """Queries are cut at MAX_QUERY_CHARS before compiling."""
    assert len(clean_text("x" * (MAX_QUERY_CHARS + 500))) == MAX_QUERY_CHARS


def test_control_characters_and_surrogates_become_spaces() -> None:
    """NUL, controls and lone surrogates never reach SQLite."""
    assert clean_text("a\x00b\ud800c\u200bd") == "a b c d"


def test_blank_query_is_empty() -> None:
    """Blank or punctuation-only input compiles to nothing."""
    for q in ["", "   ", "?!", '""', "* ^ ()", None]:
        assert compile_query(q).is_empty


def test_plain_or_baseline() -> None:
    """The baseline ORs every word, stopwords included."""
    assert plain_or_query("What did she paint?") == '"what" OR "did" OR "she" OR "paint"'
    assert plain_or_query("???") is None


_PIECES = st.sampled_from(
    [
        "AND", "OR", "NOT", "and", "NEAR", "NEAR(", '"', "*", "(", ")", ":", "^", "{", "}",
        "-", "+", "C++", "foo-bar", "P2.2", "user_id", "修改", "服", "服务端", "youer服务",
        "docker", "caroline", "\x00", "\ud800", "'", "\\", "col:", "a*b", "**", "NOT NOT",
    ]
)  # fmt: skip
_QUERIES = st.one_of(
    st.text(max_size=80),
    st.lists(st.one_of(_PIECES, st.text(max_size=6)), max_size=12).map(" ".join),
    st.lists(st.one_of(_PIECES, st.text(max_size=4)), max_size=12).map("".join),
)


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(query=_QUERIES)
def test_any_string_compiles_and_runs_without_error(conn: sqlite3.Connection, query: str) -> None:
    """Every index accepts the compiled expression of any unicode string."""
    compiled = compile_query(query)
    matches(conn, query)
    for index in INDEXES:
        expr = compiled.match[index]
        if expr is not None and (index != "trigram" or substring.positions_kept(conn)):
            table = TABLES[index]
            conn.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH ?", (expr,)).fetchall()


_LATIN_WORDS = st.from_regex(r"[a-z]{2,9}", fullmatch=True)
_CJK_WORDS = st.text(
    alphabet=st.characters(min_codepoint=0x4E00, max_codepoint=0x4FFF), min_size=2, max_size=6
)
_SEPARATORS = st.sampled_from(
    [" ", "，", "。", "？", "！", "、", "；", "：", "「", "」", "《", "》", "…", ",", ";", "!",
     "?", "(", ")", '"', "“", "”", "—", "\n", " - "]
)  # fmt: skip


@st.composite
def _natural_text(draw: st.DrawFn) -> tuple[str, str]:
    """Natural text of Latin and CJK words between punctuation, and one of its words."""
    words = draw(st.lists(st.one_of(_LATIN_WORDS, _CJK_WORDS), min_size=1, max_size=12))
    text = ""
    for word in words:
        text += draw(_SEPARATORS) + word
    text += draw(_SEPARATORS)
    kept = [w for w in words if w not in STOPWORDS]
    return text, draw(st.sampled_from(kept or words))


@pytest.fixture(scope="module")
def searchable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionStore]:
    """A store holding CORPUS in one session, shared by the property test."""
    with SessionStore(tmp_path_factory.mktemp("q") / "state.db") as store:
        store.create_session("s", started_at=0.0)
        store.append_messages(
            "s",
            [{"role": "user", "content": t, "timestamp": float(i)} for i, t in enumerate(CORPUS)],
        )
        yield store


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=_natural_text())
def test_natural_text_finds_a_message_holding_one_of_its_words(
    searchable: SessionStore, case: tuple[str, str]
) -> None:
    """Whatever the punctuation and scripts, a message holding one word of a natural query
    is found by it (quoted spans included: an explicit query that finds too little falls
    back to its words)."""
    text, word = case
    [mid] = searchable.append_messages("s", [{"role": "user", "content": f"note {word} end"}])
    try:
        hits = searchable.search_messages(text, limit=50)
        assert mid in {h["id"] for h in hits}, (text, word, compile_query(text).match)
    finally:
        searchable.delete_messages([mid])


# Two characters from anywhere, CJK ones (every block the bigram index knows, beyond the
# Basic Multilingual Plane too) most often: word_term's bigram path must be make_term's.
_CJK_SAMPLE = st.characters(min_codepoint=0x3000, max_codepoint=0x9FFF) | st.characters(
    min_codepoint=0x20000, max_codepoint=0x2FFFF
)


@settings(max_examples=400, deadline=None)
@given(st.text(_CJK_SAMPLE | st.characters(), min_size=1, max_size=3))
def test_word_term_is_make_terms_term(word: str) -> None:
    """The term a held-word lookup asks about is the one make_term builds for the word
    (None when it builds none or an OR of several)."""
    node = make_term(word)
    assert word_term(word) == (node.term if node is not None else None)
