"""The one exception tree of memstrata.

The library raises these; only the edges (tool dispatch, the CLI, the MCP server)
turn them into model-facing or user-facing text. Every message says what to do next.

    MemstrataError
    ├── ConfigError                 bad config.toml value or environment override
    ├── HomeError                   the home folder cannot be created or used
    ├── StorageError                a file or database operation failed
    │   ├── LockTimeoutError        a lock was not acquired in time
    │   ├── AtomicWriteError        writing a file atomically failed (disk full, read-only, ...)
    │   ├── UnreadableFileError     a file exists but cannot be read or decoded; never overwritten
    │   ├── SymlinkRefusedError     a memory file, export or import path is a symlink; not followed
    │   ├── DatabaseBusyError       SQLite stayed locked past the busy timeout and retries
    │   ├── SchemaError             the database schema is newer than this version or broken
    │   └── IndexError_             a full-text index is missing or inconsistent (fix: reindex)
    ├── CuratedMemoryError          an L1 memory operation was refused
    │   ├── ThreatDetectedError     the threat scanner matched; names the pattern(s)
    │   ├── MemoryFullError         the budget would be exceeded; carries entries and usage
    │   ├── NoMatchError            old_text matched no entry
    │   ├── AmbiguousMatchError     old_text matched several distinct entries
    │   ├── DuplicateEntryError     an added entry says what an existing one says
    │   ├── DriftError              the file was edited outside memstrata; a .bak was written
    │   ├── InvalidMemoryArgument   an empty or malformed argument
    │   └── ConsolidationLimitError the memory tool refused one failed consolidation too many
    ├── SessionStoreError           an L2 session store operation was refused
    │   ├── SessionNotFoundError    no session with that id (or prefix)
    │   ├── AmbiguousSessionError   a prefix matched several sessions
    │   ├── TitleConflictError      the title is held by another session
    │   └── NamespaceError          a row of another tenant was addressed, or a bad namespace
    ├── ImportDataError             an import source cannot be read (bad records are skipped)
    ├── LLMError                    a language-model call failed
    │   ├── LLMNotConfiguredError   no model configured for the task
    │   ├── LLMAuthError            401/403: the key is wrong or lacks permission
    │   ├── LLMQuotaError           402/429 quota: billing or rate limit exhausted
    │   ├── LLMTimeoutError         the call exceeded its timeout
    │   ├── LLMNetworkError         the endpoint could not be reached
    │   └── LLMResponseError        the endpoint answered with something unusable
    ├── ProviderError               a memory provider failed or was refused
    └── ToolArgumentError           a tool call's arguments are invalid

``IndexError_`` carries a trailing underscore so it never shadows the builtin.
"""

from __future__ import annotations

from typing import Any


class MemstrataError(Exception):
    """Base class of every error memstrata raises on purpose."""


class ConfigError(MemstrataError):
    """A config.toml value or environment override is invalid."""


class HomeError(MemstrataError):
    """The memstrata home folder cannot be created, read or written."""


class StorageError(MemstrataError):
    """A file or database operation failed."""


class LockTimeoutError(StorageError):
    """A lock was not acquired within its timeout."""


class AtomicWriteError(StorageError):
    """An atomic file write failed; the previous file content is intact."""


class UnreadableFileError(StorageError):
    """A file exists but cannot be read or decoded; it is refused, never overwritten."""


class SymlinkRefusedError(StorageError):
    """A path memstrata reads or writes is a symlink; it is refused, never followed."""


class DatabaseBusyError(StorageError):
    """The database stayed locked past the busy timeout and the retries."""


class SchemaError(StorageError):
    """The database schema is unknown (newer than this version) or damaged."""


class IndexError_(StorageError):
    """A full-text index is missing or inconsistent; `memstrata sessions reindex` fixes it."""


class CuratedMemoryError(MemstrataError):
    """An L1 curated-memory operation was refused.

    ``details`` holds machine-readable context for the tool response (for example
    ``current_entries`` and ``usage``) so the model can recover in the same turn.
    """

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.details: dict[str, Any] = details


class ThreatDetectedError(CuratedMemoryError):
    """The threat scanner matched the content; the message names the pattern(s)."""


class MemoryFullError(CuratedMemoryError):
    """The write would exceed the character budget of the target."""


class NoMatchError(CuratedMemoryError):
    """``old_text`` matched no entry."""


class AmbiguousMatchError(CuratedMemoryError):
    """``old_text`` matched several distinct entries."""


class DuplicateEntryError(CuratedMemoryError):
    """An added entry differs from an existing one only in case, width or punctuation."""


class DriftError(CuratedMemoryError):
    """The memory file was changed outside memstrata; it was backed up, not overwritten."""


class InvalidMemoryArgument(CuratedMemoryError):
    """An argument of a memory operation is empty or malformed."""


class ConsolidationLimitError(CuratedMemoryError):
    """The memory tool saw too many failed consolidations in one turn.

    Its ``details`` say ``done``: the model should stop retrying and answer the user.
    """


class SessionStoreError(MemstrataError):
    """An L2 session-store operation was refused."""


class SessionNotFoundError(SessionStoreError):
    """No session has that id (or id prefix)."""


class AmbiguousSessionError(SessionStoreError):
    """An id prefix matched more than one session."""


class TitleConflictError(SessionStoreError):
    """The title is already used by another session."""


class NamespaceError(SessionStoreError):
    """A namespace (tenant) name is invalid, or a row of another namespace was addressed."""


class ImportDataError(MemstrataError):
    """An import source cannot be read at all (individual bad records are skipped)."""


class LLMError(MemstrataError):
    """A language-model call failed."""


class LLMNotConfiguredError(LLMError):
    """No model is configured for the requested task."""


class LLMAuthError(LLMError):
    """The endpoint rejected the key (401) or the key lacks permission (403)."""


class LLMQuotaError(LLMError):
    """Billing quota or rate limit is exhausted (402, 429 insufficient_quota)."""


class LLMTimeoutError(LLMError):
    """The call did not finish within its timeout."""


class LLMNetworkError(LLMError):
    """The endpoint could not be reached."""


class LLMResponseError(LLMError):
    """The endpoint answered with an unusable response."""


class ProviderError(MemstrataError):
    """A memory provider failed, or was refused by the MemoryManager."""


class ToolArgumentError(MemstrataError):
    """A tool call's arguments are missing, of the wrong type, or out of range."""
