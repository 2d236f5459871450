"""The curator: background consolidation of ``MEMORY.md`` and ``USER.md``.

The main agent writes memory in the middle of a conversation and has no time to tidy
it. The curator does that between sessions (or on demand with ``memstrata curate``),
never inside a turn:

1. a **deterministic pass** removes exact and near duplicates; it needs no model, so
   curation is useful with no LLM configured;
2. the **curator model** (``client_for("curator")``, ``llm.curator_model``) is shown the
   remaining entries and the goal (``curator.budget_share`` of the file's budget) and
   proposes operations as JSON: merge, shorten, mark stale, move an episodic fact to
   the facts store (see :mod:`memstrata.memory.curator_plan`);
3. the whole plan is **validated** (every operation names existing entries, new text
   passes the threat scanner, the result fits the limit and reaches the goal); a plan
   with any problem is rejected whole, with the reasons, and nothing changes;
4. the plan is **applied** through :meth:`FileMemory.apply_batch`, all or nothing, under
   the file's lock and against the entries on disk at that moment, so a write made by
   another process meanwhile is never clobbered (if it touched an entry the plan
   changes, the batch is refused and the curator reports it). Moved facts are written to
   the facts store first and withdrawn if the batch is refused.

Every applied plan is one change in the memory history (``who="curator"``), so
``memstrata memory undo N`` restores the file byte for byte.

The facts store is handed in (``facts=``, a function that opens it): curated memory sits
below the providers, so it never imports the facts package. The CLI and the agent pass
:func:`memstrata.providers.facts.open_facts`; a curator without one removes duplicates and
rewrites entries but refuses a plan that moves an entry out.

Example::

    from memstrata.memory.curator import Curator
    from memstrata.providers.facts import open_facts

    for report in Curator(facts=open_facts).run(dry_run=True):
        print(report.render())
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from memstrata.config import Config
from memstrata.errors import (
    CuratedMemoryError,
    InvalidMemoryArgument,
    LLMError,
    LLMNotConfiguredError,
    MemstrataError,
)
from memstrata.llm.types import LLMClient
from memstrata.memory.core import CuratedMemory
from memstrata.memory.curator_plan import (
    CuratorOp,
    PlanResult,
    check_plan,
    find_duplicates,
    parse_model_plan,
)
from memstrata.memory.files import Target, memory_and_config
from memstrata.memory.format import FILE_NAMES, TARGETS

logger = logging.getLogger(__name__)


class MovedFact(Protocol):
    """What the curator reads of a fact it wrote."""

    @property
    def id(self) -> int: ...

    @property
    def content(self) -> str: ...


class FactsSink(Protocol):
    """The part of a facts store the curator uses (every facts store has it)."""

    def find_text(
        self, text: str, *, source: str | None = None, target: str | None = None
    ) -> Sequence[MovedFact]: ...

    def add(
        self,
        content: str,
        *,
        category: str = ...,
        source: str = ...,
        target: str | None = None,
        origin: str | None = None,
    ) -> MovedFact: ...

    def forget(self, fact_id: int, *, origin: str = ...) -> object: ...

    def close(self) -> None: ...


FactsOpener = Callable[[Config], FactsSink]
"""Opens the facts store of a configuration (:func:`memstrata.providers.facts.open_facts`)."""

Checkpoint = Callable[[str], None]
"""Called with the name of each stage reached ("planned", "facts_written", "applied");
tests use it to crash the process at a chosen point."""

CURATOR_SYSTEM_PROMPT: Final = """\
You curate the long-term memory file of an AI assistant. The file is a list of numbered \
entries; each entry is placed in the assistant's system prompt in every future session, \
so it must be short, specific and still true.

Propose operations as one JSON object and nothing else:
{"operations": [
  {"op": "merge", "ids": [1, 4], "content": "one entry saying what both said"},
  {"op": "shorten", "id": 2, "content": "the same fact in fewer words"},
  {"op": "stale", "id": 3, "reason": "superseded by entry 5"},
  {"op": "move", "id": 6, "category": "episodic"}
]}

