"""A scripted conversation through Hermes Agent's own plugin loader and MemoryManager.

Run with Hermes' interpreter and ``HERMES_HOME`` pointing at a folder where
``memstrata hermes install`` wrote the plugin. Prints one JSON object (the last line of
stdout) with what each step observed; tests/test_integration_hermes.py asserts on it.
Hermes is imported and called, never copied or mocked.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import threading
from pathlib import Path
from typing import Any

from agent.memory_manager import MemoryManager  # type: ignore[import-not-found]
from hermes_constants import get_hermes_home  # type: ignore[import-not-found]
from hermes_state import SessionDB  # type: ignore[import-not-found]
from plugins.memory import (  # type: ignore[import-not-found]
    _get_active_memory_provider,
    discover_memory_providers,
    load_memory_provider,
)

FIRST = [
    (
        "Our staging database moved to the Frankfurt region last week; its host is "
        "pg-stage-fra.internal now.",
        "Noted: staging runs in Frankfurt on pg-stage-fra.internal.",
    ),
    (
        "我们决定把日志系统从ELK迁移到Loki，负责人是王芳，下个月完成。",
        "好的，日志系统迁移到Loki，由王芳负责，计划下个月完成。",
    ),
    ("Remember that my favourite editor is Helix.", "Got it, Helix it is."),
]
SECOND_QUESTION = "Which region is the staging database in these days?"
CHINESE_QUESTION = "日志系统迁移到哪里了，负责人是谁？"
ENGLISH_QUESTION = "what is the hostname of the staging database"
LEGACY = "The VPN certificate for the Lisbon office expires on the third of March."


def locked(path: Path) -> bool:
    """True if another connection still holds ``path`` (an exclusive lock fails at once)."""
    conn = sqlite3.connect(path, timeout=0)
    try:
        conn.execute("BEGIN EXCLUSIVE")
        conn.rollback()
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        conn.close()


def main() -> dict[str, Any]:
    out: dict[str, Any] = {"hermes_home": str(get_hermes_home())}
    out["active"] = _get_active_memory_provider()
    # A session Hermes recorded before memstrata was installed.
    db = SessionDB(db_path=Path(get_hermes_home()) / "state.db")
    db.create_session("s-legacy", "cli")
    db.append_message("s-legacy", "user", LEGACY)
    db.append_message("s-legacy", "assistant", "I will remind you in February.")
    db.close()
    out["discovered"] = [[n, d, a] for n, d, a in discover_memory_providers()]
    provider = load_memory_provider("memstrata")
    # What `hermes memory setup` does with the answers: the provider saves them.
    out["config_schema"] = [f["key"] for f in provider.get_config_schema()]
    provider.save_config({"import_state_db": "true"}, str(get_hermes_home()))
    out["loaded"] = type(provider).__name__ if provider is not None else None
    out["mro"] = [f"{c.__module__}.{c.__name__}" for c in type(provider).__mro__]
    manager = MemoryManager()
    manager.add_provider(provider)
    out["tools"] = sorted(manager.get_all_tool_names())
    manager.initialize_all("s-first", platform="cli", agent_context="primary")
    out["system_prompt"] = manager.build_system_prompt()

    messages: list[dict[str, Any]] = []
    for turn, (user, assistant) in enumerate(FIRST, 1):
        manager.on_turn_start(turn, user)
        manager.prefetch_all(user, session_id="s-first")
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
        manager.sync_all(user, assistant, session_id="s-first", messages=list(messages))
        manager.queue_prefetch_all(user, session_id="s-first")
    # Hermes' built-in memory tool wrote USER.md; the manager mirrors it to the provider.
    manager.notify_memory_tool_write(
        {"success": True, "done": True},
        {"action": "add", "target": "user", "content": "User measures everything in metric units"},
    )
    out["flushed_first"] = manager.flush_pending(timeout=10)
    manager.commit_session_boundary_async(messages, new_session_id="s-second")
    out["flushed_boundary"] = manager.flush_pending(timeout=10)

    manager.on_turn_start(1, SECOND_QUESTION)
    out["prefetch"] = manager.prefetch_all(SECOND_QUESTION, session_id="s-second")
    out["search_zh"] = json.loads(
        manager.handle_tool_call("memstrata_session_search", {"query": CHINESE_QUESTION})
    )
    out["search_en"] = json.loads(
        manager.handle_tool_call(
            "memstrata_session_search", {"query": ENGLISH_QUESTION, "summarize": False}
        )
    )
    out["search_legacy"] = json.loads(
        manager.handle_tool_call(
            "memstrata_session_search", {"query": "When does the VPN certificate expire?"}
        )
    )
    out["remember"] = json.loads(
        manager.handle_tool_call(
            "memstrata_remember", {"content": "The release train leaves every Thursday"}
        )
    )
    out["facts_mirrored"] = json.loads(
        manager.handle_tool_call("memstrata_facts", {"query": "metric units"})
    )
    out["facts_captured"] = json.loads(
        manager.handle_tool_call("memstrata_facts", {"query": "favourite editor"})
    )
    out["pre_compress"] = manager.on_pre_compress(messages)
    out["unknown_tool"] = json.loads(manager.handle_tool_call("memstrata_nope", {}))
    out["bad_args"] = json.loads(
        manager.handle_tool_call("memstrata_session_search", {"limit": "many"})
    )
    sync_threads = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    manager.shutdown_all()
    out["drain"] = manager.shutdown_drain_state
    home = Path(get_hermes_home()) / "memstrata"
    databases = sorted(home.glob("*.db"))
    out["databases"] = [p.name for p in databases]
    out["locked"] = [p.name for p in databases if locked(p)]
    # SQLite removes a WAL file when its last connection closes: a leftover means an
    # open connection somewhere.
    out["leftover_wal"] = sorted(p.name for p in home.glob("*-wal"))
    out["threads_before_shutdown"] = sync_threads
    return out


if __name__ == "__main__":
    result = main()
    sys.stdout.write(json.dumps(result, ensure_ascii=False) + "\n")
