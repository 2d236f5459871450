"""Message vectors as the stores keep them, and the cosine of a query against them.

A vector is stored as little-endian float32 bytes (:func:`encode_vector`), normalised to
unit length when it is written, so a query's cosine with it is one dot product.
Reading a vector costs its bytes (1.5 KB for 384 dimensions), so a search compares a
bounded set (see :func:`memstrata.store.rank.rank_query`); numpy does the arithmetic and
is needed only when hybrid recall is on.
"""

from __future__ import annotations

import array
import logging
import math
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from memstrata.errors import ConfigError

logger = logging.getLogger(__name__)

# How many messages of the candidate sessions a query compares besides the keyword
# candidates (where vector-only candidates come from). The dot products are cheap; reading
# each 1.5 KB vector out of the store is what costs (tens of microseconds each).
VECTOR_SCAN = 500
# ... and how many of the newest messages of the whole store.
VECTOR_RECENT = 200


NUMPY_INSTALL = "pip install 'memstrata[embeddings]'"
_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_degraded(feature: str, reason: str) -> None:
    """Say once per process that ``feature`` is off and why; the core carries on.

    An optional part that cannot run (numpy or an embedder missing) must cost only
    itself: keyword recall still answers, and a warning on every search would bury the
    one line that says how to get the feature back.
    """
    with _warned_lock:
        if feature in _warned:
            return
        _warned.add(feature)
    logger.warning("%s is off: %s. Keyword recall carries on without it.", feature, reason)


def numpy_or_none() -> Any:
    """The numpy module, or None (with :func:`warn_degraded`) when it is not installed."""
    try:
        import numpy
    except ImportError:
        warn_degraded("Hybrid (vector) recall", f"numpy is not installed ({NUMPY_INSTALL})")
        return None
    return numpy


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


def unit(vector: Sequence[float]) -> list[float]:
    """``vector`` scaled to length 1 (a zero vector stays as it is)."""
    norm = math.sqrt(sum(x * x for x in vector))
    return [float(x) / norm for x in vector] if norm > 0 else [float(x) for x in vector]


def cosines(blobs: Mapping[int, bytes], query_vector: Sequence[float]) -> dict[int, float]:
    """Cosine of ``query_vector`` with each stored (unit) vector; blobs of another size
    (another model's dimensions, an empty placeholder) are skipped."""
    np = numpy_or_none()
    if np is None or not blobs:
        return {}
    query = np.asarray(query_vector, dtype=np.float32)
    norm = float(np.linalg.norm(query))
    if norm == 0.0:
        return {}
    size = 4 * query.shape[0]
    good = [(mid, blob) for mid, blob in blobs.items() if len(blob) == size]
    if not good:
        return {}
    matrix = np.frombuffer(b"".join(b for _, b in good), dtype="<f4").reshape(len(good), -1)
    sims = matrix @ (query / norm)
    return {mid: float(x) for (mid, _), x in zip(good, sims.tolist(), strict=True)}


@runtime_checkable
class Embedder(Protocol):
    """Anything that embeds texts: a name (stored with each vector), dims and embed()."""

    name: str
    dims: int

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector of ``dims`` floats per text, in order."""


def embed_queries(embedder: Embedder, texts: list[str]) -> list[list[float]]:
    """Vectors of search queries: the embedder's ``embed_queries`` when it has one (a
    model trained with a query prefix, such as e5), else its ``embed``."""
    embed = getattr(embedder, "embed_queries", None)
    return embed(texts) if callable(embed) else embedder.embed(texts)


def calibrated(embedder: Embedder, sims: Mapping[int, float]) -> dict[int, float]:
    """Cosines on one scale whatever the model: ``(cos - f) / (1 - f)``, where ``f`` is
    the embedder's ``cosine_floor`` (the cosine two unrelated texts reach with it; 0 when
    it declares none, as MiniLM and API models need no shift). The weights and bars of
    hybrid recall are written for that scale."""
    floor = getattr(embedder, "cosine_floor", 0.0)
    if not isinstance(floor, int | float) or isinstance(floor, bool) or not 0 <= floor < 1:
        raise ConfigError(
            f"Embedder {embedder.name!r} declares cosine_floor {floor!r}: it must be a number "
            "in [0, 1) (the cosine two unrelated texts reach), or leave it out."
        )
    if floor == 0:
        return dict(sims)
    return {key: (cos - floor) / (1.0 - floor) for key, cos in sims.items()}


def relative(sims: Mapping[int, float]) -> dict[int, float]:
    """Cosines rescaled to where each stands among the vectors compared: the least
    similar 0, the most similar 1 (all 0 when they are equal). What a model's cosines
    mean depends on the model (unrelated texts score about 0.1 with MiniLM, 0.8 with
    e5); their order among the texts compared does not."""
    if not sims:
        return {}
    low, high = min(sims.values()), max(sims.values())
    span = high - low
    return {key: (cos - low) / span if span > 0 else 0.0 for key, cos in sims.items()}
