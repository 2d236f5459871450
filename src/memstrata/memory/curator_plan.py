"""Curation plans: the operations a curator proposes, checked before anything is written.

A plan is a list of :class:`CuratorOp` over the **numbered entries** of one file, as
they were read when curation started (1 = the first entry):

==============  =====================================================================
``duplicate``   entry ``ids[0]`` says again what another entry (``keep``) says; removed
``merge``       entries ``ids`` become one entry, ``content``
``shorten``     entry ``ids[0]`` becomes ``content``, which must be shorter
``stale``       entry ``ids[0]`` is no longer true or useful; removed (``reason``)
``move``        entry ``ids[0]`` is an episodic fact or a note: it leaves the file and
                goes to the facts store with ``category``, recalled on demand
==============  =====================================================================

:func:`parse_model_plan` turns the curator model's JSON into operations and
:func:`check_plan` validates a whole plan against the entries, the threat scanner and the
budget. Both raise :class:`~memstrata.errors.InvalidMemoryArgument` with every problem
found, so a bad plan is reported whole and nothing is applied.
:func:`find_duplicates` is the deterministic pass that needs no model.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from memstrata.errors import InvalidMemoryArgument, ThreatDetectedError
from memstrata.memory.args import scan_content
from memstrata.memory.format import char_count

OpKind = Literal["duplicate", "merge", "shorten", "stale", "move"]
OP_KINDS: Final[tuple[OpKind, ...]] = ("duplicate", "merge", "shorten", "stale", "move")
# Identity and preferences belong in the frozen snapshot; only these may leave a file.
MOVABLE_CATEGORIES: Final = ("episodic", "note")
MAX_OPERATIONS: Final = 200


@dataclass(frozen=True)
class CuratorOp:
    """One proposed change to the numbered entries of a file."""

    kind: OpKind
    ids: tuple[int, ...]
    content: str | None = None
    category: str | None = None
    reason: str = ""
    keep: int | None = None
    """For ``duplicate``: the entry that stays."""

    def describe(self, entries: Sequence[str]) -> str:
        """One line for a report: what happens to which entries."""

        def quote(i: int) -> str:
            text = entries[i - 1] if 0 < i <= len(entries) else "?"
            return f"#{i} {text[:60]!r}" + ("…" if len(text) > 60 else "")

        if self.kind == "duplicate":
            return f"remove duplicate {quote(self.ids[0])} (same as #{self.keep})"
        if self.kind == "merge":
            joined = ", ".join(f"#{i}" for i in self.ids)
            return f"merge {joined} into {self.content!r}"
        if self.kind == "shorten":
            return f"shorten {quote(self.ids[0])} to {self.content!r}"
        if self.kind == "stale":
            return f"remove stale {quote(self.ids[0])}" + (
                f": {self.reason}" if self.reason else ""
            )
        return f"move {quote(self.ids[0])} to the facts store as {self.category}"


@dataclass(frozen=True)
class PlanResult:
    """A validated plan: the entries after it, the batch that applies it, facts to add."""

    ops: tuple[CuratorOp, ...]
    before: tuple[str, ...]
    after: tuple[str, ...]
    batch: tuple[dict[str, str], ...]
    facts: tuple[tuple[str, str], ...] = field(default=())
    """(content, category) of each entry moved to the facts store."""

    @property
    def chars_before(self) -> int:
        """Characters of the entries before the plan (delimiters included)."""
        return char_count(list(self.before))

    @property
    def chars_after(self) -> int:
        """Characters of the entries after the plan (delimiters included)."""
        return char_count(list(self.after))


# -- the deterministic pass -------------------------------------------------------------

_WORD = re.compile(r"\w+", re.UNICODE)


def normalize(text: str) -> str:
    """Case, width, punctuation and spacing folded away: equal means the same words."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_WORD.findall(folded))


def _words(text: str) -> frozenset[str]:
    return frozenset(normalize(text).split())


def find_duplicates(entries: Sequence[str], *, threshold: float = 0.85) -> list[CuratorOp]:
    """Entries that repeat another one, as ``duplicate`` operations (no model needed).

    Two entries are duplicates when their normalized text is equal, when one's normalized
    text is contained in the other's, or when their word sets overlap by at least
    ``threshold`` (Jaccard). The entry with the longer normalized text is kept (it says
    more); on a tie the earlier one. An entry is removed at most once, and never in
    favour of an entry that is itself removed.
    """
    norms = [normalize(e) for e in entries]
    words = [_words(e) for e in entries]
    removed: dict[int, int] = {}
    for i in range(len(entries)):
        if i in removed or not norms[i]:
            continue
        for j in range(i + 1, len(entries)):
            if j in removed or i in removed or not norms[j]:
                continue
            union = words[i] | words[j]
            jaccard = len(words[i] & words[j]) / len(union) if union else 0.0
            same = (
                norms[i] == norms[j]
                or f" {norms[i]} " in f" {norms[j]} "
                or f" {norms[j]} " in f" {norms[i]} "
                or jaccard >= threshold
            )
            if not same:
                continue
            # More words say more; punctuation and case do not, so equal texts keep the
            # earlier entry.
            keep, drop = (i, j) if len(norms[i]) >= len(norms[j]) else (j, i)
            removed[drop] = keep

    def survivor(i: int) -> int:
        # A kept entry may itself be dropped later for a longer one: follow the chain.
        while i in removed:
            i = removed[i]
        return i

    return [
        CuratorOp("duplicate", (drop + 1,), keep=survivor(keep) + 1, reason="duplicate")
        for drop, keep in sorted(removed.items())
    ]


