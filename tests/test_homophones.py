"""Homophone slips in Chinese queries: a character no bigram of the store holds beside its
neighbours, whose homophone the store holds beside both, searches the homophone, on both
backends; function characters, known bigrams, pasted text and explicit queries are
searched as written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import held_of
from memstrata.query import homophones, spelling
from memstrata.query.homophones import FUNCTION_CHARS, corrected, may_hold_slips, sounds_alike


def test_homophones_are_common_characters_of_the_same_reading() -> None:
    alike = sounds_alike("章")
    assert "张" in alike and "掌" in alike and "章" not in alike
    # Either of a character's two usual readings (长: zhǎng, cháng), not a rare third
    # one (它 is also read yí in the table: 以 is not offered for it).
    assert "张" in sounds_alike("长") and "常" in sounds_alike("长")
    assert "以" not in sounds_alike("它")
    # Function characters are never offered, nor anything outside the table.
    assert not set(sounds_alike("再")) & FUNCTION_CHARS
    assert sounds_alike("a") == () and sounds_alike("。") == ()


def test_a_slip_searches_the_homophone_the_store_holds() -> None:
    held = held_of("张伟", "伟的", "的事")
    assert corrected("章伟的事", held) == ("张伟的事", {"章伟": "张伟"})
    # Asked twice: the query's bigrams, then every bigram a replacement would make.
    assert len(held.asked) == 2
    assert held.asked[0] == ["章伟", "伟的", "的事"]


def test_the_homophone_must_fit_both_neighbours() -> None:
    # 问张 is not held: 张 fits 伟 but not 问, which is no evidence of a slip.
    assert corrected("问章伟", held_of("张伟")) == ("问章伟", {})
    assert corrected("问章伟", held_of("问张", "张伟")) == ("问张伟", {"章伟": "张伟"})


def test_a_particle_neighbour_is_no_evidence() -> None:
    # 据吗 need not be held: 吗 goes with anything.
    assert corrected("数剧吗", held_of("数据")) == ("数据吗", {"数剧": "数据"})
    assert corrected("配制的", held_of("配置")) == ("配置的", {"配制": "配置"})
    # A pronoun or 和 before a word is a neighbour like any other.
    assert corrected("和章伟", held_of("张伟")) == ("和章伟", {})


def test_a_character_the_store_holds_beside_a_neighbour_is_meant() -> None:
    # 前移 is a word the store holds: 前 is what the user meant, whatever 库前 finds.
    held = held_of("数据", "据库", "前移", "库迁", "迁移")
    assert corrected("数据库前移", held) == ("数据库前移", {})
    # A store that never wrote 前移 (nor 库前) but wrote 数据库迁移: 迁 fits both sides.
    assert corrected("数据库前移", held_of("数据", "据库", "库迁", "迁移")) == (
        "数据库迁移",
        {"前移": "迁移"},
    )


def test_function_characters_are_never_slips() -> None:
    assert corrected("你再", held_of("你在")) == ("你再", {})
    assert corrected("他有", held_of("它有")) == ("他有", {})
    # Nor read as one when the homophone is an ordinary character (塔, read tā too).
    assert corrected("他有", held_of("塔有")) == ("他有", {})


def test_nothing_held_nothing_corrected() -> None:
    held = held_of()
    assert corrected("章伟", held) == ("章伟", {})
    assert corrected("hello world", held) == ("hello world", {})
    # Asked about the query's bigram, the replacements', and (two unknown characters
    # side by side) the pairs of replacements; ASCII text is never asked about.
    assert held.asked[0] == ["章伟"] and "张伟" in held.asked[1]
    assert "张维" in held.asked[2] and len(held.asked) == 3


def test_two_slips_side_by_side_are_replaced_together() -> None:
    # Neither 张 nor 伟 alone fits the other slip: only the pair is held.
    held = held_of("张伟")
    assert corrected("章维", held) == ("张伟", {"章维": "张伟"})
    assert len(held.asked) <= 5
    # The pair's outer neighbours must fit as a single slip's do; a particle is no
    # evidence either way.
    assert corrected("问章维", held_of("张伟")) == ("问章维", {})
    assert corrected("问章维", held_of("问张", "张伟")) == ("问张伟", {"章维": "张伟"})
    assert corrected("章维的事", held_of("张伟")) == ("张伟的事", {"章维": "张伟"})
    # With no outer neighbour that counts, only where it starts its run: after a
    # particle, a pair the store never held is more often a word it has not seen.
    assert corrected("为什么章维的事", held_of("张伟", "为什", "什么")) == ("为什么章维的事", {})
    assert corrected("数剧酷迁移", held_of("数据", "据库", "库迁", "迁移")) == (
        "数据库迁移",
        {"剧酷": "据库"},
    )


def test_too_many_pairs_are_not_asked_about(monkeypatch: pytest.MonkeyPatch) -> None:
    # 章 and 维 have 15 and 32 homophones: 480 pairs, past a bound of 100.
    monkeypatch.setattr(homophones, "MAX_PAIRS", 100)
    held = held_of("张伟")
    assert corrected("章维", held) == ("章维", {})
    assert all("张伟" not in asked for asked in held.asked)


def test_pasted_text_is_searched_as_written_without_asking() -> None:
    held = held_of("张伟")
    long = "今天天气很好我们去公园散步吧" * 4 + "章伟"
    assert not may_hold_slips(long)
    assert corrected(long, held) == (long, {})
    assert held.asked == []


def test_a_long_text_is_not_read_for_slips() -> None:
    held = held_of("张伟")
    text = "章伟" + " and more" * (homophones.MAX_CHARS // 9 + 1)
    assert len(text) > homophones.MAX_CHARS
    assert corrected(text, held) == (text, {})
    assert held.asked == []
    # The bound is read without folding or listing the text's runs: a megabyte of
    # Chinese text is turned away at its 49th bigram.
    assert not may_hold_slips("数据库迁移" * 200_000)


def test_too_many_unknown_characters_are_a_new_topic() -> None:
    # Seven characters none of whose bigrams the store holds: not a slip in a question
    # the store can answer, a question about something it never held.
    held = held_of("张伟")
    assert len("章伟量子计算机") > homophones.MAX_SLIPS
    assert corrected("章伟量子计算机", held) == ("章伟量子计算机", {})
    assert len(held.asked) == 1


def test_japanese_text_is_searched_as_written() -> None:
    # Kana say the query is Japanese: its kanji are not typed by Mandarin readings.
    held = held_of("张伟")
    assert corrected("章伟さんの話", held) == ("章伟さんの話", {})
    assert corrected("章伟カード", held) == ("章伟カード", {})
    assert held.asked == []
    # The middle dot and long-vowel mark of Chinese transliterations are not kana.
    assert corrected("章伟・史密斯", held_of("张伟")) == ("张伟・史密斯", {"章伟": "张伟"})


def test_traditional_characters_keep_their_place() -> None:
    text, fixes = corrected("問章偉的事", held_of("问张", "张伟", "伟的", "的事"))
    # Folded to look up, written as typed but for the corrected character.
    assert text == "問张偉的事"
    assert fixes == {"章偉": "张伟"}


@given(st.text(alphabet=st.sampled_from('章张伟的事数据库迁移前 abc，。?"*')))
def test_any_text_is_corrected_without_raising(text: str) -> None:
    held = held_of("张伟", "迁移", "数据", "据库", "库迁")
    fixed, fixes = corrected(text, held)
    assert len(fixed) == len(text)
    assert bool(fixes) == (fixed != text)
    assert len(held.asked) <= 5 and all(asked for asked in held.asked)


def test_respell_combines_english_typos_and_chinese_slips() -> None:
    held = held_of("education", "张伟")
    assert spelling.respell("章伟 educaton", held) == (
        "张伟 education",
        {"educaton": "education", "章伟": "张伟"},
    )
    # Explicit queries are searched as written.
    assert spelling.respell('"章伟"', held) == ('"章伟"', {})
    assert spelling.respell("章伟 AND 数据", held) == ("章伟 AND 数据", {})
    assert spelling.searched_as({"章伟": "张伟"}) == (
        "Searched '张伟' for '章伟' (quote a word to search it as written)."
    )


def test_without_the_reading_table_queries_are_searched_as_written(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import importlib.util

    monkeypatch.setattr(homophones, "_table", None)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    homophones.sounds_alike.cache_clear()
    try:
        with caplog.at_level("WARNING"):
            assert corrected("章伟", held_of("张伟")) == ("章伟", {})
        assert "homophone correction is off" in caplog.text
    finally:
        homophones.sounds_alike.cache_clear()
    monkeypatch.setattr(homophones, "_table", None)


# -- through the stores, on every backend -----------------------------------------------------


def fill(store: Any) -> None:
    store.create_session("team", source="cli")
    store.append_message("team", "user", "上次和张伟讨论了数据库迁移的问题，结论是下周二做。")
    store.create_session("park", source="cli")
    store.append_message("park", "user", "明天去公园看看花。")


def test_a_slip_finds_what_the_name_would(store: Any) -> None:
    fill(store)
    hits = store.search_sessions("上次和章伟说了什么？")
    assert hits and hits[0]["session_id"] == "team"
    assert "张伟<<<" in hits[0]["snippet"]
    assert store.rank("章伟的事").corrections == {"章伟": "张伟"}
    assert store.respell("章伟") == ("张伟", {"章伟": "张伟"})
    # Both characters of the name typed wrong.
    assert store.respell("章维") == ("张伟", {"章维": "张伟"})
    assert [h["session_id"] for h in store.search_sessions("章维的问题")][:1] == ["team"]
    assert [h["session_id"] for h in store.search_messages("章伟")] == ["team"]
    # Quoted, or with correction off, it is searched as written.
    assert store.search_messages('"章伟"') == []
    store.typos = False
    assert store.search_messages("章伟") == []


def test_facts_search_and_recall_correct_slips(facts: Any) -> None:
    colleague = facts.add("张伟是我的同事，负责数据库迁移。")
    facts.add("明天去公园看看花。")
    assert [f.id for f in facts.search("章伟")] == [colleague.id]
    assert [f.id for f in facts.search("章维")] == [colleague.id]
    assert facts.search('"章伟"') == []
    assert [f.id for f in facts.recall("章伟负责什么")] == [colleague.id]


def test_session_search_says_what_it_searched(tmp_path: Path, memstrata_home: Path) -> None:
    from helpers import make_config
    from memstrata.search.recall import session_search
    from memstrata.store.sqlite.store import SessionStore

    with SessionStore(tmp_path / "state.db") as store:
        fill(store)
        result = session_search(store, "章伟", config=make_config(memstrata_home))
        assert result["corrected"] == {"章伟": "张伟"}
        assert "Searched '张伟' for '章伟'" in result["message"]
        assert "张伟" in result["results"][0]["excerpt"]
