"""Deterministic fact classification: categories, slots and explicit capture."""

from __future__ import annotations

import pytest

from memstrata.providers.facts.classify import classify, explicit_capture, extract_slot


@pytest.mark.parametrize(
    ("text", "slot"),
    [
        ("User's name is Alice Chen and she works as a data engineer", ("name", "Alice Chen")),
        ("My name is Bob.", ("name", "Bob")),
        ("Call me Al", ("name", "Al")),
        ("User works as a data engineer at Acme", ("job", "data engineer")),
        ("User lives in Berlin, Germany", ("location", "Berlin")),
        ("timezone: UTC+8", ("timezone", "UTC+8")),
        ("User is in the Asia/Shanghai timezone", ("timezone", "Asia/Shanghai")),
        ("我叫小明", ("name", "小明")),
        ("我的时区是UTC+8", ("timezone", "UTC+8")),
        ("我住在上海", ("location", "上海")),
        ("User prefers dark roast coffee", None),
        ("the name of the variable is foo", None),
        ("my dog is called Rex", None),
        ("User is called Sam", ("name", "Sam")),
    ],
)
def test_extract_slot(text: str, slot: tuple[str, str] | None) -> None:
    """Fixed English and Chinese phrasings yield a slot; other sentences none."""
    assert extract_slot(text) == slot


@pytest.mark.parametrize(
    ("target", "text", "expected"),
    [
        ("user", "User's name is Alice", ("identity", "user")),
        ("user", "User prefers tabs over spaces", ("preference", "user")),
        ("user", "用户喜欢简洁的回答", ("preference", "user")),
        ("user", "User was born in 1990", ("identity", "user")),
        ("user", "User has two kids", ("preference", "user")),
        ("memory", "Always run ruff before committing", ("note", "agent")),
        ("memory", "Use uv for installs", ("note", "agent")),
        ("memory", "Deployed v2 to production on 2026-11-30", ("episodic", "agent")),
        ("capture", "my dog is called Rex", ("episodic", "user")),
        ("capture", "I am called Sam", ("identity", "user")),
        ("capture", "we shipped the beta on Monday", ("episodic", "user")),
    ],
)
def test_classify(target: str, text: str, expected: tuple[str, str]) -> None:
    """USER.md entries are identity or preference, MEMORY.md notes or episodes."""
    assert classify(target, text) == expected


@pytest.mark.parametrize(
    ("message", "statement"),
    [
        ("remember that I use fish shell. Now help me", "I use fish shell"),
        ("Please remember: my dog is Rex", "my dog is Rex"),
        ("Don't forget that standup moved to 10:30!", "standup moved to 10:30"),
        ("记住：我喜欢喝咖啡。然后帮我写代码", "我喜欢喝咖啡"),
        ("remember that bug? it is back", None),
        ("Remember to buy milk", None),
        ("I remember that day", None),
        ("remember that ok", None),
    ],
)
def test_explicit_capture(message: str, statement: str | None) -> None:
    """Only a message opening with a remember cue yields its first statement."""
    assert explicit_capture(message) == statement