# -- the model's plan -------------------------------------------------------------------

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def parse_model_plan(text: str) -> list[CuratorOp]:
    """The operations of the curator model's reply (a JSON object, fenced or not).

    Expected shape: ``{"operations": [{"op": "merge", "ids": [1, 3], "content": "..."},
    {"op": "shorten", "id": 2, "content": "..."}, {"op": "stale", "id": 4, "reason":
    "..."}, {"op": "move", "id": 5, "category": "episodic"}]}``; ``[]`` keeps everything.
    """
    match = _FENCE.match(text)
    body = match.group(1) if match else text.strip()
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise InvalidMemoryArgument(
            f"The curator model's reply is not JSON ({exc}); nothing was changed. Rerun "
            "`memstrata curate`, or use a model that follows JSON instructions "
            "(llm.curator_model)."
        ) from None
    raw = data.get("operations") if isinstance(data, Mapping) else data
    if not isinstance(raw, list):
        raise InvalidMemoryArgument(
            'The curator model\'s reply has no "operations" list; nothing was changed. '
            "Rerun `memstrata curate`."
        )
    if len(raw) > MAX_OPERATIONS:
        raise InvalidMemoryArgument(
            f"The curator model proposed {len(raw)} operations (at most {MAX_OPERATIONS}); "
            "nothing was changed."
        )
    problems: list[str] = []
    ops: list[CuratorOp] = []
    for number, item in enumerate(raw, start=1):
        try:
            ops.append(_parse_op(item))
        except ValueError as exc:
            problems.append(f"operation {number}: {exc}")
    if problems:
        raise InvalidMemoryArgument(
            "The curator model's plan was rejected, nothing was changed: "
            + "; ".join(problems)
            + "."
        )
    return ops


def _ids(item: Mapping[str, Any]) -> tuple[int, ...]:
    raw = item.get("ids", item.get("id"))
    values = raw if isinstance(raw, list) else [raw]
    if not values or any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise ValueError(f"'id'/'ids' must be entry numbers, got {raw!r}")
    return tuple(values)


def _text(item: Mapping[str, Any], key: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"'{key}' must be non-empty text")
    return value.strip()


def _parse_op(item: object) -> CuratorOp:
    if not isinstance(item, Mapping):
        raise ValueError(f"expected an object, got {type(item).__name__}")
    kind = item.get("op", item.get("action"))
    if kind not in OP_KINDS:
        raise ValueError(f"unknown op {kind!r} (use one of {', '.join(OP_KINDS)})")
    ids = _ids(item)
    reason = item.get("reason") if isinstance(item.get("reason"), str) else ""
    if kind == "merge":
        if len(ids) < 2:
            raise ValueError("merge needs at least two ids")
        return CuratorOp("merge", ids, content=_text(item, "content"), reason=str(reason))
    if len(ids) != 1:
        raise ValueError(f"{kind} takes exactly one id")
    if kind == "shorten":
        return CuratorOp("shorten", ids, content=_text(item, "content"), reason=str(reason))
    if kind == "move":
        category = item.get("category", "episodic")
        return CuratorOp("move", ids, category=str(category), reason=str(reason))
    if kind == "duplicate":
        keep = item.get("keep")
        if isinstance(keep, bool) or not isinstance(keep, int):
            raise ValueError("duplicate needs 'keep', the number of the entry that stays")
        return CuratorOp("duplicate", ids, keep=keep, reason=str(reason))
    return CuratorOp("stale", ids, reason=str(reason))


# -- validation of a whole plan -----------------------------------------------------------


