"""L0: the system prompt, assembled once per session from an ordered list of tiers.

A tier is a plain function ``(PromptContext) -> str`` returning one part of the prompt
(``""`` to contribute nothing). :class:`PromptBuilder` runs its tiers in order, strips
each part and joins the non-empty ones with a blank line. :data:`DEFAULT_TIERS` is the
order the layers are built in, from the most stable text to the most volatile::

    stable    identity            SOUL.md in the home folder, or DEFAULT_IDENTITY
              tool_guidance       one paragraph, only for the tools that are loaded
    context   system_message      the caller's own system message
              context_files       AGENTS.md / CLAUDE.md / .cursorrules, scanned and capped
    volatile  memory_snapshot     the frozen MEMORY.md / USER.md snapshot
              provider_blocks     external memory providers' system_prompt_block()
              conversation_date   "Conversation started: Wednesday, December 02, 2026"
              platform_hint       how the conversation is shown (terminal, MCP, ...)

Copy the list to reorder, drop or add a tier, like structlog's processors::

    builder = PromptBuilder([*DEFAULT_TIERS, lambda ctx: "Answer in French."])

The prompt is built once, when a session starts, and stored with the session; it is
reused verbatim on resume and rebuilt only after compression. Nothing in it changes with
the time of day or with memory writes, so the provider's prefix cache keeps hitting.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final

from memstrata import fileio
from memstrata.errors import UnreadableFileError
from memstrata.scanner.scan import scan_for_threats

if TYPE_CHECKING:
    from memstrata.memory.core import CuratedMemory
    from memstrata.providers.manager import MemoryManager

logger = logging.getLogger(__name__)

SOUL_FILENAME: Final = "SOUL.md"
CONTEXT_FILE_NAMES: Final[tuple[str, ...]] = ("AGENTS.md", "CLAUDE.md", ".cursorrules")

# A context file may use 6 % of the context window (at 4 characters a token), but never
# less than 20,000 characters nor more than 500,000.
CONTEXT_FILE_MIN_CHARS: Final = 20_000
CONTEXT_FILE_MAX_CHARS: Final = 500_000
CONTEXT_FILE_WINDOW_SHARE: Final = 0.06
CHARS_PER_TOKEN: Final = 4
# A capped file keeps its head (where the rules usually are) and its tail (the latest
# additions); the middle goes.
HEAD_SHARE: Final = 0.70
TAIL_SHARE: Final = 0.20

DEFAULT_IDENTITY: Final = (
    "You are a helpful, knowledgeable assistant with a long-term memory. You remember "
    "durable facts about the user and their work across conversations, and you can look "
    "up past conversations when they become relevant. Be direct and accurate; say so "
    "when you are unsure, and ask when a request is ambiguous."
)

MEMORY_GUIDANCE: Final = (
    "Your memory (the memory tool) is placed in the system prompt of every future "
    "conversation, so keep it compact and durable. Save first what stops the user from "
    "having to correct you again (their preferences, corrections, ways of working), then "
    "lasting facts about their environment and projects. Do not save task progress, "
    "issue or PR numbers, commit hashes, completion logs or anything that will be stale "
    "within a week; past conversations stay searchable. Write entries as declarative "
    "facts ('User prefers tabs over spaces'), not as instructions to yourself ('Always "
    "use tabs'). A write is saved at once; the memory shown above stays as it was when "
    "this conversation started."
)
SESSION_SEARCH_GUIDANCE: Final = (
    "When the user refers to something from an earlier conversation, search for it with "
    "session_search before asking them to repeat themselves."
)
# Tool name -> the sentence(s) that teach the model when to use it.
TOOL_GUIDANCE: Final[dict[str, str]] = {
    "memory": MEMORY_GUIDANCE,
    "session_search": SESSION_SEARCH_GUIDANCE,
}

PLATFORM_HINTS: Final[dict[str, str]] = {
    "cli": (
        "You are talking to the user in a terminal (memstrata chat). Markdown is shown as "
        "plain text, so keep formatting light: short paragraphs, simple lists, code in "
        "fenced blocks."
    ),
    "mcp": (
        "You are reached through the Model Context Protocol by another application, "
        "which decides how your answers are shown."
    ),
    "api": "Your answers are returned to a program through an API; keep them plain.",
}

_WEEKDAYS: Final = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS: Final = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


@dataclass(frozen=True)
class PromptContext:
    """Everything the tiers read, gathered once when a session's prompt is built.

    Args:
        home: the memstrata home folder (where ``SOUL.md`` lives).
        tool_names: the tools offered to the model this session.
        system_message: the caller's own system message, if any.
        cwd: the folder searched for context files (None: no context files).
        context_files: explicit context files; when given, ``cwd`` is not searched.
        memory: the curated memory whose frozen snapshot is injected.
        manager: the memory manager whose external providers add blocks.
        platform: ``"cli"``, ``"mcp"``, ``"api"`` or another name (no hint then).
        now: the moment the conversation starts (only its day is used).
        context_window: the model's window in tokens, which scales the context-file cap.
    """

    home: Path
    tool_names: Sequence[str] = ()
    system_message: str | None = None
    cwd: Path | None = None
    context_files: Sequence[Path] | None = None
    memory: CuratedMemory | None = None
    manager: MemoryManager | None = None
    platform: str = "cli"
    now: datetime = field(default_factory=datetime.now)
    context_window: int = 128_000


Tier = Callable[[PromptContext], str]


# -- helpers ------------------------------------------------------------------------------


def context_file_cap(context_window: int) -> int:
    """The most characters one context file may put in the prompt."""
    scaled = int(context_window * CONTEXT_FILE_WINDOW_SHARE * CHARS_PER_TOKEN)
    return min(CONTEXT_FILE_MAX_CHARS, max(CONTEXT_FILE_MIN_CHARS, scaled))


def truncate_head_tail(text: str, cap: int, name: str = "the file") -> str:
    """``text`` if it fits in ``cap`` characters, else its first 70 % and last 20 % of
    ``cap`` with a marker saying how much was left out in between."""
    if len(text) <= cap:
        return text
    head = int(cap * HEAD_SHARE)
    tail = int(cap * TAIL_SHARE)
    omitted = len(text) - head - tail
    marker = (
        f"\n\n[... {omitted:,} characters of {name} left out to fit the prompt; "
        "read the file itself for the full text ...]\n\n"
    )
    return text[:head] + marker + text[len(text) - tail :]


def blocked_file_notice(name: str, pattern_ids: Sequence[str]) -> str:
    """The line that stands in for a context file the threat scanner flagged."""
    return (
        f"[BLOCKED: {name} contained threat pattern(s): {', '.join(pattern_ids)}. It was "
        "not loaded into the prompt; review and clean the file, then start a new session.]"
    )


def load_context_file(path: Path, cap: int) -> str:
    """A context file's text, capped, scanned at ``context`` scope; ``""`` when absent.

    A scanner hit replaces the whole file by a ``[BLOCKED: ...]`` line naming the
    patterns, so an injected instruction never reaches the model. An unreadable file
    becomes a note instead of stopping the session.
    """
    try:
        raw = fileio.read_text(path)
    except UnreadableFileError as exc:
        return f"[{path.name} could not be read and was left out: {exc}]"
    if raw is None or not raw.strip():
        return ""
    text = truncate_head_tail(raw.strip(), cap, path.name)
    findings = scan_for_threats(text, "context")
    if findings:
        return blocked_file_notice(path.name, [f.pattern_id for f in findings])
    return text


def format_day(moment: datetime) -> str:
    """``Wednesday, December 02, 2026``: English whatever the process locale."""
    return (
        f"{_WEEKDAYS[moment.weekday()]}, {_MONTHS[moment.month - 1]} "
        f"{moment.day:02d}, {moment.year}"
    )


# -- the tiers ----------------------------------------------------------------------------


def identity(ctx: PromptContext) -> str:
    """``SOUL.md`` from the home folder (scanned and capped like a context file), or
    :data:`DEFAULT_IDENTITY` when there is none."""
    text = load_context_file(ctx.home / SOUL_FILENAME, context_file_cap(ctx.context_window))
    return text or DEFAULT_IDENTITY


def tool_guidance(ctx: PromptContext) -> str:
    """One paragraph of guidance for the loaded tools that have some."""
    return " ".join(TOOL_GUIDANCE[name] for name in TOOL_GUIDANCE if name in ctx.tool_names)


def system_message(ctx: PromptContext) -> str:
    """The caller's system message."""
    return ctx.system_message or ""


