"""Typos in natural queries: a word no message holds, one edit from an English word some
message does, searches that word, on both backends; real words, short words, code-like
terms and explicit queries are searched as written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import held_of
from memstrata.query import spelling
from memstrata.query.spelling import candidate_typos, corrections, edits, respelled


def test_candidates_are_long_non_english_plain_words() -> None:
    text = (
        "What was Caroline's educaton about? Ask redis, kubernetes, auth-api, file.py, "
        "snake_case, v2beta, #tagg, user@hostt, /usr/binn and wrting plus hikng."
    )
    # A full stop may follow a word (`hikng.`); a dot inside a name may not (`file.py`).
    assert candidate_typos(text) == ["educaton", "redis", "kubernetes", "wrting", "hikng"]
    # English words, however rare in a store, are never candidates.
    assert candidate_typos("writing political negative photography destress") == ["destress"]
    assert candidate_typos("") == []


def test_edits_are_one_step_away() -> None:
    found = edits("abc")
    assert {"ab", "bac", "abd", "abcd", "xabc"} <= found
    assert "abc" not in found and "cba" not in found
    # Deleted, swapped, changed, inserted: never more than one letter longer or shorter.
    assert {len(e) for e in edits("education")} == {8, 9, 10}


def test_the_commonest_english_neighbour_the_store_holds_wins() -> None:
    held = held_of("received", "relieved", "educator", "education", "fundraiser")
    assert corrections("Who recieved the educaton award at the funraiser?", held) == {
        "recieved": "received",
        "educaton": "education",
        "funraiser": "fundraiser",
    }
    # One question to the store, with the typos and their English neighbours.
    assert len(held.asked) == 1
    # Only what the store holds is a correction: `educator` when `education` is absent.
    assert corrections("educaton", held_of("educator")) == {"educaton": "educator"}
    assert corrections("educaton", held_of()) == {}


def test_a_word_the_store_holds_is_never_corrected() -> None:
    assert corrections("my educaton notes", held_of("educaton", "education")) == {}


def test_no_store_question_without_a_candidate_with_neighbours() -> None:
    held = held_of("education")
    assert corrections("What did Caroline paint in the kubernetes cluster?", held) == {}
    assert held.asked == []


def test_too_many_candidates_is_not_a_question_with_a_slip() -> None:
    text = "Wir haben gestern lange über Kubernetes geredet, danach nochmals zusammen gegessen"
    assert len(candidate_typos(text)) > spelling.MAX_TYPOS
    assert corrections(text, held_of("gotten", "rested")) == {}


def test_respelled_replaces_whole_words_in_any_case() -> None:
    fixes = {"educaton": "education"}
    assert respelled("Educaton. EDUCATON educaton-x xeducaton", fixes) == (
        "education. education educaton-x xeducaton"
    )
    assert respelled("unchanged", {}) == "unchanged"


@given(st.text(max_size=300))
def test_any_text_is_corrected_without_raising(text: str) -> None:
    fixes = corrections(text, lambda ws: [w for w in ws if w.startswith("e")])
    for typo, word in fixes.items():
        assert typo in candidate_typos(text) and word in edits(typo)
    fixed = respelled(text, fixes)
    assert not fixes or fixed != text


# -- through the session store, on every backend -------------------------------------------


def fill(store: Any) -> None:
    store.create_session("school", source="cli")
    store.append_message("school", "user", "Caroline finished her education degree in May.")
    store.create_session("waiting", source="cli")
    store.append_message("waiting", "user", "We were waiting for the fundraiser to start.")
    store.create_session("other", source="cli")
    store.append_message("other", "user", "The garden needs water every morning.")


def test_a_typo_finds_what_the_word_would(store: Any) -> None:
    fill(store)
    hits = store.search_sessions("What was Caroline's educaton?")
    assert hits and hits[0]["session_id"] == "school"
    assert ">>>education<<<" in hits[0]["snippet"]
    ranked = store.rank("when did the funraiser start")
    assert ranked.corrections == {"funraiser": "fundraiser"}
    assert ranked.candidates and ranked.candidates[0].session_id == "waiting"
    assert [h["session_id"] for h in store.search_messages("educaton")] == ["school"]
    for sort in ("newest", "oldest"):
        assert [h["session_id"] for h in store.search_messages("educaton", sort=sort)] == ["school"]


def test_quoted_words_and_real_words_are_searched_as_written(store: Any) -> None:
    fill(store)
    assert store.search_messages('"educaton"') == []
    assert store.rank('"educaton"').corrections == {}
    # `writing` is English: a question about it is not a typo of `waiting`.
    assert store.rank("writing").corrections == {}
    assert store.search_messages("writing") == []


def test_a_word_the_store_holds_is_searched_as_written(store: Any) -> None:
    fill(store)
    store.create_session("typo", source="cli")
    store.append_message("typo", "user", "my educaton notes, spelt as I spell it")
    ranked = store.rank("educaton")
    assert ranked.corrections == {}
    assert {c.session_id for c in ranked.candidates} == {"typo"}


@pytest.mark.postgres
def test_another_tenants_words_are_not_a_vocabulary() -> None:
    from conftest import PG_DSN, fresh_namespace
    from memstrata.store.postgres import PostgresSessionStore

    with (
        PostgresSessionStore(PG_DSN, namespace=fresh_namespace(), pool_size=1) as mine,
        PostgresSessionStore(PG_DSN, namespace=fresh_namespace(), pool_size=1) as theirs,
    ):
        try:
            fill(theirs)
            mine.create_session("mine", source="cli")
            mine.append_message("mine", "user", "Nothing about school here.")
            # Their `education` neither corrects my typo nor shows through it.
            assert mine.rank("educaton").corrections == {}
            assert mine.search_messages("educaton") == []
        finally:
            mine.delete_namespace()
            theirs.delete_namespace()


# -- through the facts store, on every backend ----------------------------------------------


def test_facts_search_and_recall_correct_typos(facts: Any) -> None:
    school = facts.add("Caroline finished her education degree in May.")
    facts.add("The garden needs water every morning.")
    assert [f.id for f in facts.search("Caroline's educaton")] == [school.id]
    assert facts.search('"educaton"') == []
    assert [f.id for f in facts.recall("how is my educaton going?")] == [school.id]
    # A real English word the facts do not hold is not a typo of one they do.
    assert facts.recall("the wording of the lease") == []


def test_without_the_word_list_queries_are_searched_as_written(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def missing(name: str) -> Any:
        raise ModuleNotFoundError(f"No module named {name!r}")

    monkeypatch.setattr(spelling, "_english", None)
    monkeypatch.setattr(spelling.resources, "files", missing)
    assert candidate_typos("educaton") == []
    assert corrections("educaton", held_of("education")) == {}
    assert "pip install pyspellchecker" in caplog.text


def test_a_latin_word_glued_to_cjk_is_held(store: Any) -> None:
    # `youer` is in the CJK index only (glued to Chinese text), `your` everywhere: the
    # query is no typo, and a stopword is never a correction anyway.
    store.create_session("glued", source="cli")
    store.append_message("glued", "user", "请修改youer服务端的配置")
    store.create_session("english", source="cli")
    store.append_message("english", "user", "Your yogurt is in the fridge.")
    ranked = store.rank("youer")
    assert ranked.corrections == {}
    assert [c.session_id for c in ranked.candidates] == ["glued"]
    assert corrections("yogurr", store_held(store)) == {"yogurr": "yogurt"}


def store_held(store: Any) -> Any:
    def held(words: list[str]) -> list[str]:
        with store._transaction(snapshot=True) as tx:
            return list(tx.held_words(words))

    return held


def test_facts_hold_latin_words_glued_to_cjk(facts: Any) -> None:
    glued = facts.add("请修改youer服务端的配置")
    facts.add("Your yogurt is in the fridge.")
    assert [f.id for f in facts.search("youer")] == [glued.id]
    with facts._transaction() as tx:
        assert tx.held_words(["youer", "yogurt", "educaton"]) == ["youer", "yogurt"]


# -- session_search, the model's tool --------------------------------------------------------


def test_session_search_cuts_its_excerpt_around_the_corrected_word(
    tmp_path: Path, memstrata_home: Path
) -> None:
    from helpers import make_config
    from memstrata.search.recall import session_search
    from memstrata.store.sqlite.store import SessionStore

    with SessionStore(tmp_path / "state.db") as store:
        store.create_session("big", source="cli")
        # The match stands in the middle: an excerpt not cut around it leaves it out.
        store.append_message(
            "big",
            "user",
            "filler text " * 2000 + " the fundraiser moved to Friday. " + "more filler " * 2000,
        )
        result = session_search(store, "funraiser", config=make_config(memstrata_home))
        assert result["query"] == "funraiser"
        assert result["corrected"] == {"funraiser": "fundraiser"}
        assert "Searched 'fundraiser' for 'funraiser'" in result["message"]
        assert "the fundraiser moved to Friday" in result["results"][0]["excerpt"]
        quoted = session_search(store, '"funraiser"', config=make_config(memstrata_home))
        assert quoted["results"] == [] and "corrected" not in quoted


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a memstrata subprocess whose store holds the school session."""
    from helpers import subprocess_env
    from memstrata.store.sqlite.store import SessionStore

    home = tmp_path / "cli-home"
    home.mkdir()
    with SessionStore(home / "state.db") as store:
        store.create_session("school", source="cli")
        store.append_message("school", "user", "Caroline finished her education degree in May.")
    return subprocess_env(home)