def check_plan(
    entries: Sequence[str],
    ops: Sequence[CuratorOp],
    *,
    limit: int,
    goal: int,
    require_goal: bool,
) -> PlanResult:
    """Validate ``ops`` against ``entries`` and return the resulting entries and batch.

    Every op must name existing entries, each entry at most once; new text must pass the
    threat scanner; a shortened entry must get shorter; moved entries need a category in
    MOVABLE_CATEGORIES; the result must fit ``limit``, must not grow past ``goal`` and,
    with ``require_goal``, must reach ``goal`` when the file is over it. Raises
    InvalidMemoryArgument listing every problem.
    """
    problems: list[str] = []
    used: dict[int, int] = {}
    count = len(entries)
    for number, op in enumerate(ops, start=1):
        for i in (*op.ids, *((op.keep,) if op.keep is not None else ())):
            if not 1 <= i <= count:
                problems.append(
                    f"operation {number} ({op.kind}) names entry #{i}, which does "
                    f"not exist (there are {count})"
                )
        for i in op.ids:
            if i in used:
                problems.append(
                    f"operation {number} touches entry #{i}, already used by operation {used[i]}"
                )
            used.setdefault(i, number)
        if op.kind == "duplicate" and op.keep is not None and op.keep in op.ids:
            problems.append(f"operation {number} keeps and removes entry #{op.keep}")
        if op.kind == "move" and op.category not in MOVABLE_CATEGORIES:
            problems.append(
                f"operation {number} moves entry #{op.ids[0]} as {op.category!r}; only "
                f"{' or '.join(MOVABLE_CATEGORIES)} facts leave the file (identity and "
                "preferences stay in the snapshot)"
            )
        if op.content is not None:
            try:
                scan_content(op.content)
            except ThreatDetectedError as exc:
                problems.append(f"operation {number}: {exc}")
    for number, op in enumerate(ops, start=1):
        if op.kind == "duplicate" and op.keep in used and used.get(op.keep) != number:
            keeper = ops[used[op.keep] - 1]
            if keeper.kind in ("stale", "move", "duplicate"):
                problems.append(
                    f"operation {number} keeps entry #{op.keep}, which operation "
                    f"{used[op.keep]} removes"
                )
        if op.kind == "shorten" and not problems:
            old = entries[op.ids[0] - 1]
            if op.content is not None and len(op.content) >= len(old):
                problems.append(
                    f"operation {number} 'shortens' entry #{op.ids[0]} from {len(old)} to "
                    f"{len(op.content)} characters"
                )
    if problems:
        raise InvalidMemoryArgument(
            "The curation plan was rejected, nothing was changed: " + "; ".join(problems) + "."
        )
    return _simulate(entries, ops, limit=limit, goal=goal, require_goal=require_goal)


def _simulate(
    entries: Sequence[str],
    ops: Sequence[CuratorOp],
    *,
    limit: int,
    goal: int,
    require_goal: bool,
) -> PlanResult:
    replaced: dict[int, str] = {}
    dropped: set[int] = set()
    batch: list[dict[str, str]] = []
    facts: list[tuple[str, str]] = []
    for op in ops:
        first = op.ids[0]
        if op.kind in ("merge", "shorten"):
            assert op.content is not None
            replaced[first] = op.content
            batch.append(
                {"action": "replace", "old_text": entries[first - 1], "content": op.content}
            )
            rest = op.ids[1:]
        else:
            rest = op.ids
            if op.kind == "move":
                facts.append((entries[first - 1], str(op.category)))
        for i in rest:
            dropped.add(i)
            batch.append({"action": "remove", "old_text": entries[i - 1]})
    after: list[str] = []
    for i, entry in enumerate(entries, start=1):
        if i in dropped:
            continue
        text = replaced.get(i, entry)
        if text not in after:
            after.append(text)
    before_chars = char_count(list(entries))
    after_chars = char_count(after)
    if entries and not after:
        raise InvalidMemoryArgument(
            "The curation plan would remove every entry; nothing was changed. A curator "
            "never empties a file: remove entries yourself if that is what you want."
        )
    # A file already over its limit (hand edit, lowered limit) may shrink step by step,
    # as FileMemory allows; a plan may never push a file past it.
    if after_chars > limit and after_chars > before_chars:
        raise InvalidMemoryArgument(
            f"The curation plan leaves {after_chars:,} characters, over the limit of "
            f"{limit:,}; nothing was changed."
        )
    if after_chars > max(goal, before_chars):
        raise InvalidMemoryArgument(
            f"The curation plan grows the file to {after_chars:,} characters, past the "
            f"curator's goal of {goal:,}; nothing was changed."
        )
    if require_goal and before_chars > goal and after_chars > goal:
        raise InvalidMemoryArgument(
            f"The curation plan leaves {after_chars:,} characters, still over the curator's "
            f"goal of {goal:,} (curator.budget_share of {limit:,}); nothing was changed. "
            "Rerun `memstrata curate`, or raise curator.budget_share."
        )
    return PlanResult(
        ops=tuple(ops),
        before=tuple(entries),
        after=tuple(after),
        batch=tuple(batch),
        facts=tuple(facts),
    )
