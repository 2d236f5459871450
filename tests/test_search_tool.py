"""session_search: recent, discover, read and scroll over a real store and a real fake model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from helpers import make_config
from memstrata.cli import cli
from memstrata.config import Config
from memstrata.errors import SessionNotFoundError, SessionStoreError
from memstrata.search.recall import NOTE, VERBATIM_CHARS, session_search
from memstrata.store.sqlite.store import SessionStore
from memstrata.testing import FakeLLMServer, Reply
from memstrata.tools.session_search import SCHEMA, SessionSearchTool, parse_time
from memstrata.tools.toolbox import Toolbox


@pytest.fixture
def store(memstrata_home: Path) -> Iterator[SessionStore]:
    with SessionStore(memstrata_home / "state.db") as opened:
        yield opened


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        fake.set_default(Reply.text("The user fixed it by raising worker_connections."))
        yield fake


def add_session(
    store: SessionStore,
    sid: str,
    texts: list[str],
    *,
    source: str = "cli",
    start: float = 1_767_225_600.0,
    **kwargs: Any,
) -> list[int]:
    """Create a session with alternating user/assistant messages, one minute apart."""
    store.create_session(sid, source=source, started_at=start, **kwargs)
    roles = ("user", "assistant")
    return store.append_messages(
        sid,
        [
            {"role": roles[i % 2], "content": t, "timestamp": start + 60 * (i + 1)}
            for i, t in enumerate(texts)
        ],
    )


def split_by_compression(store: SessionStore) -> tuple[list[int], list[int]]:
    """A parent holding the detail, compressed into a child whose live rows are the context."""
    parent_ids = add_session(
        store,
        "parent",
        [
            "The staging database password rotation failed with error ORA-28001.",
            "We fixed ORA-28001 by running ALTER PROFILE app_profile LIMIT "
            "PASSWORD_LIFE_TIME UNLIMITED on staging.",
        ],
    )
    store.end_session("parent", "compression", ended_at=1_767_226_000.0)
    child_ids = add_session(
        store,
        "child",
        [
            "Summary of earlier turns: a database password issue was handled.",
            "Live context mentions quokkaword which the model already sees.",
        ],
        start=1_767_226_100.0,
        parent_session_id="parent",
        lineage_kind="compression",
    )
    return parent_ids, child_ids


# ------------------------------------------------------------------------------ schema


def test_schema_is_an_openai_function_without_combinators() -> None:
    """The schema is an OpenAI function tool whose parameters have no top-level combinator."""
    assert SCHEMA["type"] == "function"
    function = SCHEMA["function"]
    assert function["name"] == "session_search"
    params = function["parameters"]
    assert params["type"] == "object" and params["required"] == []
    assert not {"anyOf", "oneOf", "allOf", "not"} & set(params)
    assert set(params["properties"]) == {
        "query",
        "limit",
        "role_filter",
        "source",
        "since",
        "until",
        "session_id",
        "around_message_id",
        "window",
        "summarize",
    }
    assert params["properties"]["limit"]["maximum"] == 5
    assert "not proof" in function["description"]


def test_default_toolbox_registers_session_search_without_creating_a_database(
    memstrata_home: Path,
) -> None:
    """Toolbox.default holds session_search, and building it opens no database."""
    box = Toolbox.default(memstrata_home)
    assert "session_search" in box.names
    assert not (memstrata_home / "state.db").exists()
    answer = json.loads(box.dispatch("session_search", {}))
    assert answer["success"] is True and answer["mode"] == "recent"


# ---------------------------------------------------------------------------- recent


def test_empty_query_lists_recent_conversations_without_any_model_call(
    store: SessionStore, server: FakeLLMServer, memstrata_home: Path
) -> None:
    """An empty query lists recent conversations (not the current one) and calls no model."""
    add_session(store, "old", ["first talk about kayaks"], start=1_000_000.0)
    add_session(store, "new", ["second talk about canoes"], start=2_000_000.0)
    add_session(store, "me", ["the current conversation"], start=3_000_000.0)
    add_session(store, "bot", ["a sub-agent run"], source="subagent", start=4_000_000.0)
    result = session_search(
        store, "", current_session_id="me", config=make_config(memstrata_home, server)
    )
    assert result["mode"] == "recent"
    assert [r["session_id"] for r in result["results"]] == ["new", "old"]
    assert result["results"][0]["preview"] == "second talk about canoes"
    assert result["note"] == NOTE
    assert server.chat_requests == []


# -------------------------------------------------------------------------- discover


def test_lineage_rules_hold_across_a_compression_split(
    store: SessionStore, memstrata_home: Path
) -> None:
    """From the child, the parent's detail is found; the child's live messages are not."""
    split_by_compression(store)
    config = make_config(memstrata_home)
    found = session_search(store, "ORA-28001 fix", current_session_id="child", config=config)
    assert found["count"] == 1
    hit = found["results"][0]
    assert hit["session_id"] == "parent"
    assert hit["current_conversation"] is True
    assert "ALTER PROFILE app_profile" in hit["excerpt"]
    # The child's live rows are the model's context: never returned, not even in excerpts.
    assert "quokkaword" not in hit["excerpt"]
    live = session_search(store, "quokkaword", current_session_id="child", config=config)
    assert live["count"] == 0 and live["note"] == NOTE
    # Searched from elsewhere, the same live message is an ordinary past conversation.
    other = session_search(store, "quokkaword", current_session_id="unrelated", config=config)
    assert other["count"] == 1 and other["results"][0]["tip_session_id"] == "child"


def test_compacted_rows_of_the_current_session_stay_findable(
    store: SessionStore, memstrata_home: Path
) -> None:
    """In-place compaction archives rows; those stay findable from the same session."""
    add_session(store, "me", ["The wombat deploy key lives in vault path secret/wombat."])
    store.archive_and_compact("me", [{"role": "user", "content": "Summary: wombat key stored."}])
    store.append_message("me", "user", "wombat again, live")
    result = session_search(
        store, "wombat vault", current_session_id="me", config=make_config(memstrata_home)
    )
    assert result["count"] == 1
    excerpt = result["results"][0]["excerpt"]
    assert "secret/wombat" in excerpt
    assert "wombat again, live" not in excerpt and "Summary: wombat" not in excerpt


def test_rewound_rows_are_not_found(store: SessionStore, memstrata_home: Path) -> None:
    """Rows undone on purpose (active=0, not compacted) are hidden from recall."""
    add_session(store, "s", ["I said something about narwhals and regret it"])
    store.archive_messages("s", compacted=False)
    result = session_search(store, "narwhals", config=make_config(memstrata_home))
    assert result["count"] == 0


def test_results_are_grouped_by_lineage_and_limited(
    store: SessionStore, memstrata_home: Path
) -> None:
    """A compression chain is one result; limit is clamped to 5; each result is distinct."""
    add_session(store, "a", ["kubernetes ingress timeout on port 443"])
    store.end_session("a", "compression")
    add_session(
        store,
        "a2",
        ["more kubernetes ingress timeout debugging"],
        parent_session_id="a",
        lineage_kind="compression",
    )
    for i in range(7):
        add_session(store, f"x{i}", [f"kubernetes ingress note number {i}"])
    config = make_config(memstrata_home)
    result = session_search(store, "kubernetes ingress timeout", limit=50, config=config)
    assert result["count"] == 5
    roots = [r["conversation_root"] for r in result["results"]]
    assert len(set(roots)) == 5
    assert roots[0] == "a"
    assert result["results"][0]["tip_session_id"] == "a2"
    default = session_search(store, "kubernetes", config=config)
    assert default["count"] == 3


def test_filters_by_role_source_and_time(store: SessionStore, memstrata_home: Path) -> None:
    """role_filter, source and since/until narrow the matches."""
    add_session(store, "cli1", ["pelican question", "pelican answer"], start=1_000_000.0)
    add_session(store, "tg1", ["pelican on telegram"], source="telegram", start=5_000_000.0)
    config = make_config(memstrata_home)

    def ids(**kwargs: Any) -> list[str]:
        found = session_search(store, "pelican", config=config, **kwargs)
        return sorted(r["session_id"] for r in found["results"])

    assert ids() == ["cli1", "tg1"]
    assert ids(source="telegram") == ["tg1"]
    assert ids(since=4_000_000.0) == ["tg1"]
    assert ids(until=4_000_000.0) == ["cli1"]
    only_assistant = session_search(store, "pelican", role_filter="assistant", config=config)
    assert [r["matched_role"] for r in only_assistant["results"]] == ["assistant"]
    with pytest.raises(SessionStoreError, match="since"):
        session_search(store, "pelican", since=10.0, until=5.0, config=config)


def test_no_summary_model_gives_verbatim_excerpts(
    store: SessionStore, memstrata_home: Path
) -> None:
    """Without a summary model each result carries a bounded verbatim excerpt."""
    add_session(store, "big", ["filler text " * 2000 + " the magic flag is --frobnicate-all"])
    result = session_search(store, "frobnicate", config=make_config(memstrata_home))
    hit = result["results"][0]
    assert "summary" not in hit
    assert "--frobnicate-all" in hit["excerpt"]
    assert hit["excerpt"].startswith("...[earlier conversation truncated]...")
    assert len(hit["excerpt"]) <= VERBATIM_CHARS + 100
    assert hit["chars"]["conversation"] > hit["chars"]["returned"]
    assert "no summary model" in result["summaries"]["unavailable"]


# -------------------------------------------------------------------------- summaries


def test_summary_request_is_query_focused_and_uses_the_transcript_format(
    store: SessionStore, server: FakeLLMServer, memstrata_home: Path
) -> None:
    """One request per conversation: temperature 0.1, the query, and [ROLE]: blocks."""
    store.create_session("t", source="cli", started_at=1_000.0)
    store.append_messages(
        "t",
        [
            {"role": "user", "content": "restart the flamingo service", "timestamp": 1_001.0},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {
                            "name": "terminal",
                            "arguments": '{"command": "systemctl restart flamingo"}',
                        },
                    }
                ],
                "timestamp": 1_002.0,
            },
            {
                "role": "tool",
                "content": "ok",
                "tool_name": "terminal",
                "tool_call_id": "c1",
                "timestamp": 1_003.0,
            },
        ],
    )
    result = session_search(store, "flamingo", config=make_config(memstrata_home, server))
    assert result["results"][0]["summary"] == "The user fixed it by raising worker_connections."
    assert result["results"][0]["summary_origin"] == "model"
    (body,) = server.chat_requests
    assert body["temperature"] == pytest.approx(0.1)
    system, user = body["messages"]
    assert "not discussed" in system["content"] and "exactly" in system["content"]
    assert "flamingo" in user["content"]
    assert "[USER]: restart the flamingo service" in user["content"]
    assert (
        '[ASSISTANT]: [Called: terminal({"command": "systemctl restart flamingo"})]'
        in (user["content"])
    )
    assert "[TOOL:terminal]: ok" in user["content"]


def test_concurrency_bound_holds(
    store: SessionStore, server: FakeLLMServer, memstrata_home: Path
) -> None:
    """With max_concurrency=2 the server never sees more than two summaries in flight."""
    for i in range(5):
        add_session(store, f"s{i}", [f"the heron migration plan, part {i}"])
    server.latency = 1.0  # long enough that both workers overlap on a busy machine
    config = make_config(memstrata_home, server, max_concurrency=2)
    result = session_search(store, "heron migration", limit=5, config=config)
    assert result["summaries"]["made"] == 5
    assert len(server.chat_requests) == 5
    assert server.max_in_flight == 2


def test_concurrency_allows_five_at_once(
    store: SessionStore, server: FakeLLMServer, memstrata_home: Path
) -> None:
    """max_concurrency=5 lets all five summaries run together."""
    for i in range(5):
        add_session(store, f"s{i}", [f"the egret rollout plan, part {i}"])
    server.latency = 1.5
    config = make_config(memstrata_home, server, max_concurrency=5)
    session_search(store, "egret rollout", limit=5, config=config)
    assert server.max_in_flight == 5


def test_timeout_falls_back_to_verbatim(
    store: SessionStore, server: FakeLLMServer, memstrata_home: Path
) -> None:
    """Summaries not ready within search.summary_timeout become verbatim excerpts."""
    add_session(store, "slow", ["the ibis cluster failover runbook"])
    server.latency = 5.0
    config = make_config(memstrata_home, server, summary_timeout=0.5)
    result = session_search(store, "ibis failover", config=config)
    hit = result["results"][0]
    assert "summary" not in hit
    assert "ibis cluster failover" in hit["excerpt"]
    assert result["summaries"]["failed"] == 1


def test_one_failed_summary_falls_back_for_that_conversation_only(
    store: SessionStore, server: FakeLLMServer, memstrata_home: Path
) -> None:
    """A model error replaces only its own conversation's summary with an excerpt."""
    add_session(store, "good", ["the osprey build cache works"])
    add_session(store, "bad", ["the osprey build cache is broken badmarker"])
    server.on("badmarker", Reply.error(500, "model exploded"))
    result = session_search(store, "osprey build cache", config=make_config(memstrata_home, server))
    by_id = {r["session_id"]: r for r in result["results"]}
    assert "summary" in by_id["good"] and "excerpt" not in by_id["good"]
    assert "excerpt" in by_id["bad"] and "badmarker" in by_id["bad"]["excerpt"]
    assert "original text" in by_id["bad"]["summary_error"]
    assert result["summaries"] == {"requested": 2, "made": 1, "cached": 0, "failed": 1}


