"""Regenerate the command reference in docs/cli.md from the commands' own help.

Run `python scripts/gen_cli_docs.py` after changing a command, its options or its help;
`tests/test_cli_docs.py` fails while the reference is stale (`--check` does the same
from the command line). The reference sits between `<!-- generated:cli -->` and
`<!-- /generated:cli -->`; the text around it is written by hand.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from memstrata.cli import cli  # noqa: E402

DOC = ROOT / "docs" / "cli.md"
MARK = "cli"
WIDTH = 100


def _context(command: click.Command, name: str, parent: click.Context | None) -> click.Context:
    # The same context chain a real `memstrata ... --help` builds, so inherited settings
    # (-h as well as --help) show as users see them.
    return command.make_context(
        name,
        [],
        parent=parent,
        resilient_parsing=True,
        terminal_width=WIDTH,
        max_content_width=WIDTH,
    )


def _walk(ctx: click.Context) -> list[tuple[click.Context, click.Command]]:
    group = ctx.command
    assert isinstance(group, click.Group)
    found: list[tuple[click.Context, click.Command]] = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None:
            continue
        sub = _context(command, name, ctx)
        found.append((sub, command))
        if isinstance(command, click.Group):
            found += _walk(sub)
    return found


def reference() -> str:
    """The generated Markdown: the top-level help, then one section per command."""
    top = _context(cli, "memstrata", None)
    parts = ["## Command reference", "", "### `memstrata`", "", "```text", cli.get_help(top)]
    parts += ["```", ""]
    for ctx, command in _walk(top):
        parts += [f"### `{ctx.command_path}`", "", "```text", command.get_help(ctx), "```", ""]
    return "\n".join(parts)


def render(current: str) -> str:
    """``current`` with the generated block replaced by the reference."""
    pattern = re.compile(
        rf"(<!-- generated:{MARK} -->\n).*?(<!-- /generated:{MARK} -->)", re.DOTALL
    )
    if not pattern.search(current):
        raise SystemExit(f"{DOC} lacks the <!-- generated:{MARK} --> markers")
    return pattern.sub(lambda m: m.group(1) + reference() + "\n" + m.group(2), current)


def main(argv: list[str]) -> int:
    current = DOC.read_text(encoding="utf-8")
    fresh = render(current)
    if "--check" in argv:
        if fresh != current:
            print(f"{DOC} is stale: run python scripts/gen_cli_docs.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
