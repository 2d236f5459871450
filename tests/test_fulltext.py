"""Tests for memstrata.store.sqlite.fulltext: message and session search over a real store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import traced_reads, write_turns
from memstrata.errors import SessionStoreError
from memstrata.store import base as store_base
from memstrata.store.base import search_messages, search_sessions
from memstrata.store.hits import highlight
from memstrata.store.sqlite.store import SessionStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SessionStore]:
    """A store with three sessions: English chat, a tool session, a Chinese chat."""
    s = SessionStore(tmp_path / "state.db")
    s.create_session("en", source="cli", started_at=1000.0)
    s.append_messages(
        "en",
        [
            {"role": "user", "content": "Hi there", "timestamp": 1001.0},
            {
                "role": "user",
                "content": "Caroline went to the LGBTQ support group yesterday",
                "timestamp": 1002.0,
            },
            {
                "role": "assistant",
                "content": "That sounds like a great group.",
                "timestamp": 1003.0,
            },
            {"role": "user", "content": "She is painting a sunrise now", "timestamp": 1004.0},
        ],
    )
    s.create_session("tools", source="cron", started_at=2000.0)
    s.append_messages(
        "tools",
        [
            {"role": "user", "content": "deploy the staging server", "timestamp": 2001.0},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"function": {"name": "shell", "arguments": '{"cmd": "kubectl apply"}'}}
                ],
                "timestamp": 2002.0,
            },
            {"role": "tool", "content": "deployed ok", "tool_name": "shell", "timestamp": 2003.0},
        ],
    )
    s.create_session("zh", source="cli", started_at=3000.0)
    s.append_messages(
        "zh",
        [
            {"role": "user", "content": "我想修改youer服务端的配置", "timestamp": 3001.0},
            {
                "role": "assistant",
                "content": "好的，服务端配置在 config/user_ids.py 里",
                "timestamp": 3002.0,
            },
        ],
    )
    yield s
    s.close()


def test_natural_question_finds_the_message(store: SessionStore) -> None:
    """A verbatim question with `?` and stopwords finds the message, with every hit key."""
    hits = search_messages(store, "When did Caroline go to the support group?")
    assert hits[0]["session_id"] == "en"
    assert hits[0]["id"] == 2
    top = hits[0]
    for key in ("id", "session_id", "role", "snippet", "timestamp", "tool_name", "source",
                "model", "session_started", "score", "context"):  # fmt: skip
        assert key in top
    assert ">>>" in top["snippet"] and "<<<" in top["snippet"]
    assert top["source"] == "cli" and top["session_started"] == 1000.0
    assert top["context"] == [
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "That sounds like a great group."},
    ]


def test_stemming_matches_other_word_forms(store: SessionStore) -> None:
    """`painted` finds `painting` through the Porter-stemmed word index."""
    assert [h["id"] for h in search_messages(store, "what has she painted?")] == [4]


def test_blank_and_unsearchable_queries_return_nothing(store: SessionStore) -> None:
    """Blank input and input with nothing searchable return []."""
    for q in ["", "   ", "???", "NOT group", "*"]:
        assert search_messages(store, q) == []


def test_tool_name_and_arguments_are_searchable(store: SessionStore) -> None:
    """Tool names and tool-call arguments are indexed alongside the content."""
    assert {h["id"] for h in search_messages(store, "kubectl")} == {6}
    shell = search_messages(store, "shell")
    assert {h["id"] for h in shell} == {6, 7}
    assert any(h["tool_name"] == "shell" for h in shell)


def test_role_filter_takes_a_list_or_csv(store: SessionStore) -> None:
    """role_filter restricts hits to the given roles, as a list or a CSV string."""
    assert {h["role"] for h in search_messages(store, "group", role_filter=["assistant"])} == {
        "assistant"
    }
    assert {h["id"] for h in search_messages(store, "group deploy", role_filter="user, tool")} == {
        2,
        5,
        7,
    }


def test_source_and_session_filters(store: SessionStore) -> None:
    """source_filter, exclude_sources and exclude_session_ids apply inside the search."""
    assert {
        h["session_id"] for h in search_messages(store, "deploy group", source_filter="cron")
    } == {"tools"}
    assert {
        h["session_id"] for h in search_messages(store, "deploy group", exclude_sources=["cron"])
    } == {"en"}
    assert {
        h["session_id"] for h in search_messages(store, "deploy group", exclude_session_ids=["en"])
    } == {"tools"}


def test_time_range_is_inclusive(store: SessionStore) -> None:
    """since and until bound the message timestamps, both ends included."""
    hits = search_messages(store, "group deploy", since=1003.0, until=2001.0)
    assert {h["id"] for h in hits} == {3, 5}


def test_rewound_rows_are_hidden_and_compacted_rows_found(store: SessionStore) -> None:
    """Undone rows leave search, compaction-archived rows stay, include_inactive shows both."""
    store.archive_messages("en", [2], compacted=False)
    store.archive_messages("tools", [5], compacted=True)
    assert 2 not in {h["id"] for h in search_messages(store, "support group")}
    assert 5 in {h["id"] for h in search_messages(store, "staging")}
    assert 2 in {h["id"] for h in search_messages(store, "support group", include_inactive=True)}
    # The hidden row is not offered as context either.
    ctx = next(h for h in search_messages(store, "great group") if h["id"] == 3)["context"]
    assert ctx[0]["content"] == "Hi there"


def test_sort_and_pagination(store: SessionStore) -> None:
    """newest/oldest order by time, and pages do not overlap."""
    q = "group deploy kubectl shell 服务"
    newest = [h["timestamp"] for h in search_messages(store, q, sort="newest")]
    oldest = [h["timestamp"] for h in search_messages(store, q, sort="oldest")]
    assert newest == sorted(newest, reverse=True) and oldest == sorted(oldest)
    assert newest == list(reversed(oldest))
    everything = [h["id"] for h in search_messages(store, q, limit=50)]
    paged = [
        h["id"] for off in range(0, 8, 2) for h in search_messages(store, q, limit=2, offset=off)
    ]
    assert paged == everything[:8]
    scores = [h["score"] for h in search_messages(store, q)]
    assert scores == sorted(scores, reverse=True)


def test_bad_arguments_raise_clear_errors(store: SessionStore) -> None:
    """Unknown sort, non-positive limit and non-numeric times raise SessionStoreError."""
    with pytest.raises(SessionStoreError, match="newest"):
        search_messages(store, "group", sort="sideways")
    with pytest.raises(SessionStoreError, match="limit"):
        search_messages(store, "group", limit=0)
    with pytest.raises(SessionStoreError, match="offset"):
        search_messages(store, "group", offset=-1)
    with pytest.raises(SessionStoreError, match="must be text"):
        search_messages(store, 42)  # type: ignore[arg-type]
    with pytest.raises(SessionStoreError, match="Unix timestamp"):
        search_messages(store, "group", since="yesterday")  # type: ignore[arg-type]


def test_cjk_one_and_two_characters_use_the_bigram_index(store: SessionStore) -> None:
    """1- and 2-character Chinese queries hit through the index, never a LIKE scan."""
    with traced_reads(store) as statements:
        one = search_messages(store, "服")
        two = search_messages(store, "服务")
    assert {h["id"] for h in one} == {8, 9}
    assert {h["id"] for h in two} == {8, 9}
    assert ">>>服务<<<" in two[0]["snippet"]
    assert not [s for s in statements if " LIKE " in s.upper()]
    assert any("messages_fts_cjk MATCH" in s for s in statements)


def test_latin_glued_to_cjk_is_found(store: SessionStore) -> None:
    """A Latin word written inside Chinese text is found by itself."""
    assert [h["id"] for h in search_messages(store, "youer")] == [8]


def test_identifier_substring_is_found(store: SessionStore) -> None:
    """A partial identifier is found through the trigram index, snippet included."""
    hits = search_messages(store, "user_id")
    assert [h["id"] for h in hits] == [9]
    assert "user_id" in hits[0]["snippet"]


def test_store_method_delegates(store: SessionStore) -> None:
    """SessionStore.search_messages returns the same hits as the module function."""
    assert store.search_messages("group", limit=5) == search_messages(store, "group", limit=5)


def test_sessions_rank_by_their_best_messages(tmp_path: Path) -> None:
    """A session discussing the topic in several messages beats one stray mention."""
    with SessionStore(tmp_path / "s.db") as s:
        s.create_session("stray", started_at=1.0)
        s.append_messages(
            "stray",
            [{"role": "user", "content": "the garden needs water"}]
            + [{"role": "user", "content": f"unrelated chatter {i}"} for i in range(5)],
        )
        s.create_session("topic", started_at=2.0)
        s.append_messages(
            "topic",
            [
                {"role": "user", "content": "my garden has tomatoes"},
                {"role": "assistant", "content": "water the garden tomatoes at dawn"},
                {"role": "user", "content": "the garden soil is dry"},
            ],
        )
        ranked = search_sessions(s, "how should I water my garden tomatoes?")
        assert [r["session_id"] for r in ranked] == ["topic", "stray"]
        assert ranked[0]["hit_count"] == 3 and ">>>" in ranked[0]["snippet"]
        assert ranked[0]["score"] > ranked[1]["score"]
        assert search_sessions(s, "") == []


def test_sessions_group_by_lineage(tmp_path: Path) -> None:
    """With by_lineage, a compression child and its parent are reported once."""
    with SessionStore(tmp_path / "s.db") as s:
        s.create_session("root", started_at=1.0)
        s.append_message("root", "user", "we chose postgres for billing")
        s.create_session(
            "child", parent_session_id="root", lineage_kind="compression", started_at=2.0
        )
        s.append_message("child", "user", "postgres billing migration is done")
        s.create_session("other", started_at=3.0)
        s.append_message("other", "user", "postgres is also used for search")
        flat = search_sessions(s, "postgres billing")
        grouped = search_sessions(s, "postgres billing", by_lineage=True)
        assert len(flat) == 3
        assert [r["lineage_root"] for r in grouped] == ["root", "other"]
        assert grouped[0]["hit_count"] == 2


_TEXT = st.one_of(
    st.text(max_size=60),
    st.lists(
        st.sampled_from(
            ["AND", "OR", "NOT", '"', "*", "(", ")", ":", "服", "服务端", "C++", "a-b"]
        ),
        max_size=8,
    ).map(" ".join),
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(query=_TEXT)
def test_any_query_searches_without_error(store: SessionStore, query: str) -> None:
    """search_messages and search_sessions accept any string and return lists."""
    assert isinstance(search_messages(store, query), list)
    assert isinstance(search_sessions(store, query), list)


def test_highlight_marks_every_needle() -> None:
    """The Python snippet wraps each occurrence and merges adjacent marks."""
    assert highlight("好的，服务端配置", ["服务", "务端"]) == "好的，>>>服务端<<<配置"
    # A needle ending in a Latin letter is marked to its word's end, wherever it starts.
    assert highlight("修改youer服务端", ["改you"]) == "修>>>改youer<<<服务端"
    assert highlight("x" * 300 + " needle", ["needle"]).startswith("...")


def test_common_terms_are_bounded_but_still_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Terms in more than COMMON_DF rows stay out of the BM25 scan yet still add to scores."""
    import memstrata.store.sqlite.fulltext as ft

    with SessionStore(tmp_path / "s.db") as s:
        s.create_session("a", started_at=1.0)
        s.append_messages(
            "a",
            [{"role": "user", "content": f"filler line {i}"} for i in range(200)]
            + [{"role": "user", "content": f"weather report number {i}"} for i in range(20)]
            + [
                {"role": "user", "content": "Oslo trip booked for the spring holidays"},
                {"role": "user", "content": "the weather in Oslo was cold"},
            ],
        )
        unbounded = [h["id"] for h in search_messages(s, "weather in Oslo?")]
        monkeypatch.setattr(ft, "COMMON_DF", 5)
        bounded = [h["id"] for h in search_messages(s, "weather in Oslo?")]
        # "weather" (21 rows) is common, "oslo" rare: the message with both still wins.
        assert unbounded[0] == bounded[0] == 222
        assert bounded[:2] == unbounded[:2] == [222, 221]
        # Only common terms: the newest matches come back.
        common = search_messages(s, "weather report", limit=3)
        assert len(common) == 3 and all(">>>weather<<<" in h["snippet"] for h in common)
        # A rare term with no match does not hide the common ones.
        assert search_messages(s, "weather zanzibar", limit=3)


