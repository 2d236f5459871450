"""The bearer token of the HTTP MCP server.

One random token per home, generated on first use and kept in ``<home>/mcp_token``
(0600, never through a symlink). ``mcp.token`` (or ``MEMSTRATA_MCP__TOKEN``) overrides
the file, for a deployment that hands every server process the same secret. A client
sends it as ``Authorization: Bearer <token>``; ``memstrata mcp token`` prints it.

A token file anyone but its owner can read, or that another user owns, is refused
rather than used: whoever could read it could call the tools.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path
from typing import Final

from memstrata.config import Config, ensure_home
from memstrata.errors import ConfigError
from memstrata.fileio import file_lock

__all__ = ["MIN_TOKEN_CHARS", "TOKEN_FILENAME", "configured_token", "load_or_create_token"]

TOKEN_FILENAME: Final = "mcp_token"  # noqa: S105 - a file name, not a secret
# 32 characters of token_urlsafe carry 192 bits; anything shorter is guessable in bulk.
MIN_TOKEN_CHARS: Final = 32


def _check_strength(token: str, origin: str) -> str:
    token = token.strip()
    if len(token) < MIN_TOKEN_CHARS or any(c.isspace() for c in token):
        raise ConfigError(
            f"The MCP token from {origin} is too weak ({len(token)} characters; at least "
            f"{MIN_TOKEN_CHARS} without spaces). Remove it to have one generated "
            "(`memstrata mcp token --rotate`), or set a long random one."
        )
    return token


def _read_token_file(path: Path) -> str | None:
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ConfigError(
                f"Refusing to read the MCP token through a symlink: {path}. Remove the link; "
                "`memstrata mcp token` then writes a new token there."
            ) from None
        raise ConfigError(f"Cannot read the MCP token {path}: {exc.strerror or exc}.") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"The MCP token {path} is not a regular file: remove it.")
        if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
            raise ConfigError(
                f"The MCP token {path} belongs to uid {info.st_uid}, not to this user "
                f"(uid {os.geteuid()}): remove it, then run `memstrata mcp token`."
            )
        if os.name == "posix" and info.st_mode & 0o077:
            raise ConfigError(
                f"The MCP token {path} can be read by other users (mode "
                f"{stat.S_IMODE(info.st_mode):04o}): treat it as leaked. Run "
                "`memstrata mcp token --rotate` for a new one (written 0600)."
            )
        raw = handle.read().decode("utf-8", "replace")
    return _check_strength(raw, str(path))


def _write_token_file(path: Path, token: str) -> None:
    flags = (
        os.O_WRONLY
        | os.O_CREAT
        | os.O_TRUNC
        | getattr(os, "O_NOFOLLOW", 0)
        | getattr(os, "O_CLOEXEC", 0)
    )
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ConfigError(
                f"Refusing to write the MCP token through a symlink: {path}. Remove the link."
            ) from None
        raise ConfigError(f"Cannot write the MCP token {path}: {exc.strerror or exc}.") from None
    with os.fdopen(fd, "wb") as handle:
        os.fchmod(handle.fileno(), 0o600)  # an existing file keeps its mode through O_CREAT
        handle.write((token + "\n").encode())
        handle.flush()
        os.fsync(handle.fileno())


def configured_token(config: Config) -> str | None:
    """The token set in ``mcp.token`` (checked for strength), else the token file's, else
    None. Never creates anything."""
    value = str(config.get("mcp.token") or "")
    if value.strip():
        return _check_strength(value, "mcp.token")
    return _read_token_file(config.home / TOKEN_FILENAME)


def load_or_create_token(config: Config, *, rotate: bool = False) -> str:
    """The server's token, generated and stored 0600 on first use (or when ``rotate``).

    Raises :class:`~memstrata.errors.ConfigError` naming the fix when the stored token
    cannot be trusted (a symlink, readable by others, another user's, too short).
    """
    if str(config.get("mcp.token") or "").strip():
        if rotate:
            raise ConfigError(
                "The MCP token is set in mcp.token (config or MEMSTRATA_MCP__TOKEN): change "
                "it there, or remove it to use a generated one."
            )
        return _check_strength(str(config.get("mcp.token")), "mcp.token")
    home = ensure_home(config.home)
    path = home / TOKEN_FILENAME
    with file_lock(home / (TOKEN_FILENAME + ".lock")):
        if not rotate:
            found = _read_token_file(path)
            if found is not None:
                return found
        elif path.is_symlink():
            raise ConfigError(
                f"Refusing to write the MCP token through a symlink: {path}. Remove the link."
            )
        token = secrets.token_urlsafe(32)
        _write_token_file(path, token)
        return token
