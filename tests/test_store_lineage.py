"""Session lineage: recorded kinds, the timestamp fallback, compression tips and listings."""

from __future__ import annotations

import random

import pytest

from memstrata.errors import SessionNotFoundError
from memstrata.store.lineage import MAX_HOPS
from memstrata.store.sqlite.store import SessionStore

# ``store`` comes from tests/conftest.py: every test runs on SQLite and on PostgreSQL.


def _compress(store: SessionStore, parent: str, child: str, at: float) -> None:
    store.end_session(parent, "compression", ended_at=at)
    store.create_session(child, parent_session_id=parent, lineage_kind="compression", started_at=at)


def test_recorded_compression_chain_tip_and_root(store: SessionStore) -> None:
    """The tip follows recorded compression children; the root walks back to the start."""
    store.create_session("a", started_at=1.0)
    _compress(store, "a", "b", 10.0)
    _compress(store, "b", "c", 20.0)
    assert [store.get_compression_tip(s) for s in "abc"] == ["c", "c", "c"]
    assert store.get_lineage_root("c") == "a"
    assert store.get_lineage_ids("b") == ["a", "b", "c"]
    with pytest.raises(SessionNotFoundError):
        store.get_compression_tip("zzz")


def test_recorded_kind_beats_timestamps(store: SessionStore) -> None:
    """A recorded continuation that started before its parent ended (a race) is still the tip."""
    store.create_session("p", started_at=1.0)
    store.create_session("cont", parent_session_id="p", lineage_kind="compression", started_at=5.0)
    store.create_session("sub", parent_session_id="p", lineage_kind="delegate", started_at=11.0)
    store.end_session("p", "compression", ended_at=10.0)
    assert store.get_compression_tip("p") == "cont"
    assert store.get_lineage_root("sub") == "p"


def test_timestamp_fallback_for_imported_rows(store: SessionStore) -> None:
    """Unrecorded kinds: started after a compression end continues, started before delegates."""
    store.create_session("p", started_at=1.0)
    store.create_session("delegate", parent_session_id="p", started_at=5.0)
    store.create_session("cont", parent_session_id="p", started_at=10.0)
    store.end_session("p", "compression", ended_at=10.0)
    assert store.get_compression_tip("p") == "cont"
    listed = store.list_sessions_rich()
    assert [(r["id"], r["root_id"]) for r in listed] == [("cont", "p")]
    assert sorted(store.delete_session("p")) == ["delegate", "p"]
    assert store.get_session("cont") is not None


def test_fallback_reads_hermes_markers(store: SessionStore) -> None:
    """Imported _delegate_from / _branched_from markers in model_config decide the kind."""
    store.create_session("p", started_at=1.0)
    store.end_session("p", "compression", ended_at=2.0)
    store.create_session(
        "d", parent_session_id="p", started_at=3.0, model_config={"_delegate_from": "p"}
    )
    store.create_session(
        "b", parent_session_id="p", started_at=3.0, model_config={"_branched_from": "p"}
    )
    assert store.get_compression_tip("p") == "p"
    assert sorted(r["id"] for r in store.list_sessions_rich()) == ["b", "p"]


def test_ended_parent_without_compression_makes_a_branch(store: SessionStore) -> None:
    """An unrecorded child started after a non-compression end is listed on its own."""
    store.create_session("p", started_at=1.0)
    store.end_session("p", "user_exit", ended_at=2.0)
    store.create_session("later", parent_session_id="p", started_at=3.0)
    assert store.get_compression_tip("p") == "p"
    assert sorted(r["id"] for r in store.list_sessions_rich()) == ["later", "p"]


def test_tip_walk_is_bounded_to_100_hops(store: SessionStore) -> None:
    """A chain longer than 100 continuations stops after 100 hops."""
    store.create_session("s0", started_at=0.0)
    for i in range(1, MAX_HOPS + 20):
        _compress(store, f"s{i - 1}", f"s{i}", float(i))
    assert store.get_compression_tip("s0") == f"s{MAX_HOPS}"


def test_tip_walk_survives_a_cycle(store: SessionStore) -> None:
    """A parent cycle in damaged data ends the walk instead of looping."""
    store.create_session("a", started_at=1.0)
    _compress(store, "a", "b", 2.0)
    _compress(store, "b", "c", 3.0)
    sql = "UPDATE sessions SET parent_session_id = 'c', lineage_kind = 'compression' WHERE "
    with store.write() as conn:
        if isinstance(store, SessionStore):
            conn.execute(sql + "id = 'a'")
        else:  # PostgreSQL: only this test's tenant
            conn.execute(sql + "namespace = %s AND id = 'a'", (store.namespace,))
    assert store.get_compression_tip("a") == "c"
    assert store.get_lineage_root("a") in {"a", "b", "c"}
    assert store.list_sessions_rich() == []  # every member is a continuation now


def test_fork_prefers_the_compressed_continuation(store: SessionStore) -> None:
    """Of two continuations, the one that was itself compressed carries the chain on."""
    store.create_session("p", started_at=1.0)
    store.end_session("p", "compression", ended_at=2.0)
    store.create_session("x", parent_session_id="p", lineage_kind="compression", started_at=3.0)
    store.create_session("y", parent_session_id="p", lineage_kind="compression", started_at=4.0)
    _compress(store, "x", "x2", 5.0)
    assert store.get_compression_tip("p") == "x2"