def test_trigram_serves_terms_the_word_index_misses(tmp_path: Path) -> None:
    """A camelCase fragment is found inside a longer identifier through the trigram index,
    and so is an identifier cut inside, marked where it was found to its word's end (a
    word is marked only where a word starts)."""
    with SessionStore(tmp_path / "s.db") as s:
        write_turns(
            s,
            "a",
            [
                "why does getUserById return null?",
                "the user list is empty",
                "Renamed the helper to VENRIXTOR_CACHE today.",
                "we painted and repainted the wall",
            ],
            started_at=1.0,
        )
        hits = search_messages(s, "getUser")
        assert [h["id"] for h in hits] == [1]
        assert ">>>getUser" in hits[0]["snippet"]
        assert [h["snippet"] for h in search_messages(s, "xtor_cache")] == [
            "Renamed the helper to VENRI>>>XTOR_CACHE<<< today."
        ]
        assert [h["snippet"] for h in search_messages(s, "paint")] == [
            "we >>>painted<<< and repainted the wall"
        ]


def _reference_highlight(text: str, needles: list[str], width: int = 120) -> str:
    """Every occurrence of every needle marked over the whole text, then windowed."""
    from memstrata.query.cjk import has_cjk

    def latin_alnum(ch: str) -> bool:
        return ch.isalnum() and not has_cjk(ch)

    lower = text.lower()
    spans: list[tuple[int, int]] = []
    for needle in {n.lower() for n in needles if n}:
        latin = not has_cjk(needle) and needle[:1].isalnum()
        pos = lower.find(needle)
        while pos >= 0:
            end = pos + len(needle)
            if latin and pos > 0 and latin_alnum(lower[pos - 1]):
                pos = lower.find(needle, pos + 1)
                continue
            while (
                (latin or latin_alnum(needle[-1])) and end < len(lower) and latin_alnum(lower[end])
            ):
                end += 1
            spans.append((pos, end))
            pos = lower.find(needle, pos + 1)
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    begin = max(0, merged[0][0] - width // 3) if merged else 0
    stop = min(len(text), begin + width)
    out, cursor = ["..." if begin > 0 else ""], begin
    for start, end in merged:
        if end <= begin or start >= stop:
            continue
        start, end = max(start, begin), min(end, stop)
        out += [text[cursor:start], ">>>", text[start:end], "<<<"]
        cursor = end
    out += [text[cursor:stop], "..." if stop < len(text) else ""]
    return "".join(out)


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet="ab cé服务端-_", max_size=400),
    needles=st.lists(st.text(alphabet="ab cé服务端", min_size=1, max_size=4), max_size=4),
)
def test_windowed_highlight_equals_marking_the_whole_text(text: str, needles: list[str]) -> None:
    """Scanning only the snippet window marks exactly what a scan of the whole text would."""
    assert highlight(text, needles) == _reference_highlight(text, needles)