def test_the_cli_says_what_it_searched(cli_env: dict[str, str]) -> None:
    from helpers import run_memstrata

    run = run_memstrata("search", "educaton", "--no-summary", env=cli_env)
    assert run.returncode == 0, run.stderr
    assert "finished her education degree" in run.stdout
    assert "Searched 'education' for 'educaton' (quote a word to search it as written)." in (
        run.stdout
    )


def test_sessions_search_says_what_it_searched(cli_env: dict[str, str]) -> None:
    from helpers import run_memstrata

    run = run_memstrata("sessions", "search", "educaton", env=cli_env)
    assert run.returncode == 0, run.stderr
    assert "education" in run.stdout
    assert "Searched 'education' for 'educaton'" in run.stderr
    as_json = run_memstrata("sessions", "search", "educaton", "--json", env=cli_env)
    assert as_json.returncode == 0 and as_json.stderr == ""


def test_a_huge_word_is_no_candidate() -> None:
    """Edits grow with a word's length (a pasted run of 2,000 letters made 106,000
    strings of 2 KB each); no English word is longer than MAX_LETTERS, so a longer word
    is searched as written, at once."""
    held = held_of("x" * 45)
    assert candidate_typos("x" * 2000) == []
    assert corrections("x" * 2000 + " " + "y" * (spelling.MAX_LETTERS + 1), held) == {}
    assert held.asked == []
    assert candidate_typos("pneumonoultramicroscopicsilicovolcanoconiosiss") == [
        "pneumonoultramicroscopicsilicovolcanoconiosiss"
    ]


