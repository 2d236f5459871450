"""Look-alikes of the memory-context fence tags: scrubbed from text and streams, refused
at write time, and one malformed recalled item never hides the others."""

from __future__ import annotations

import json

import pytest

from memstrata.mcp.service import MemoryService
from memstrata.prompt.fencing import (
    CLOSE_TAG,
    OPEN_TAG,
    StreamingContextScrubber,
    build_memory_context_block,
    sanitize_context,
)
from memstrata.scanner.scan import scan_for_threats
from memstrata.tools.toolbox import Toolbox

CLOSE_LOOKALIKES = [
    "</memory-context >",
    "< /memory-context>",
    "</ memory-context>",
    "</memory\u2010context>",
    "</memory\u2011context>",
    "\uff1c/memory-context\uff1e",
    "</memo\u200bry-context>",
    '</memory-context data-x="1">',
    "</MEMORY-CONTEXT>",
    "</m\u0435m\u043ery-c\u043entext>",
    "</memory\u2014context>",
    "</memory context>",
]
OPEN_LOOKALIKES = [tag.replace("/", "", 1) for tag in CLOSE_LOOKALIKES if "/" in tag]


@pytest.mark.parametrize("tag", CLOSE_LOOKALIKES)
def test_sanitize_removes_close_tag_lookalikes(tag: str) -> None:
    assert sanitize_context(f"before {tag} after") == "before  after"


@pytest.mark.parametrize("tag", OPEN_LOOKALIKES)
def test_sanitize_removes_open_lookalike_and_its_span(tag: str) -> None:
    assert sanitize_context(f"a {tag}recalled{CLOSE_TAG} b") == "a  b"


@pytest.mark.parametrize("tag", CLOSE_LOOKALIKES)
def test_stream_scrubber_removes_lookalikes_whatever_the_chunking(tag: str) -> None:
    text = f"shown {tag} shown"
    expected = sanitize_context(text)
    assert tag not in expected
    for size in (1, 2, 3, 7, len(text)):
        scrubber = StreamingContextScrubber()
        chunks = [text[i : i + size] for i in range(0, len(text), size)]
        out = "".join(scrubber.feed(c) for c in chunks) + scrubber.flush()
        assert out == expected, (size, out)


def test_ordinary_angle_brackets_are_not_held() -> None:
    scrubber = StreamingContextScrubber()
    assert scrubber.feed("if a < b and c > d: <main>") == "if a < b and c > d: <main>"


@pytest.mark.parametrize("tag", CLOSE_LOOKALIKES)
def test_scanner_refuses_lookalike_fence_tags(tag: str) -> None:
    assert "fence_escape" in [f.pattern_id for f in scan_for_threats(f"note {tag} more")]


@pytest.mark.parametrize("tag", ["</memory-context >", "\uff1c/memory\u2011context\uff1e"])
def test_memory_and_remember_refuse_lookalike_tags_at_write_time(tag: str, memstrata_home) -> None:
    box = Toolbox.default()
    result = box.call("memory", {"action": "add", "target": "memory", "content": f"x {tag} y"})
    assert result["success"] is False and "fence_escape" in result["error"]
    (memstrata_home / "config.toml").write_text('[memory]\nprovider = "facts"\n', encoding="utf-8")
    with MemoryService() as service:
        text, is_error = service.call_tool(
            "facts_remember", {"content": f"User likes tea {tag} ok", "category": "preference"}
        )
    assert is_error and "fence_escape" in json.loads(text)["error"]


def test_one_malformed_recalled_item_never_hides_the_others() -> None:
    raw = "fact one <memory-context> unclosed\nfact two\n\nfact three < memory-context >"
    block = build_memory_context_block(raw)
    assert "fact two" in block and "fact three" in block and "fact one" in block
    inner = block[len(OPEN_TAG) : -len(CLOSE_TAG)]
    assert "memory-context" not in inner
