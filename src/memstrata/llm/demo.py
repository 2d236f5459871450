"""A scripted offline model for trying memstrata without a hosted model: ``--model demo``.

It understands a handful of phrasings (English and Chinese), answers them by calling the
real tools the agent offers (``memory`` to save and read, ``session_search`` to recall
past conversations) and words its replies from the tool results. It is not a language
model: every reply says so, and anything it does not recognise gets the list of things
to try. Nothing leaves the machine.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from memstrata.llm.types import Completion, Message, StreamEvent, ToolCall, ToolSchema

__all__ = ["DEMO_BANNER", "DEMO_MODEL", "DemoClient"]

DEMO_MODEL = "demo"
LABEL = "[demo] "
DEMO_BANNER = (
    "This is the offline demo model: scripted replies that exercise memory and session "
    "search, not an AI. Try: 'remember that I like green tea', 'what do you remember "
    "about me?', 'search green tea'. For a real model run `memstrata help llm`."
)
_TRY = (
    "I am the offline demo model, not an AI: I only understand a few phrasings. Try "
    "'remember that I like green tea' (saves a memory), 'what do you remember about me?' "
    "(reads it back) or 'search green tea' (searches past conversations). "
    "`memstrata help llm` shows how to connect a real model."
)

# (pattern, what to do); the first match wins. Group "text" is the argument.
_REMEMBER = [
    re.compile(r"^\s*(?:please\s+)?remember(?:\s+that)?[:,]?\s+(?P<text>.+)$", re.I | re.S),
    re.compile(r"^\s*(?:请)?记住[：:，,]?\s*(?P<text>.+)$", re.S),
]
_RECALL = [
    re.compile(r"\bwhat do you (?:remember|know)\b|\bwho am i\b|\babout me\b", re.I),
    re.compile(r"你记得|关于我|我是谁"),
]
_SEARCH = [
    re.compile(
        r"^\s*(?:search(?:\s+for)?|find|recall|did we (?:talk|speak) about|what did we "
        r"(?:say|decide) about)[:,]?\s+(?P<text>.+?)\??\s*$",
        re.I | re.S,
    ),
    re.compile(r"^\s*(?:搜索|查找|我们聊过)[：:，,]?\s*(?P<text>.+?)[？?]?\s*$", re.S),
]


class DemoClient:
    """An :class:`~memstrata.llm.types.LLMClient` whose replies are scripted."""

    def __init__(self) -> None:
        self.model = DEMO_MODEL
        self._ids = itertools.count(1)

    # -- the LLMClient contract ------------------------------------------------------------

    def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSchema] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
        stream: bool = False,
    ) -> Completion:
        """The scripted reply to the conversation: a tool call, or text."""
        names = {str(t.get("function", {}).get("name")) for t in tools or ()}
        last = messages[-1] if messages else {}
        if last.get("role") == "tool":
            return self._answer(messages)
        text = str(last.get("content") or "") if last.get("role") == "user" else ""
        call = self._tool_call(text, names)
        if call is not None:
            return Completion("", (call,), "tool_calls", model=self.model)
        return Completion(LABEL + _TRY, finish_reason="stop", model=self.model)

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSchema] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
    ) -> Iterator[StreamEvent]:
        """The same reply, in word-sized text events, then its tool calls and ``done``."""
        completion = self.complete(messages, tools=tools)
        for word in re.findall(r"\S+\s*", completion.text):
            yield StreamEvent("text", text=word)
        for call in completion.tool_calls:
            yield StreamEvent("tool_call", tool_call=call)
        yield StreamEvent("done", completion=completion)

    def embed(self, texts: Sequence[str], *, timeout: float | None = None) -> list[list[float]]:
        """Refused: the demo has no embedding model (recall uses keywords)."""
        from memstrata.errors import LLMNotConfiguredError

        raise LLMNotConfiguredError(
            "The demo model has no embeddings; keyword recall works without them."
        )

    def close(self) -> None:
        """Nothing to release."""

    # -- the script -------------------------------------------------------------------------

    def _call(self, name: str, args: Mapping[str, Any]) -> ToolCall:
        return ToolCall(f"demo-{next(self._ids)}", name, json.dumps(args, ensure_ascii=False))

    def _tool_call(self, text: str, tools: set[str]) -> ToolCall | None:
        if "memory" in tools:
            for pattern in _REMEMBER:
                match = pattern.match(text)
                if match:
                    fact = match.group("text").strip().rstrip(".。!！")
                    return self._call(
                        "memory", {"action": "add", "target": "user", "content": fact}
                    )
            if any(p.search(text) for p in _RECALL):
                return self._call("memory", {"action": "read", "target": "user"})
        if "session_search" in tools:
            for pattern in _SEARCH:
                match = pattern.match(text)
                if match:
                    return self._call("session_search", {"query": match.group("text").strip()})
        return None

    def _answer(self, messages: Sequence[Message]) -> Completion:
        """Word the result of the tool call this turn made."""
        result_message = messages[-1]
        call = _call_of(messages, str(result_message.get("tool_call_id") or ""))
        try:
            result = json.loads(str(result_message.get("content") or "{}"))
        except json.JSONDecodeError:
            result = {}
        if not isinstance(result, dict):
            result = {}
        name = call.get("name") if call else None
        args = call.get("args", {}) if call else {}
        if result.get("error") or result.get("success") is False:
            text = f"The {name} tool refused: {result.get('error') or 'no reason given'}"
        elif name == "memory" and args.get("action") == "read":
            entries = result.get("entries") or []
            text = (
                "Here is what I remember about you:\n"
                + "\n".join(f"- {entry}" for entry in entries)
                if entries
                else "I do not remember anything about you yet. Say 'remember that ...'."
            )
        elif name == "memory":
            text = (
                f"Saved to memory: '{args.get('content', '')}'. Ask 'what do you remember "
                "about me?' now, or in a new session (/new), where it is in the system prompt."
            )
            if result.get("staged"):
                text = f"{result.get('message', 'Staged for approval.')}"
        elif name == "session_search":
            text = _search_text(result, str(args.get("query", "")))
        else:
            text = _TRY
        return Completion(LABEL + text, finish_reason="stop", model=self.model)


def _call_of(messages: Sequence[Message], call_id: str) -> dict[str, Any] | None:
    """Name and parsed arguments of the assistant's tool call ``call_id``."""
    for message in reversed(messages):
        for call in message.get("tool_calls") or ():
            if call.get("id") == call_id:
                function = call.get("function") or {}
                try:
                    args = json.loads(function.get("arguments") or "{}")
                except json.JSONDecodeError:
                    args = {}
                return {
                    "name": function.get("name"),
                    "args": args if isinstance(args, dict) else {},
                }
    return None


def _search_text(result: Mapping[str, Any], query: str) -> str:
    found = result.get("results") or []
    if not found:
        return str(result.get("message") or f"No past conversation mentions {query!r}.")
    lines = [f"I found {len(found)} past conversation(s) about {query!r}:"]
    for item in found:
        title = item.get("title") or "(untitled)"
        text = item.get("snippet") or item.get("summary") or item.get("excerpt") or ""
        lines.append(f"- {item.get('session_id', '')} {title}: {' '.join(str(text).split())[:200]}")
    return "\n".join(lines)
