"""``memstrata mcp``: serve the memory tools to MCP clients (stdio or streamable HTTP)."""

from __future__ import annotations

import dataclasses

import click

from memstrata.cli.common import CONTEXT_SETTINGS
from memstrata.config import Config


def _with_store(config: Config, dsn: str | None, namespace: str | None) -> Config:
    """``config`` with ``store.dsn`` / ``store.namespace`` taken from the command line."""
    store = dict(config.values["store"])
    if dsn is not None:
        store["dsn"] = dsn
    if namespace is not None:
        store["namespace"] = namespace
    return dataclasses.replace(config, values={**config.values, "store": store})


@click.command("mcp", context_settings=CONTEXT_SETTINGS)
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default="stdio",
    show_default=True,
    help="stdio: the client starts this process; http: streamable HTTP for many clients.",
)
@click.option("--host", default=None, help="HTTP address to listen on [default: mcp.host].")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help="HTTP port (0 picks a free one) [default: mcp.port].",
)
@click.option(
    "--dsn",
    default=None,
    help="PostgreSQL DSN for sessions and memory (overrides store.dsn; needs memstrata[postgres]).",
)
@click.option("--namespace", default=None, help="PostgreSQL tenant (overrides store.namespace).")
def mcp_command(
    transport: str, host: str | None, port: int | None, dsn: str | None, namespace: str | None
) -> None:
    """Serve the memory and session_search tools to MCP clients.

    Tools: memory, session_search and the tools of the provider named by
    memory.provider. Resources: the memory snapshot, recent sessions, one session.
    When the client supports sampling, search summaries use the client's own model.
    Several server processes may share one home or one DSN.

    \b
    Example:
        memstrata mcp                                   # stdio, for Claude Desktop or Cursor
        memstrata mcp --transport http --port 8765      # http://127.0.0.1:8765/mcp
        memstrata mcp --transport http --dsn postgresql://127.0.0.1:5432/memstrata
    """
    from memstrata.mcp.server import require_mcp, run
    from memstrata.mcp.service import MemoryService

    require_mcp()
    if transport == "stdio" and (host is not None or port is not None):
        raise click.UsageError("--host and --port apply to --transport http only.")
    config = Config.load()
    if dsn is not None or namespace is not None:
        config = _with_store(config, dsn, namespace)
    service = MemoryService(config)
    try:
        run(service, "http" if transport == "http" else "stdio", host=host, port=port)
    finally:
        service.close()