def test_cache_hit_sends_no_request_until_the_conversation_changes(
    store: SessionStore, server: FakeLLMServer, memstrata_home: Path
) -> None:
    """A repeated recall is served from the cache; a new message invalidates it."""
    add_session(store, "c", ["the puffin release checklist"])
    config = make_config(memstrata_home, server)
    first = session_search(store, "Puffin release?", config=config)
    assert first["results"][0]["summary_origin"] == "model"
    assert len(server.chat_requests) == 1
    again = session_search(store, "  puffin   RELEASE ", config=config)
    assert again["results"][0]["summary_origin"] == "cache"
    assert again["results"][0]["summary"] == first["results"][0]["summary"]
    assert len(server.chat_requests) == 1
    store.append_message("c", "assistant", "puffin release shipped on friday")
    changed = session_search(store, "puffin release", config=config)
    assert changed["results"][0]["summary_origin"] == "model"
    assert len(server.chat_requests) == 2


def test_deleting_a_session_removes_its_cached_summaries(
    store: SessionStore, server: FakeLLMServer, memstrata_home: Path
) -> None:
    """A summary quotes its conversation, so delete_session removes it from the cache."""
    add_session(store, "gone", ["the secret grebe recipe"])
    session_search(store, "grebe recipe", config=make_config(memstrata_home, server))
    with store.read_conn() as conn:
        assert conn.execute("SELECT count(*) FROM summary_cache").fetchone()[0] == 1
    store.delete_session("gone")
    with store.read_conn() as conn:
        assert conn.execute("SELECT count(*) FROM summary_cache").fetchone()[0] == 0


