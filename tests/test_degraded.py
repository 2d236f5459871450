"""Optional parts degrade to the core: without numpy (or a loadable embedder) keyword
recall keeps answering, with one clear warning per process."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from memstrata.providers.facts.store import FactStore
from memstrata.search.recall import session_search
from memstrata.store import vectors
from memstrata.store.sqlite.store import SessionStore
from memstrata.store.vectors import cosines, encode_vector


class Concepts:
    """A toy embedder with no numpy inside."""

    name = "concepts"
    dims = 3
    axes: ClassVar[dict[str, int]] = {"oven": 1, "bread": 1, "hoops": 0}

    def embed(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            vector = [0.0, 0.0, 0.3]
            for word in text.lower().split():
                if word in self.axes:
                    vector[self.axes[word]] += 1.0
            out.append(vector)
        return out


@pytest.fixture
def no_numpy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """numpy cannot be imported, and no warning was given yet in this process."""
    monkeypatch.setitem(sys.modules, "numpy", None)  # type: ignore[arg-type]
    monkeypatch.setattr(vectors, "_warned", set())
    yield


def degraded_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "is off:" in r.getMessage()]


def test_cosines_without_numpy_are_empty_and_warn_once(
    no_numpy: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    blobs = {1: encode_vector([1.0, 0.0, 0.0])}
    assert cosines(blobs, [1.0, 0.0, 0.0]) == {}
    assert cosines(blobs, [1.0, 0.0, 0.0]) == {}
    (line,) = degraded_warnings(caplog)
    assert "numpy is not installed" in line and "memstrata[embeddings]" in line


def test_facts_keep_keyword_recall_without_numpy(
    tmp_path: Path, no_numpy: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Vectors are stored, numpy is gone: the keyword match still comes back."""
    caplog.set_level(logging.WARNING)
    with FactStore(tmp_path / "facts.db") as store:
        store.embedder = Concepts()
        store.add("User bakes sourdough bread in a dutch oven every Sunday")
        store.add("User plays basketball on Tuesdays")
        sys.modules.pop("numpy")  # indexing writes bytes only, no numpy needed
        assert store.index_vectors() == 2
        sys.modules["numpy"] = None  # type: ignore[assignment]
        found = store.recall("how long does the sourdough bread need in the oven?")
        assert [f.content for f in found][:1] == [
            "User bakes sourdough bread in a dutch oven every Sunday"
        ]
        assert store.search("basketball")[0].content == "User plays basketball on Tuesdays"
    assert len(degraded_warnings(caplog)) == 1


def test_session_search_without_a_loadable_embedder_is_keyword_only(
    memstrata_home: Path, no_numpy: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    (memstrata_home / "config.toml").write_text('[search]\nembedder = "minilm"\n')
    with SessionStore() as store:
        store.create_session("s1", started_at=1.0)
        store.append_message("s1", "user", "the nginx deadlock came back", timestamp=2.0)
        store.end_session("s1", "user_exit", ended_at=3.0)
        for _ in range(2):
            result = session_search(store, "nginx deadlock", summarize=False)
            assert [r["session_id"] for r in result["results"]] == ["s1"]
    (line,) = degraded_warnings(caplog)
    assert "search.embedder='minilm'" in line and "numpy" in line
