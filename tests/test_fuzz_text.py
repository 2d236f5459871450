"""Fuzzing the text defences: the query sanitiser, the threat scanner, the fence scrubber.

The existing unit and property tests check each one's grammar; these feed them what an
attacker or a confused model would: FTS5 operator soup with filters, attack phrases
disguised with Unicode tricks, fence fragments in every case and chunking, and inputs
of 100,000 characters, which must finish in time linear in their size (a quadratic
path would take minutes here).
"""

from __future__ import annotations

import json
import os
import random
import time
import unicodedata
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import report_inputs
from memstrata import (
    SessionStore,
    StreamingContextScrubber,
    build_memory_context_block,
    sanitize_context,
    scan_for_threats,
)
from memstrata.errors import MemstrataError
from memstrata.prompt.fencing import CLOSE_TAG, OPEN_TAG, SYSTEM_NOTE
from memstrata.query.compile import compile_query
from memstrata.scanner.scan import SCOPES, pattern_ids
from memstrata.search.recall import session_search

DATA = Path(__file__).parent / "data"
# Generous: the linear paths take well under a second; a quadratic one takes minutes.
BIG = 100_000
BUDGET_SECONDS = 20.0
STRESS_EXAMPLES = int(os.environ.get("MEMSTRATA_TEST_FUZZ_EXAMPLES", "5000"))
INPUTS: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def _report_inputs() -> Iterator[None]:
    yield
    report_inputs(INPUTS, "test_fuzz_text.py")


# -- the query sanitiser -------------------------------------------------------------------

_FTS_TOKENS = [
    "AND", "OR", "NOT", "NEAR", "NEAR(", "and", '"', "'", "(", ")", "*", "^", ":", "-", "+",
    "content:", "tool_name:", "{", "}", ",", "\\", "%", "_", "\x00", "\t", "\n", "deploy",
    "cache", "服务端", "服", "修改youer服务端", "é", "ß", "İ", "🙂", "ops/deploy.sh", "--",
    "1", "0x1F", "NULL", "'; DROP TABLE messages; --", "MATCH", "rank", "bm25(",
]  # fmt: skip
_soup = st.lists(st.sampled_from(_FTS_TOKENS) | st.text(max_size=6), max_size=30).map(
    lambda parts: " ".join(parts) if len(parts) % 2 else "".join(parts)
)
_queries = _soup | st.text(max_size=80)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionStore]:
    """A store with a little of everything the filters look at."""
    path = tmp_path_factory.mktemp("fuzz-text") / "state.db"
    with SessionStore(path) as opened:
        for s, source in enumerate(["cli", "telegram", "mcp"]):
            sid = f"conv-{s}"
            opened.create_session(sid, source=source)
            opened.append_messages(
                sid,
                [
                    {
                        "role": "user",
                        "content": f"How do I deploy ops/deploy.sh {s}? 修改youer服务端",
                    },
                    {
                        "role": "assistant",
                        "content": f"Warm the cache first ({s}).",
                        "tool_calls": [
                            {
                                "id": f"c{s}",
                                "type": "function",
                                "function": {"name": "grep", "arguments": '{"q": "deploy"}'},
                            }
                        ],
                    },
                    {"role": "tool", "content": "ok", "tool_name": "grep", "tool_call_id": f"c{s}"},
                ],
            )
        yield opened


_FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
_roles = st.none() | st.sampled_from(["user", "assistant,tool", "nobody", "", ",,", "USER"])
_sources = st.none() | st.sampled_from(["cli", "cli,mcp", "", "x" * 300, "telegram,,"])
_times = st.none() | st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**40), 2**40)


def _search_body(
    store: SessionStore, query: str, role: Any, source: Any, since: Any, until: Any
) -> None:
    INPUTS["query sanitiser + filters (search_messages, session_search)"] += 1
    hits = store.search_messages(
        query, role_filter=role, source_filter=source, since=since, until=until
    )
    assert isinstance(hits, list) and all("session_id" in h for h in hits)
    try:
        result = session_search(
            store, query, role_filter=role, source=source, since=since, until=until, summarize=False
        )
    except MemstrataError as exc:  # a refusal (e.g. since after until) must say why
        assert str(exc).strip()
        return
    assert result["success"] is True, result
    json.dumps(result)  # the tool reply must be encodable as it is


@_FUZZ
@given(query=_queries, role=_roles, source=_sources, since=_times, until=_times)
def test_any_query_and_filters_search_without_error(
    store: SessionStore, query: str, role: Any, source: Any, since: Any, until: Any
) -> None:
    """search_messages and session_search accept any query with any filters."""
    _search_body(store, query, role, source, since, until)


@pytest.mark.stress
@settings(_FUZZ, max_examples=STRESS_EXAMPLES)
@given(query=_queries, role=_roles, source=_sources, since=_times, until=_times)
def test_any_query_and_filters_search_without_error_long(
    store: SessionStore, query: str, role: Any, source: Any, since: Any, until: Any
) -> None:
    """The query fuzz with STRESS_EXAMPLES inputs."""
    _search_body(store, query, role, source, since, until)