Rules:
- merge entries that say the same thing or belong together; keep every distinct fact;
- shorten wordy entries without losing names, numbers or paths;
- mark stale only what another entry contradicts or what is clearly over;
- move (category "episodic") one-off events and decisions tied to a date or a task: \
they leave this file and are recalled from the facts store when relevant. Who the user \
is and how they like to work stays here, never moved;
- use each entry number at most once; never invent facts; write entries as \
declarative statements;
- if nothing needs doing, answer {"operations": []}."""


@dataclass
class CurationReport:
    """What curation did (or would do) to one file."""

    target: Target
    dry_run: bool
    entries_before: int = 0
    entries_after: int = 0
    chars_before: int = 0
    chars_after: int = 0
    limit: int = 0
    goal: int = 0
    operations: list[str] = field(default_factory=list)
    """One line per operation, in plan order."""
    moved_facts: list[int] = field(default_factory=list)
    """Ids of the facts written to the facts store."""
    model_used: bool = False
    applied: bool = False
    change_id: int | None = None
    """The memory-history change of the applied plan (undo it with ``memory undo``)."""
    rejected: str | None = None
    """Why the plan was refused; nothing was changed."""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, for ``memstrata curate --json``."""
        return dict(self.__dict__)

    def render(self) -> str:
        """A few human-readable lines."""
        name = FILE_NAMES[self.target]
        head = (
            f"{name}: {self.entries_before} -> {self.entries_after} entries, "
            f"{self.chars_before:,} -> {self.chars_after:,}/{self.limit:,} chars "
            f"(goal {self.goal:,})"
        )
        if self.rejected:
            head = f"{name}: plan rejected, nothing changed. {self.rejected}"
        elif not self.operations:
            head = f"{name}: nothing to do ({self.chars_before:,}/{self.limit:,} chars)."
        elif self.dry_run:
            head += " [dry run: nothing written]"
        elif self.applied:
            head += f" [applied as change #{self.change_id}]"
        lines = [head, *(f"  - {op}" for op in self.operations)]
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)


