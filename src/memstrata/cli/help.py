"""``memstrata help [TOPIC]``: the documentation pages, shipped inside the package.

A pip install has no ``docs/`` folder to open, so errors name a page as
``memstrata help TOPIC`` (or by its URL) and this command prints it from the package.
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable

import click

from memstrata.cli.common import CONTEXT_SETTINGS

__all__ = ["DOCS_URL", "doc_pages", "help_command", "topic_hint"]

DOCS_URL = "https://github.com/memstrata/memstrata/tree/main/docs"


def doc_pages() -> dict[str, Traversable]:
    """Topic name (the page's file name without ``.md``) -> the page."""
    folder = resources.files("memstrata") / "docs"
    if not folder.is_dir():
        return {}
    return {
        page.name.removesuffix(".md"): page
        for page in folder.iterdir()
        if page.name.endswith(".md") and page.is_file()
    }


def topic_hint(topic: str) -> str:
    """How an error message points at a page: the command, and the URL."""
    return f"`memstrata help {topic}` ({DOCS_URL}/{topic}.md)"


def _title(page: Traversable) -> str:
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return ""


@click.command("help", context_settings=CONTEXT_SETTINGS)
@click.argument("topic", required=False)
@click.pass_context
def help_command(ctx: click.Context, topic: str | None) -> None:
    """Print a documentation page; without TOPIC, list the topics.

    TOPIC may also be a command (`memstrata help sessions` shows its --help when no page
    has that name).

    \b
    Example:
        memstrata help
        memstrata help postgres
    """
    pages = doc_pages()
    if topic is None:
        width = max((len(name) for name in pages), default=0)
        for name in sorted(pages):
            click.echo(f"  {name:<{width}}  {_title(pages[name])}")
        click.echo(f"\nRead one with `memstrata help TOPIC`; online: {DOCS_URL}")
        return
    key = topic.strip().lower().removesuffix(".md")
    if key in pages:
        click.echo_via_pager(pages[key].read_text(encoding="utf-8"))
        return
    parent = ctx.parent
    group = parent.command if parent is not None else None
    if isinstance(group, click.Group):
        command = group.get_command(ctx, key)
        if command is not None and parent is not None:
            with click.Context(command, info_name=key, parent=parent) as sub:
                click.echo(command.get_help(sub))
            return
    raise click.UsageError(
        f"No help topic {topic!r}. Topics: {', '.join(sorted(pages))}. "
        f"All pages are also at {DOCS_URL}."
    )
