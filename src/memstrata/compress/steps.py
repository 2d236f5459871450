"""The steps of context compression: small functions over a :class:`CompressionJob`.

Each step reads and fills some fields of the job and returns it, like structlog's
processors; :data:`DEFAULT_PROCESSORS` is the order
:class:`~memstrata.compress.compressor.ContextCompressor` runs them in. Copy the tuple to reorder,
drop or add a step::

    from memstrata.compress.compressor import DEFAULT_PROCESSORS, ContextCompressor

    def keep_pinned(job):  # e.g. never compact messages a user pinned
        ...
        return job

    compressor = ContextCompressor(client, processors=(*DEFAULT_PROCESSORS[:3], keep_pinned,
                                                       *DEFAULT_PROCESSORS[3:]))

1. :func:`find_previous_summary` — an earlier summary becomes the base of an update;
2. :func:`prune_tool_output` — cheap pruning of old tool output, no model call;
3. :func:`choose_boundaries` — protected head and token-budgeted tail;
4. :func:`summarize_middle` — the model's summary, or the deterministic fallback;
5. :func:`assemble` — head, summary message, tail;
6. :func:`repair_tool_pairs` — no tool result without its call, no call without results.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memstrata.compress.prompt import (
    auto_focus,
    build_summary_prompt,
    clean_summary_output,
    clip,
    content_text,
    fallback_summary,
    is_pure_summary,
    serialize_turns,
    set_task_snapshot,
    split_summary,
    tool_calls_of,
    wrap_summary,
)
from memstrata.config import Config
from memstrata.errors import (
    ConfigError,
    LLMAuthError,
    LLMError,
    LLMQuotaError,
    LLMResponseError,
)

logger = logging.getLogger("memstrata.compress.compressor")

Message = dict[str, Any]

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 10
IMAGE_TOKENS = 1_600
DEFAULT_CONTEXT_WINDOW = 128_000
# Tool outputs at least this long are deduplicated and, outside the tail, pruned.
PRUNE_MIN_CHARS = 200
# Tool-call argument JSON longer than this has its string values cut.
ARGS_PRUNE_CHARS = 500


# -- token estimate -----------------------------------------------------------------


def _content_tokens(content: Any) -> int:
    if isinstance(content, list):
        images = sum(
            1
            for p in content
            if isinstance(p, Mapping) and p.get("type") in ("image_url", "image", "input_image")
        )
        text = "".join(
            p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)
        )
        return images * IMAGE_TOKENS + -(-len(text) // CHARS_PER_TOKEN)
    return -(-len(content_text(content)) // CHARS_PER_TOKEN)


def message_tokens(message: Mapping[str, Any]) -> int:
    """Rough tokens of one message: 4 characters a token plus a per-message overhead.

    Tool-call envelopes count too: a model reads every argument it wrote.
    """
    tokens = MESSAGE_OVERHEAD_TOKENS + _content_tokens(message.get("content"))
    calls = message.get("tool_calls")
    if calls:
        tokens += -(-len(json.dumps(calls, ensure_ascii=False, default=str)) // CHARS_PER_TOKEN)
    return tokens


def estimate_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """Rough tokens of a conversation (prefer the endpoint's ``prompt_tokens`` when known)."""
    return sum(message_tokens(m) for m in messages)


# -- settings, job and result ---------------------------------------------------------


@dataclass(frozen=True)
class CompressionSettings:
    """Knobs of one compressor; :meth:`from_config` reads the ``[compression]`` table."""

    context_window: int = DEFAULT_CONTEXT_WINDOW
    threshold: float = 0.75
    protect_first_n: int = 3
    protect_last_n: int = 6
    tail_token_ratio: float = 0.20
    failure_cooldown: float = 60.0
    fallback_max_chars: int = 8_000
    enabled: bool = True
    in_place: bool = False

    def __post_init__(self) -> None:
        if not 0.05 <= self.threshold <= 1.0:
            raise ConfigError(
                f"compression.threshold = {self.threshold} must be between 0.05 and 1.0 "
                "(a share of the context window, e.g. 0.75)."
            )
        if not 0.0 < self.tail_token_ratio <= 0.8:
            raise ConfigError(
                f"compression.tail_token_ratio = {self.tail_token_ratio} must be above 0 "
                "and at most 0.8, e.g. 0.2."
            )
        for name in ("context_window", "protect_last_n"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"compression.{name} must be at least 1.")
        if self.protect_first_n < 0 or self.failure_cooldown < 0:
            raise ConfigError(
                "compression.protect_first_n and compression.failure_cooldown must not be negative."
            )
        if self.fallback_max_chars < 500:
            raise ConfigError("fallback_max_chars must be at least 500.")

    @classmethod
    def from_config(cls, config: Config | None = None, **overrides: Any) -> CompressionSettings:
        """Settings from the ``[compression]`` table, with keyword overrides."""
        unknown = set(overrides) - set(cls.__dataclass_fields__)
        if unknown:
            raise ConfigError(
                f"Unknown compression setting(s) {sorted(unknown)}; known: "
                f"{', '.join(sorted(cls.__dataclass_fields__))}."
            )
        section = (config or Config.load()).section("compression")
        values = {k: section[k] for k in cls.__dataclass_fields__ if k in section}
        values.update(overrides)
        return cls(**values)

    def threshold_tokens(self, context_window: int | None = None) -> int:
        """Prompt tokens at which compression starts."""
        return int((context_window or self.context_window) * self.threshold)

    def tail_budget(self, context_window: int | None = None) -> int:
        """Tokens the protected tail may use."""
        return max(1, int(self.threshold_tokens(context_window) * self.tail_token_ratio))

    def summary_budget(self, middle_tokens: int) -> int:
        """Tokens to ask the summary model for (guidance in the prompt, not a hard cap)."""
        ceiling = max(500, min(int(self.context_window * 0.05), 10_000))
        return max(min(500, ceiling), min(int(middle_tokens * 0.20), ceiling))


Summarizer = Callable[[str], str]


@dataclass
class CompressionJob:
    """What flows through the processors; each reads and fills some of the fields.

    ``original`` is the caller's conversation (a deep copy, never edited); ``messages``
    is the working copy that pruning edits in place (indices stay aligned with
    ``original``). Both hold shallow copies of the caller's dicts, so a step replaces a
    value (``message["content"] = ...``) and never edits a nested list or dict in place.
    ``summarizer`` is None when the model must not be called (no client, or a
    cooldown); it raises :class:`~memstrata.errors.LLMError` on failure.
    """

    settings: CompressionSettings
    original: list[Message]
    messages: list[Message]
    summarizer: Summarizer | None = None
    focus_topic: str = ""
    provider_context: str = ""
    skip_reason: str = ""
    # find_previous_summary
    summary_at: int | None = None
    previous_summary: str | None = None
    first_compaction: bool = True
    # prune_tool_output
    pruned_count: int = 0
    # choose_boundaries
    head_end: int = 0
    tail_start: int = 0
    # summarize_middle
    summary: str = ""
    used_fallback: bool = False
    error: LLMError | None = None
    aborted: bool = False
    # assemble / repair_tool_pairs
    output: list[Message] | None = None
    repaired_count: int = 0

    @property
    def middle(self) -> list[Message]:
        """The working copies of the turns being compacted (previous summary excluded)."""
        return _without_summary(self.messages, self.head_end, self.tail_start, self.summary_at)

    @property
    def original_middle(self) -> list[Message]:
        """The unpruned turns being compacted, for the deterministic fallback."""
        return _without_summary(self.original, self.head_end, self.tail_start, self.summary_at)


Processor = Callable[[CompressionJob], CompressionJob]


def _without_summary(
    messages: list[Message], start: int, end: int, summary_at: int | None
) -> list[Message]:
    out: list[Message] = []
    for index in range(start, end):
        message = messages[index]
        if index == summary_at:
            parts = split_summary(message.get("content"))
            if not parts or not parts[1]:
                continue
            # A summary merged into a real message: that message's own text still counts.
            message = {**message, "content": parts[1]}
        out.append(message)
    return out


# -- processors ---------------------------------------------------------------------------


def _leading_system(messages: Sequence[Mapping[str, Any]]) -> int:
    index = 0
    while index < len(messages) and messages[index].get("role") == "system":
        index += 1
    return index


def _past_tool_results(messages: Sequence[Mapping[str, Any]], index: int) -> int:
    while index < len(messages) and messages[index].get("role") == "tool":
        index += 1
    return index


def head_end_of(job: CompressionJob) -> int:
    """Index after the protected head: system messages, plus ``protect_first_n`` on the
    first compaction, moved forward past the results of a tool call it contains."""
    end = _leading_system(job.messages)
    if job.first_compaction:
        end = min(len(job.messages), end + job.settings.protect_first_n)
    end = _past_tool_results(job.messages, end)
    if job.summary_at is not None:
        end = min(end, job.summary_at)
    return end


def budget_tail_start(job: CompressionJob, floor: int) -> int:
    """Index of the first message of the token-budgeted tail (at least one message)."""
    budget = job.settings.tail_budget()
    used = 0
    start = len(job.messages)
    while start > floor and len(job.messages) - start < job.settings.protect_last_n:
        tokens = message_tokens(job.messages[start - 1])
        if start < len(job.messages) and used + tokens > budget:
            break
        used += tokens
        start -= 1
    return start


def find_previous_summary(job: CompressionJob) -> CompressionJob:
    """Find the newest earlier summary: its body becomes the base of an iterative update,
    and the head decays to the system message after the first compaction."""
    for index in range(len(job.messages) - 1, -1, -1):
        if job.messages[index].get("role") not in ("user", "assistant"):
            continue  # a tool output that happens to start with the marker is not ours
        parts = split_summary(job.messages[index].get("content"))
        if parts is not None:
            job.summary_at = index
            job.previous_summary = parts[0]
            job.first_compaction = False
            break
    return job


def _prune_arguments(arguments: str) -> str:
    try:
        value = json.loads(arguments)
    except ValueError:
        return clip(arguments, ARGS_PRUNE_CHARS)

    def cut(node: Any) -> Any:
        if isinstance(node, str) and len(node) > 200:
            return node[:200] + "...[truncated]"
        if isinstance(node, list):
            return [cut(item) for item in node]
        if isinstance(node, dict):
            return {key: cut(item) for key, item in node.items()}
        return node

    return json.dumps(cut(value), ensure_ascii=False)


def _pruned_line(name: str, args: str, text: str) -> str:
    lines = text.splitlines()
    errors = [ln.strip() for ln in lines if "error" in ln.lower() or "fail" in ln.lower()][:2]
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    line = (
        f"[pruned tool output] {name}({clip(' '.join(args.split()), 120)}) -> "
        f"{len(lines)} lines, {len(text)} chars; began: {clip(first, 160)!r}"
    )
    if errors:
        line += "; errors: " + " | ".join(clip(e, 160) for e in errors)
    return line


def prune_tool_output(job: CompressionJob) -> CompressionJob:
    """Cheap pruning before any model call, outside the head and the budgeted tail.

    Identical long tool outputs keep only their newest copy; other long tool outputs
    become a one-line note (tool, arguments, size, first line, error lines); long
    tool-call arguments have their string values cut, keeping the JSON valid.
    """
    messages = job.messages
    start = head_end_of(job)
    end = budget_tail_start(job, start)
    names: dict[str, tuple[str, str]] = {}
    for message in messages:
        for call_id, name, args in tool_calls_of(message):
            names[call_id] = (name, args)
    seen: set[str] = set()
    for index in range(len(messages) - 1, start - 1, -1):
        message = messages[index]
        if message.get("role") == "tool":
            text = content_text(message.get("content"))
            if len(text) < PRUNE_MIN_CHARS or not isinstance(message.get("content"), str):
                continue
            digest = hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()
            name, args = names.get(str(message.get("tool_call_id") or ""), ("tool", ""))
            name = str(message.get("name") or message.get("tool_name") or name)
            if digest in seen:
                message["content"] = (
                    f"[Duplicate tool output of {name} — same content as a later call]"
                )
                job.pruned_count += 1
            elif index < end:
                message["content"] = _pruned_line(name, args, text)
                job.pruned_count += 1
            seen.add(digest)
        elif index < end and message.get("tool_calls"):
            calls = message["tool_calls"]
            if len(json.dumps(calls, ensure_ascii=False, default=str)) <= ARGS_PRUNE_CHARS:
                continue
            trimmed = []
            for call in calls:
                function = call.get("function") if isinstance(call, Mapping) else None
                if isinstance(function, Mapping):
                    arguments = function.get("arguments")
                    if isinstance(arguments, str) and len(arguments) > ARGS_PRUNE_CHARS:
                        pruned = {**function, "arguments": _prune_arguments(arguments)}
                        call = {**call, "function": pruned}
                trimmed.append(call)
            message["tool_calls"] = trimmed
            job.pruned_count += 1
    return job


def last_user_index(messages: Sequence[Mapping[str, Any]]) -> int | None:
    """Index of the last real user message (a message that is only a summary does not
    count; one the summary was merged into does)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") == "user" and not is_pure_summary(message):
            return index
    return None


def _last_reply_before(messages: Sequence[Mapping[str, Any]], index: int) -> int | None:
    """Index of the last assistant message with visible text before ``index``."""
    for at in range(index - 1, -1, -1):
        message = messages[at]
        if message.get("role") == "user":
            return None
        if message.get("role") == "assistant" and content_text(message.get("content")).strip():
            return at
    return None


def choose_boundaries(job: CompressionJob) -> CompressionJob:
    """Pick the head and the tail; everything between them is compacted.

    The tail holds up to ``protect_last_n`` messages within the token budget, reaches
    back to the last user message whatever it costs (the task must survive) and to the
    assistant reply that message answers, never starts with a tool result (its call
    would be cut off) and starts after the previous summary.
    """
    messages = job.messages
    job.head_end = head = head_end_of(job)
    start = budget_tail_start(job, head)
    anchor = last_user_index(messages)
    if anchor is not None and head <= anchor:
        start = min(start, anchor)
        # The reply the user's last message answers ("yes, do that") goes with it.
        reply = _last_reply_before(messages, anchor)
        if reply is not None and head <= reply < start:
            start = reply
    while start > head and messages[start].get("role") == "tool":
        start -= 1
    if job.summary_at is not None:
        start = max(start, job.summary_at + 1)
    job.tail_start = max(start, head)
    if not job.middle:
        job.skip_reason = "nothing between the protected head and tail to compact"
    return job


def _last_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    index = last_user_index(messages)
    return content_text(messages[index].get("content")) if index is not None else ""


def summarize_middle(job: CompressionJob) -> CompressionJob:
    """Summarise the middle with the model, or build the deterministic fallback.

    Auth and quota errors abort (the job keeps the error and no summary); any other
    model failure, or no model at all, gives the fallback summary.
    """
    if job.skip_reason:
        return job
    middle = job.middle
    focus = job.focus_topic or auto_focus(middle)
    if job.summarizer is not None:
        prompt = build_summary_prompt(
            serialize_turns(middle),
            previous_summary=job.previous_summary,
            provider_context=job.provider_context,
            focus_topic=focus,
            target_tokens=job.settings.summary_budget(estimate_tokens(middle)),
        )
        try:
            text = clean_summary_output(job.summarizer(prompt))
            if not text:
                raise LLMResponseError("The summary model returned an empty summary.")
        except (LLMAuthError, LLMQuotaError) as exc:
            job.error, job.aborted = exc, True
            return job
        except LLMError as exc:
            job.error = exc
            logger.warning("Compression summary failed, using the fallback summary: %s", exc)
        else:
            job.summary = set_task_snapshot(text, _last_user_text(middle))
            return job
    reason = type(job.error).__name__ if job.error else "no summary model available"
    job.summary = fallback_summary(
        job.original_middle,
        previous_summary=job.previous_summary,
        reason=reason,
        max_chars=job.settings.fallback_max_chars,
    )
    job.used_fallback = True
    return job


def _summary_role(head: Sequence[Mapping[str, Any]], tail: Sequence[Mapping[str, Any]]) -> str:
    before = head[-1].get("role") if head else None
    after = tail[0].get("role") if tail else None
    has_user = any(m.get("role") == "user" for m in (*head, *tail) if m.get("role") != "system")
    role = (
        "user" if before in (None, "system", "assistant", "tool") or not has_user else "assistant"
    )
    if role == after:
        role = "assistant" if role == "user" else "user"
    return role


def assemble(job: CompressionJob) -> CompressionJob:
    """Head, then the summary message, then the tail.

    The summary's role avoids two consecutive messages of one role; when both roles
    would collide, the summary is merged into the first tail message instead.
    """
    if job.skip_reason or job.aborted:
        return job
    # Repaired first, so the role choice sees the neighbours the model will see.
    head, fixed_head = repair_pairs(job.messages[: job.head_end])
    tail, fixed_tail = repair_pairs(job.messages[job.tail_start :])
    job.repaired_count += fixed_head + fixed_tail
    wrapped = wrap_summary(job.summary)
    role = _summary_role(head, tail)
    before = head[-1].get("role") if head else None
    if role == before and tail:
        first = dict(tail[0])
        own = first.get("content")
        if isinstance(own, list):
            first["content"] = [{"type": "text", "text": wrapped}, *own]
        else:
            text = content_text(own)
            first["content"] = f"{wrapped}\n\n{text}" if text else wrapped
        job.output = [*head, first, *tail[1:]]
    else:
        job.output = [*head, {"role": role, "content": wrapped}, *tail]
    return job


def repair_pairs(messages: Sequence[Message]) -> tuple[list[Message], int]:
    """``messages`` without broken tool pairs, and how many calls and results were removed.

    A tool result must directly follow the assistant message that called it (any order
    within the group); results without their call go, calls without a result are
    stripped, and an assistant message left with neither text nor calls gets a short
    placeholder so the conversation stays well-formed.
    """
    out: list[Message] = []
    removed = 0
    open_calls: set[str] = set()
    answered: set[str] = set()
    group_at: int | None = None

    def close_group() -> int:
        if group_at is None:
            return 0
        caller = out[group_at]
        calls = caller["tool_calls"]
        kept = [c for c in calls if isinstance(c, Mapping) and str(c.get("id") or "") in answered]
        if len(kept) == len(calls):
            return 0
        caller = {**caller, "tool_calls": kept}
        if not kept:
            del caller["tool_calls"]
            if not content_text(caller.get("content")).strip():
                caller["content"] = "(tool call removed)"
        out[group_at] = caller
        return len(calls) - len(kept)

    for message in messages:
        role = message.get("role")
        if role == "tool":
            call_id = str(message.get("tool_call_id") or "")
            if call_id in open_calls and call_id not in answered:
                answered.add(call_id)
                out.append(message)
            else:
                removed += 1
            continue
        removed += close_group()
        open_calls, answered, group_at = set(), set(), None
        out.append(message)
        if role == "assistant" and isinstance(message.get("tool_calls"), list):
            open_calls = {cid for cid, _, _ in tool_calls_of(message) if cid}
            group_at = len(out) - 1
    removed += close_group()
    return out, removed


def repair_tool_pairs(job: CompressionJob) -> CompressionJob:
    """Remove broken tool pairs from the output (see :func:`repair_pairs`).

    Head and tail are cut at group boundaries, so this only finds pairs that were
    already broken in the input; it is the last guard before the model sees them.
    """
    if job.output is not None:
        job.output, removed = repair_pairs(job.output)
        job.repaired_count += removed
    return job


DEFAULT_PROCESSORS: tuple[Processor, ...] = (
    find_previous_summary,
    prune_tool_output,
    choose_boundaries,
    summarize_middle,
    assemble,
    repair_tool_pairs,
)