class Curator:
    """Consolidates curated memory; see the module docstring for the steps.

    Args:
        memory: the files to curate (default: those of the configured home).
        config: settings (``curator.*``; default :meth:`Config.load`).
        client: the curator model; None builds ``client_for("curator")`` on first use,
            and when no model is configured only the deterministic pass runs.
        use_model: False runs only the deterministic pass.
        checkpoint: called at each stage (tests crash the process there).
        facts: opens the facts store moved entries go to (called with ``config``);
            without it a plan that moves an entry is refused and nothing changes.
    """

    def __init__(
        self,
        memory: CuratedMemory | None = None,
        *,
        config: Config | None = None,
        client: LLMClient | None = None,
        use_model: bool | None = None,
        checkpoint: Checkpoint | None = None,
        facts: FactsOpener | None = None,
    ) -> None:
        self.memory, self.config = memory_and_config(memory, config)
        self.facts = facts
        config = self.config
        share = float(config.get("curator.budget_share"))
        if not 0.1 <= share <= 1.0:
            raise CuratedMemoryError(
                f"curator.budget_share must be between 0.1 and 1.0, got {share}. Fix it with "
                "`memstrata config set curator.budget_share 0.8`."
            )
        self.budget_share = share
        self.threshold = float(config.get("curator.near_duplicate_threshold"))
        if not 0.5 <= self.threshold <= 1.0:
            raise CuratedMemoryError(
                "curator.near_duplicate_threshold must be between 0.5 and 1.0, got "
                f"{self.threshold}. Fix it with "
                "`memstrata config set curator.near_duplicate_threshold 0.85`."
            )
        self.use_model = bool(config.get("curator.use_model")) if use_model is None else use_model
        self._client = client
        self._client_error: str | None = None
        self.checkpoint = checkpoint

    # -- the model ------------------------------------------------------------------------

    def _model(self) -> LLMClient | None:
        if not self.use_model:
            return None
        if self._client is None and self._client_error is None:
            from memstrata.llm.settings import client_for

            try:
                self._client = client_for("curator", self.config)
            except LLMNotConfiguredError as exc:
                self._client_error = str(exc)
        return self._client

    def _ask_model(
        self, client: LLMClient, target: Target, entries: Sequence[str], goal: int
    ) -> str:
        numbered = "\n".join(f"{i}. {entry}" for i, entry in enumerate(entries, start=1))
        chars = sum(len(e) for e in entries) + 3 * max(0, len(entries) - 1)
        kind = "the user profile (USER.md)" if target == "user" else "the agent's notes (MEMORY.md)"
        user = (
            f"File: {kind}. It holds {chars:,} characters; bring it to at most {goal:,} "
            f"if it is over, and never above.\n\nEntries:\n{numbered}"
        )
        completion = client.complete(
            [
                {"role": "system", "content": CURATOR_SYSTEM_PROMPT},
                {"role": "user", "content": user},
            ],
            temperature=0.0,
        )
        return completion.text

    # -- planning -------------------------------------------------------------------------

    def goal(self, target: Target) -> int:
        """The character count the curator brings ``target`` down to."""
        return math.floor(self.memory.limit(target) * self.budget_share)

    def plan(self, target: Target) -> tuple[PlanResult, CurationReport]:
        """Read ``target`` and build a validated plan (nothing is written).

        Raises InvalidMemoryArgument when the model's plan is rejected.
        """
        report = self._report(target, dry_run=True)
        entries = self.memory.entries(target)
        limit, goal = self.memory.limit(target), self.goal(target)
        duplicates = find_duplicates(entries, threshold=self.threshold)
        dropped = {op.ids[0] for op in duplicates}
        # The model sees the entries left after the deterministic pass, renumbered, so it
        # cannot trip over entries that are going anyway; its numbers are mapped back.
        remaining = [i for i in range(1, len(entries) + 1) if i not in dropped]
        ops: list[CuratorOp] = list(duplicates)
        client = self._model()
        if client is not None and remaining:
            reply = self._ask_model(client, target, [entries[i - 1] for i in remaining], goal)
            report.model_used = True
            proposed = parse_model_plan(reply)
            _check_numbers(proposed, len(remaining))
            ops.extend(_renumber(op, remaining) for op in proposed)
        elif self.use_model and self._client_error:
            report.notes.append(
                "no curator model is configured, so only duplicates were looked for "
                "(set llm.curator_model or llm.model)"
            )
        result = check_plan(entries, ops, limit=limit, goal=goal, require_goal=report.model_used)
        if not report.model_used and result.chars_after > goal:
            report.notes.append(
                f"{FILE_NAMES[target]} stays over the goal of {goal:,} characters: "
                "shortening and merging needs the curator model"
            )
        report.operations = [op.describe(entries) for op in result.ops]
        self._fill(report, result)
        return result, report

    def _report(self, target: Target, *, dry_run: bool) -> CurationReport:
        return CurationReport(
            target=target,
            dry_run=dry_run,
            limit=self.memory.limit(target),
            goal=self.goal(target),
        )

    @staticmethod
    def _fill(report: CurationReport, result: PlanResult) -> None:
        report.entries_before = len(result.before)
        report.entries_after = len(result.after)
        report.chars_before = result.chars_before
        report.chars_after = result.chars_after

    # -- running --------------------------------------------------------------------------

    def curate(self, target: Target, *, dry_run: bool = False) -> CurationReport:
        """Plan and (unless ``dry_run``) apply curation of one file; never half-applies.

        A rejected plan or a refused batch comes back as ``report.rejected``; model and
        storage failures raise.
        """
        try:
            result, report = self.plan(target)
        except CuratedMemoryError as exc:
            report = self._report(target, dry_run=dry_run)
            entries = self.memory.entries(target)
            report.entries_before = report.entries_after = len(entries)
            report.chars_before = report.chars_after = self.memory.usage(target).chars
            report.model_used = self._client is not None
            report.rejected = str(exc)
            return report
        report.dry_run = dry_run
        self._stage("planned")
        if dry_run or not result.batch:
            return report
        fact_ids: list[int] = []
        try:
            self._write_facts(target, result, fact_ids)
        except CuratedMemoryError as exc:
            # E.g. a hand-edited entry the scanner refuses as a fact: all or nothing.
            self._withdraw_facts(fact_ids)
            report.rejected = (
                f"An entry could not be moved to the facts store ({exc}); nothing was changed."
            )
            report.entries_after, report.chars_after = report.entries_before, report.chars_before
            return report
        self._stage("facts_written")
        why = "curator: " + _tally(result.ops)
        try:
            with self.memory.attributed("curator", why):
                write = self.memory.apply_batch(target, list(result.batch))
        except CuratedMemoryError as exc:
            self._withdraw_facts(fact_ids)
            report.rejected = (
                f"{FILE_NAMES[target]} changed while it was being curated, or the batch "
                f"was refused ({exc}). Nothing was changed; run `memstrata curate` again."
            )
            report.entries_after, report.chars_after = report.entries_before, report.chars_before
            return report
        report.applied = write.changed
        report.moved_facts = fact_ids
        report.change_id = write.change_id
        self._stage("applied")
        return report

    def run(
        self, targets: Sequence[Target] = TARGETS, *, dry_run: bool = False
    ) -> list[CurationReport]:
        """Curate each of ``targets`` (both files by default); one report per file."""
        return [self.curate(target, dry_run=dry_run) for target in targets]

    def start_background(self, targets: Sequence[Target] = TARGETS) -> threading.Thread:
        """Run :meth:`run` in a background thread and return it (already started).

        Meant for the end of a session (``Agent.close`` or a gateway's idle hook), never
        inside a turn: the curator model call may take seconds. Failures are logged, not
        raised. The thread is not a daemon, so a process that exits waits for the plan
        to be applied or refused rather than killing it halfway.
        """

        def work() -> None:
            try:
                for report in self.run(targets):
                    logger.info("curator: %s", report.render())
            except (MemstrataError, LLMError):
                logger.warning("curator: background curation failed", exc_info=True)

        thread = threading.Thread(target=work, name="memstrata-curator", daemon=False)
        thread.start()
        return thread

    # -- facts ----------------------------------------------------------------------------

    def _write_facts(self, target: Target, result: PlanResult, ids: list[int]) -> None:
        """Add the moved entries as facts, appending each new fact's id to ``ids``."""
        if not result.facts:
            return
        if self.facts is None:
            raise CuratedMemoryError(
                "the plan moves entries to the facts store and this curator has none; "
                "pass facts=open_facts (memstrata.providers.facts) to Curator"
            )
        store = self.facts(self.config)
        try:
            for content, category in result.facts:
                text = " ".join(content.split())
                # A fact stored before (remembered, mirrored) is reused by add(); it is not
                # ours to withdraw if the batch is refused, so only new ids are kept.
                existing = {f.id for f in store.find_text(text) if f.content == text}
                fact = store.add(
                    content, category=category, source="curator", target=target, origin="curator"
                )
                if fact.id not in existing:
                    ids.append(fact.id)
        finally:
            store.close()

    def _withdraw_facts(self, ids: Sequence[int]) -> None:
        if not ids or self.facts is None:
            return
        store = self.facts(self.config)
        try:
            for fact_id in ids:
                store.forget(fact_id, origin="curator")
        finally:
            store.close()

    def _stage(self, name: str) -> None:
        if self.checkpoint is not None:
            self.checkpoint(name)