def test_summarize_false_calls_no_model(
    store: SessionStore, server: FakeLLMServer, memstrata_home: Path
) -> None:
    """summarize=False returns excerpts without contacting the model."""
    add_session(store, "c", ["the cormorant api token"])
    result = session_search(
        store, "cormorant", summarize=False, config=make_config(memstrata_home, server)
    )
    assert "excerpt" in result["results"][0]
    assert server.chat_requests == []


# ------------------------------------------------------------------------ read, scroll


def test_read_is_bounded_with_a_scroll_hint(store: SessionStore, memstrata_home: Path) -> None:
    """A long session reads as its first 20 and last 10 messages, flagged truncated."""
    ids = add_session(store, "long", [f"message number {i}" for i in range(45)])
    result = session_search(store, session_id="long")
    assert result["mode"] == "read" and result["truncated"] is True
    shown = [m["id"] for m in result["messages"]]
    assert shown == ids[:20] + ids[-10:]
    assert result["omitted_messages"] == 15
    assert "around_message_id" in result["hint"]
    short = session_search(store, session_id="lo")  # a unique prefix resolves
    assert short["session_id"] == "long"
    with pytest.raises(SessionNotFoundError):
        session_search(store, session_id="nope")


def test_read_of_the_current_session_shows_only_what_left_the_context(
    store: SessionStore,
) -> None:
    """Reading the current session is refused unless compaction archived some of it."""
    add_session(store, "me", ["live only"])
    with pytest.raises(SessionStoreError, match="already in your context"):
        session_search(store, session_id="me", current_session_id="me")
    store.archive_and_compact("me", [{"role": "user", "content": "summary"}])
    result = session_search(store, session_id="me", current_session_id="me")
    assert [m["content"] for m in result["messages"]] == ["live only"]
    assert result["messages"][0]["archived"] is True


