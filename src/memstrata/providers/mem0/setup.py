"""Setting mem0 up: its config from memstrata's, and importing it safely.

Kept apart from :mod:`memstrata.providers.mem0.provider` so the mapping can be read (and tested)
on its own. Nothing here imports mem0 except :func:`import_mem0`, which first turns
mem0's anonymous telemetry off, keeps its id file out of ``~/.mem0`` and stops it from
pip-installing a spaCy model at the first ``add``.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from memstrata.config import Config
from memstrata.errors import MemstrataError, ProviderError
from memstrata.llm.settings import LLMSettings, resolve_settings

logger = logging.getLogger(__name__)

INSTALL_HINT: Final = "pip install 'memstrata[mem0]'"
MEM0_DIRNAME: Final = "mem0"
COLLECTION: Final = "memstrata"
HISTORY_FILENAME: Final = "history.db"
# The key sent to a local server that needs none (the OpenAI SDK insists on one).
PLACEHOLDER_KEY: Final = "unused"


def mem0_installed() -> bool:
    """True if the ``mem0ai`` package can be imported (checked without importing it)."""
    return _spec_exists("mem0")


def normalize_user_id(raw: str) -> str:
    """A mem0 user id: stripped, whitespace runs replaced by ``_`` (mem0 rejects spaces)."""
    return re.sub(r"\s+", "_", raw.strip())


def llm_settings(config: Config) -> LLMSettings:
    """The ``[llm]`` settings mem0 runs on: the ``curator`` task's model and endpoint.

    Raises :class:`ProviderError` naming the setting to fix when the endpoint, the model
    or the embedding model is missing.
    """
    try:
        settings = resolve_settings("curator", config)
    except MemstrataError as exc:
        raise ProviderError(f"mem0 needs a model for fact extraction: {exc}") from None
    if settings.provider != "openai":
        raise ProviderError(
            f"mem0 runs against an OpenAI-compatible endpoint, but llm.provider is "
            f"{settings.provider!r}. Set `memstrata config set llm.provider openai` and "
            "point llm.base_url at the endpoint."
        )
    if not settings.embedding_model:
        raise ProviderError(
            "mem0 needs an embedding model at the same endpoint. Set one with "
            "`memstrata config set llm.embedding_model text-embedding-3-small` and make "
            "mem0.embedding_dims its vector size."
        )
    if not settings.base_url and not settings.api_key:
        raise ProviderError(
            "mem0 has no endpoint: set llm.base_url (or OPENAI_BASE_URL) to an "
            "OpenAI-compatible server, or llm.api_key (OPENAI_API_KEY) for api.openai.com."
        )
    return settings


def mem0_config(config: Config, home: Path | None = None) -> dict[str, Any]:
    """The ``Memory.from_config`` dictionary for ``config`` (``[llm]`` and ``[mem0]``).

    Raises :class:`ProviderError` naming the setting to fix when the LLM endpoint, the
    model or the embedding model is missing. Touches neither the network nor the disk.
    """
    settings = llm_settings(config)
    section = config.section("mem0")
    dims = int(section["embedding_dims"])
    if dims < 1:
        raise ProviderError(
            f"mem0.embedding_dims must be the embedding model's vector size, got {dims}."
        )
    root = (home if home is not None else config.home) / MEM0_DIRNAME
    qdrant_path = str(section["qdrant_path"]) or str(root / "qdrant")
    vector_store: dict[str, Any] = {
        "collection_name": COLLECTION,
        "embedding_model_dims": dims,
        # mem0's config check wants a path even when a URL is given; the URL wins.
        "path": qdrant_path,
        "on_disk": True,
    }
    if str(section["qdrant_url"]):
        vector_store["url"] = str(section["qdrant_url"])
        vector_store["api_key"] = str(section["qdrant_api_key"]) or None
    api_key = settings.api_key or PLACEHOLDER_KEY
    base_url = settings.base_url or None
    return {
        "llm": {
            "provider": "openai",
            "config": {"model": settings.model, "api_key": api_key, "openai_base_url": base_url},
        },
        # No embedding_dims here on purpose: mem0 would then send `dimensions=` with every
        # request, which servers of fixed-size models (vLLM, llama.cpp) reject.
        "embedder": {
            "provider": "openai",
            "config": {
                "model": settings.embedding_model,
                "api_key": api_key,
                "openai_base_url": base_url,
            },
        },
        "vector_store": {"provider": "qdrant", "config": vector_store},
        "history_db_path": str(root / HISTORY_FILENAME),
    }


def import_mem0(mem0_dir: Path) -> Any:
    """Import mem0 with its telemetry off and its config file under ``mem0_dir``.

    mem0 reads ``MEM0_TELEMETRY`` and ``MEM0_DIR`` once, when it is first imported, and
    would otherwise send usage events to PostHog and write ``~/.mem0``. Both are
    process-wide switches, so they are set here, before the import.
    """
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ.setdefault("MEM0_DIR", str(mem0_dir))
    try:
        module = importlib.import_module("mem0")
    except ImportError as exc:
        raise ProviderError(
            f"The mem0 provider needs the mem0ai package ({exc}). Install it with "
            f"{INSTALL_HINT}, or choose another provider with "
            '`memstrata config set memory.provider ""`.'
        ) from exc
    _no_model_downloads()
    # If something imported mem0 before us with telemetry on, switch it off in place:
    # mem0 checks these module attributes on every call.
    for name in ("mem0.memory.telemetry", "mem0.memory.main"):
        loaded = sys.modules.get(name)
        if loaded is not None and getattr(loaded, "MEM0_TELEMETRY", False):
            setattr(loaded, "MEM0_TELEMETRY", False)  # noqa: B010 - a module global
    return module


def _no_model_downloads() -> None:
    """Keep mem0 from installing a spaCy model over the network at the first add.

    With spaCy present but ``en_core_web_sm`` missing, mem0 runs ``spacy download``
    (a pip install) from inside ``Memory.add``. Marking the model as failed makes mem0
    do what it does without spaCy: plain-text keyword scoring, no entity boosts.
    """
    if not _spec_exists("spacy") or _spec_exists("en_core_web_sm"):
        return
    models: Any = importlib.import_module("mem0.utils.spacy_models")
    if models._nlp_full is None and models._nlp_lemma is None:
        models._load_failed_full = True
        models._load_failed_lemma = True
        logger.info(
            "mem0: spaCy is installed without en_core_web_sm; entity and lemma scoring are "
            "off (python -m spacy download en_core_web_sm turns them on)."
        )


def _spec_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def folder_locked(folder: Path) -> bool:
    """True if another Qdrant client holds the embedded store's lock file.

    Checked before mem0 opens the store because Qdrant, refused the lock, raises without
    closing the lock file it opened (a resource leak on every failed open). Uses the
    same lock library as Qdrant, so the check means what Qdrant's own lock means.
    """
    lock_path = folder / ".lock"
    if not lock_path.is_file():
        return False
    portalocker = importlib.import_module("portalocker")
    with open(lock_path, "r+") as handle:
        try:
            portalocker.lock(
                handle, portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING
            )
        except portalocker.exceptions.LockException:
            return True
        portalocker.unlock(handle)
    return False


def qdrant_server_client(store: Mapping[str, Any], timeout: float) -> Any:
    """A client for the Qdrant server at ``store["url"]``.

    Built here rather than by mem0 to skip Qdrant's version check, a background thread
    that only warns, and to bound every request by ``llm.timeout``.
    """
    qdrant_client = importlib.import_module("qdrant_client")
    return qdrant_client.QdrantClient(
        url=store["url"],
        api_key=store.get("api_key"),
        timeout=max(1, int(timeout)),
        check_compatibility=False,
    )


def describe_error(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if type(exc).__name__ not in text else text


def error_hint(exc: BaseException, base_url: str) -> str:
    """The next step for a failed mem0 call, guessed from the exception."""
    text = f"{type(exc).__name__} {exc}".lower()
    if "dimension" in text or "vector size" in text or "shapes" in text:
        return (
            " Make mem0.embedding_dims the vector size of llm.embedding_model; a store "
            "created with another size needs a new mem0.qdrant_path."
        )
    if "connect" in text or "timeout" in text or "timed out" in text:
        where = base_url or "api.openai.com"
        return f" Is the endpoint at {where} reachable? (llm.base_url, llm.timeout)"
    if "auth" in text or "401" in text or "api key" in text:
        return " Check llm.api_key (or OPENAI_API_KEY)."
    return " See `memstrata help mem0`."
