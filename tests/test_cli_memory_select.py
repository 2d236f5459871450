"""Saying which memory entry: list numbers, loose case/width matching, near-duplicates."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from memstrata.cli import cli
from memstrata.errors import DuplicateEntryError
from memstrata.memory.files import FileMemory
from memstrata.memory.format import Usage


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["memory", *args])
    return result.exit_code, result.output


@pytest.fixture
def two_entries(memstrata_home: Path) -> FileMemory:
    memory = FileMemory()
    memory.add("memory", "Born in 1992")
    memory.add("memory", "Project uses pnpm 9 workspaces")
    return memory


def entries() -> list[str]:
    return FileMemory().entries("memory")


@pytest.mark.parametrize("form", [["#2"], ["--index", "2"], ["-n", "2"]], ids=" ".join)
def test_remove_by_list_number(two_entries: FileMemory, form: list[str]) -> None:
    code, out = run("remove", *form)
    assert code == 0, out
    assert entries() == ["Born in 1992"]


def test_a_bare_number_that_is_also_text_is_refused_with_both_readings(
    two_entries: FileMemory,
) -> None:
    """`2` is list number 2 and also occurs in "Born in 1992": nothing is removed."""
    code, out = run("remove", "2")
    assert code == 1
    assert "as list number 2: Project uses pnpm 9 workspaces" in out
    assert "as text it occurs in: Born in 1992" in out
    assert "--index 2" in out
    assert len(entries()) == 2


def test_a_bare_number_with_one_reading_is_used(two_entries: FileMemory) -> None:
    code, out = run("remove", "1992")  # no entry #1992: only the text reading exists
    assert code == 0, out
    assert entries() == ["Project uses pnpm 9 workspaces"]


def test_a_number_past_the_end_says_how_many_there_are(two_entries: FileMemory) -> None:
    code, out = run("remove", "--index", "5")
    assert code == 1 and "no entry #5: it holds 2" in out
    assert len(entries()) == 2


def test_replace_takes_a_list_number(two_entries: FileMemory) -> None:
    code, out = run("replace", "#1", "Born in Kyoto in 1992")
    assert code == 0, out
    assert entries()[0] == "Born in Kyoto in 1992"


@pytest.mark.parametrize("needle", ["PNPM", "ｐｎｐｍ", "PROJECT USES"])
def test_matching_ignores_case_and_width_when_one_entry_matches(
    two_entries: FileMemory, needle: str
) -> None:
    code, out = run("remove", needle)
    assert code == 0, out
    assert entries() == ["Born in 1992"]


def test_loose_matching_never_picks_between_several(memstrata_home: Path) -> None:
    memory = FileMemory()
    memory.add("memory", "Uses PNPM at work")
    memory.add("memory", "Uses pnpm at home")
    code, out = run("remove", "Pnpm")
    assert code == 1 and "Pnpm" in out
    assert len(entries()) == 2


@pytest.mark.parametrize(
    "variant",
    [
        "project uses PNPM 9 workspaces!",
        "Project  uses pnpm 9 workspaces.",
        "ＰＲＯＪＥＣＴ uses pnpm 9 workspaces",
    ],
)
def test_add_refuses_a_normalised_near_duplicate(two_entries: FileMemory, variant: str) -> None:
    code, out = run("add", variant)
    assert code == 1
    assert "'Project uses pnpm 9 workspaces' already says this" in out
    assert len(entries()) == 2
    with pytest.raises(DuplicateEntryError) as caught:
        FileMemory().add("memory", variant)
    assert caught.value.details["existing"] == "Project uses pnpm 9 workspaces"


def test_chinese_near_duplicate_is_refused(memstrata_home: Path) -> None:
    memory = FileMemory()
    memory.add("user", "用户喜欢简洁的回答")
    with pytest.raises(DuplicateEntryError):
        memory.add("user", "用户喜欢简洁的回答。")
    assert memory.entries("user") == ["用户喜欢简洁的回答"]


def test_over_budget_usage_says_how_far_over() -> None:
    assert str(Usage(107, 50)) == "214% — 107/50 chars, 57 over the limit"
    assert str(Usage(25, 50)) == "50% — 25/50 chars"
