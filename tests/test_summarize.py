"""Query-focused summaries: cache, concurrency bound, per-job failures, real HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memstrata.llm import OpenAIClient
from memstrata.search.summarize import (
    MAX_SUMMARY_CHARS,
    SummaryJob,
    cache_get,
    cache_put,
    clean_summary,
    normalize_query,
    summarize_all,
)
from memstrata.store.sqlite.store import SessionStore
from memstrata.testing import FakeLLMServer, Reply


@pytest.fixture
def store(memstrata_home: Path) -> Iterator[SessionStore]:
    with SessionStore(memstrata_home / "state.db") as opened:
        yield opened


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        fake.set_default(Reply.text("Recall note."))
        yield fake


@pytest.fixture
def client(server: FakeLLMServer) -> Iterator[OpenAIClient]:
    llm = OpenAIClient("fake", base_url=server.base_url, api_key="test", max_retries=0)
    yield llm
    llm.close()


def job(tip: str, *, count: int = 3, last: int = 9, query: str = "q", text: str = "") -> SummaryJob:
    """A job over a transcript that names its tip (so server rules can pick it)."""
    return SummaryJob(
        tip_session_id=tip,
        root_session_id=tip,
        message_count=count,
        last_message_id=last,
        query=query,
        transcript=text or f"[USER]: conversation {tip}",
        source="cli",
        when="2026-01-01 00:00 UTC",
    )


def test_normalize_query_ignores_case_spacing_and_trailing_punctuation() -> None:
    """Equivalent phrasings of one query share a cache entry."""
    assert normalize_query("  Nginx   Deadlock?! ") == "nginx deadlock"
    assert normalize_query("nginx deadlock") == normalize_query("NGINX deadlock.")


def test_cache_key_is_tip_count_last_id_and_query(store: SessionStore) -> None:
    """A summary is found again only for the same conversation state and query."""
    assert cache_put(store, job("t"), "note one", "m")
    assert cache_get(store, job("t", query="Q?")) == "note one"
    assert cache_get(store, job("t", count=4)) is None
    assert cache_get(store, job("t", last=10)) is None
    assert cache_get(store, job("u")) is None
    cache_put(store, job("t", count=4), "note two", "m")
    # The entry for the older state of the same conversation and query is dropped.
    assert cache_get(store, job("t")) is None
    assert cache_get(store, job("t", count=4)) == "note two"


def test_clean_summary_drops_reasoning_and_caps_length() -> None:
    """<think> blocks go; an overlong summary is cut."""
    assert clean_summary("<think>hmm</think>\nThe user fixed it.") == "The user fixed it."
    assert len(clean_summary("x" * (MAX_SUMMARY_CHARS * 2))) == MAX_SUMMARY_CHARS


def test_cached_jobs_send_nothing_and_new_ones_are_cached(
    store: SessionStore, server: FakeLLMServer, client: OpenAIClient
) -> None:
    """Jobs found in the cache make no request; fresh summaries are stored."""
    cache_put(store, job("a"), "cached note", "m")
    outcomes = summarize_all(store, client, [job("a"), job("b")])
    assert [(o.summary, o.origin) for o in outcomes] == [
        ("cached note", "cache"),
        ("Recall note.", "model"),
    ]
    assert len(server.chat_requests) == 1
    assert "conversation b" in server.chat_requests[0]["messages"][1]["content"]
    assert cache_get(store, job("b")) == "Recall note."


class DictCache:
    """A summary cache of another backend: a dict keyed by tip and query."""

    def __init__(self) -> None:
        self.kept: dict[tuple[str, str], str] = {}

    def get(self, job: SummaryJob) -> str | None:
        return self.kept.get((job.tip_session_id, normalize_query(job.query)))

    def put(self, job: SummaryJob, summary: str, model: str) -> bool:
        self.kept[(job.tip_session_id, normalize_query(job.query))] = summary
        return True


def test_a_given_cache_replaces_the_store_table(
    store: SessionStore, server: FakeLLMServer, client: OpenAIClient
) -> None:
    """``cache=`` is read and written instead of the store; without both, nothing is kept."""
    cache = DictCache()
    cache.kept[("a", "q")] = "from the other backend"
    outcomes = summarize_all(None, client, [job("a"), job("b")], cache=cache)
    assert [(o.summary, o.origin) for o in outcomes] == [
        ("from the other backend", "cache"),
        ("Recall note.", "model"),
    ]
    assert cache.kept[("b", "q")] == "Recall note."
    assert len(server.chat_requests) == 1
    # The store's own table was neither read nor written.
    assert cache_get(store, job("b")) is None
    again = summarize_all(None, client, [job("b")])
    assert [(o.summary, o.origin) for o in again] == [("Recall note.", "model")]
    assert len(server.chat_requests) == 2


def test_concurrency_is_bounded_and_clamped_to_five(
    store: SessionStore, server: FakeLLMServer, client: OpenAIClient
) -> None:
    """max_concurrency caps requests in flight; values above 5 count as 5."""
    server.latency = 1.0
    summarize_all(store, client, [job(f"j{i}") for i in range(6)], max_concurrency=3)
    assert server.max_in_flight == 3
    server.reset()
    server.set_default(Reply.text("Recall note."))
    summarize_all(store, client, [job(f"k{i}") for i in range(8)], max_concurrency=50)
    assert server.max_in_flight == 5


def test_failures_are_reported_per_job_and_never_cached(
    store: SessionStore, server: FakeLLMServer, client: OpenAIClient
) -> None:
    """An HTTP error or an empty answer fails its own job only, and is not cached."""
    server.on("conversation bad", Reply.error(500, "boom"))
    server.on("conversation empty", Reply.text("   "))
    outcomes = summarize_all(store, client, [job("ok"), job("bad"), job("empty")])
    assert outcomes[0].summary == "Recall note."
    assert outcomes[1].summary is None and outcomes[1].error
    assert outcomes[2].summary is None and "empty" in (outcomes[2].error or "")
    assert cache_get(store, job("bad")) is None and cache_get(store, job("empty")) is None


def test_aggregate_timeout_reports_unfinished_jobs(
    store: SessionStore, server: FakeLLMServer, client: OpenAIClient
) -> None:
    """Jobs still running at the deadline come back as timed out, without a summary."""
    server.on("conversation slow", Reply.text("late").after(5.0))
    outcomes = summarize_all(store, client, [job("fast"), job("slow")], timeout=1.0)
    assert outcomes[0].summary == "Recall note."
    assert outcomes[1].summary is None and "within 1 s" in (outcomes[1].error or "")