def test_scroll_window_is_clamped_and_marks_the_anchor(
    store: SessionStore, memstrata_home: Path
) -> None:
    """Scroll shows at most 20 messages each side, the anchor flagged, counts beyond."""
    ids = add_session(store, "s", [f"line {i}" for i in range(60)])
    result = session_search(store, session_id="s", around_message_id=ids[30], window=99)
    assert result["window"] == 20
    assert [m["id"] for m in result["messages"]] == ids[10:51]
    assert [m["id"] for m in result["messages"] if m.get("anchor")] == [ids[30]]
    assert result["messages_before"] == 10 and result["messages_after"] == 9
    small = session_search(store, session_id="s", around_message_id=ids[0], window=0)
    assert small["window"] == 1 and len(small["messages"]) == 2


def test_scroll_refuses_live_context_and_foreign_ids(store: SessionStore) -> None:
    """Scrolling into the current live context or another conversation is an error."""
    parent_ids, child_ids = split_by_compression(store)
    add_session(store, "other", ["unrelated"])
    with pytest.raises(SessionStoreError, match="already in your context"):
        session_search(
            store, session_id="child", around_message_id=child_ids[0], current_session_id="child"
        )
    with pytest.raises(SessionStoreError, match="not in session"):
        session_search(store, session_id="other", around_message_id=parent_ids[0])
    # An id from the same compression chain moves the scroll there, with a warning.
    moved = session_search(
        store, session_id="child", around_message_id=parent_ids[1], current_session_id="child"
    )
    assert moved["session_id"] == "parent" and "warning" in moved
    with pytest.raises(SessionStoreError, match="needs session_id"):
        session_search(store, around_message_id=parent_ids[0])