def _tally(ops: Sequence[CuratorOp]) -> str:
    """ "2 duplicate, 1 merge" - the history's reason for an applied plan."""
    counts: dict[str, int] = {}
    for op in ops:
        counts[op.kind] = counts.get(op.kind, 0) + 1
    return ", ".join(f"{n} {kind}" for kind, n in counts.items())


def _check_numbers(ops: Sequence[CuratorOp], shown: int) -> None:
    """Every number the model used must be one of the ``shown`` entries."""
    bad = sorted(
        {i for op in ops for i in (*op.ids, op.keep) if i is not None and not 1 <= i <= shown}
    )
    if bad:
        raise InvalidMemoryArgument(
            "The curator model's plan was rejected, nothing was changed: it names entries "
            f"{', '.join(f'#{i}' for i in bad)}, but it was shown entries #1 to #{shown}."
        )


def _renumber(op: CuratorOp, remaining: Sequence[int]) -> CuratorOp:
    """Map the model's numbers (over ``remaining``) back to the file's entry numbers."""

    def back(i: int) -> int:
        return remaining[i - 1]

    return CuratorOp(
        op.kind,
        tuple(back(i) for i in op.ids),
        content=op.content,
        category=op.category,
        reason=op.reason,
        keep=back(op.keep) if op.keep is not None else None,
    )