def context_files(ctx: PromptContext) -> str:
    """Project context files, each under a heading, scanned and capped."""
    if ctx.context_files is not None:
        paths = list(ctx.context_files)
    elif ctx.cwd is not None:
        paths = [ctx.cwd / name for name in CONTEXT_FILE_NAMES]
    else:
        return ""
    cap = context_file_cap(ctx.context_window)
    parts: list[str] = []
    for path in paths:
        text = load_context_file(path, cap)
        if text:
            parts.append(f"## {path.name}\n\n{text}")
    if not parts:
        return ""
    return "# Project context\n\n" + "\n\n".join(parts)


def memory_snapshot(ctx: PromptContext) -> str:
    """The frozen snapshot of MEMORY.md and USER.md (writes show from the next session)."""
    return ctx.memory.snapshot() if ctx.memory is not None else ""


def provider_blocks(ctx: PromptContext) -> str:
    """The external providers' system-prompt blocks (the built-in one is the snapshot)."""
    if ctx.manager is None:
        return ""
    blocks: list[str] = []
    for provider in ctx.manager.providers:
        if provider is ctx.manager.builtin:
            continue
        try:
            block = provider.system_prompt_block()  # type: ignore[attr-defined]
        except Exception:
            # The manager's rule: a failing provider is logged and skipped, never fatal.
            logger.warning(
                "Memory provider %r: system_prompt_block failed", provider, exc_info=True
            )
            continue
        if isinstance(block, str) and block.strip():
            blocks.append(block.strip())
    return "\n\n".join(blocks)