# --------------------------------------------------------------------- tool and CLI


def test_tool_dispatch_validates_arguments(store: SessionStore, memstrata_home: Path) -> None:
    """Bad arguments come back to the model as errors saying how to fix them."""
    box = Toolbox()
    box.register_tool(SessionSearchTool(store, config=make_config(memstrata_home)))

    def call(args: Any) -> dict[str, Any]:
        return dict(json.loads(box.dispatch("session_search", args)))

    assert "integer" in call({"limit": "many"})["error"]
    assert "YYYY-MM-DD" in call({"query": "x", "since": "last tuesday"})["error"]
    assert "Unknown argument" in call({"qeury": "x"})["error"]
    assert "string" in call({"query": 5})["error"]
    assert call({"session_id": "missing"})["success"] is False
    add_session(store, "s", ["the albatross"], start=1_767_225_600.0)
    ok = call('{"query": "albatross", "since": "2026-01-01", "until": "2026-01-01"}')
    assert ok["success"] is True and ok["count"] == 1


def test_parse_time_accepts_dates_times_and_unix_seconds() -> None:
    """since/until take a date (whole day for until), a UTC time or Unix seconds."""
    assert parse_time("2026-01-01", "since") == 1_767_225_600.0
    assert parse_time("2026-01-01", "until", end_of_day=True) == pytest.approx(
        1_767_225_600.0 + 86_400 - 1e-6
    )
    assert parse_time("2026-01-01T01:00", "since") == 1_767_229_200.0
    assert parse_time("2026-01-01T01:00Z", "since") == 1_767_229_200.0
    assert parse_time("1767225600", "since") == 1_767_225_600.0
    assert parse_time(12.5, "since") == 12.5
    assert parse_time(None, "since") is None


