"""Deterministic embeddings for tests: no model, same text -> same unit vector.

Two modes:

``hash``
    a pseudo-random unit vector seeded by the SHA-256 of the text. Different texts are
    nearly orthogonal, whatever they share; good for "was this exact text embedded?".
``bow``
    feature hashing of the text's words (lower-cased, stopwords dropped) and of CJK
    bigrams, each word adding +1 or -1 to one dimension. Texts that share words get
    similar vectors, so hybrid-recall tests can expect "tea" to be near "green tea".
"""

from __future__ import annotations

import hashlib
import math
import re
import struct
from typing import Literal

from memstrata.query.cjk import CJK_RUN, run_terms

EmbeddingMode = Literal["hash", "bow"]

_WORD = re.compile(r"[^\W_]+")
# Small on purpose: enough that "the" or "is" does not make every sentence alike.
_STOPWORD_TEXT = """
a an and are as at be but by did do does for from had has have he her his i if in into is
it its me my no not of on or our she so that the their them they this to was we were what
when where which who why will with you your
"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def _normalise(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0.0:
        return vector
    return [x / norm for x in vector]


def hash_embedding(text: str, dimensions: int) -> list[float]:
    """A unit vector determined by the exact text (SHA-256 counter mode)."""
    values: list[float] = []
    counter = 0
    seed = text.encode("utf-8")
    while len(values) < dimensions:
        digest = hashlib.sha256(seed + counter.to_bytes(4, "big")).digest()
        # 8 unsigned 32-bit integers per digest, mapped to [-1, 1).
        for (number,) in struct.iter_unpack(">I", digest):
            values.append(number / 2**31 - 1.0)
        counter += 1
    return _normalise(values[:dimensions])


def words(text: str) -> list[str]:
    """The terms the bag-of-words mode counts: Latin words and CJK bigrams."""
    terms: list[str] = []
    for chunk in _WORD.findall(text.lower()):
        runs = CJK_RUN.findall(chunk)
        if runs:
            for run in runs:
                terms.extend(run_terms(run))
            chunk = CJK_RUN.sub(" ", chunk)
            terms.extend(w for w in chunk.split() if w not in _STOPWORDS)
        elif chunk not in _STOPWORDS:
            terms.append(chunk)
    return terms


def bag_of_words_embedding(text: str, dimensions: int) -> list[float]:
    """A unit vector by feature hashing; texts sharing words point the same way."""
    vector = [0.0] * dimensions
    for term in words(text):
        digest = hashlib.sha256(term.encode("utf-8")).digest()
        index = int.from_bytes(digest[:4], "big") % dimensions
        vector[index] += 1.0 if digest[4] & 1 else -1.0
    if not any(vector):
        # A text of stopwords only still gets a stable, non-zero vector.
        return hash_embedding(text, dimensions)
    return _normalise(vector)


def embed_text(text: str, dimensions: int, mode: EmbeddingMode) -> list[float]:
    """Embed one text in the given mode."""
    if mode == "bow":
        return bag_of_words_embedding(text, dimensions)
    return hash_embedding(text, dimensions)


def cosine(a: list[float], b: list[float]) -> float:
    """Cosine similarity of two vectors (0.0 when either is zero)."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0
