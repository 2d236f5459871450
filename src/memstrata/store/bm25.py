"""BM25 as FTS5 computes it, written once for every backend.

SQLite's FTS5 ranks with ``bm25()``; where a search scores rows itself (a bounded
boolean query on SQLite, every ranked search on PostgreSQL) it uses these functions, so
that the two backends weigh a term by the same rarity and a row by the same length
normalisation: FTS5's defaults, k1 = 1.2 and b = 0.75, and its IDF
``log((N - n + 0.5) / (n + 0.5))`` floored at a small positive value.
"""

from __future__ import annotations

import math

__all__ = ["B", "K1", "gain", "idf"]

# FTS5's bm25() defaults.
K1 = 1.2
B = 0.75


def idf(nrow: float, count: float) -> float:
    """FTS5's IDF of a term in ``count`` of ``nrow`` rows, log((N - n + 0.5) / (n + 0.5)),
    floored as FTS5 floors it: a term in most rows still counts a little."""
    count = min(count, float(nrow))
    return max(math.log((nrow - count + 0.5) / (count + 0.5)), 1e-6)


def gain(frequency: float, length: float, average: float) -> float:
    """The factor a row's BM25 multiplies a term's IDF by: the term ``frequency`` times in
    a row of ``length`` tokens, where rows hold ``average`` tokens on average.

    ``frequency * (K1 + 1) / (frequency + K1 * (1 - B + B * length / average))``; 0 for a
    term the row does not hold.
    """
    if frequency <= 0:
        return 0.0
    norm = 1 - B + B * length / average if average > 0 else 1.0
    return frequency * (K1 + 1) / (frequency + K1 * norm)