def test_cli_search_prints_json_and_text(store: SessionStore, memstrata_home: Path) -> None:
    """`memstrata search` prints results as JSON or text, and lists recent sessions."""
    add_session(store, "c", ["the kestrel backup schedule is nightly at 02:00"])
    runner = CliRunner()
    as_json = runner.invoke(cli, ["search", "kestrel backup", "--json", "--no-summary"])
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.output)
    assert data["results"][0]["session_id"] == "c"
    text = runner.invoke(cli, ["search", "kestrel", "--no-summary"])
    assert text.exit_code == 0 and "nightly at 02:00" in text.output
    recent = runner.invoke(cli, ["search"])
    assert recent.exit_code == 0 and "kestrel" in recent.output
    bad = runner.invoke(cli, ["search", "x", "--since", "soon"])
    assert bad.exit_code != 0 and "YYYY-MM-DD" in bad.output


def test_summary_input_is_bounded_and_cut_around_the_match(
    store: SessionStore, server: FakeLLMServer, memstrata_home: Path
) -> None:
    """A 300 KB conversation reaches the model as at most 100,000 characters around the hit."""
    texts = [f"routine chatter line {i} " + "lorem ipsum " * 40 for i in range(600)]
    texts[450] = "the gannet certificate expired; renewed it with certbot renew --force"
    add_session(store, "huge", texts)
    session_search(store, "gannet certificate", config=make_config(memstrata_home, server))
    (body,) = server.chat_requests
    content = body["messages"][1]["content"]
    assert "certbot renew --force" in content
    assert "...[earlier conversation truncated]..." in content
    transcript = content[content.index("<transcript>") : content.index("</transcript>")]
    assert 90_000 <= len(transcript) <= 100_200


def test_cli_reads_and_scrolls_a_session(store: SessionStore) -> None:
    """`memstrata search --session ID [--around N]` prints the session's messages."""
    ids = add_session(store, "c", [f"step {i}" for i in range(8)])
    runner = CliRunner()
    read = runner.invoke(cli, ["search", "--session", "c"])
    assert read.exit_code == 0 and "step 0" in read.output and "step 7" in read.output
    around = runner.invoke(
        cli, ["search", "--session", "c", "--around", str(ids[4]), "--window", "1"]
    )
    assert around.exit_code == 0
    assert f"> #{ids[4]}" in around.output and "step 6" not in around.output


def test_recall_options_from_config_reach_session_search(
    store: SessionStore, memstrata_home: Path, server: FakeLLMServer
) -> None:
    # Two conversations about the same thing; the question names the day of one of them.
    july = 1_688_720_400.0  # 2023-07-07 09:00 UTC
    august = 1_691_398_800.0  # 2023-08-07 09:00 UTC
    add_session(
        store, "aug", ["The fence: we repainted the whole fence", "Fence blue again?"], start=august
    )
    add_session(store, "jul", ["We repainted the fence", "Nice colour"], start=july)
    question = "What happened to the fence on 7 July, 2023?"

    def first(config: Config) -> str:
        found = session_search(store, question, summarize=False, config=config)
        return str(found["results"][0]["session_id"])

    assert first(make_config(memstrata_home)) == "jul"
    # With date awareness off, the date words match nothing and August's fuller text wins.
    assert first(make_config(memstrata_home, dates=False)) == "aug"

    # Query expansion asks the summary model once and adds its sub-queries.
    server.set_default(Reply.text('["fence painting", "repainted fence"]'))
    config = make_config(memstrata_home, server, expansion=True)
    session_search(store, "garden work", summarize=False, config=config)
    session_search(store, "garden work", summarize=False, config=config)
    assert len(server.requests) == 1  # the second search read the cached expansion
