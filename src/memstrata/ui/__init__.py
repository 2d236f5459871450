"""``memstrata ui``: a local web inspector over one home (or one PostgreSQL namespace).

Server-rendered pages (Jinja2 on Starlette, served by uvicorn; ``pip install
'memstrata[ui]'``) that read without JavaScript: curated memory with its history,
pending writes and facts; sessions with their transcripts and lineage; a recall
playground; the curator's dry run; forget with a preview; the doctor's findings.

* :mod:`memstrata.ui.views` gathers what each page shows, through the same library calls
  the CLI makes (no second implementation of any write).
* :mod:`memstrata.ui.app` is the web app: routes, templates, the door (the MCP server's
  Host and Origin rules, then the URL token and the form token).
* :mod:`memstrata.ui.server` binds loopback, prints the URL and serves it.
"""

from __future__ import annotations

__all__ = ["INSTALL_HINT", "require_ui"]

INSTALL_HINT = "pip install 'memstrata[ui]'"


def require_ui() -> None:
    """Raise :class:`~memstrata.errors.ConfigError` with the install line when the web
    stack (Starlette, uvicorn, Jinja2) is missing."""
    import importlib.util

    from memstrata.errors import ConfigError

    missing = [m for m in ("starlette", "uvicorn", "jinja2") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(
            f"`memstrata ui` needs {', '.join(missing)}, which is not installed: {INSTALL_HINT}."
        )
