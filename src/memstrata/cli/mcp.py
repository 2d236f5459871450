"""``memstrata mcp``: serve the memory tools to MCP clients (stdio or streamable HTTP)."""

from __future__ import annotations

import dataclasses

import click

from memstrata.cli.common import CONTEXT_SETTINGS
from memstrata.config import Config


def with_store(config: Config, dsn: str | None, namespace: str | None) -> Config:
    """``config`` with ``store.dsn`` / ``store.namespace`` taken from the command line."""
    store = dict(config.values["store"])
    if dsn is not None:
        store["dsn"] = dsn
    if namespace is not None:
        store["namespace"] = namespace
    return dataclasses.replace(config, values={**config.values, "store": store})


@click.group("mcp", context_settings=CONTEXT_SETTINGS, invoke_without_command=True)
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
@click.pass_context
def mcp_command(
    ctx: click.Context,
    transport: str,
    host: str | None,
    port: int | None,
    dsn: str | None,
    namespace: str | None,
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
        memstrata mcp token                             # the bearer token HTTP clients send

    Any --host other than loopback needs a bearer token: create it first with
    `memstrata mcp token`.
    """
    if ctx.invoked_subcommand is not None:
        if (transport, host, port, dsn, namespace) != ("stdio", None, None, None, None):
            raise click.UsageError(
                f"`memstrata mcp {ctx.invoked_subcommand}` takes no server options "
                "(--transport, --host, --port, --dsn, --namespace): drop them."
            )
        return
    from memstrata.mcp.server import require_mcp, run
    from memstrata.mcp.service import MemoryService

    require_mcp()
    if transport == "stdio" and (host is not None or port is not None):
        raise click.UsageError("--host and --port apply to --transport http only.")
    config = Config.load()
    if dsn is not None or namespace is not None:
        config = with_store(config, dsn, namespace)
    service = MemoryService(config)
    try:
        run(service, "http" if transport == "http" else "stdio", host=host, port=port)
    finally:
        service.close()


@mcp_command.command("token")
@click.option("--rotate", is_flag=True, help="Replace the token (clients need the new one).")
def mcp_token(rotate: bool) -> None:
    """Print the bearer token HTTP clients send (created 0600 on first use).

    Clients send it as 'Authorization: Bearer <token>'. It is required on every
    non-loopback --host, and on loopback when mcp.require_token is on.

    \b
    Example:
        memstrata mcp token
        memstrata mcp token --rotate
    """
    from memstrata.mcp.token import load_or_create_token

    click.echo(load_or_create_token(Config.load(), rotate=rotate))
