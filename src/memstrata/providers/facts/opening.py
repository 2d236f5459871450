"""Open the facts store the configuration names: ``facts.db`` by default, the PostgreSQL
tenant of the session store when ``store.dsn`` is set.

Every reader and writer of facts (the ``facts`` provider, the ``remember`` tool and the
built-in provider's recall of it, the curator, the CLI) opens its store here, so one
setting moves them together: with a DSN, two machines of one user share the facts as
they share the sessions.

    facts = open_facts()          # FactStore on $MEMSTRATA_HOME/facts.db, or the tenant's
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from memstrata.backends import postgres_dsn
from memstrata.config import Config, ensure_home
from memstrata.scanner.redaction import redact_dsn

if TYPE_CHECKING:
    from memstrata.providers.facts.contract import FactStoreContract
    from memstrata.search.embedders import Embedder
    from memstrata.store.sqlite.database import Durability

__all__ = ["facts_key", "open_facts"]


def open_facts(
    config: Config | None = None,
    *,
    home: Path | None = None,
    embedder: Embedder | None = None,
    **options: Any,
) -> FactStoreContract:
    """The facts store ``config`` names (default: the home's configuration).

    Without ``store.dsn``: the SQLite file ``<home>/facts.db`` (created if needed), with
    the configured durability and busy timeout. With it: the facts of ``store.namespace``
    in that database. ``options`` go to the store's constructor.
    """
    cfg = config if config is not None else Config.load(home)
    dsn = postgres_dsn(cfg)
    if dsn is None:
        from memstrata.providers.facts.store import FACTS_FILENAME, FactStore

        folder = ensure_home(home if home is not None else cfg.home)
        options.setdefault("durability", cast("Durability", str(cfg.get("store.durability"))))
        options.setdefault("busy_timeout_ms", int(cfg.get("store.busy_timeout_ms")))
        facts: FactStoreContract = FactStore(folder / FACTS_FILENAME, embedder=embedder, **options)
        facts.typos = bool(cfg.get("search.typos"))
        return facts
    try:
        from memstrata.providers.facts.postgres import PostgresFactStore
    except ImportError as exc:
        from memstrata.errors import ConfigError

        raise ConfigError(
            "store.dsn names a PostgreSQL server, but the PostgreSQL driver is not installed: "
            "pip install 'memstrata[postgres]'."
        ) from exc
    store: FactStoreContract = PostgresFactStore(
        dsn, namespace=str(cfg.get("store.namespace")), config=cfg, embedder=embedder, **options
    )
    store.typos = bool(cfg.get("search.typos"))
    return store


def facts_key(config: Config, home: Path | None = None) -> str:
    """Which facts ``config`` names, as a string, without opening them: the absolute path
    of the file, or the DSN (password hidden) and the tenant."""
    dsn = postgres_dsn(config)
    if dsn is None:
        from memstrata.providers.facts.store import FACTS_FILENAME

        return str((Path(home if home is not None else config.home) / FACTS_FILENAME).absolute())
    return f"{redact_dsn(dsn)} (namespace {str(config.get('store.namespace'))!r})"
