"""A small home with something in every layer, for trying and testing ``memstrata ui``.

:func:`fill_sample_home` writes curated memory (with its history), one staged memory
write waiting for approval, facts with slots, and three conversations: one compressed
into three sessions (``#2``, ``#3`` titles), one in Chinese with a tool call, and a short
one from another source. Everything goes through the library's public calls, so the
result is what an agent would have left behind.
"""

from __future__ import annotations

from pathlib import Path

from memstrata.config import Config
from memstrata.memory.approval import PendingWrites
from memstrata.memory.files import FileMemory
from memstrata.providers.facts.store import FactStore
from memstrata.store.sqlite.store import SessionStore

__all__ = ["SAMPLE_DAY", "fill_sample_home"]

# 2026-03-02 09:00 UTC: the sample conversations start on this day.
SAMPLE_DAY = 1_772_442_000.0
_HOUR = 3600.0


def _conversations(store: SessionStore) -> None:
    t = SAMPLE_DAY
    # A conversation compressed twice: three sessions, titled "Kyoto trip", "#2", "#3".
    store.create_session("trip-1", source="cli", model="gpt-4o-mini", started_at=t)
    store.set_session_title("trip-1", "Kyoto trip")
    store.append_messages(
        "trip-1",
        [
            {"role": "user", "content": "Plan a 4-day Kyoto trip in April.", "timestamp": t},
            {
                "role": "assistant",
                "content": "Day 1: Fushimi Inari at dawn; day 2: Arashiyama.",
                "timestamp": t + 60,
            },
        ],
    )
    store.end_session("trip-1", "compression")
    for part, (sid, parent) in enumerate((("trip-2", "trip-1"), ("trip-3", "trip-2")), start=2):
        at = t + part * _HOUR
        store.create_session(
            sid,
            source="cli",
            model="gpt-4o-mini",
            parent_session_id=parent,
            lineage_kind="compression",
            started_at=at,
        )
        store.set_session_title(sid, store.get_next_title_in_lineage("Kyoto trip"))
        store.append_messages(
            sid,
            [
                {
                    "role": "user",
                    "content": f"Part {part}: keep the ryokan budget under 30,000 yen a night.",
                    "timestamp": at,
                },
                {
                    "role": "assistant",
                    "content": "Noted: ryokan under 30,000 yen; Gion area preferred.",
                    "timestamp": at + 60,
                },
            ],
        )
        if sid != "trip-3":
            store.end_session(sid, "compression")
    # A Chinese conversation with a tool call and its result.
    day2 = t + 24 * _HOUR
    store.create_session("db-move", source="telegram", model="qwen-max", started_at=day2)
    store.set_session_title("db-move", "数据库迁移")
    calls = [
        {
            "id": "call-1",
            "type": "function",
            "function": {"name": "calendar_lookup", "arguments": '{"week": "next"}'},
        }
    ]
    store.append_messages(
        "db-move",
        [
            {"role": "user", "content": "我们什么时候把数据库迁移到新服务器？", "timestamp": day2},
            {"role": "assistant", "content": None, "tool_calls": calls, "timestamp": day2 + 5},
            {
                "role": "tool",
                "content": '{"free": ["周二 22:00", "周四 23:00"]}',
                "tool_name": "calendar_lookup",
                "tool_call_id": "call-1",
                "timestamp": day2 + 6,
            },
            {
                "role": "assistant",
                "content": "数据库迁移定在下周二晚上十点，先在测试环境演练一次。",
                "timestamp": day2 + 30,
            },
        ],
    )
    day3 = t + 48 * _HOUR
    store.create_session("standup", source="mcp", started_at=day3)
    store.append_messages(
        "standup",
        [
            {"role": "user", "content": "Summarise yesterday's deploy.", "timestamp": day3},
            {
                "role": "assistant",
                "content": "The deploy of v2.4 went out at 17:10; no rollbacks.",
                "timestamp": day3 + 20,
            },
        ],
    )


def fill_sample_home(home: Path) -> Path:
    """Fill ``home`` (created if needed) with the sample; returns it."""
    home.mkdir(parents=True, exist_ok=True)
    config = Config.load(home)
    memory = FileMemory(home, config=config, actor="sample")
    memory.add("user", "Prefers concise answers; works in UTC+8")
    memory.add("user", "Name: Lin. Writes Python and Go.")
    memory.add("memory", "Project uses pnpm, not npm")
    memory.add("memory", "Staging database: pg-staging.internal, port 5433")
    memory.add("memory", "Run the tests with `pytest -m 'not stress'`")
    PendingWrites(home).stage(
        "memory",
        [{"action": "add", "content": "Deploys happen on Tuesdays after 17:00", "old_text": None}],
        origin="tool",
    )
    facts = FactStore.open(home)
    try:
        facts.upsert_slot("timezone", "UTC+8", content="User's timezone is UTC+8")
        facts.upsert_slot("city", "Shanghai", content="User lives in Shanghai")
        facts.upsert_slot("city", "Hangzhou", content="User moved to Hangzhou")
        facts.add("User prefers green tea over coffee", category="preference")
        facts.add("The v2.4 deploy went out on a Wednesday", category="episodic")
    finally:
        facts.close()
    with SessionStore(config=config) as store:
        _conversations(store)
    return home
