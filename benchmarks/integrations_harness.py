"""Feed one conversation to Hermes Agent twice (built-in state.db and the memstrata
provider through Hermes' MemoryManager), then ask the questions of both.

Run by ``benchmarks/integrations.py`` as ``<hermes-python> integrations_harness.py <
job.json`` with ``HERMES_HOME`` pointing at a scratch folder where
``memstrata hermes install`` wrote the plugin. Hermes is imported and called, never
copied. The job: ``{"sessions": [{"id", "turns": [[user, assistant], ...]}],
"queries": {"<form>": [question, ...]}}``. The result (one JSON line): per system and
query form the ranked session ids (top 5) per question, and the seconds each call took.

* built-in: what Hermes' agent loop writes for a turn (``SessionDB.create_session`` then
  ``append_message`` for the user and the assistant message), searched by Hermes'
  ``session_search`` tool function (discover mode, limit 5);
* provider: ``load_memory_provider("memstrata")`` registered in a ``MemoryManager``;
  every turn goes through ``sync_all`` and each new session through
  ``commit_session_boundary_async`` (what ``/new`` does), then the questions go through
  ``MemoryManager.handle_tool_call("memstrata_session_search", ...)``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from agent.memory_manager import MemoryManager  # type: ignore[import-not-found]
from hermes_state import SessionDB  # type: ignore[import-not-found]
from plugins.memory import load_memory_provider  # type: ignore[import-not-found]
from tools.session_search_tool import session_search  # type: ignore[import-not-found]

LIMIT = 5
CURRENT = "bench-current"  # the session the questions are asked from (in neither store)


def main() -> dict[str, Any]:
    job = json.load(sys.stdin)
    home = Path(os.environ["HERMES_HOME"])
    db = SessionDB(db_path=home / "state.db")
    provider = load_memory_provider("memstrata")
    if provider is None:
        raise SystemExit("Hermes did not load the memstrata provider: run memstrata hermes install")
    manager = MemoryManager()
    manager.add_provider(provider)
    sessions = job["sessions"]
    manager.initialize_all(sessions[0]["id"], platform="cli", agent_context="primary")
    sync_s = 0.0
    for n, session in enumerate(sessions):
        sid = session["id"]
        db.create_session(sid, "cli")
        history: list[dict[str, str]] = []
        for user, assistant in session["turns"]:
            db.append_message(sid, "user", user)
            if assistant:
                db.append_message(sid, "assistant", assistant)
            history += [
                {"role": "user", "content": user},
                {"role": "assistant", "content": assistant},
            ]
            t0 = time.perf_counter()
            manager.sync_all(user, assistant, session_id=sid, messages=list(history))
            sync_s += time.perf_counter() - t0
        following = sessions[n + 1]["id"] if n + 1 < len(sessions) else CURRENT
        manager.commit_session_boundary_async(history, new_session_id=following)
    t0 = time.perf_counter()
    if not manager.flush_pending(timeout=600):
        raise SystemExit("the provider's background writes did not finish in 600 s")
    drain_s = time.perf_counter() - t0

    out: dict[str, Any] = {"ranked": {}, "seconds": {}, "sync_call_s": sync_s, "drain_s": drain_s}
    for form, questions in job["queries"].items():
        for system in ("hermes", "provider"):
            ranked: list[list[str]] = []
            seconds: list[float] = []
            for question in questions:
                t0 = time.perf_counter()
                if system == "hermes":
                    raw = session_search(
                        query=question, limit=LIMIT, db=db, current_session_id=CURRENT
                    )
                else:
                    raw = manager.handle_tool_call(
                        "memstrata_session_search",
                        {"query": question, "limit": LIMIT, "summarize": False},
                    )
                seconds.append(time.perf_counter() - t0)
                result = json.loads(raw)
                ids = [r["session_id"] for r in result.get("results", [])]
                ranked.append(list(dict.fromkeys(ids))[:LIMIT])
            out["ranked"][f"{system}/{form}"] = ranked
            out["seconds"][f"{system}/{form}"] = seconds
    manager.shutdown_all()
    db.close()
    return out


if __name__ == "__main__":
    sys.stdout.write(json.dumps(main()) + "\n")
