"""Query-focused summaries of past conversations, concurrent, bounded and cached.

A summary model reads up to :data:`MAX_SUMMARY_INPUT_CHARS` of a transcript (cut around
the query's matches) and writes what the conversation said *about the query*: a soft
rerank with reasoning, which also bridges vocabulary the keyword index cannot ("the
ReAct loop hung" found for "deadlock"). Recall is cheap and wide; the summary filters.

Costs stay bounded: at most ``max_concurrency`` requests in flight, one aggregate
deadline for all of them, and a cache in the store keyed by the conversation's tip, its
message count and last message id, and the normalised query, so a repeated recall of an
unchanged conversation sends nothing. A summary that fails (or is not ready by the
deadline) is reported per conversation; the caller falls back to verbatim text for that
conversation only.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from memstrata.errors import LLMError, SessionStoreError, StorageError
from memstrata.llm.types import LLMClient

if TYPE_CHECKING:
    from memstrata.store.contract import SessionStoreContract

MAX_SUMMARY_INPUT_CHARS = 100_000
MAX_SUMMARY_CHARS = 6_000
SUMMARY_MAX_TOKENS = 1_200
SUMMARY_TEMPERATURE = 0.1
MAX_CONCURRENCY = 5

SYSTEM_PROMPT = """\
You help an AI assistant recall a past conversation with its user. You are given the \
transcript of that conversation (possibly cut around the parts that matched a search) \
and the topic being searched for. Write a short recall note about that topic only.

Cover, where the transcript shows them:
1. what the user wanted;
2. what was done and what came of it;
3. decisions taken and solutions that worked (or did not);
4. specific commands, file paths, URLs, names, numbers and settings, quoted exactly as \
they appear in the transcript;
5. anything left open or unresolved.

