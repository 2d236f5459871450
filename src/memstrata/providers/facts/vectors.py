"""Optional embeddings for the facts store: stored vectors and their fusion with keywords.

Hybrid recall for facts uses the same seam as the session search
(:class:`memstrata.search.embedders.Embedder`: the offline MiniLM or an OpenAI-compatible
``/v1/embeddings``). Writes stay cheap: ``FactStore.add`` never embeds. Vectors are
computed afterwards, in batches, by ``FactStore.index_vectors`` (the provider calls it
lazily before a recall, the CLI and benchmarks call it explicitly), and stored in
``fact_vectors`` as float32 blobs (schema migration 2). A fact that is retired, purged or
re-worded loses its vector by trigger.

Reading: a facts store is small (thousands of rows, not millions), so the query vector
is compared with the newest :data:`VECTOR_SCAN` live vectors by brute force; numpy does
the dot products.

Fusion is the session search's (:func:`memstrata.store.boosts.hybrid_scores`, one
implementation): a keyword candidate gains ``VECTOR_WEIGHT`` x where its cosine stands
among the facts compared (the least similar 0, the most similar 1), so the vector part
means the same whatever the model's cosine range;

* :func:`fuse_search` (explicit search): a fact the keywords missed joins when its
  calibrated cosine reaches ``SEARCH_VECTOR_MIN``, with the vector part alone;
* :func:`fuse_recall` (gated prefetch): the same re-scoring of the facts the keyword gate
  admitted, and a fact the gate refused joins only when its calibrated cosine reaches
  ``RECALL_VECTOR_MIN``, a bar set so unrelated chit-chat stays unanswered.

The thresholds were chosen on ``benchmarks/facts_recall.py`` with all-MiniLM-L6-v2; the
figures are in ``benchmarks/results/facts_recall.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final

from memstrata.errors import ConfigError, StorageError
from memstrata.search.embedders import Embedder, encode_vector
from memstrata.store import boosts
from memstrata.store.boosts import hybrid_scores
from memstrata.store.vectors import embed_queries, numpy_or_none, relative

__all__ = [
    "INDEX_BATCH",
    "RECALL_VECTOR_MIN",
    "SEARCH_VECTOR_MIN",
    "VECTOR_SCAN",
    "VECTOR_WEIGHT",
    "check_embedder",
    "cosines",
    "embed_query",
    "fuse_recall",
    "fuse_search",
]

# Facts embedded per call of the embedder, each batch written in its own transaction.
INDEX_BATCH: Final = 64
# Live vectors compared per query, newest first: 20 000 x 384 float32 is 30 MB read,
# the most a per-turn prefetch should pay; a larger store keeps keywords for the rest.
VECTOR_SCAN: Final = 20_000
# Weight of the vector part against a keyword score (the best keyword hit scores 1.0):
# the session search's.
VECTOR_WEIGHT: float = boosts.VECTOR_WEIGHT
# A fact no keyword matched joins an explicit search at this cosine...
SEARCH_VECTOR_MIN: float = 0.5
# ... and a prefetch recall at this one: recall answers a chat message nobody wrote as a
# query, so a vector-only fact must be close to it in meaning. On the benchmark 0.5 added
# no answer to chit-chat (the 6 % it answers come from keywords) and 2.2 points of R@5
# over 0.6; 0.4 gained nothing more, so the bar keeps that margin.
RECALL_VECTOR_MIN: float = 0.5
# Text handed to the embedder per fact: facts are short sentences; this bounds a stray one.
EMBED_CHARS: Final = 2000


def check_embedder(embedder: object) -> Embedder:
    """``embedder`` if it looks like an Embedder, else ConfigError saying what it needs."""
    if (
        not isinstance(embedder, Embedder)
        or not getattr(embedder, "name", "")
        or int(getattr(embedder, "dims", 0)) < 1
    ):
        raise ConfigError(
            f"{embedder!r} is not an embedder: it needs a non-empty `name`, `dims` >= 1 and "
            "`embed(texts) -> list of vectors` (see memstrata.search.embedders.Embedder)."
        )
    return embedder


def embed_checked(embedder: Embedder, texts: list[str]) -> list[bytes]:
    """Unit float32 blobs of ``texts``; ConfigError when the embedder breaks its contract."""
    vectors = embedder.embed(texts) if texts else []
    if len(vectors) != len(texts):
        raise ConfigError(
            f"Embedder {embedder.name!r} returned {len(vectors)} vectors for {len(texts)} "
            "texts; it must return one per text."
        )
    blobs: list[bytes] = []
    for vector in vectors:
        if len(vector) != embedder.dims:
            raise ConfigError(
                f"Embedder {embedder.name!r} declares {embedder.dims} dims but returned a "
                f"vector of {len(vector)}; fix its `dims`."
            )
        norm = sum(float(x) * float(x) for x in vector) ** 0.5
        blobs.append(encode_vector([float(x) / norm if norm > 0 else 0.0 for x in vector]))
    return blobs


def index_in_batches(
    read: Callable[[int, int], list[tuple[int, str]]],
    write: Callable[[list[tuple[int, bytes]]], int],
    embedder: Embedder,
    *,
    limit: int | None,
    batch: int,
    progress: Callable[[int], None] | None,
) -> int:
    """The indexing loop: read a batch, embed it outside any transaction, write it.

    Returns how many facts were embedded. An interrupted run keeps what it wrote.
    """
    if batch < 1:
        raise StorageError(f"batch must be at least 1, got {batch!r}.")
    if limit is not None and limit < 0:
        raise StorageError(f"limit must be None or >= 0, got {limit!r}.")
    done, after = 0, 0
    while limit is None or done < limit:
        size = batch if limit is None else min(batch, limit - done)
        rows = read(after, size)
        if not rows:
            break
        after = rows[-1][0]
        blobs = embed_checked(embedder, [text for _, text in rows])
        write([(fid, blob) for (fid, _), blob in zip(rows, blobs, strict=True)])
        done += len(rows)
        if progress is not None:
            progress(done)
    return done


def embed_query(embedder: Embedder, *texts: str) -> list[list[float]]:
    """The vectors of a query's readings (one embedder call; usually one text)."""
    vectors = embed_queries(embedder, [text[:EMBED_CHARS] for text in texts])
    if len(vectors) != len(texts) or any(len(v) != embedder.dims for v in vectors):
        raise ConfigError(
            f"Embedder {embedder.name!r} did not return one vector of {embedder.dims} dims "
            "per query text; check the embedder."
        )
    return [[float(x) for x in vector] for vector in vectors]


