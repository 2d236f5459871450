"""Session titles: sanitising, uniqueness, moving along compression, numbering."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memstrata.errors import SessionNotFoundError, SessionStoreError, TitleConflictError
from memstrata.store.sqlite.store import SessionStore
from memstrata.store.titles import sanitize_title


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SessionStore]:
    with SessionStore(tmp_path / "state.db") as s:
        yield s


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("  Deploy\tplan \n v2 ", "Deploy plan v2"),
        ("zero\u200bwidth\u200d", "zerowidth"),
        ("bidi \u202eevil\u202c", "bidi evil"),
        ("bell\x07 ring\x00", "bell ring"),
        ("\u200b \u2028 ", None),
        ("", None),
        (None, None),
        ("标题 测试", "标题 测试"),
    ],
)
def test_sanitize_title(raw: str | None, clean: str | None) -> None:
    """Control, zero-width and bidi characters go; whitespace collapses; empty is None."""
    assert sanitize_title(raw) == clean


def test_title_length_limit() -> None:
    """100 characters pass; 101 raise an error that says how long it is."""
    assert sanitize_title("x" * 100) == "x" * 100
    with pytest.raises(SessionStoreError, match="101 characters"):
        sanitize_title("x" * 101)


def test_titles_are_unique(store: SessionStore) -> None:
    """A title held by an unrelated session is refused with Hermes' message."""
    store.create_session("a", title="Plan")
    store.create_session("b")
    with pytest.raises(TitleConflictError, match="Title 'Plan' is already in use by session a"):
        store.set_session_title("b", "  Plan ")
    with pytest.raises(TitleConflictError):
        store.create_session("c", title="Plan")
    assert store.get_session("c") is None
    assert store.get_session_title("b") is None
    with pytest.raises(SessionNotFoundError):
        store.set_session_title("ghost", "x")


def test_title_moves_from_a_compression_ancestor(store: SessionStore) -> None:
    """Setting an ancestor's title on its continuation moves it instead of failing."""
    store.create_session("a", title="Plan", started_at=1.0)
    store.end_session("a", "compression", ended_at=2.0)
    store.create_session("b", parent_session_id="a", lineage_kind="compression", started_at=2.0)
    assert store.set_session_title("b", "Plan") == "Plan"
    assert store.get_session_title("a") is None
    assert store.get_session_title("b") == "Plan"


def test_branch_cannot_take_its_parents_title(store: SessionStore) -> None:
    """A branch is another conversation: its parent's title is not moved to it."""
    store.create_session("a", title="Plan")
    store.create_session("b", parent_session_id="a", lineage_kind="branch")
    with pytest.raises(TitleConflictError):
        store.set_session_title("b", "Plan")


def test_clearing_a_title(store: SessionStore) -> None:
    """A blank title clears it and frees the name."""
    store.create_session("a", title="Plan")
    assert store.set_session_title("a", " \u200b ") is None
    store.create_session("b", title="Plan")
    assert store.get_session_title("b") == "Plan"


def test_next_title_in_lineage(store: SessionStore) -> None:
    """'X' becomes 'X #2', then one above the highest number in use."""
    assert store.get_next_title_in_lineage("Trip") == "Trip #2"
    store.create_session("a", title="Trip")
    store.create_session("b", title="Trip #2")
    store.create_session("c", title="Trip #5")
    store.create_session("d", title="Trip #x")
    store.create_session("e", title="Trip_ #9")
    assert store.get_next_title_in_lineage("Trip") == "Trip #6"
    assert store.get_next_title_in_lineage("Trip #2") == "Trip #6"
    assert len(store.get_next_title_in_lineage("y" * 100)) == 100


def test_resolve_by_title_prefers_newest_number(store: SessionStore) -> None:
    """Resolving 'X' returns the session titled with the highest 'X #N'."""
    store.create_session("a", title="Trip")
    assert store.resolve_session_by_title("Trip") == "a"
    store.create_session("c", title="Trip #3")
    store.create_session("b", title="Trip #2")
    assert store.resolve_session_by_title("Trip") == "c"
    assert store.resolve_session_by_title("Trip #2") == "b"
    assert store.resolve_session_by_title("Nope") is None
