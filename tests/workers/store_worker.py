"""Worker process for the session-store concurrency and crash tests.

store_worker.py append DB WORKER_ID N     append N messages, print a JSON summary
store_worker.py forever DB                append until killed, print ids as calls return
store_worker.py search DB STOP_FILE       run raw FTS queries until STOP_FILE exists
store_worker.py open DB GO_FILE           wait for GO_FILE, open (migrate) and write
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

from memstrata.store.sqlite.store import SessionStore

CJK_DIGITS = "甲乙丙丁戊己庚辛壬癸"
# Endless modes stop on their own when the test that started them is gone.
PARENT = os.getppid()
MAX_SECONDS = 900
STARTED = time.monotonic()


def abandoned() -> bool:
    """True when the test process died or the worker has run far too long."""
    return os.getppid() != PARENT or time.monotonic() - STARTED > MAX_SECONDS


def cjk_code(n: int) -> str:
    """A CJK run unique to ``n``: a marker and n's six digits as stem characters."""
    return "鑫" + "".join(CJK_DIGITS[int(d)] for d in f"{n:06d}")


def tool_calls(k: int) -> list[dict[str, object]]:
    return [
        {"id": f"c{i}", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
        for i in range(k)
    ]


def append(db: str, wid: str, n: int) -> None:
    rng = random.Random(wid)
    store = SessionStore(db)
    own = f"own-{wid}"
    store.create_session("shared", source="stress")
    store.create_session(own, source="stress", parent_session_id="shared", lineage_kind="branch")
    ids: list[int] = []
    counts = {"own": 0, "shared": 0, "own_calls": 0, "shared_calls": 0}
    single_time = batch_time = 0.0
    single_rows = batch_rows = 0
    seq = 0
    while seq < n:
        if seq % 2 == 0:
            k = rng.randint(0, 2)
            t0 = time.perf_counter()
            ids.append(
                store.append_message(
                    own,
                    "assistant",
                    f"worker {wid} message {seq} token w{wid}s{seq}z",
                    tool_calls=tool_calls(k) if k else None,
                )
            )
            single_time += time.perf_counter() - t0
            single_rows += 1
            counts["own"] += 1
            counts["own_calls"] += k
            seq += 1
        else:
            size = min(rng.randint(2, 6), n - seq)
            batch = []
            for j in range(size):
                k = rng.randint(0, 1)
                batch.append(
                    {
                        "role": "user" if j % 2 == 0 else "tool",
                        "content": f"shared {wid} {seq + j} token w{wid}s{seq + j}z 共享消息",
                        "tool_calls": tool_calls(k) if k else None,
                    }
                )
                counts["shared_calls"] += k
            t0 = time.perf_counter()
            ids += store.append_messages("shared", batch)
            batch_time += time.perf_counter() - t0
            batch_rows += size
            counts["shared"] += size
            seq += size
    store.close()
    print(
        json.dumps(
            {
                "ids": ids,
                **counts,
                "single_rows_per_s": single_rows / single_time if single_time else 0,
                "batch_rows_per_s": batch_rows / batch_time if batch_time else 0,
            }
        ),
        flush=True,
    )


def forever(db: str) -> None:
    store = SessionStore(db)
    store.create_session("crash", source="crash")
    n = 0
    while not abandoned():
        if n % 3 == 2:
            batch = [
                {"role": "user", "content": f"batch crashtok{n + j}x {cjk_code(n + j)}的消息"}
                for j in range(3)
            ]
            ids = store.append_messages("crash", batch)
            for j, mid in enumerate(ids):
                print(f"{mid} {n + j}", flush=True)
            n += 3
        else:
            mid = store.append_message("crash", "assistant", f"single crashtok{n}x")
            print(f"{mid} {n}", flush=True)
            n += 1


def search(db: str, stop: str) -> None:
    store = SessionStore(db)
    queries = 0
    while not os.path.exists(stop) and not abandoned():
        with store.read_conn() as conn:
            for table, term in (
                ("messages_fts", "token"),
                ("messages_fts_trigram", '"har"'),
                ("messages_fts_cjk", '"共享 享消"'),
            ):
                conn.execute(
                    f"SELECT rowid FROM {table} WHERE {table} MATCH ? ORDER BY rank LIMIT 20",
                    (term,),
                ).fetchall()
                queries += 1
        time.sleep(0.002)  # a reader's pace, not a busy loop stealing the writers' CPU
    store.close()
    print(json.dumps({"queries": queries}), flush=True)


def open_store(db: str, go: str) -> None:
    while not os.path.exists(go) and not abandoned():
        time.sleep(0.001)
    with SessionStore(db) as store:
        sid = f"p{os.getpid()}"
        store.create_session(sid)
        store.append_message(sid, "user", "opened")
    print("ok", flush=True)


if __name__ == "__main__":
    mode, db = sys.argv[1], sys.argv[2]
    Path(db).parent.mkdir(parents=True, exist_ok=True)
    if mode == "append":
        append(db, sys.argv[3], int(sys.argv[4]))
    elif mode == "forever":
        forever(db)
    elif mode == "search":
        search(db, sys.argv[3])
    elif mode == "open":
        open_store(db, sys.argv[3])
    else:
        raise SystemExit(f"unknown mode {mode}")
