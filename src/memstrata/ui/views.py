"""What each page of ``memstrata ui`` shows, gathered through the library's own calls.

Nothing here writes on its own account: every change goes through the call the CLI
makes for it (``memory.add``/``replace``/``remove``/``undo``,
``PendingWrites.approve``/``reject``, ``Curator.curate``, ``plan_forget``/``forget``),
so the scanner, the budgets, the history and the errors are the same as everywhere
else. The functions return plain dicts and lists for the templates.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memstrata.config import Config
from memstrata.errors import ConfigError, MemstrataError
from memstrata.memory.approval import PendingWrites
from memstrata.memory.core import CuratedMemory
from memstrata.memory.curator import Curator
from memstrata.memory.files import FileMemory, Target
from memstrata.memory.format import FILE_NAMES, TARGETS
from memstrata.ops.forget import ForgetPlan, forget, plan_forget
from memstrata.store.contract import SessionStoreContract

__all__ = [
    "Home",
    "PAGE_SIZE",
    "curate_preview",
    "facts_view",
    "forget_preview",
    "health_view",
    "memory_view",
    "recall_view",
    "run_forget",
    "session_view",
    "sessions_view",
    "when",
]

PAGE_SIZE = 50
RECALL_LIMIT = 5
TARGET_TITLES: dict[Target, str] = {"memory": "agent notes", "user": "user profile"}
_FACT_CATEGORIES = ("identity", "preference", "episodic", "note")


@dataclass
class Home:
    """The open memory and store of the home the inspector serves."""

    config: Config
    memory: CuratedMemory
    store: SessionStoreContract
    backend: str
    pending: PendingWrites = field(init=False)

    def __post_init__(self) -> None:
        self.pending = PendingWrites(self.config.home)


def when(ts: float | None) -> str:
    """``2026-05-14 09:30`` in UTC, or empty."""
    if not ts:
        return ""
    return datetime.fromtimestamp(float(ts), UTC).strftime("%Y-%m-%d %H:%M")


# ------------------------------------------------------------------------------- memory


def memory_view(home: Home, *, history_limit: int = 30) -> dict[str, Any]:
    """Both files (entries, usage against the limit), pending writes, recent history."""
    targets = []
    for target in TARGETS:
        usage = home.memory.usage(target)
        entries = home.memory.entries(target)
        targets.append(
            {
                "target": target,
                "name": FILE_NAMES[target],
                "title": TARGET_TITLES[target],
                "entries": entries,
                "chars": usage.chars,
                "limit": usage.limit,
                "percent": min(100, round(100 * usage.chars / usage.limit)) if usage.limit else 0,
                "usage": str(usage),
            }
        )
    history = [
        {
            **change.summary(),
            "size_delta": change.size_delta,
            "diff": _bytes_diff(change.before, change.after),
        }
        for change in home.memory.history.list(limit=history_limit)
    ]
    pending = [
        {
            "id": w.id,
            "target": w.target,
            "created_at": w.created_at,
            "origin": w.origin,
            "operations": [dict(op) for op in w.operations],
            "describe": w.describe(),
        }
        for w in home.pending.list()
    ]
    where = (
        str(home.memory.path("memory").parent)
        if isinstance(home.memory, FileMemory)
        else f"PostgreSQL namespace {home.config.get('store.namespace')!r}"
    )
    return {"targets": targets, "history": history, "pending": pending, "where": where}


def _bytes_diff(before: bytes | None, after: bytes | None) -> list[tuple[str, str]]:
    """Changed lines of a memory file as ``(sign, line)``: ``-`` removed, ``+`` added."""
    old = (before or b"").decode("utf-8", "replace").splitlines()
    new = (after or b"").decode("utf-8", "replace").splitlines()
    out = []
    for line in difflib.unified_diff(old, new, lineterm="", n=0):
        if line.startswith(("---", "+++", "@@")):
            continue
        out.append((line[:1], line[1:]))
    return out


def facts_view(home: Home, *, limit: int = 50) -> dict[str, Any]:
    """The facts store (``facts.db``, or the namespace's facts under ``store.dsn``) by
    category, the slots of each subject, its history."""
    from memstrata.backends import postgres_dsn
    from memstrata.providers.facts.opening import facts_key, open_facts

    path = facts_key(home.config)
    if postgres_dsn(home.config) is None and not Path(path).exists():
        return {"exists": False, "path": path}
    store = open_facts(home.config)
    try:
        categories = [
            {
                "name": category,
                "count": store.count(category=category),
                "facts": [_fact(f) for f in store.list(category=category, limit=limit)],
            }
            for category in _FACT_CATEGORIES
        ]
        slots = {
            subject: [_fact(f) for f in store.slots(subject=subject, categories=_FACT_CATEGORIES)]
            for subject in ("user", "agent")
        }
        history = [
            {
                "id": c.id,
                "fact_id": c.fact_id,
                "action": c.action,
                "before": _fact_text(c.before),
                "after": _fact_text(c.after),
                "origin": c.origin,
                "at": when(c.at),
            }
            for c in store.history(limit=limit)
        ]
    finally:
        store.close()
    return {
        "exists": True,
        "path": path,
        "categories": categories,
        "slots": slots,
        "history": history,
    }


def _fact(fact: Any) -> dict[str, Any]:
    return {
        "id": fact.id,
        "content": fact.content,
        "key": fact.key,
        "value": fact.value,
        "subject": fact.subject,
        "source": fact.source,
        "status": fact.status,
    }


def _fact_text(value: Mapping[str, Any] | None) -> str:
    if not value:
        return ""
    if value.get("key"):
        return f"{value['key']} = {value.get('value')} ({value.get('content', '')})"
    return str(value.get("content", ""))


# ------------------------------------------------------------------------------ sessions


def sessions_view(
    home: Home,
    *,
    source: str | None,
    since: float | None,
    until: float | None,
    page: int,
) -> dict[str, Any]:
    """One page of conversations, newest activity first, one row per compression chain."""
    rows = home.store.list_sessions_rich(
        source=source or None,
        limit=PAGE_SIZE + 1,
        offset=page * PAGE_SIZE,
        active_since=since,
        active_until=until,
    )
    return {
        "rows": [
            {**r, "when": when(r["last_active"] or r["started_at"])} for r in rows[:PAGE_SIZE]
        ],
        "more": len(rows) > PAGE_SIZE,
        "page_number": page,
    }


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False, indent=2)


def session_view(home: Home, ref: str) -> dict[str, Any]:
    """A conversation: its compression chain drawn as parts (the tip marked), each part's
    messages with tool calls and tool results folded, and its sub-agent sessions."""
    store = home.store
    sid = store.resolve_session(ref)
    chain = store.get_compression_chain(sid)
    tip = chain[-1]
    parts = []
    for index, part_id in enumerate(chain):
        info = store.get_session(part_id)
        assert info is not None  # the chain names stored sessions
        messages = []
        for m in store.get_messages(part_id, include_inactive=True):
            messages.append(
                {
                    "id": m["id"],
                    "role": m["role"],
                    "tool_name": m["tool_name"],
                    "text": _content_text(m["content"]),
                    "tool_calls": [
                        {
                            "name": str((c.get("function") or {}).get("name") or c.get("name")),
                            "arguments": _content_text(
                                (c.get("function") or {}).get("arguments") or c.get("arguments")
                            ),
                        }
                        for c in (m["tool_calls"] or [])
                        if isinstance(c, Mapping)
                    ],
                    "when": when(m["timestamp"]),
                    "active": bool(m["active"]),
                }
            )
        parts.append(
            {
                "id": part_id,
                "number": index + 1,
                "title": info["title"] or "",
                "source": info["source"],
                "model": info["model"] or "",
                "started": when(info["started_at"]),
                "ended": when(info["ended_at"]),
                "end_reason": info["end_reason"] or "",
                "lineage_kind": info["lineage_kind"] or "",
                "message_count": info["message_count"],
                "is_tip": part_id == tip,
                "is_selected": part_id == sid,
                "messages": messages,
            }
        )
    lineage = store.get_lineage_ids(sid)
    delegates = [i for i in lineage if i not in chain]
    return {"id": sid, "chain": chain, "tip": tip, "parts": parts, "delegates": delegates}


# -------------------------------------------------------------------------------- recall


def recall_view(home: Home, query: str, *, source: str | None, summarize: bool) -> dict[str, Any]:
    """What ``session_search`` returns for ``query`` (ranked conversations, summaries or
    excerpts) and, per result, the evidence behind its best message's score."""
    from memstrata.query.filters import make_filters
    from memstrata.search.embedders import embedder_from_config
    from memstrata.search.recall import session_search
    from memstrata.store.hits import highlight_needles

    answer = session_search(
        home.store,
        query,
        limit=RECALL_LIMIT,
        source=source or None,
        summarize=summarize,
        config=home.config,
    )
    try:
        embedder = embedder_from_config(home.config)
    except ConfigError:
        embedder = None  # session_search warned already; the keywords still rank
    ranked = home.store.rank(
        query,
        make_filters(source_filter=source or None),
        dates=bool(home.config.get("search.dates")),
        embedder=embedder,
    )
    parts = {c.id: (c.score, dict(c.bm25)) for c in ranked.candidates}
    for result in answer.get("results", []):
        found = parts.get(int(result["match_message_id"]))
        result["score"] = round(found[0], 4) if found else None
        result["evidence"] = sorted((k, round(v, 4)) for k, v in found[1].items()) if found else []
    answer["dates"] = [w.text for w in ranked.windows]
    answer["terms"] = sorted(set(highlight_needles(ranked.compiled)))
    return answer


# ------------------------------------------------------------------------- curator/forget


def curate_preview(home: Home, target: Target, *, use_model: bool) -> dict[str, Any]:
    """The curator's plan for ``target`` as a diff of the entries; nothing is written."""
    curator = Curator(home.memory, config=home.config, use_model=use_model)
    try:
        result, report = curator.plan(target)
    except MemstrataError as exc:
        return {"target": target, "rejected": str(exc), "diff": [], "report": None}
    diff = []
    for line in difflib.ndiff(list(result.before), list(result.after)):
        if line.startswith("?"):
            continue
        diff.append((line[:1].strip() or " ", line[2:]))
    return {"target": target, "rejected": None, "diff": diff, "report": report.to_dict()}


def run_curate(home: Home, target: Target, *, use_model: bool) -> dict[str, Any]:
    """Curate ``target`` as ``memstrata curate`` does (one undoable history change)."""
    curator = Curator(home.memory, config=home.config, use_model=use_model)
    return curator.curate(target).to_dict()


def forget_preview(
    home: Home,
    *,
    sessions: Sequence[str],
    query: str | None,
    since: float | None,
    until: float | None,
    max_messages: int = 100,
) -> ForgetPlan:
    """Everything ``forget`` would remove (messages, sessions, memory history changes)."""
    return plan_forget(
        home.store,
        sessions=tuple(s for s in sessions if s),
        message_ids=(),
        query=query or None,
        since=since,
        until=until,
        max_messages=max_messages,
        memory_history=home.memory.history if query else None,
    )


def run_forget(home: Home, plan: ForgetPlan, *, query: str | None) -> dict[str, Any]:
    """Forget what ``plan`` holds, as ``memstrata forget --yes`` does."""
    report = forget(home.store, plan, memory_history=home.memory.history if query else None)
    return report.as_dict()


# -------------------------------------------------------------------------------- health


def health_view(home: Home) -> dict[str, Any]:
    """The doctor's findings, the store's sizes and index counts, the memory files."""
    from memstrata.ops.doctor import run_doctor

    report = run_doctor(home.config.home)
    try:
        stats = home.store.stats()
    except MemstrataError as exc:
        stats = {"error": str(exc)}
    try:
        counts = home.store.index_counts()
    except MemstrataError as exc:
        counts = {"error": str(exc)}  # type: ignore[dict-item]
    sizes = {}
    for name in ("state.db", "state.db-wal", "facts.db"):
        path: Path = home.config.home / name
        if path.exists():
            sizes[name] = path.stat().st_size
    return {
        "report": report.as_dict(),
        "stats": stats,
        "counts": counts,
        "sizes": sizes,
    }