def test_a_forgotten_fact_is_no_vocabulary(facts: Any) -> None:
    """A forgotten fact leaves recall and search; a correction to its words would tell
    that the store once held them."""
    secret = facts.add("The diagnosis came back: pregnant, due in June.")
    facts.add("The garden needs water every morning.")
    with facts._transaction() as tx:
        assert tx.held_words(["pregnant", "garden"]) == ["pregnant", "garden"]
    facts.forget(secret.id)
    with facts._transaction() as tx:
        assert tx.held_words(["pregnant", "garden"]) == ["garden"]
    assert facts.search("pregnent") == []
    assert facts.recall("am I still pregnent?") == []


def test_a_deleted_message_is_no_vocabulary(store: Any) -> None:
    fill(store)
    assert store.rank("funraiser").corrections == {"funraiser": "fundraiser"}
    store.delete_session("waiting")
    assert store.rank("funraiser").corrections == {}
    assert store.search_messages("funraiser") == []


# -- search.typos ------------------------------------------------------------------------------


def test_search_typos_off_searches_every_word_as_written(
    tmp_path: Path, memstrata_home: Path
) -> None:
    from helpers import make_config
    from memstrata.providers.facts.opening import open_facts
    from memstrata.search.recall import session_search
    from memstrata.store.sqlite.store import SessionStore

    config = make_config(memstrata_home, typos=False)
    with SessionStore(tmp_path / "state.db", config=config) as store:
        assert store.typos is False
        fill(store)
        assert store.rank("educaton").corrections == {}
        assert store.search_messages("educaton") == []
        assert store.search_messages("educaton", sort="newest") == []
        assert store.respell("educaton") == ("educaton", {})
        result = session_search(store, "educaton", config=config)
        assert result["results"] == [] and "corrected" not in result
        store.typos = True  # settable: the next search corrects again
        assert store.rank("educaton").corrections == {"educaton": "education"}
    facts = open_facts(config, home=tmp_path / "facts")
    try:
        assert facts.typos is False
        facts.add("Caroline finished her education degree in May.")
        assert facts.search("educaton") == [] and facts.recall("my educaton?") == []
    finally:
        facts.close()


@pytest.mark.postgres
def test_search_typos_off_on_postgres(memstrata_home: Path) -> None:
    from conftest import PG_DSN, fresh_namespace
    from helpers import make_config
    from memstrata.store.postgres import PostgresSessionStore

    config = make_config(memstrata_home, typos=False)
    with PostgresSessionStore(PG_DSN, namespace=fresh_namespace(), config=config) as store:
        try:
            fill(store)
            assert store.rank("educaton").corrections == {}
            assert store.search_messages("educaton") == []
        finally:
            store.delete_namespace()


def test_session_search_asks_the_store_once(
    tmp_path: Path, memstrata_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """session_search corrects the query once, for the search and its excerpts alike: the
    search it runs does not ask the store about the same words again."""
    from helpers import make_config
    from memstrata.search.recall import session_search
    from memstrata.store.sqlite.store import SessionStore

    asked = []
    original = spelling.corrections

    def counted(text: Any, held: Any) -> dict[str, str]:
        asked.append(text)
        return original(text, held)

    monkeypatch.setattr(spelling, "corrections", counted)
    with SessionStore(tmp_path / "state.db") as store:
        fill(store)
        store.create_session("build", source="cli")
        store.append_message("build", "user", "The gradle build is slow.")
        # `gradle` is no English word but the store holds it: a candidate, not corrected.
        result = session_search(
            store, "gradle and the funraiser", config=make_config(memstrata_home)
        )
        assert result["corrected"] == {"funraiser": "fundraiser"}
        assert {r["session_id"] for r in result["results"]} == {"build", "waiting"}
    assert asked == ["gradle and the funraiser"]