Rules: write in the past tense, plainly and briefly. Use only what the transcript says: \
never guess or fill gaps. If the transcript does not discuss the topic, or a point above, \
say "not discussed" instead of inventing. Related wording counts (a "hung loop" when the \
topic is "deadlock"): say how it relates. Parts marked "[truncated]" were cut, not \
missing from the conversation."""


def normalize_query(query: str) -> str:
    """The cache form of a query: lower case, single spaces, no trailing punctuation."""
    return " ".join(query.lower().split()).strip(" ?!.;,")


def user_prompt(query: str, transcript: str, *, source: str, when: str) -> str:
    """The user message for one conversation."""
    return (
        f"Search topic: {query}\n"
        f"Conversation source: {source}; started {when}.\n\n"
        f"<transcript>\n{transcript}\n</transcript>\n\n"
        f"Write the recall note about: {query}"
    )


@dataclass(frozen=True)
class SummaryJob:
    """One conversation to summarise, with its cache key."""

    tip_session_id: str
    root_session_id: str
    message_count: int
    last_message_id: int
    query: str
    transcript: str
    source: str
    when: str


@dataclass(frozen=True)
class SummaryOutcome:
    """A job's result: ``summary`` text, or ``error`` saying why there is none.

    ``origin`` is ``"model"`` (made now), ``"cache"`` (made earlier) or ``"none"``.
    """

    summary: str | None
    origin: str
    error: str | None = None
    seconds: float = 0.0


# ------------------------------------------------------------------------------ cache


def cache_get(store: SessionStoreContract, job: SummaryJob) -> str | None:
    """The cached summary for ``job``, or None."""
    return store.get_cached_summary(
        job.tip_session_id, job.message_count, job.last_message_id, normalize_query(job.query)
    )


def cache_put(store: SessionStoreContract, job: SummaryJob, summary: str, model: str) -> bool:
    """Store a summary; older entries of the same conversation and query are dropped.

    Returns False when the store cannot be written (read-only): caching is best effort.
    """
    try:
        store.cache_summary(
            tip_session_id=job.tip_session_id,
            root_session_id=job.root_session_id,
            message_count=job.message_count,
            last_message_id=job.last_message_id,
            query=normalize_query(job.query),
            model=model,
            summary=summary,
        )
    except (StorageError, SessionStoreError):
        return False
    return True


class SummaryCache(Protocol):
    """Where :func:`summarize_all` looks summaries up and keeps the new ones."""

    def get(self, job: SummaryJob) -> str | None:
        """The cached summary for ``job``, or None."""
        ...

    def put(self, job: SummaryJob, summary: str, model: str) -> bool:
        """Keep a summary; False when it could not be written (caching is best effort)."""
        ...


@dataclass(frozen=True)
class StoreSummaryCache:
    """The summary cache of a session store (either backend)."""

    store: SessionStoreContract

    def get(self, job: SummaryJob) -> str | None:
        """The cached summary for ``job``, or None."""
        return cache_get(self.store, job)

    def put(self, job: SummaryJob, summary: str, model: str) -> bool:
        """Keep a summary; False when the store is read-only."""
        return cache_put(self.store, job, summary, model)


class NoSummaryCache:
    """No cache: every job goes to the model and nothing is kept."""

    def get(self, job: SummaryJob) -> str | None:
        """Nothing is cached."""
        return None

    def put(self, job: SummaryJob, summary: str, model: str) -> bool:
        """Nothing is kept."""
        return False


# -------------------------------------------------------------------------- summaries


_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


def clean_summary(text: str) -> str:
    """Drop reasoning blocks some models emit and cap the length."""
    text = _THINK.sub("", text).strip()
    if len(text) > MAX_SUMMARY_CHARS:
        text = text[: MAX_SUMMARY_CHARS - 3].rstrip() + "..."
    return text


def summarize_one(client: LLMClient, job: SummaryJob, *, timeout: float) -> str:
    """Ask the model for one summary; raise LLMError on failure or an empty answer."""
    completion = client.complete(
        [
            {"role": "system", "content": SYSTEM_PROMPT},
            {
                "role": "user",
                "content": user_prompt(job.query, job.transcript, source=job.source, when=job.when),
            },
        ],
        temperature=SUMMARY_TEMPERATURE,
        max_tokens=SUMMARY_MAX_TOKENS,
        timeout=max(0.1, timeout),
    )
    text = clean_summary(completion.text or "")
    if not text:
        raise LLMError("The summary model returned an empty answer.")
    return text


def _close_later(pool: ThreadPoolExecutor, client: LLMClient | None) -> None:
    # Calls still running past the deadline finish in the background (their own timeout
    # ends them); the client is closed once they have.
    def finish() -> None:
        pool.shutdown(wait=True)
        if client is not None:
            client.close()

    threading.Thread(target=finish, name="memstrata-summary-cleanup", daemon=True).start()


def summarize_all(
    store: SessionStoreContract | None,
    client: LLMClient,
    jobs: Sequence[SummaryJob],
    *,
    max_concurrency: int = 3,
    timeout: float = 90.0,
    close_client: bool = False,
    cache: SummaryCache | None = None,
) -> list[SummaryOutcome]:
    """Summarise ``jobs`` (cache first), at most ``max_concurrency`` at once.

    ``timeout`` bounds the whole batch: summaries not done by then are reported as timed
    out and the caller moves on. Never raises for a model failure; each outcome carries
    its own error. With ``close_client`` the client is closed when the calls are done.
    ``cache`` is where summaries are looked up and kept: by default the ``store``'s own
    table (no cache at all when ``store`` is None too); another backend passes its own.
    """
    if cache is None:
        cache = StoreSummaryCache(store) if store is not None else NoSummaryCache()
    outcomes: list[SummaryOutcome | None] = [None] * len(jobs)
    todo: list[int] = []
    for i, job in enumerate(jobs):
        cached = cache.get(job)
        if cached is not None:
            outcomes[i] = SummaryOutcome(cached, "cache")
        else:
            todo.append(i)
    if not todo:
        if close_client:
            client.close()
        return [o for o in outcomes if o is not None]

    workers = max(1, min(int(max_concurrency), MAX_CONCURRENCY, len(todo)))
    deadline = time.monotonic() + max(0.0, float(timeout))
    model = getattr(client, "model", "")

    def run(job: SummaryJob) -> tuple[str, float]:
        started = time.monotonic()
        left = deadline - started
        if left <= 0:
            raise LLMError("The summary deadline passed before this summary could start.")
        return summarize_one(client, job, timeout=left), time.monotonic() - started

    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="memstrata-summary")
    futures: dict[int, Future[tuple[str, float]]] = {i: pool.submit(run, jobs[i]) for i in todo}
    _, pending = wait(list(futures.values()), timeout=max(0.0, deadline - time.monotonic()))
    for i, future in futures.items():
        if future in pending:
            future.cancel()
            outcomes[i] = SummaryOutcome(
                None, "none", f"the summary was not ready within {timeout:g} s"
            )
            continue
        try:
            text, seconds = future.result()
        except LLMError as exc:
            outcomes[i] = SummaryOutcome(None, "none", str(exc))
            continue
        except Exception as exc:  # a summary must never break recall itself
            outcomes[i] = SummaryOutcome(None, "none", f"{type(exc).__name__}: {exc}")
            continue
        cache.put(jobs[i], text, model)
        outcomes[i] = SummaryOutcome(text, "model", seconds=seconds)
    if pending:
        _close_later(pool, client if close_client else None)
    else:
        pool.shutdown(wait=True)
        if close_client:
            client.close()
    return [o for o in outcomes if o is not None]
