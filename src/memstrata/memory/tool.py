"""The ``memory`` tool: the model's one door to curated memory (L1).

:data:`MEMORY_TOOL_SCHEMA` is the function-tool definition in OpenAI format (convert it
with :func:`memstrata.tools.toolbox.to_anthropic_schema`). :class:`MemoryTool` turns the model's
arguments into :class:`~memstrata.memory.files.FileMemory` calls and a saved write into a
JSON-able dict. A refused call raises (a :class:`~memstrata.errors.CuratedMemoryError` carries
the recovery data in ``details``); the edge (:meth:`memstrata.tools.toolbox.Toolbox.call`,
the MCP server) turns it into the model's ``{"success": false, ...}`` text. It lives with
curated memory, below the tools and the providers, because the built-in provider offers it.

Responses are shaped for a model in a loop:

* a successful write is terminal (``"done": true``) and does not echo the entries, so the
  model has nothing to "fix" and stops;
* a refused write carries what the model needs to recover in the same turn
  (``current_entries``, ``usage``, a retry instruction);
* after ``memory.max_consolidation_failures`` failed consolidation attempts in one turn the
  response becomes terminal too, so a full store never blocks the reply to the user.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

from memstrata.config import Config
from memstrata.errors import (
    AmbiguousMatchError,
    ConsolidationLimitError,
    CuratedMemoryError,
    InvalidMemoryArgument,
    MemoryFullError,
    NoMatchError,
    ToolArgumentError,
)
from memstrata.llm.arguments import describe_type, optional_str, shorten
from memstrata.memory.approval import Operation, PendingWrites
from memstrata.memory.core import CuratedMemory
from memstrata.memory.files import Target, WriteResult, memory_and_config

logger = logging.getLogger(__name__)

MEMORY_TOOL_NAME: Final = "memory"
TARGETS: Final[tuple[Target, ...]] = ("memory", "user")
WRITE_ACTIONS: Final = ("add", "replace", "remove")
ACTIONS: Final = (*WRITE_ACTIONS, "read")

SUCCESS_NOTE: Final = "Write saved. This update is complete — do not repeat it."
UNCHANGED_NOTE: Final = "Nothing needed saving. This update is complete — do not repeat it."
READ_NOTE: Final = (
    "These are the live entries on disk. The memory block in your system prompt is a "
    "snapshot frozen when this session started; it shows writes made since then only in "
    "the next session."
)

MEMORY_TOOL_DESCRIPTION: Final = (
    "Keep durable facts in persistent memory that outlives this conversation. Memory is "
    "placed in the system prompt of every future session, so each entry must earn its "
    "space: short, specific, still true next month.\n"
    "\n"
    "HOW: put every change you want in ONE call, as an 'operations' array of "
    "{action, content, old_text} items; they are applied together or not at all, and the "
    "size budget is checked only on the final result, so removing and adding in the same "
    "batch works even when memory is full. 'replace' and 'remove' find the entry by "
    "old_text, a short substring that occurs in exactly one entry; 'replace' swaps the "
    "whole entry for content. When the response says the write was saved, it is done: do "
    "not send it again. 'read' returns the current entries and usage.\n"
    "\n"
    "WHEN: save without being asked when you learn something that will matter later. "
    "First priority: the user's preferences and corrections of your behaviour (they stop "
    "the same correction from being needed again). Then facts about the user's "
    "environment and projects. Then working methods that proved themselves. Write "
    "entries as declarative facts ('User prefers tabs over spaces'), not as orders to "
    "yourself ('Always use tabs').\n"
    "\n"
    "IF FULL: an add that does not fit is refused with the current entries. Resend one "
    "batch that removes stale entries or shortens long ones and adds the new fact.\n"
    "\n"
    "TARGETS: 'user' holds who the user is (name, role, preferences, habits); 'memory' "
    "holds your own notes (environment facts, project conventions, lessons learned).\n"
    "\n"
    "SKIP: small talk, facts that are easy to look up again, raw data dumps, task "
    "progress, TODO lists, issue or PR numbers, commit SHAs, and anything that will be "
    "stale within a week. Past conversations stay searchable with session_search, so "
    "there is no need to copy them into memory."
)

_OPERATION_ITEM: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": list(WRITE_ACTIONS)},
        "content": {
            "type": "string",
            "description": "The entry text, for add and replace.",
        },
        "old_text": {
            "type": "string",
            "description": "For replace and remove: a short substring found in exactly one entry.",
        },
    },
    "required": ["action"],
}

# No top-level allOf/anyOf/oneOf/enum/not: OpenAI's Codex backend and Anthropic reject
# combinators at the top of a tool's parameters, so per-action requirements live in prose.
MEMORY_TOOL_SCHEMA: Final[dict[str, Any]] = {
    "type": "function",
    "function": {
        "name": MEMORY_TOOL_NAME,
        "description": MEMORY_TOOL_DESCRIPTION,
        "parameters": {
            "type": "object",
            "properties": {
                "action": {
                    "type": "string",
                    "enum": list(ACTIONS),
                    "description": "One operation. Leave it out when you send 'operations'.",
                },
                "target": {
                    "type": "string",
                    "enum": list(TARGETS),
                    "description": "'user' for the user profile, 'memory' for your own notes.",
                },
                "content": {
                    "type": "string",
                    "description": "The entry text. Required for add and replace.",
                },
                "old_text": {
                    "type": "string",
                    "description": (
                        "Required for replace and remove: a short substring that occurs in "
                        "exactly one entry."
                    ),
                },
                "operations": {
                    "type": "array",
                    "description": (
                        "Several changes applied all-or-nothing in order; the size budget "
                        "is checked on the final result. Preferred over single actions."
                    ),
                    "items": _OPERATION_ITEM,
                },
            },
            "required": ["target"],
        },
    },
}

# Errors that mean "the model tried to make room and failed"; they count toward the cap.
_CONSOLIDATION_FAILURES: Final = (MemoryFullError, NoMatchError)


class MemoryTool:
    """The ``memory`` tool over one curated memory (any backend), with a per-turn failure cap.

    ``approval`` is the queue that writes are staged to instead of being saved; by
    default it exists exactly when ``memory.write_approval`` is on. Call
    :meth:`reset_turn` at the start of every user turn.
    """

    name: Final = MEMORY_TOOL_NAME
    schema: Final = MEMORY_TOOL_SCHEMA

    def __init__(
        self,
        memory: CuratedMemory | None = None,
        *,
        config: Config | None = None,
        approval: PendingWrites | None = None,
        max_consolidation_failures: int | None = None,
    ) -> None:
        self.memory, self.config = memory_and_config(memory, config)
        config = self.config
        if approval is None and config.get("memory.write_approval"):
            approval = PendingWrites(self.memory.home)
        self.approval = approval
        self.max_consolidation_failures = (
            int(config.get("memory.max_consolidation_failures"))
            if max_consolidation_failures is None
            else max_consolidation_failures
        )
        self.consolidation_failures = 0

    def reset_turn(self) -> None:
        """Start a new user turn: forget this turn's consolidation failures."""
        self.consolidation_failures = 0

    def handle(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Run one tool call and return its response dict.

        A refused call raises: :class:`~memstrata.errors.ToolArgumentError` for bad
        arguments, a :class:`~memstrata.errors.CuratedMemoryError` (with
        ``current_entries`` and ``usage`` in ``details``) for a write memory refused, and
        :class:`~memstrata.errors.ConsolidationLimitError` once this turn's failed
        consolidations pass the cap.
        """
        # The model's writes are attributed to "tool" in the memory history.
        with self.memory.attributed("tool", "memory tool call"):
            try:
                return self._handle(args)
            except CuratedMemoryError as exc:
                raise self._refused(exc, batch=_is_batch(args)) from None

    def _handle(self, args: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(args, Mapping):
            raise ToolArgumentError(
                f"The memory tool takes a JSON object of arguments, got {describe_type(args)}. "
                'Resend it like {"action": "add", "target": "memory", "content": "..."}.'
            )
        target = self._target(args.get("target"))
        operations = args.get("operations")
        if operations is not None and operations != []:
            ops = self._operations(target, operations)
            if self.approval is not None:
                return _staged(self.approval, target, ops, batch=True)
            return self._saved(self.memory.apply_batch(target, ops))

        action = args.get("action")
        if not isinstance(action, str) or action not in ACTIONS:
            if operations == []:
                raise ToolArgumentError(
                    "operations is empty. Put at least one {action, content, old_text} item "
                    "in it, or send a single action instead."
                )
            raise ToolArgumentError(
                f"Unknown action '{shorten(action)}'. Use: {', '.join(ACTIONS)}"
            )
        if action == "read":
            return self._read(target)
        op = self._single(action, target, args)
        if op is None:
            raise self._missing_old_text(action, target)
        if self.approval is not None:
            return _staged(self.approval, target, [op], batch=False)
        if action == "add":
            result = self.memory.add(target, op["content"] or "")
        elif action == "replace":
            result = self.memory.replace(target, op["old_text"] or "", op["content"] or "")
        else:
            result = self.memory.remove(target, op["old_text"] or "")
        return self._saved(result)

    # -- argument checking ---------------------------------------------------------------

    @staticmethod
    def _target(raw: Any) -> Target:
        if raw is None or raw == "memory":
            return "memory"
        if raw == "user":
            return "user"
        raise ToolArgumentError(f"Invalid target '{shorten(raw)}'. Use 'memory' or 'user'.")

    def _single(self, action: str, target: Target, args: Mapping[str, Any]) -> Operation | None:
        """Validate a single-op call; ``None`` means old_text is missing (recoverable)."""
        content = optional_str(args, "content")
        old_text = optional_str(args, "old_text")
        if action == "add":
            if not content or not content.strip():
                raise ToolArgumentError("Content is required for 'add' action.")
            return {"action": "add", "content": content, "old_text": None}
        if not old_text or not old_text.strip():
            return None
        self._check_old_text(target, old_text, "")
        if action == "replace" and (not content or not content.strip()):
            raise ToolArgumentError(
                "content is required for 'replace' action. Use 'remove' to delete an entry."
            )
        return {"action": action, "content": content, "old_text": old_text}

    def _check_old_text(self, target: Target, old_text: str, where: str) -> None:
        # An old_text longer than the whole budget cannot match; refusing it here also
        # keeps a huge string from being echoed back into the model's context.
        limit = self.memory.limit(target)
        if len(old_text) > limit:
            raise ToolArgumentError(
                f"{where}old_text is {len(old_text):,} chars, longer than the whole {target} "
                f"budget ({limit:,} chars), so it cannot match an entry. Use a short "
                "substring that occurs in exactly one entry."
            )

    def _operations(self, target: Target, raw: Any) -> list[Operation]:
        if not isinstance(raw, list):
            raise ToolArgumentError(
                f"operations must be an array of {{action, content, old_text}} objects, got "
                f"{describe_type(raw)}. No operations were applied."
            )
        ops: list[Operation] = []
        for number, item in enumerate(raw, start=1):
            where = f"Operation {number}: "
            if not isinstance(item, Mapping):
                raise ToolArgumentError(
                    f"{where}each operation must be an object like "
                    f'{{"action": "add", "content": "..."}}, got {describe_type(item)}. '
                    "No operations were applied (batch is all-or-nothing)."
                )
            action = item.get("action")
            if not isinstance(action, str) or action not in WRITE_ACTIONS:
                raise ToolArgumentError(
                    f"Operation {number} ({shorten(action)}): unknown action. Use add, "
                    "replace, or remove. No operations were applied (batch is all-or-nothing)."
                )
            content = optional_str(item, "content", where)
            old_text = optional_str(item, "old_text", where)
            if old_text is not None:
                self._check_old_text(target, old_text, where)
            ops.append({"action": action, "content": content, "old_text": old_text})
        return ops

    # -- responses -----------------------------------------------------------------------

    def _read(self, target: Target) -> dict[str, Any]:
        entries = self.memory.entries(target)
        return {
            "success": True,
            "target": target,
            "entries": entries,
            "entry_count": len(entries),
            "usage": str(self.memory.usage(target)),
            "note": READ_NOTE,
        }

    def _missing_old_text(self, action: str, target: Target) -> InvalidMemoryArgument:
        return InvalidMemoryArgument(
            f"old_text is required for '{action}'. Reissue the same call with old_text set to "
            "a short substring that occurs in exactly one of current_entries.",
            current_entries=self.memory.entries(target),
            usage=str(self.memory.usage(target)),
        )

    def _saved(self, result: WriteResult) -> dict[str, Any]:
        self.consolidation_failures = 0
        return {
            "success": True,
            "done": True,
            "target": result.target,
            "usage": str(result.usage),
            "entry_count": result.entry_count,
            "message": result.message,
            "note": SUCCESS_NOTE if result.changed else UNCHANGED_NOTE,
        }

    def _refused(self, exc: CuratedMemoryError, *, batch: bool) -> CuratedMemoryError:
        """The error to raise for a refused write: ``exc``, or the terminal
        :class:`ConsolidationLimitError` once this turn's failures pass the cap."""
        counts = isinstance(exc, _CONSOLIDATION_FAILURES) or (
            batch and isinstance(exc, AmbiguousMatchError)
        )
        if counts:
            self.consolidation_failures += 1
            if self.consolidation_failures > self.max_consolidation_failures:
                return ConsolidationLimitError(
                    f"Memory consolidation failed {self.consolidation_failures} times "
                    "this turn. Stop retrying memory calls — leave memory unchanged for "
                    "now and continue with your reply to the user. The fact can be "
                    "saved in a later turn.",
                    done=True,
                )
        return exc


def _is_batch(args: object) -> bool:
    return isinstance(args, Mapping) and args.get("operations") not in (None, [])


def _staged(
    approval: PendingWrites, target: Target, ops: Sequence[Operation], *, batch: bool
) -> dict[str, Any]:
    staged = approval.stage(target, ops, batch=batch)
    return {
        "success": True,
        "staged": True,
        "pending_id": staged.id,
        "target": target,
        "message": (
            "Staged for approval (memory.write_approval is on). Not yet saved — review "
            "with `memstrata memory pending`."
        ),
    }