def test_boolean_query_with_many_matches_ranks_the_newest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past BOOLEAN_RANKED matches, AND/NOT rank their newest; a filter still reaches old rows."""
    import memstrata.store.sqlite.fulltext as ft

    with SessionStore(tmp_path / "s.db") as s:
        s.create_session("a", started_at=1.0)
        s.append_messages(
            "a",
            [{"role": "user", "content": "deploy deploy deploy staging", "timestamp": 10.0}]
            + [
                {"role": "user", "content": f"deploy staging step {i}", "timestamp": 20.0 + i}
                for i in range(30)
            ]
            + [{"role": "user", "content": "deploy to the desert", "timestamp": 60.0}],
        )
        exact = [h["id"] for h in search_messages(s, "deploy NOT desert", limit=40)]
        assert exact[0] == 1 and 32 not in exact and len(exact) == 31
        monkeypatch.setattr(ft, "BOOLEAN_RANKED", 10)
        monkeypatch.setattr(store_base, "MESSAGE_CANDIDATES", 5)
        capped = [h["id"] for h in search_messages(s, "deploy NOT desert", limit=5)]
        # Only the 10 newest matches (ids 22-31) were scored; the excluded row stays out.
        assert len(capped) == 5 and set(capped) <= set(range(22, 32))
        assert [h["id"] for h in search_messages(s, "deploy AND staging", limit=3)] != [1]
        # A filter that empties the newest window falls back to the exact query.
        old = search_messages(s, "deploy AND staging", until=15.0)
        assert [h["id"] for h in old] == [1]


def test_or_of_common_terms_puts_rows_holding_all_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When every term is common, a message holding all of them beats the newest matches."""
    import memstrata.store.sqlite.fulltext as ft

    with SessionStore(tmp_path / "s.db") as s:
        s.create_session("a", started_at=1.0)
        s.append_messages(
            "a",
            [{"role": "user", "content": "Both kafka and redis showed up in the trace"}]
            + [{"role": "user", "content": f"kafka consumer lag {i}"} for i in range(20)]
            + [{"role": "user", "content": f"redis eviction {i}"} for i in range(20)]
            + [{"role": "user", "content": f"filler line {i}"} for i in range(100)],
        )
        monkeypatch.setattr(ft, "COMMON_DF", 5)
        hits = search_messages(s, "kafka OR redis", limit=3)
        assert hits[0]["id"] == 1
        assert ">>>kafka<<<" in hits[0]["snippet"] and ">>>redis<<<" in hits[0]["snippet"]
        # One common term alone: its newest matches, each scored as holding it.
        single = search_messages(s, "kafka", limit=3)
        assert [h["id"] for h in single] == [21, 20, 19]
        assert all(h["score"] == 1.0 for h in single)


def test_context_of_every_hit_in_one_page(store: SessionStore) -> None:
    """Each hit of a page gets its own session's previous and next visible message."""
    hits = {h["id"]: h["context"] for h in search_messages(store, "deploy OR sunrise OR hi")}
    assert hits[4] == [{"role": "assistant", "content": "That sounds like a great group."}]
    assert hits[5] == [{"role": "assistant", "content": ""}]
    assert hits[1] == [
        {"role": "user", "content": "Caroline went to the LGBTQ support group yesterday"}
    ]