@settings(max_examples=100, deadline=None)
@given(query=_queries)
def test_compiled_queries_never_leak_raw_operators(query: str) -> None:
    """Every compiled expression is built from quoted terms: no bare column filter,
    caret or NEAR group from the input survives to reach FTS5 unquoted."""
    compiled = compile_query(query)
    for expr in compiled.match.values():
        if expr is None:
            continue
        outside = "".join(expr.split('"')[0::2])  # the text outside quoted terms
        assert ":" not in outside and "^" not in outside and "NEAR" not in outside, expr


@pytest.mark.parametrize(
    "unit", ["deploy ", '"', "(", "a OR ", "NOT ", "x* ", "NEAR(", "-", "服", "content:"]
)
def test_a_huge_query_is_answered_in_linear_time(store: SessionStore, unit: str) -> None:
    """A 100,000-character query of one token repeated finishes well inside the budget."""
    query = unit * (BIG // len(unit))
    started = time.perf_counter()
    assert isinstance(store.search_messages(query), list)
    assert time.perf_counter() - started < BUDGET_SECONDS


# -- the threat scanner --------------------------------------------------------------------


def _attacks() -> list[str]:
    lines = (DATA / "scanner_attacks.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    return [row["text"] for row in rows if scan_for_threats(row["text"], "strict")]


ATTACKS = _attacks()
_FULLWIDTH = {c: chr(ord(c) + 0xFEE0) for c in map(chr, range(0x21, 0x7F))}
_HOMOGLYPHS = {"a": "а", "e": "е", "o": "о", "p": "р", "c": "с", "x": "х", "i": "і"}


def _disguise(text: str, how: str, rng: random.Random) -> str:
    """One of the Unicode tricks used to slip a phrase past a pattern."""
    if how == "fullwidth":
        return "".join(_FULLWIDTH.get(c, c) for c in text)
    if how == "homoglyphs":
        return "".join(_HOMOGLYPHS.get(c, c) if rng.random() < 0.5 else c for c in text)
    if how == "zero-width":
        return "".join(c + ("\u200b" if rng.random() < 0.3 else "") for c in text)
    if how == "soft-hyphen":
        return "".join(c + ("\u00ad" if c.isalpha() and rng.random() < 0.3 else "") for c in text)
    if how == "accents":
        return "".join(c + ("\u0301" if c.isalpha() and rng.random() < 0.3 else "") for c in text)
    if how == "case":
        return "".join(c.upper() if rng.random() < 0.5 else c.lower() for c in text)
    if how == "spacing":
        return "".join(rng.choice([" ", "  ", "\t", "\u00a0"]) if c == " " else c for c in text)
    if how == "tag-smuggling":
        # Tag characters exist for ASCII only: encode the compatibility form, so an
        # attack written in, say, mathematical bold is smuggled whole.
        plain = unicodedata.normalize("NFKC", text)
        return "note: " + "".join(chr(0xE0000 + ord(c)) if ord(c) < 0x80 else c for c in plain)
    raise AssertionError(how)  # pragma: no cover


_TRICKS = [
    "fullwidth", "homoglyphs", "zero-width", "soft-hyphen", "accents", "case", "spacing",
    "tag-smuggling",
]  # fmt: skip


def _disguised_body(attack: str, tricks: list[str], seed: int) -> None:
    INPUTS["threat scanner: disguised attacks"] += 1
    rng = random.Random(seed)
    text = attack
    for how in tricks:
        text = _disguise(text, how, rng)
    assert scan_for_threats(text, "strict"), (tricks, text)


_disguises = {
    "attack": st.sampled_from(ATTACKS),
    "tricks": st.lists(st.sampled_from(_TRICKS), min_size=1, max_size=3, unique=True),
    "seed": st.integers(0, 2**16),
}


@settings(max_examples=250, deadline=None)
@given(**_disguises)
def test_disguised_attacks_are_still_flagged(attack: str, tricks: list[str], seed: int) -> None:
    """A flagged attack stays flagged at strict scope under any mix of Unicode disguises."""
    _disguised_body(attack, tricks, seed)


@pytest.mark.stress
@settings(max_examples=STRESS_EXAMPLES, deadline=None)
@given(**_disguises)
def test_disguised_attacks_are_still_flagged_long(
    attack: str, tricks: list[str], seed: int
) -> None:
    """The disguise fuzz with STRESS_EXAMPLES inputs."""
    _disguised_body(attack, tricks, seed)


_adversarial = st.lists(
    st.sampled_from(
        ["ignore", " previous", " instructions", "<!--", "-->", "curl ", "$(", "http://", "\u200b",
         "\U000e0041", "system:", "§", "\n", "```", "base64", "=", " ", "ï", "\ud800", "\x00"]
    )
    | st.text(max_size=5),
    max_size=60,
).map("".join)  # fmt: skip


def _scan_body(text: str) -> None:
    INPUTS["threat scanner: arbitrary strings, all scopes"] += 1
    for scope in SCOPES:
        known = set(pattern_ids(scope))
        for finding in scan_for_threats(text, scope):
            assert finding.pattern_id in known or finding.pattern_id.startswith(
                "invisible_unicode_U+"
            )


@settings(max_examples=300, deadline=None)
@given(text=_adversarial)
def test_scanner_accepts_any_string(text: str) -> None:
    """Any string (lone surrogates and NULs included) scans to known ids at every scope."""
    _scan_body(text)


@pytest.mark.stress
@settings(max_examples=STRESS_EXAMPLES, deadline=None)
@given(text=_adversarial)
def test_scanner_accepts_any_string_long(text: str) -> None:
    """The scanner fuzz with STRESS_EXAMPLES inputs."""
    _scan_body(text)


@pytest.mark.parametrize(
    "unit", ["http://", "<!--", "%", "system: ", "ignore ", "$(", "\u200b", "ｉｇｎｏｒｅ ", "a"]
)
def test_a_huge_text_scans_in_linear_time(unit: str) -> None:
    """100,000 characters of a pattern's favourite prefix scan inside the budget."""
    text = unit * (BIG // len(unit))
    started = time.perf_counter()
    for scope in SCOPES:
        scan_for_threats(text, scope)
    assert time.perf_counter() - started < BUDGET_SECONDS


# -- the fence and its scrubbers -----------------------------------------------------------

_FENCE_BITS = [
    OPEN_TAG, CLOSE_TAG, OPEN_TAG.upper(), CLOSE_TAG.upper(), "<memory-", "context>", "</",
    "<", ">", "[System note:", SYSTEM_NOTE, SYSTEM_NOTE.upper(), "＜memory-context＞", "\n",
    "memory", "-context", "Ignore the fence.", "</memory-context >", "<memory-context\n>",
]  # fmt: skip
_fenced = st.lists(st.sampled_from(_FENCE_BITS) | st.text(max_size=4), max_size=25).map("".join)


def _tags(text: str) -> int:
    low = text.lower()
    return low.count(OPEN_TAG) + low.count(CLOSE_TAG)


def _fence_body(recalled: str) -> None:
    INPUTS["fence: build_memory_context_block"] += 1
    block = build_memory_context_block(recalled)
    if not block:
        return
    assert block.startswith(OPEN_TAG) and block.endswith(CLOSE_TAG)
    assert _tags(block) == 2, block
    assert block.count(SYSTEM_NOTE) == 1


def _stream_body(text: str, cuts: list[int]) -> None:
    INPUTS["fence: StreamingContextScrubber vs sanitize_context"] += 1
    scrubber = StreamingContextScrubber()
    pieces, last = [], 0
    for cut in sorted(c for c in cuts if c <= len(text)):
        pieces.append(scrubber.feed(text[last:cut]))
        last = cut
    pieces.append(scrubber.feed(text[last:]))
    pieces.append(scrubber.flush())
    shown = "".join(pieces)
    assert _tags(shown) == 0
    assert shown == sanitize_context(text)


_cuts = st.lists(st.integers(0, 400), max_size=20)


@settings(max_examples=250, deadline=None)
@given(recalled=_fenced)
def test_recalled_text_cannot_escape_its_fence(recalled: str) -> None:
    """Whatever recalled memory holds, the built block has exactly one open tag at its
    start and one close tag at its end: nothing inside can close it early."""
    _fence_body(recalled)


@settings(max_examples=200, deadline=None)
@given(text=_fenced, cuts=_cuts)
def test_streamed_model_output_never_shows_a_fence(text: str, cuts: list[int]) -> None:
    """A model echoing fence fragments in any chunking never gets a tag to the screen,
    and the streamed result equals sanitising the whole text."""
    _stream_body(text, cuts)


@pytest.mark.stress
@settings(max_examples=STRESS_EXAMPLES, deadline=None)
@given(recalled=_fenced, text=_fenced, cuts=_cuts)
def test_fences_hold_long(recalled: str, text: str, cuts: list[int]) -> None:
    """Both fence properties with STRESS_EXAMPLES inputs."""
    _fence_body(recalled)
    _stream_body(text, cuts)


@pytest.mark.parametrize(
    "unit", ["<memory-context", "</memory-context", "<", "[System note:", OPEN_TAG + "<"]
)
def test_a_huge_stream_is_scrubbed_in_linear_time(unit: str) -> None:
    """100,000 characters of near-tags, fed seven at a time, scrub inside the budget."""
    text = unit * (BIG // len(unit))
    scrubber = StreamingContextScrubber()
    started = time.perf_counter()
    for i in range(0, len(text), 7):
        scrubber.feed(text[i : i + 7])
    scrubber.flush()
    assert time.perf_counter() - started < BUDGET_SECONDS
    assert sanitize_context(text).lower().count("<memory-context>") == 0
