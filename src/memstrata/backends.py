"""Pick the storage backend from the configuration: SQLite by default, PostgreSQL on a DSN.

The CLI, the MCP server and the agent open their session store and curated memory here,
so that one setting (``store.dsn``) moves a whole deployment to PostgreSQL:

    store = open_store()          # SessionStore on $MEMSTRATA_HOME/state.db
    memory = open_memory()        # FileMemory on $MEMSTRATA_HOME/memories/

With ``store.dsn = "postgresql://..."`` the same calls return the PostgreSQL classes
(scoped to ``store.namespace``), which keep the same public methods.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from memstrata.config import Config
from memstrata.errors import ConfigError
from memstrata.scanner.redaction import redact_dsn

if TYPE_CHECKING:
    from memstrata.memory.core import CuratedMemory
    from memstrata.store.contract import SessionStoreContract

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
SQLITE_ONLY_OPTIONS = ("verify_indexes", "readonly")


def postgres_dsn(config: Config) -> str | None:
    """The configured PostgreSQL DSN, or None for SQLite; a malformed DSN is refused."""
    dsn = str(config.get("store.dsn")).strip()
    if not dsn:
        return None
    if not dsn.startswith(POSTGRES_SCHEMES):
        raise ConfigError(
            f"store.dsn must start with postgresql:// (got {redact_dsn(dsn)[:60]!r}); "
            "set it to '' to use the SQLite state.db in the home folder."
        )
    return dsn


def _postgres() -> Any:
    try:
        return importlib.import_module("memstrata.store.postgres")
    except ImportError as exc:
        raise ConfigError(
            "store.dsn names a PostgreSQL server, but the PostgreSQL driver is not installed: "
            "pip install 'memstrata[postgres]'."
        ) from exc


def open_store(config: Config | None = None, **options: Any) -> SessionStoreContract:
    """The session store the configuration names (options go to the constructor)."""
    cfg = config if config is not None else Config.load()
    dsn = postgres_dsn(cfg)
    if dsn is None:
        from memstrata.store.sqlite.store import SessionStore

        return SessionStore(config=cfg, **options)
    # Options about the SQLite file (its index check on open, read-only mode) do not
    # apply to a server: PostgreSQL checks its indexes itself and the CLI's read paths
    # do not write.
    for name in SQLITE_ONLY_OPTIONS:
        options.pop(name, None)
    store: SessionStoreContract = _postgres().PostgresSessionStore(
        dsn, namespace=str(cfg.get("store.namespace")), config=cfg, **options
    )
    return store


def open_memory(config: Config | None = None, **options: Any) -> CuratedMemory:
    """The curated memory the configuration names (MEMORY.md/USER.md or PostgreSQL rows).

    Options go to the constructor; both backends take ``actor`` (who writes made outside
    ``attributed`` are attributed to) and the limit overrides.
    """
    cfg = config if config is not None else Config.load()
    dsn = postgres_dsn(cfg)
    if dsn is None:
        from memstrata.memory.files import FileMemory

        return FileMemory(cfg.home, config=cfg, **options)
    memory: CuratedMemory = _postgres().PostgresMemory(
        dsn, namespace=str(cfg.get("store.namespace")), config=cfg, **options
    )
    return memory