def conversation_date(ctx: PromptContext) -> str:
    """The day the conversation started; day-granular so the prompt is stable all day."""
    return f"Conversation started: {format_day(ctx.now)}"


def platform_hint(ctx: PromptContext) -> str:
    """How the conversation reaches the user (``PLATFORM_HINTS``; unknown: nothing)."""
    return PLATFORM_HINTS.get(ctx.platform, "")


DEFAULT_TIERS: Final[tuple[Tier, ...]] = (
    identity,
    tool_guidance,
    system_message,
    context_files,
    memory_snapshot,
    provider_blocks,
    conversation_date,
    platform_hint,
)


class PromptBuilder:
    """Builds the system prompt by running tiers in order.

    Example::

        builder = PromptBuilder()
        prompt = builder.build(PromptContext(home=memstrata_home(), tool_names=["memory"]))

    A tier that raises is a bug in that tier and propagates: a silently missing part
    would change the prompt without anyone noticing.
    """

    def __init__(self, tiers: Sequence[Tier] = DEFAULT_TIERS, *, separator: str = "\n\n") -> None:
        self.tiers: list[Tier] = list(tiers)
        self.separator = separator

    def parts(self, ctx: PromptContext) -> list[tuple[str, str]]:
        """``(tier name, text)`` for every tier that contributed, in order."""
        out: list[tuple[str, str]] = []
        for tier in self.tiers:
            text = (tier(ctx) or "").strip()
            if text:
                out.append((getattr(tier, "__name__", type(tier).__name__), text))
        return out

    def build(self, ctx: PromptContext) -> str:
        """The system prompt: the non-empty tier texts joined by a blank line."""
        return self.separator.join(text for _, text in self.parts(ctx))


__all__ = [
    "CONTEXT_FILE_NAMES",
    "DEFAULT_IDENTITY",
    "DEFAULT_TIERS",
    "MEMORY_GUIDANCE",
    "PLATFORM_HINTS",
    "SESSION_SEARCH_GUIDANCE",
    "TOOL_GUIDANCE",
    "PromptBuilder",
    "PromptContext",
    "Tier",
    "blocked_file_notice",
    "context_file_cap",
    "context_files",
    "conversation_date",
    "format_day",
    "identity",
    "load_context_file",
    "memory_snapshot",
    "platform_hint",
    "provider_blocks",
    "system_message",
    "tool_guidance",
    "truncate_head_tail",
]
