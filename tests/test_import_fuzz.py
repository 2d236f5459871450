"""Fuzzing every importer's parser: arbitrary bytes and JSON never escape as a traceback.

The contract under test: reading a source either raises ImportDataError (the source as a
whole is unreadable) or yields session records and bad records; iterating the records
never raises; writing them into a real store never raises, and every record is counted
(added, topped up, skipped, or reported bad).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstrata.errors import ImportDataError
from memstrata.ops.importing import chatgpt, claude, hermes, memstrata_jsonl, openai_jsonl
from memstrata.ops.importing.detect import detect_format
from memstrata.ops.importing.idempotence import write_records
from memstrata.ops.importing.records import BadRecord, ParsedSource, SessionRecord
from memstrata.ops.importing.report import ImportReport
from memstrata.store.sqlite.store import SessionStore

HERMES_DB = Path(__file__).parent / "data" / "import" / "hermes_home" / "state.db"
# MEMSTRATA_TEST_FUZZ_EXAMPLES scales every test up for a long hardening run; the
# defaults keep the file quick on a shared machine.
_SCALE = int(os.environ.get("MEMSTRATA_TEST_FUZZ_EXAMPLES", "0") or 0)
_HEALTH = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
FUZZ = settings(max_examples=_SCALE or 120, deadline=None, suppress_health_check=_HEALTH)
# Tests that also write every record into a real SQLite store.
FUZZ_STORE = settings(max_examples=_SCALE or 40, deadline=None, suppress_health_check=_HEALTH)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
stamps = json_values | st.datetimes().map(lambda d: d.isoformat()) | st.floats(0, 2e12)
node_ids = st.sampled_from(["a", "b", "c", "d"])

chatgpt_message = st.fixed_dictionaries(
    {
        "id": node_ids | json_values,
        "author": st.fixed_dictionaries(
            {
                "role": st.sampled_from(["user", "assistant", "tool", "system", 3, None]),
                "name": st.sampled_from(["python", "browser", None]) | json_values,
            }
        )
        | json_values,
        "content": st.fixed_dictionaries(
            {
                "content_type": st.sampled_from(
                    [
                        "text",
                        "multimodal_text",
                        "code",
                        "execution_output",
                        "thoughts",
                        "tether_quote",
                        "tether_browsing_display",
                        "user_editable_context",
                        "reasoning_recap",
                        "other",
                    ]
                ),
                "parts": st.lists(json_values, max_size=3) | json_values,
                "text": json_values,
                "thoughts": st.lists(json_values, max_size=2),
            }
        )
        | json_values,
        "recipient": st.sampled_from(["all", "python", "", None, 1]),
        "create_time": stamps,
        "metadata": st.fixed_dictionaries(
            {
                "is_visually_hidden_from_conversation": st.booleans() | json_values,
                "model_slug": json_values,
            }
        )
        | json_values,
    }
)
chatgpt_node = st.fixed_dictionaries(
    {
        "parent": node_ids | st.none() | json_values,
        "children": st.lists(node_ids, max_size=3) | json_values,
        "message": st.none() | chatgpt_message | json_values,
    }
)
chatgpt_conversation = st.fixed_dictionaries(
    {
        "id": st.text(max_size=40) | json_values,
        "title": json_values,
        "create_time": stamps,
        "mapping": st.dictionaries(node_ids, chatgpt_node, max_size=4) | json_values,
        "current_node": node_ids | json_values,
        "is_archived": json_values,
    }
)
claude_block = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["text", "thinking", "tool_use", "tool_result", "image", 7]),
        "text": json_values,
        "thinking": json_values,
        "name": json_values,
        "input": json_values,
        "id": json_values,
        "tool_use_id": json_values,
        "content": json_values,
    }
)
claude_message = st.fixed_dictionaries(
    {
        "uuid": st.sampled_from(["m1", "m2", "m3"]) | json_values,
        "sender": st.sampled_from(["human", "assistant", "robot", None]),
        "text": json_values,
        "content": st.lists(claude_block, max_size=4) | json_values,
        "parent_message_uuid": st.sampled_from(["m1", "m2", "m3", "root"]) | json_values,
        "created_at": stamps,
        "attachments": st.lists(
            st.fixed_dictionaries({"file_name": json_values, "extracted_content": json_values}),
            max_size=2,
        )
        | json_values,
    }
)
claude_conversation = st.fixed_dictionaries(
    {
        "uuid": st.text(max_size=40) | json_values,
        "name": json_values,
        "created_at": stamps,
        "chat_messages": st.lists(claude_message, max_size=5) | json_values,
    }
)
openai_message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "tool", "system", "", 5]) | json_values,
        "content": json_values,
        "tool_calls": json_values,
        "tool_call_id": json_values,
        "name": json_values,
        "function_call": json_values,
    }
)
openai_line = st.fixed_dictionaries(
    {
        "id": json_values,
        "title": json_values,
        "created": stamps,
        "messages": st.lists(openai_message | json_values, max_size=4) | json_values,
    }
)
memstrata_line = st.fixed_dictionaries(
    {
        "session": st.fixed_dictionaries(
            {
                "id": st.text(max_size=210) | json_values,
                "parent_session_id": st.sampled_from(["p", "q"]) | json_values,
                "lineage_kind": st.sampled_from(["compression", "delegate", "x"]) | json_values,
                "started_at": json_values,
                "ended_at": json_values,
                "end_reason": json_values,
                "title": json_values,
                "model_config": json_values,
                "archived": json_values,
                "input_tokens": json_values,
                "estimated_cost_usd": json_values,
            }
        ),
        "messages": st.lists(
            st.fixed_dictionaries(
                {
                    "role": st.sampled_from(["user", "assistant", ""]) | json_values,
                    "content": json_values,
                    "tool_calls": json_values,
                    "timestamp": json_values,
                    "token_count": json_values,
                    "active": json_values,
                    "compacted": json_values,
                    "api_content": json_values,
                }
            ),
            max_size=4,
        )
        | json_values,
    }
)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("fuzz")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def fuzz_store(fuzz_dir: Path) -> Iterator[SessionStore]:
    with SessionStore(fuzz_dir / "state.db") as store:
        yield store


def _drain(parsed: ParsedSource) -> list[SessionRecord | BadRecord]:
    items = list(parsed.records)
    assert all(isinstance(i, SessionRecord | BadRecord) for i in items)
    return items


def _write_and_count(store: SessionStore, parsed: ParsedSource) -> None:
    """Write every record into the real store; every record must be accounted for."""
    items = _drain(parsed)
    report = ImportReport(parsed.origin, parsed.format)
    write_records(store, items, report, total=parsed.total)
    records = [i for i in items if isinstance(i, SessionRecord)]
    refused = [b for b in report.bad if b.reason.startswith("refused by the store")]
    accounted = (
        report.sessions_added + report.sessions_topped_up + report.sessions_skipped + len(refused)
    )
    assert accounted == len(records)
    bad_items = [i for i in items if isinstance(i, BadRecord)]
    problems = sum(len(r.problems) for r in records)
    assert len(report.bad) == len(bad_items) + problems + len(refused)


def _parse_or_refuse(parse: Any, raw: bytes) -> ParsedSource | None:
    try:
        parsed: ParsedSource = parse(raw, "fuzz.json")
    except ImportDataError as exc:
        assert str(exc)
        return None
    return parsed


@pytest.mark.parametrize("module", [chatgpt, claude, openai_jsonl, memstrata_jsonl])
@FUZZ
@given(raw=st.binary(max_size=300))
def test_arbitrary_bytes(module: Any, raw: bytes) -> None:
    """Random bytes either raise ImportDataError or parse into records without raising."""
    parsed = _parse_or_refuse(module.parse_bytes, raw)
    if parsed is not None:
        _drain(parsed)


@pytest.mark.parametrize("module", [chatgpt, claude])
@FUZZ
@given(data=json_values)
def test_arbitrary_json_documents(module: Any, data: Any) -> None:
    """Any JSON document is refused as a whole or read record by record."""
    parsed = _parse_or_refuse(module.parse_bytes, _dumps(data).encode())
    if parsed is not None:
        _drain(parsed)


@FUZZ_STORE
@given(conversations=st.lists(chatgpt_conversation | json_values, max_size=4))
def test_chatgpt_shaped_input(fuzz_store: SessionStore, conversations: list[Any]) -> None:
    """ChatGPT-shaped conversations with random fields import or are counted as bad."""
    _write_and_count(fuzz_store, chatgpt.parse_data(conversations, "conversations.json"))


@FUZZ_STORE
@given(conversations=st.lists(claude_conversation | json_values, max_size=4))
def test_claude_shaped_input(fuzz_store: SessionStore, conversations: list[Any]) -> None:
    """Claude-shaped conversations with random fields import or are counted as bad."""
    _write_and_count(fuzz_store, claude.parse_data(conversations, "conversations.json"))


@FUZZ_STORE
@given(
    lines=st.lists(
        openai_line.map(_dumps) | json_values.map(_dumps) | st.text(max_size=40), max_size=5
    )
)
def test_openai_jsonl_shaped_input(fuzz_store: SessionStore, lines: list[str]) -> None:
    """OpenAI JSONL lines, valid or not, import or are counted as bad by line."""
    raw = "\n".join(lines).encode("utf-8", "surrogatepass")
    parsed = _parse_or_refuse(openai_jsonl.parse_bytes, raw)
    if parsed is not None:
        _write_and_count(fuzz_store, parsed)


@FUZZ_STORE
@given(lines=st.lists(memstrata_line.map(_dumps) | json_values.map(_dumps), max_size=5))
def test_memstrata_jsonl_shaped_input(fuzz_store: SessionStore, lines: list[str]) -> None:
    """memstrata export lines with random fields import or are counted as bad."""
    raw = "\n".join(lines).encode("utf-8", "surrogatepass")
    parsed = _parse_or_refuse(memstrata_jsonl.parse_bytes, raw)
    if parsed is not None:
        _write_and_count(fuzz_store, parsed)


sqlite_values = (
    st.none()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=30)
    | st.binary(max_size=20)
)
hermes_session = st.fixed_dictionaries(
    {
        "id": st.text(max_size=30) | sqlite_values,
        "source": sqlite_values,
        "title": sqlite_values,
        "started_at": sqlite_values,
        "ended_at": sqlite_values,
        "end_reason": sqlite_values,
        "parent_session_id": sqlite_values,
        "model_config": sqlite_values,
        "archived": sqlite_values,
        "input_tokens": sqlite_values,
        "estimated_cost_usd": sqlite_values,
    }
)
hermes_row = st.fixed_dictionaries(
    {
        "id": sqlite_values,
        "role": st.sampled_from(["user", "assistant", "tool"]) | sqlite_values,
        "content": sqlite_values | st.text(max_size=20).map(lambda t: "\x00json:" + t),
        "tool_calls": sqlite_values | json_values.map(_dumps),
        "timestamp": sqlite_values,
        "token_count": sqlite_values,
        "active": sqlite_values,
        "compacted": sqlite_values,
        "api_content": sqlite_values,
    }
)


@FUZZ_STORE
@given(session=hermes_session, rows=st.lists(hermes_row, max_size=4))
def test_hermes_rows(fuzz_store: SessionStore, session: dict[str, Any], rows: list[Any]) -> None:
    """Hermes rows with any SQLite values convert to a record or a bad record."""
    from memstrata.ops.importing.records import guarded

    item = guarded("state.db", lambda: hermes.session_record(session, rows, "state.db"))
    parsed = ParsedSource("hermes", "state.db", 1, [item])
    _write_and_count(fuzz_store, parsed)


@FUZZ_STORE
@given(
    edits=st.lists(
        st.tuples(st.integers(0, HERMES_DB.stat().st_size - 1), st.binary(min_size=1, max_size=8)),
        min_size=1,
        max_size=6,
    ),
    cut=st.none() | st.integers(0, HERMES_DB.stat().st_size),
)
def test_hermes_damaged_database(
    fuzz_store: SessionStore, fuzz_dir: Path, edits: list[tuple[int, bytes]], cut: int | None
) -> None:
    """A state.db with overwritten or cut pages is refused whole or read session by session."""
    data = bytearray(HERMES_DB.read_bytes())
    for offset, chunk in edits:
        data[offset : offset + len(chunk)] = chunk
    if cut is not None:
        del data[cut:]
    path = fuzz_dir / "damaged.db"
    path.write_bytes(bytes(data))
    try:
        parsed = hermes.read(path)
    except ImportDataError as exc:
        assert str(exc)
        return
    _write_and_count(fuzz_store, parsed)


@FUZZ
@given(raw=st.binary(max_size=200), suffix=st.sampled_from([".json", ".jsonl", ".db", ""]))
def test_detect_format_never_crashes(fuzz_dir: Path, raw: bytes, suffix: str) -> None:
    """Format detection on any bytes names a format or raises ImportDataError."""
    path = fuzz_dir / f"detect{suffix}"
    path.write_bytes(raw)
    try:
        assert detect_format(path) in ("hermes", "chatgpt", "claude", "openai", "memstrata")
    except ImportDataError as exc:
        assert "--format" in str(exc)
