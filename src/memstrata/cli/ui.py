"""``memstrata ui``: the local web inspector of memory, sessions and recall."""

from __future__ import annotations

import click

from memstrata.cli.common import CONTEXT_SETTINGS
from memstrata.cli.mcp import with_store
from memstrata.config import Config


@click.command("ui", context_settings=CONTEXT_SETTINGS)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Loopback address to listen on (127.0.0.1 or ::1; nothing else is accepted).",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="Port (0 picks a free one).",
)
@click.option("--no-open", is_flag=True, help="Print the URL; do not open a browser.")
@click.option(
    "--dsn",
    default=None,
    help="PostgreSQL DSN for sessions and memory (overrides store.dsn; needs memstrata[postgres]).",
)
@click.option("--namespace", default=None, help="PostgreSQL tenant (overrides store.namespace).")
def ui_command(host: str, port: int, no_open: bool, dsn: str | None, namespace: str | None) -> None:
    """Open a local web inspector of memory, sessions, recall, curation and health.

    Serves this machine only (loopback), with a new random token in the URL it prints
    and opens; the pages work without JavaScript. Every change goes through the same
    calls as the CLI (memory add/replace/remove/undo, approve/reject, curate, forget).
    Needs memstrata[ui].

    \b
    Example:
        memstrata ui                      # opens http://127.0.0.1:<port>/?token=...
        memstrata ui --port 8766 --no-open
    """
    from memstrata.ui import require_ui
    from memstrata.ui.server import run

    require_ui()
    config = Config.load()
    if dsn is not None or namespace is not None:
        config = with_store(config, dsn, namespace)
    run(config, host=host, port=port, open_browser=not no_open)
