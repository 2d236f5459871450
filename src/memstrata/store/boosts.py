"""Evidence beyond BM25 that re-scores the fused candidates of a search.

Each step takes the candidates of a search (:func:`memstrata.store.rank.rank_query`: the
backend's full-text score) and adjusts them in place; none reads the store itself:

* :func:`boost_dates` - messages written inside a date the question names;
* :func:`boost_speakers` - transcript lines ("Name: ...") spoken by a person the
  question names;
* :func:`mix_readings` - the scores of a transcript-shaped query read as a whole and by
  its last turn (:mod:`memstrata.query.transcript`);
* :func:`merge_subqueries` - the candidates of rewritten sub-queries (query expansion);
* :func:`fuse_vectors` - cosine similarity from an embedder (hybrid recall), plus the
  messages the keywords missed when they are close enough.

Every step is optional; the shipped default is keyword + dates (measured in
``benchmarks/results/recall.md``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

from memstrata.query.dates import DateWindow

if TYPE_CHECKING:
    from memstrata.store.backend import Candidate

__all__ = [
    "DATE_BOOST",
    "EXPANSION_WEIGHT",
    "SPEAKER_BOOST",
    "VECTOR_FLOOR",
    "VECTOR_ONLY_MIN",
    "VECTOR_RERANK",
    "VECTOR_SESSIONS",
    "VECTOR_WEIGHT",
    "boost_dates",
    "boost_speakers",
    "fuse_vectors",
    "hybrid_scores",
    "merge_subqueries",
    "mix_readings",
]

# A message written inside a date the question names ("on 7 July, 2023", "in August
# 2023") has its score multiplied by 1 + DATE_BOOST (memstrata.query.dates). Large on
# purpose: a named date is a strong constraint, yet still a boost, not a filter, since
# the event may have been told a few days later.
DATE_BOOST = 2.0
# A message spoken by a person the question names (a transcript line "Name: ...") has its
# score multiplied by 1 + SPEAKER_BOOST when speaker awareness is on (off by default:
# within noise on LoCoMo, see benchmarks/results/recall.md).
SPEAKER_BOOST = 0.25
# Hybrid recall: a keyword candidate's score gains VECTOR_WEIGHT x its cosine similarity
# above VECTOR_FLOOR (rescaled to 0..1); a message the keywords missed enters only when
# its similarity reaches VECTOR_ONLY_MIN, scored by the vector part alone.
VECTOR_WEIGHT = 1.0
VECTOR_FLOOR = 0.1
VECTOR_ONLY_MIN = 0.5
VECTOR_SCALE = "relative"
# Only the best VECTOR_RERANK keyword candidates are re-scored, and vector-only candidates
# come from the messages of the best VECTOR_SESSIONS candidate sessions (at most
# memstrata.search.embedders.VECTOR_SCAN of them): reading vectors is the cost of hybrid recall.
# With no keyword candidate at all, the newest VECTOR_SCAN vectors are compared.
VECTOR_RERANK = 300
VECTOR_SESSIONS = 10
# Query expansion: the best score of a message under the rewritten sub-queries is added
# to its score under the question, times EXPANSION_WEIGHT.
EXPANSION_WEIGHT = 0.5
Key = TypeVar("Key")
# A transcript line starts with its speaker: one to three words, then a colon.
_SPEAKER = re.compile(r"^\s*([^\W\d_][\w .'-]{0,40}?)\s*:", re.UNICODE)


def boost_dates(cands: Iterable[Candidate], windows: Sequence[DateWindow], boost: float) -> int:
    """Multiply by ``1 + boost`` the score of each candidate written inside a window;
    return how many were boosted."""
    boosted = 0
    if not windows or boost == 0:
        return 0
    for cand in cands:
        if any(w.contains(cand.timestamp) for w in windows):
            cand.score *= 1 + boost
            boosted += 1
    return boosted


def speaker_of(text: str) -> str | None:
    """The speaker of a transcript line ("Caroline: I went ...") in lower case, else None."""
    match = _SPEAKER.match(text)
    if match is None or len(match.group(1).split()) > 3:
        return None
    return match.group(1).strip().lower()


def boost_speakers(
    texts: Mapping[int, str], cands: Sequence[Candidate], question: str, boost: float
) -> int:
    """Multiply by ``1 + boost`` the score of each candidate whose speaker (read from the
    start of its text, ``texts`` by message id) the question names; return how many."""
    words = {w.lower() for w in re.findall(r"\w+", question)}
    if not cands or not words or boost == 0:
        return 0
    boosted = 0
    for cand in cands:
        speaker = speaker_of(texts.get(cand.id, "")[:64])
        if speaker and set(speaker.split()) <= words:
            cand.score *= 1 + boost
            boosted += 1
    return boosted


def merge_subqueries(
    found: dict[int, Candidate], extra: Iterable[Sequence[Candidate]], weight: float
) -> None:
    """Add ``weight`` x each message's best score under the sub-queries to its score;
    messages only the sub-queries found join with that part alone."""
    best: dict[int, Candidate] = {}
    for cands in extra:
        for cand in cands:
            if cand.id not in best or cand.score > best[cand.id].score:
                best[cand.id] = cand
    for mid, cand in best.items():
        if mid in found:
            found[mid].score += weight * cand.score
        else:
            cand.score *= weight
            found[mid] = cand


def merge_fallback(found: dict[int, Candidate], extra: Sequence[Candidate]) -> None:
    """Append the fallback's candidates (an explicit query's words) below every candidate
    of the explicit query itself: what the user asked for exactly stays first."""
    extra = [c for c in extra if c.id not in found and c.score > 0]
    if not extra:
        return
    floor = min((c.score for c in found.values()), default=1.0)
    top = max(c.score for c in extra)
    # Scaled into (0, floor / 2]: below the weakest exact hit, in their own order.
    scale = (floor / 2) / top if floor > 0 else 1.0 / top
    for cand in extra:
        cand.score *= scale
        found[cand.id] = cand


def too_few(found: Iterable[Candidate], want: int, *, sessions: bool) -> bool:
    """True when ``found`` has fewer than ``want`` messages (or sessions)."""
    keys = {c.session_id for c in found} if sessions else {c.id for c in found}
    return len(keys) < want


def hybrid_scores(
    keyword: Mapping[Key, float],
    sims: Mapping[Key, float],
    joining: Iterable[Key],
    *,
    weight: float = VECTOR_WEIGHT,
) -> dict[Key, float]:
    """Hybrid fusion, the one rule of every hybrid search (sessions and facts): each
    keyword score (the query's best 1.0) gains ``weight * sims[key]``, and each key of
    ``joining`` the keywords did not find enters with that part alone.

    ``sims`` are cosines on the scale of :func:`memstrata.store.vectors.relative`: where
    each stands among the vectors compared (the least similar 0, the most similar 1), so
    the vector part means the same whatever the model's own cosine range. Which
    vector-only keys may join is the caller's gate (a cosine bar on the model's
    calibrated scale).
    """
    fused = {key: score + weight * sims.get(key, 0.0) for key, score in keyword.items()}
    for key in joining:
        if key not in fused:
            fused[key] = weight * sims.get(key, 0.0)
    return fused


def mix_readings(
    whole: Mapping[Key, float], last_turn: Mapping[Key, float], weight: float
) -> dict[Key, float]:
    """The scores of a query read twice (:mod:`memstrata.query.transcript`): each key's
    ``(whole + weight * last_turn) / (1 + weight)``, a key one reading did not find
    counting 0 there. With both readings on one scale (keyword scores whose best is 1.0,
    or cosines), the mix stays on it."""
    return {
        key: (whole.get(key, 0.0) + weight * last_turn.get(key, 0.0)) / (1.0 + weight)
        for key in {**whole, **last_turn}
    }


def fuse_vectors(
    found: dict[int, Candidate],
    sims: Mapping[int, float],
    passing: Sequence[Candidate],
    *,
    weight: float = VECTOR_WEIGHT,
    floor: float = VECTOR_FLOOR,
    only_min: float = VECTOR_ONLY_MIN,
) -> int:
    """Add the vector evidence to ``found`` (message id -> candidate) in place.

    A keyword candidate gains ``weight * max(0, (cos - floor) / (1 - floor))``. A message
    with no keyword match joins when ``cos >= only_min`` and it is among ``passing`` (the
    messages the search's filters let through: the similarity scan does not know about
    roles, sources or sessions), scored by the vector part alone. Returns how many
    joined that way.
    """

    def part(cos: float) -> float:
        return weight * max(0.0, (cos - floor) / (1.0 - floor))

    for mid, cand in found.items():
        cos = sims.get(mid)
        if cos is not None:
            cand.score += part(cos)
    added = 0
    for cand in passing:
        cos = sims.get(cand.id)
        if cand.id not in found and cos is not None and cos >= only_min:
            cand.score = part(cos)
            found[cand.id] = cand
            added += 1
    return added