def cosines(rows: Sequence[tuple[int, bytes]], query_vector: Sequence[float]) -> dict[int, float]:
    """Cosine similarity of ``query_vector`` with stored unit vectors ``(fact id, float32
    bytes)``: ``{fact id: cosine}`` (``{}`` when none is stored or numpy is missing).

    Vectors of another size (an embedder whose dims changed) are left out."""
    np = numpy_or_none()
    if np is None:
        return {}  # keyword recall alone; numpy_or_none said so once
    query = np.asarray(query_vector, dtype=np.float32)
    norm = float(np.linalg.norm(query))
    if norm == 0.0:
        return {}
    size = 4 * query.shape[0]
    kept = [(int(fid), bytes(blob)) for fid, blob in rows if len(blob) == size]
    if not kept:
        return {}
    matrix = np.frombuffer(b"".join(blob for _, blob in kept), dtype="<f4").reshape(len(kept), -1)
    sims = matrix @ (query / norm)
    return {fid: float(x) for (fid, _), x in zip(kept, sims.tolist(), strict=True)}


def fuse_search(
    keyword: Mapping[int, float],
    sims: Mapping[int, float],
    *,
    only_min: float | None = None,
) -> dict[int, float]:
    """The session search's hybrid fusion (:func:`memstrata.store.boosts.hybrid_scores`):
    keyword scores plus ``VECTOR_WEIGHT`` x each fact's cosine relative to the facts
    compared, and the vector-only facts whose (calibrated) cosine reaches ``only_min``
    (default SEARCH_VECTOR_MIN)."""
    only_min = SEARCH_VECTOR_MIN if only_min is None else only_min
    joining = [fid for fid, cos in sims.items() if fid not in keyword and cos >= only_min]
    return hybrid_scores(keyword, relative(sims), joining, weight=VECTOR_WEIGHT)


def fuse_recall(
    gated: Mapping[int, float],
    sims: Mapping[int, float],
    exclude: Iterable[int] = (),
    *,
    only_min: float | None = None,
) -> dict[int, float]:
    """The facts the keyword gate admitted (scores normalised to the best one) fused as
    :func:`fuse_search` fuses them, and the facts the gate refused whose cosine reaches
    ``only_min`` (default RECALL_VECTOR_MIN)."""
    only_min = RECALL_VECTOR_MIN if only_min is None else only_min
    best = max(gated.values(), default=0.0)
    keyword = {fid: score / best if best > 0 else 0.0 for fid, score in gated.items()}
    skip = set(exclude)
    joining = [
        fid
        for fid, cos in sims.items()
        if fid not in keyword and fid not in skip and cos >= only_min
    ]
    return hybrid_scores(keyword, relative(sims), joining, weight=VECTOR_WEIGHT)
