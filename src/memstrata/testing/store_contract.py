"""The shared behaviour suite of the session-store contract, for every backend.

A backend passes when a pytest class that provides a ``store`` fixture (a fresh, empty
store, closed afterwards) and inherits :class:`StoreContractSuite` passes::

    import pytest
    from memstrata.testing.store_contract import StoreContractSuite

    class TestMyBackend(StoreContractSuite):
        @pytest.fixture
        def store(self, tmp_path):
            with MyBackendStore(tmp_path / "db") as store:
                yield store

memstrata runs it against SQLite and PostgreSQL (``tests/test_store_contract.py``); a
new backend runs it against itself. The suite checks what every caller above the store
relies on: the row shapes of :mod:`memstrata.store.contract`, the errors, lineage and
titles, search in English and Chinese, the caches, and that ``write()`` is atomic. It
imports nothing from pytest, so this module loads without the test extras.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from typing import Any

from memstrata.errors import (
    AmbiguousSessionError,
    SessionNotFoundError,
    SessionStoreError,
)
from memstrata.query.paging import MAX_PAGE
from memstrata.store.contract import (
    MessageHit,
    MessageRow,
    MessageWindow,
    SessionHit,
    SessionListing,
    SessionRow,
    SessionStoreContract,
)

__all__ = ["StoreContractSuite"]

Store = SessionStoreContract


def _raises(error: type[BaseException], call: Callable[[], object]) -> BaseException:
    """The error ``call`` raised; fails when it raised none or another kind."""
    try:
        call()
    except error as exc:
        return exc
    raise AssertionError(f"expected {error.__name__}")


def _shape(row: Mapping[str, Any], kind: Any) -> None:
    """``row`` has every required key of the TypedDict ``kind`` and no undeclared one."""
    keys = set(row)
    missing = kind.__required_keys__ - keys
    extra = keys - kind.__required_keys__ - kind.__optional_keys__
    assert not missing and not extra, f"{kind.__name__}: missing {missing}, extra {extra}"


def _conversation(store: Store, session_id: str, *texts: str, **session: Any) -> list[int]:
    store.create_session(session_id, **session)
    roles = ("user", "assistant")
    return store.append_messages(
        session_id, [{"role": roles[i % 2], "content": t} for i, t in enumerate(texts)]
    )


class StoreContractSuite:
    """Inherit in a pytest class that defines a ``store`` fixture; see the module doc."""

    # -- sessions ------------------------------------------------------------------------

    def test_a_session_row_has_the_contract_shape(self, store: Store) -> None:
        store.create_session("s1", source="telegram", model="m", model_config={"t": 0.2})
        row = store.get_session("s1")
        assert row is not None
        _shape(row, SessionRow)
        assert (row["id"], row["source"], row["model"]) == ("s1", "telegram", "m")
        assert row["model_config"] == {"t": 0.2}
        assert row["ended_at"] is None and row["message_count"] == 0
        assert store.get_session("nope") is None

    def test_unknown_sessions_raise_not_found(self, store: Store) -> None:
        _raises(SessionNotFoundError, lambda: store.append_message("nope", "user", "hi"))
        _raises(SessionNotFoundError, lambda: store.end_session("nope", "done"))
        _raises(SessionNotFoundError, lambda: store.resolve_session_id("nope"))
        turn = [
            {"role": "user", "content": "zqxorphan one"},
            {"role": "assistant", "content": "two"},
        ]
        _raises(SessionNotFoundError, lambda: store.append_messages("nope", turn))
        _raises(SessionNotFoundError, lambda: store.append_messages("nope", []))
        # Nothing of the refused turn was written.
        assert store.get_messages("nope", include_inactive=True) == []
        assert store.search_messages("zqxorphan") == []
        store.create_session("s1")
        assert len(store.append_messages("s1", turn)) == 2
        row = store.get_session("s1")
        assert row is not None and row["message_count"] == 2

    def test_bad_arguments_are_refused_with_the_store_error(self, store: Store) -> None:
        store.create_session("s1")
        _raises(SessionStoreError, lambda: store.create_session(""))
        _raises(SessionStoreError, lambda: store.append_message("s1", "", "no role"))
        _raises(SessionStoreError, lambda: store.search_messages("x", limit=-1))
        _raises(SessionStoreError, lambda: store.get_messages_around(1, window=-1))

    def test_values_the_store_cannot_hold_are_refused_and_nothing_is_written(
        self, store: Store
    ) -> None:
        """A timestamp that is no finite number, a count past 2**63, a source past a
        label's length, tool calls nested past what JSON encoding recurses through: each
        gets the store error naming the value (not the driver's error or a
        RecursionError, not a NaN stored), and the write it came with leaves nothing."""
        store.create_session("s1")
        for bad in (float("nan"), float("inf"), -float("inf"), 10**400):
            _raises(SessionStoreError, lambda: store.create_session("s2", started_at=bad))  # noqa: B023
            message = {"role": "user", "content": "kept out", "timestamp": bad}
            _raises(SessionStoreError, lambda: store.append_messages("s1", [message]))  # noqa: B023
        _raises(SessionStoreError, lambda: store.create_session("s2", source="x" * 5000))
        deep: list[Any] = []
        for _ in range(5000):
            deep = [deep]
        for calls in ([{"id": "1", "function": {"name": "f", "arguments": deep}}], "[" * 9000):
            call = {"role": "assistant", "content": "kept out", "tool_calls": calls}
            _raises(SessionStoreError, lambda: store.append_messages("s1", [call]))  # noqa: B023
        for field in ("content", "api_content"):
            nested = {"role": "user", "content": "kept out", field: [{"type": "text", "x": deep}]}
            _raises(SessionStoreError, lambda: store.append_messages("s1", [nested]))  # noqa: B023
        huge = {"role": "user", "content": "kept out", "token_count": 2**63}
        _raises(SessionStoreError, lambda: store.append_messages("s1", [huge]))
        _raises(SessionStoreError, lambda: store.update_token_counts("s1", input_tokens=2**63))
        assert store.get_session("s2") is None
        row = store.get_session("s1")
        assert row is not None and row["message_count"] == 0 and row["input_tokens"] == 0
        assert store.search_messages("kept") == []

    def test_a_word_longer_than_a_lexeme_is_stored_and_searched(self, store: Store) -> None:
        """A word past 2,046 bytes (PostgreSQL's longest lexeme: a pasted base64 blob, a
        minified line) beside Chinese text is stored and its message found by its other
        words; searching for the long word itself answers without an error."""
        blob = "é" * 1500  # 3,000 bytes
        ids = _conversation(store, "s1", f"数据库{blob} 迁移完成", "hello " + "y" * 3000)
        assert [h["id"] for h in store.search_messages("数据库")] == [ids[0]]
        assert [h["id"] for h in store.search_messages("hello")] == [ids[1]]
        for query in (blob, "y" * 3000, f"数据库{blob}", f'"{blob}"', f"{blob[:700]}*"):
            store.search_messages(query)
            store.search_sessions(query)

    def test_a_word_at_the_lexeme_bound_is_stored_and_searched(self, store: Store) -> None:
        """Words of 2,046 to 2,048 bytes beside Chinese: a tsvector holds 2,047 bytes but
        a tsquery (PostgreSQL 18) only 2,046, so the bound is the smaller; a word of
        exactly 2,047 once went into the CJK vector and its search failed."""
        for size in (2046, 2047, 2048):
            word = "y" * size
            (msg,) = _conversation(store, f"s{size}", f"数据库{word} 迁移完成")
            assert msg in [h["id"] for h in store.search_messages("数据库")]
            for query in (word, f"数据库{word}", f"\x00{word}", f'"{word[:60]}"'):
                assert isinstance(store.search_messages(query), list)
                assert isinstance(store.search_sessions(query), list)

    def test_a_message_of_megabytes_is_stored_whole_and_found(self, store: Store) -> None:
        """A tool's output of megabytes with as many distinct words, or a Chinese text of
        250,000 characters (a tsvector of either would pass the 1 MB PostgreSQL allows),
        is stored whole and found by a word near its start."""
        rng = random.Random(3)
        words = [f"w{rng.randrange(10**8)}" for _ in range(200_000)]
        chinese = "".join(chr(0x4E00 + rng.randrange(20_000)) for _ in range(250_000))
        ids = _conversation(store, "s1", " ".join(words), chinese)
        message = store.get_message(ids[0])
        assert message is not None and message["content"] == " ".join(words)
        assert [h["id"] for h in store.search_messages(words[3])] == [ids[0]]
        assert ids[1] in [h["id"] for h in store.search_messages(chinese[100:104])]

    def test_a_page_is_bounded_where_sql_can_hold_it(self, store: Store) -> None:
        """A limit or offset of any size gets the store error naming the range, never an
        overflow of SQL's integers; the largest page allowed reads what there is."""
        _conversation(store, "s1", "hello")
        huge = 10**30
        for call in (
            lambda: store.search_messages("hello", limit=huge),
            lambda: store.search_messages("hello", offset=huge),
            lambda: store.search_sessions("hello", limit=huge),
            lambda: store.list_sessions_rich(limit=huge),
            lambda: store.list_sessions_rich(offset=huge),
            lambda: store.list_sessions_rich(limit=0),
        ):
            _raises(SessionStoreError, call)
        assert len(store.search_messages("hello", limit=MAX_PAGE, offset=0)) == 1
        assert store.search_messages("hello", limit=MAX_PAGE, offset=MAX_PAGE) == []
        assert [r["id"] for r in store.list_sessions_rich(limit=MAX_PAGE)] == ["s1"]

    def test_ids_and_windows_past_sql_integers_are_no_rows(self, store: Store) -> None:
        """An id no 64-bit integer holds names no row (deleted or archived: none; shown:
        the store error), and a window of any size shows the whole session."""
        ids = _conversation(store, "s1", "hello", "there", "again")
        huge = 10**30
        assert store.delete_messages([huge, -huge]) == 0
        assert store.archive_messages("s1", [huge]) == 0
        _raises(SessionStoreError, lambda: store.get_messages_around(huge))
        shown = store.get_messages_around(ids[1], window=huge)
        assert [m["id"] for m in shown["messages"]] == ids
        assert shown["messages_before"] == shown["messages_after"] == 0
        assert len(store.get_messages("s1")) == 3

    def test_the_first_end_reason_wins_and_reopen_clears_it(self, store: Store) -> None:
        store.create_session("s1")
        assert store.end_session("s1", "user_exit", ended_at=100.0) is True
        assert store.end_session("s1", "other") is False
        row = store.get_session("s1")
        assert row is not None and (row["end_reason"], row["ended_at"]) == ("user_exit", 100.0)
        store.reopen_session("s1")
        row = store.get_session("s1")
        assert row is not None and row["ended_at"] is None and row["end_reason"] is None

    def test_usage_adds_up_and_the_prompt_is_kept(self, store: Store) -> None:
        store.create_session("s1")
        store.update_token_counts("s1", input_tokens=10, output_tokens=2, estimated_cost_usd=0.5)
        store.update_token_counts("s1", input_tokens=5, cache_read_tokens=7)
        store.update_system_prompt("s1", "You are terse.")
        row = store.get_session("s1")
        assert row is not None
        assert (row["input_tokens"], row["output_tokens"], row["cache_read_tokens"]) == (15, 2, 7)
        assert row["api_call_count"] == 2 and row["system_prompt"] == "You are terse."

    def test_ids_resolve_by_unique_prefix_only(self, store: Store) -> None:
        for sid in ("20261203_aaa", "20261203_abb", "20261204_ccc"):
            store.create_session(sid)
        assert store.resolve_session_id("20261204") == "20261204_ccc"
        assert store.resolve_session_id("20261203_aaa") == "20261203_aaa"
        _raises(AmbiguousSessionError, lambda: store.resolve_session_id("20261203_a"))

    def test_delete_takes_the_messages_and_prune_the_old_ended(self, store: Store) -> None:
        # older_than counts days
        old = time.time() - 400 * 86400
        _conversation(store, "old", "a year ago", started_at=old)
        store.end_session("old", "done", ended_at=old)
        _conversation(store, "new", "today")
        assert store.prune_sessions(older_than=300, dry_run=True) == ["old"]
        assert store.get_session("old") is not None
        assert store.prune_sessions(older_than=300) == ["old"]
        assert store.get_session("old") is None and store.get_session("new") is not None
        assert store.delete_session("new") == ["new"]
        assert store.get_messages("new") == [] and store.search_messages("today") == []

    # -- titles and lineage --------------------------------------------------------------

    def test_titles_are_unique_and_resolve(self, store: Store) -> None:
        store.create_session("s1")
        store.create_session("s2")
        assert store.set_session_title("s1", "Kyoto trip") == "Kyoto trip"
        assert store.get_session_title("s1") == "Kyoto trip"
        assert store.resolve_session_by_title("Kyoto trip") == "s1"
        _raises(SessionStoreError, lambda: store.set_session_title("s2", "Kyoto trip"))
        assert store.get_next_title_in_lineage("Kyoto trip") == "Kyoto trip #2"

    def test_a_compression_chain_is_one_conversation(self, store: Store) -> None:
        _conversation(store, "root", "first part about the kyoto budget")
        store.set_session_title("root", "Trip")
        store.end_session("root", "compression")
        store.create_session("tip", parent_session_id="root", lineage_kind="compression")
        store.append_message("tip", "user", "second part")
        assert store.get_compression_tip("root") == "tip"
        assert store.get_lineage_root("tip") == "root"
        assert store.get_compression_chain("tip") == ["root", "tip"]
        assert set(store.get_lineage_ids("root")) == {"root", "tip"}
        assert store.live_session_ids("tip")[0] == "tip"
        listing = store.list_sessions_rich()
        assert len(listing) == 1
        _shape(listing[0], SessionListing)
        assert listing[0]["id"] == "tip" and listing[0]["root_id"] == "root"
        assert listing[0]["session_ids"] == ["root", "tip"]
        assert listing[0]["preview"].startswith("first part")

    def test_archived_sessions_leave_the_listing(self, store: Store) -> None:
        _conversation(store, "s1", "hello")
        _conversation(store, "s2", "hello again")
        store.set_session_archived("s1")
        assert [r["id"] for r in store.list_sessions_rich()] == ["s2"]
        shown = store.list_sessions_rich(include_archived=True)
        assert {r["id"] for r in shown} == {"s1", "s2"}

    def test_the_listing_keeps_a_span_of_activity(self, store: Store) -> None:
        def day(number: int) -> float:
            return 1_700_000_000.0 + number * 86_400

        def ids(**bounds: Any) -> list[str]:
            return [r["id"] for r in store.list_sessions_rich(**bounds)]

        for number, start in enumerate((1, 5, 9)):
            store.create_session(f"s{number}", started_at=day(start))
            store.append_message(f"s{number}", "user", f"day {start}", timestamp=day(start))
        # A compressed conversation counts as active when its newest part was.
        store.end_session("s0", "compression")
        store.create_session(
            "s0b", parent_session_id="s0", lineage_kind="compression", started_at=day(7)
        )
        store.append_message("s0b", "user", "day 7", timestamp=day(7))
        assert ids() == ["s2", "s0b", "s1"]
        assert ids(active_until=day(8)) == ["s0b", "s1"]
        assert ids(active_since=day(6)) == ["s2", "s0b"]
        assert ids(active_since=day(2), active_until=day(6)) == ["s1"]
        assert ids(active_until=day(8), limit=1, offset=1) == ["s1"]
        _raises(SessionStoreError, lambda: ids(active_since=day(6), active_until=day(2)))
        _raises(SessionStoreError, lambda: ids(active_since=day(1), order_by_last_active=False))

    # -- messages ------------------------------------------------------------------------

    def test_messages_round_trip_with_the_contract_shape(self, store: Store) -> None:
        store.create_session("s1")
        calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
        first = store.append_message("s1", "user", "数据库迁移 plan")
        second = store.append_message("s1", "assistant", None, tool_calls=calls)
        third = store.append_message("s1", "tool", "ok", tool_name="f", tool_call_id="c1")
        assert first < second < third
        rows = store.get_messages("s1")
        for row in rows:
            _shape(row, MessageRow)
        assert [r["content"] for r in rows] == ["数据库迁移 plan", None, "ok"]
        one = store.get_message(second)
        assert one is not None and one["tool_calls"] == calls
        assert store.get_message(10**12) is None
        conversation = store.get_messages_as_conversation("s1")
        assert [m["role"] for m in conversation] == ["user", "assistant", "tool"]
        session = store.get_session("s1")
        assert session is not None and session["message_count"] == 3

    def test_a_window_around_a_message(self, store: Store) -> None:
        ids = _conversation(store, "s1", *(f"line {i}" for i in range(9)))
        window: MessageWindow = store.get_messages_around(ids[4], window=2)
        assert set(window) == set(MessageWindow.__required_keys__)
        assert [m["id"] for m in window["messages"]] == ids[2:7]
        assert (window["messages_before"], window["messages_after"]) == (2, 2)
        assert window["anchor"]["id"] == ids[4]
        _raises(SessionStoreError, lambda: store.get_messages_around(10**12))

    def test_archived_rows_stay_searchable_but_not_live(self, store: Store) -> None:
        ids = _conversation(store, "s1", "the zeppelin hangar", "noted")
        assert store.archive_messages("s1", [ids[0]]) == 1
        assert [m["id"] for m in store.get_messages("s1")] == [ids[1]]
        assert len(store.get_messages("s1", include_inactive=True)) == 2
        assert [h["id"] for h in store.search_messages("zeppelin")] == [ids[0]]
        compacted = store.archive_and_compact("s1", [{"role": "user", "content": "summary"}])
        assert [m["id"] for m in store.get_messages("s1")] == compacted

    def test_replace_and_delete_messages(self, store: Store) -> None:
        ids = _conversation(store, "s1", "one", "two", "three")
        new = store.replace_messages("s1", [{"role": "user", "content": "only"}])
        assert [m["content"] for m in store.get_messages("s1")] == ["only"]
        assert store.delete_messages(new) == 1
        assert store.get_messages("s1") == []
        assert store.delete_messages(ids) == 0

    def test_message_ids_by_time_and_session(self, store: Store) -> None:
        store.create_session("s1")
        early = store.append_message("s1", "user", "early", timestamp=1_000.0)
        late = store.append_message("s1", "user", "late", timestamp=2_000.0)
        assert store.list_message_ids(until=1_500.0) == [early]
        assert store.list_message_ids(since=1_500.0) == [late]
        assert store.list_message_ids(session_ids=["s1"]) == [early, late]

    def test_visible_messages_leave_out_live_sessions_of_the_caller(self, store: Store) -> None:
        _conversation(store, "s1", "a", "b", "c")
        assert store.count_visible(["s1"]) == 3
        assert store.count_visible(["s1"], hide_live=["s1"]) == 0
        newest = store.visible_messages(["s1"], newest_first=True, limit=2)
        assert [m["content"] for m in newest] == ["c", "b"]

    # -- search --------------------------------------------------------------------------

    def test_search_messages_hits_have_the_contract_shape(self, store: Store) -> None:
        _conversation(store, "s1", "We migrate the database on Tuesday.", "Backups first.")
        hits = store.search_messages("database migrate")
        assert hits and hits[0]["session_id"] == "s1"
        for hit in hits:
            _shape(hit, MessageHit)
        assert ">>>" in hits[0]["snippet"] and "<<<" in hits[0]["snippet"]
        newest = store.search_messages("database", sort="newest")
        assert [h["id"] for h in newest] == [hits[0]["id"]]

    def test_a_two_clause_chinese_question_finds_its_session(self, store: Store) -> None:
        _conversation(store, "zh", "我们决定下周二把数据库迁移到新的集群，先做备份。")
        _conversation(store, "other", "今天天气很好，我们去公园散步。")
        found = store.search_sessions("上次我们讨论数据库迁移，结论是什么？")
        assert found and found[0]["session_id"] == "zh"
        _shape(found[0], SessionHit)

    def test_a_long_chinese_dialogue_finds_the_memory_of_its_rare_words(self, store: Store) -> None:
        # The dialogue repeats small talk that many sessions hold (more distinct bigrams
        # than a search may look up), and names the memory once, in rare words.
        _conversation(store, "magic", "元旦晚会上我表演了魔术，大家都很喜欢。")
        chatter = "你好呀，今天过得怎么样？我觉得还不错，谢谢你的关心。"
        for i in range(6):
            _conversation(store, f"chat{i}", chatter)
        turns = ["Bart: 元旦的魔术表演怎么样？", f"Assistant: {chatter}", f"Bart: {chatter}"]
        found = store.search_sessions("\n".join(turns))
        assert found and found[0]["session_id"] == "magic"

    def test_search_sessions_rank_sessions_and_honour_filters(self, store: Store) -> None:
        _conversation(store, "a", "the kyoto itinerary and the ryokan booking", source="cli")
        _conversation(store, "b", "kyoto again", source="telegram")
        found: list[SessionHit] = store.search_sessions("kyoto ryokan")
        assert [f["session_id"] for f in found][:1] == ["a"]
        only = store.search_sessions("kyoto", source_filter="telegram")
        assert [f["session_id"] for f in only] == ["b"]
        skip = store.search_sessions("kyoto", exclude_session_ids=["a"])
        assert [f["session_id"] for f in skip] == ["b"]

    def test_hostile_queries_never_raise(self, store: Store) -> None:
        _conversation(store, "s1", 'he said "ship it" (finally) -- AND NOT done*')
        for query in ('"', '"ship', "(", "NOT", "AND OR", "*", "-", "'; DROP TABLE x; --", ""):
            store.search_messages(query)
            store.search_sessions(query)
        assert store.search_messages('"ship it"')
        assert store.search_messages("ship*")

    def test_rank_gives_the_candidates_best_first(self, store: Store) -> None:
        _conversation(store, "s1", "kyoto ryokan", "osaka castle")
        ranked = store.rank("kyoto")
        ids = [c.id for c in ranked.candidates]
        assert ids and store.get_message(ids[0]) is not None

    # -- caches and metadata -------------------------------------------------------------

    def test_the_summary_cache_is_keyed_by_the_conversation_state(self, store: Store) -> None:
        ids = _conversation(store, "s1", "hello")
        store.cache_summary(
            tip_session_id="s1",
            root_session_id="s1",
            message_count=1,
            last_message_id=ids[-1],
            query="q",
            model="m",
            summary="S",
        )
        assert store.get_cached_summary("s1", 1, ids[-1], "q") == "S"
        assert store.get_cached_summary("s1", 2, ids[-1], "q") is None
        assert store.clear_summary_cache(["s1"]) == 1
        assert store.get_cached_summary("s1", 1, ids[-1], "q") is None

    def test_query_expansions_are_cached_and_cleared(self, store: Store) -> None:
        store.cache_expansion("m", "where did we go", '["kyoto trip"]')
        assert store.get_cached_expansion("m", "where did we go") == '["kyoto trip"]'
        assert store.clear_query_expansions() == 1
        assert store.get_cached_expansion("m", "where did we go") is None

    def test_a_long_query_is_cached_and_told_from_its_near_twin(self, store: Store) -> None:
        """A query past what a database index holds (a pasted dialogue: 12,000 varied
        characters) caches its summary and its expansion, and a query differing from it
        only at its end is another key."""
        ids = _conversation(store, "s1", "hello")
        rng = random.Random(5)
        long = "".join(rng.choice("abcdefgh 数据库迁移") for _ in range(12_000))
        twin = long[:-1] + ("x" if long[-1] != "x" else "y")
        store.cache_summary(
            tip_session_id="s1",
            root_session_id="s1",
            message_count=1,
            last_message_id=ids[-1],
            query=long,
            model="m",
            summary="S",
        )
        assert store.get_cached_summary("s1", 1, ids[-1], long) == "S"
        assert store.get_cached_summary("s1", 1, ids[-1], twin) is None
        store.cache_expansion("m" * 3000, long, '["a"]')
        assert store.get_cached_expansion("m" * 3000, long) == '["a"]'
        assert store.get_cached_expansion("m" * 3000, twin) is None

    def test_vectors_are_stored_per_model(self, store: Store) -> None:
        ids = _conversation(store, "s1", "alpha", "beta")
        assert store.count_unvectored("m") == 2
        pending = store.unvectored_messages("m")
        assert [p[0] for p in pending] == ids
        assert store.store_vectors("m", 2, {ids[0]: b"\x00" * 8}) == 1
        assert store.count_unvectored("m") == 1 and store.count_unvectored("other") == 2

    def test_meta_values_set_and_clear(self, store: Store) -> None:
        assert store.get_meta("k") is None
        store.set_meta("k", "v")
        assert store.get_meta("k") == "v"
        store.set_meta("k", None)
        assert store.get_meta("k") is None

    # -- maintenance and transactions ----------------------------------------------------

    def test_maintenance_reports_a_healthy_store(self, store: Store) -> None:
        _conversation(store, "s1", "hello world")
        assert store.durability in ("normal", "full")
        assert store.check_indexes() == []
        assert store.integrity_check()["ok"] is True
        stats = store.stats()
        assert stats["sessions"] == 1 and stats["messages"] == 1
        assert all(isinstance(v, int) for v in store.index_counts().values())
        store.analyze()
        store.optimize()
        with store.secure_deletes():
            store.delete_session("s1")
        assert store.search_messages("hello") == []

    def test_write_is_one_transaction(self, store: Store) -> None:
        store.create_session("s1")

        def half_done() -> None:
            with store.write():
                store.append_message("s1", "user", "never kept")
                store.set_session_title("s1", "never set")
                raise RuntimeError("stop")

        _raises(RuntimeError, half_done)
        assert store.get_messages("s1") == [] and store.get_session_title("s1") is None
        with store.write():
            store.append_message("s1", "user", "kept")
            store.set_session_title("s1", "set")
        assert len(store.get_messages("s1")) == 1 and store.get_session_title("s1") == "set"