def test_listing_projects_chains_onto_tips(store: SessionStore) -> None:
    """One row per conversation: tip id, root id, lineage counts, first user text as preview."""
    store.create_session("root", source="cli", started_at=1.0, title="Trip")
    store.append_message(
        "root",
        "user",
        "Plan\na trip to Kyoto in the spring, with temples and food " * 2,
        timestamp=2.0,
    )
    _compress(store, "root", "tip", 3.0)
    store.set_session_title("tip", store.get_next_title_in_lineage("Trip"))
    store.append_message("tip", "assistant", "sure", timestamp=50.0)
    store.create_session("sub", parent_session_id="tip", lineage_kind="delegate", started_at=4.0)
    store.create_session("fork", parent_session_id="root", lineage_kind="branch", started_at=5.0)
    store.append_message("fork", "user", "other", timestamp=6.0)
    store.create_session("cron", source="cron", started_at=7.0)
    store.append_message("cron", "user", "tick", timestamp=60.0)

    rows = store.list_sessions_rich()
    assert [r["id"] for r in rows] == ["cron", "tip", "fork"]
    trip = rows[1]
    assert trip["root_id"] == "root" and trip["title"] == "Trip #2"
    assert trip["message_count"] == 2 and trip["last_active"] == 50.0
    assert trip["started_at"] == 1.0 and trip["session_ids"] == ["root", "tip"]
    assert trip["preview"].startswith("Plan a trip") and trip["preview"].endswith("...")
    assert len(trip["preview"]) == 63

    assert [r["id"] for r in store.list_sessions_rich(source="cron")] == ["cron"]
    assert [r["id"] for r in store.list_sessions_rich(exclude_sources=["cron"])] == ["tip", "fork"]
    assert [r["id"] for r in store.list_sessions_rich(order_by_last_active=False)] == [
        "cron",
        "fork",
        "tip",
    ]
    assert [r["id"] for r in store.list_sessions_rich(limit=1, offset=1)] == ["tip"]
    store.set_session_archived("cron")
    assert [r["id"] for r in store.list_sessions_rich()] == ["tip", "fork"]
    assert len(store.list_sessions_rich(include_archived=True)) == 3


def test_orphaned_continuation_becomes_a_root(store: SessionStore) -> None:
    """Deleting the head of a chain lists its continuation as a conversation of its own."""
    store.create_session("a", started_at=1.0)
    _compress(store, "a", "b", 2.0)
    store.delete_session("a")
    rows = store.list_sessions_rich()
    assert [(r["id"], r["root_id"]) for r in rows] == [("b", "b")]
    assert store.get_lineage_root("b") == "b"


def _reference_listing(store: SessionStore, **kwargs: object) -> list[dict[str, object]]:
    """The listing by definition: every listed session's chain walked, sorted, then cut."""
    limit = int(kwargs.pop("limit", 20))  # type: ignore[call-overload]
    offset = int(kwargs.pop("offset", 0))  # type: ignore[call-overload]
    everything = store.list_sessions_rich(limit=10**6, order_by_last_active=False, **kwargs)

    def key(row: dict[str, object]) -> tuple[float, str]:
        members = [store.get_session(str(i)) for i in row["session_ids"]]  # type: ignore[attr-defined]
        newest = max(float(m["last_active"] or m["started_at"]) for m in members if m)
        return newest, str(row["root_id"])

    everything.sort(key=key, reverse=True)
    return everything[offset : offset + limit]


def _random_lineage(store: SessionStore, seed: int, n: int) -> None:
    rng = random.Random(seed)
    ids: list[str] = []
    for i in range(n):
        sid = f"s{i:04d}"
        parent = rng.choice(ids) if ids and rng.random() < 0.5 else None
        kind = rng.choice(["compression", "compression", "delegate", "branch", None])
        started = float(rng.randint(1, 50))  # coarse: many ties in activity
        store.create_session(
            sid,
            source=rng.choice(["cli", "cron"]),
            parent_session_id=parent,
            lineage_kind=kind if parent else None,
            started_at=started,
        )
        if rng.random() < 0.6:
            store.append_message(sid, "user", f"m{i}", timestamp=float(rng.randint(1, 60)))
        if rng.random() < 0.5:
            reason = rng.choice(["compression", "done"])
            store.end_session(sid, reason, ended_at=started + rng.randint(0, 5))
        if rng.random() < 0.1:
            store.set_session_archived(sid)
        ids.append(sid)


@pytest.mark.parametrize("seed", range(4))
def test_sql_listing_matches_the_definition(store: SessionStore, seed: int) -> None:
    """Random lineage graphs (forks, ties, filters, deep pages) list as the definition says."""
    # The SQLite walk switches to preloaded maps past 400 rows: one graph big enough.
    deep = seed == 0 and isinstance(store, SessionStore)
    _random_lineage(store, seed, 600 if deep else 120)
    cases: list[dict[str, object]] = [
        {},
        {"limit": 7, "offset": 5},
        {"source": "cron"},
        {"exclude_sources": ["cron"], "include_archived": True},
        {"limit": 50, "offset": 60},
    ]
    if deep:
        cases.append({"limit": 40, "offset": 420})
    for kwargs in cases:
        expected = _reference_listing(store, **dict(kwargs))
        assert store.list_sessions_rich(**kwargs) == expected, kwargs  # type: ignore[arg-type]
