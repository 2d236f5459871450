"""Health check of a memstrata home: what is wrong, how bad, and the command that fixes it.

:func:`run_doctor` looks at the configuration file, the session store (SQLite
``integrity_check``, full-text index consistency, WAL and free space), the curated memory
(budget use per file, duplicate and near-duplicate entries, scanner findings in what is
already stored, unreadable files) and leftovers of crashed writers (temp files, lock
files that cannot work). Every :class:`Finding` has a severity and, when one exists, the
exact command that fixes it; :func:`apply_fixes` runs the fixes that are safe to automate
(``memstrata doctor --fix``).

    report = run_doctor()
    for finding in report.findings:
        print(finding.severity, finding.message, finding.fix)
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from memstrata import fileio
from memstrata.backends import open_memory, open_store, postgres_dsn
from memstrata.config import CONFIG_FILENAME, DEFAULTS, Config, memstrata_home
from memstrata.errors import ConfigError, LockTimeoutError, MemstrataError
from memstrata.memory.format import FILE_NAMES, TARGETS, Target, normalize_entry, split_raw
from memstrata.scanner import scan as scanner
from memstrata.store.contract import SessionStoreContract
from memstrata.store.sqlite.store import DB_FILENAME, SessionStore

__all__ = [
    "DoctorReport",
    "Finding",
    "apply_fixes",
    "near_duplicates",
    "normalize_entry",
    "run_doctor",
]

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")
# Token Jaccard similarity from which two entries count as near-duplicates.
NEAR_DUPLICATE_JACCARD = 0.8
# Share of the budget from which a memory file is reported as nearly full.
BUDGET_WARNING = 0.9
# A temp file older than this belongs to a writer that died (a live write takes ms).
STALE_TEMP_SECONDS = 60.0
# A WAL larger than this (bytes) means checkpoints are not keeping up.
WAL_WARNING_BYTES = 64 * 1024 * 1024
# Free pages above this share of the file are worth a VACUUM.
FREE_SPACE_WARNING = 0.25
# Automated fixes, by finding code.
FIXABLE = ("stale_temp_file", "index_inconsistent", "duplicate_entry")


@dataclass(frozen=True)
class Finding:
    """One problem: ``code`` (stable, for scripts), ``severity``, ``message``, ``fix``.

    ``fix`` is the exact command to run (None when there is nothing to run);
    ``auto`` is True when ``memstrata doctor --fix`` applies it.
    """

    code: str
    severity: Severity
    message: str
    fix: str | None = None
    auto: bool = False
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "fix": self.fix,
            "auto": self.auto,
            "details": self.details,
        }


@dataclass
class DoctorReport:
    """Findings (errors first) and the checks that ran."""

    home: Path
    checks: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    fixed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no finding is an error."""
        return not any(f.severity == "error" for f in self.findings)

    def counts(self) -> dict[str, int]:
        """Findings per severity."""
        return {s: sum(1 for f in self.findings if f.severity == s) for s in SEVERITIES}

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "ok": self.ok,
            "home": str(self.home),
            "checks": self.checks,
            "counts": self.counts(),
            "findings": [f.as_dict() for f in self.findings],
            "fixed": self.fixed,
        }


# ---------------------------------------------------------------------------- entries


def _tokens(text: str) -> set[str]:
    return set(normalize_entry(text).split())


def near_duplicates(
    entries: Iterable[tuple[Target, str]], threshold: float = NEAR_DUPLICATE_JACCARD
) -> list[tuple[tuple[Target, str], tuple[Target, str], float]]:
    """Pairs of entries that say the same thing: equal normalised text or token Jaccard
    similarity ``>= threshold``; each pair is ``(first, later, similarity)``."""
    items = [(item, normalize_entry(item[1]), _tokens(item[1])) for item in entries]
    pairs: list[tuple[tuple[Target, str], tuple[Target, str], float]] = []
    for i, (first, norm_a, tokens_a) in enumerate(items):
        for later, norm_b, tokens_b in items[i + 1 :]:
            if norm_a == norm_b:
                pairs.append((first, later, 1.0))
                continue
            union = tokens_a | tokens_b
            if not union:
                continue
            similarity = len(tokens_a & tokens_b) / len(union)
            if similarity >= threshold:
                pairs.append((first, later, round(similarity, 3)))
    return pairs


def _remove_command(target: Target, entry: str) -> str:
    return f"memstrata memory remove {shlex.quote(entry)} --target {target}"


def _short(text: str, width: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


# ----------------------------------------------------------------------------- checks


def _check_config(home: Path, report: DoctorReport) -> Config:
    report.checks.append("config")
    path = home / CONFIG_FILENAME
    try:
        config = Config.load(home)
    except ConfigError as exc:
        report.findings.append(
            Finding(
                "config_invalid",
                "error",
                f"The configuration is invalid: {exc}",
                fix=f"memstrata config show  # then fix or move aside {path}",
                details={"path": str(path)},
            )
        )
        # The other checks still run, on the defaults.
        return Config(home=home, values={k: dict(v) for k, v in DEFAULTS.items()})
    try:
        postgres_dsn(config)
    except ConfigError as exc:
        report.findings.append(
            Finding("config_invalid", "error", str(exc), fix="memstrata config set store.dsn ''")
        )
    return config


def _open_store(config: Config) -> SessionStoreContract:
    # Opened without the open-time index check: the doctor reports what that check raises.
    if postgres_dsn(config) is None:
        return SessionStore(config.home / DB_FILENAME, config=config, verify_indexes=False)
    return open_store(config)


def _check_store(config: Config, report: DoctorReport) -> None:
    report.checks.append("session store")
    try:
        dsn = postgres_dsn(config)
    except ConfigError:
        return  # already reported by the config check
    path = config.home / DB_FILENAME
    if dsn is None and not path.exists():
        report.findings.append(
            Finding("no_session_store", "info", f"No session store yet ({path}).")
        )
        return
    try:
        store = _open_store(config)
    except MemstrataError as exc:
        report.findings.append(
            Finding(
                "store_unusable",
                "error",
                f"The session store cannot be opened: {exc}",
                fix=f"sqlite3 {shlex.quote(str(path))} .recover | sqlite3 state-recovered.db"
                if dsn is None
                else None,
            )
        )
        return
    recover = (
        f"sqlite3 {shlex.quote(str(path))} .recover | sqlite3 state-recovered.db"
        "  # then move state.db aside and the recovered file in its place"
    )
    with store:
        try:
            check = store.integrity_check()
        except MemstrataError as exc:
            # The index check writes (FTS5 commands); a damaged page fails it outright.
            report.findings.append(
                Finding("database_damaged", "error", f"The store fails its checks: {exc}", recover)
            )
            return
        damaged = [line for line in check["sqlite"] if line != "ok"]
        if damaged:
            report.findings.append(
                Finding(
                    "database_damaged",
                    "error",
                    f"SQLite integrity_check failed: {'; '.join(damaged[:5])}",
                    fix=recover,
                )
            )
        if check["indexes"]:
            report.findings.append(
                Finding(
                    "index_inconsistent",
                    "error",
                    f"Full-text indexes do not match the messages: {'; '.join(check['indexes'])}",
                    fix="memstrata sessions reindex",
                    auto=True,
                )
            )
        if dsn is None:
            _check_store_file(store.stats(), report)


def _check_store_file(stats: dict[str, Any], report: DoctorReport) -> None:
    if stats.get("wal_bytes", 0) > WAL_WARNING_BYTES:
        report.findings.append(
            Finding(
                "wal_large",
                "warning",
                f"The write-ahead log is {stats['wal_bytes'] / 1e6:.0f} MB: a long-lived "
                "reader may be blocking checkpoints.",
                fix="memstrata sessions optimize",
            )
        )
    pages, free = int(stats.get("pages", 0)), int(stats.get("free_pages", 0))
    if pages > 256 and free / pages > FREE_SPACE_WARNING:
        report.findings.append(
            Finding(
                "free_space",
                "info",
                f"{free / pages:.0%} of state.db is free pages left by deletions.",
                fix="memstrata sessions optimize",
            )
        )


def _check_memory(config: Config, report: DoctorReport) -> None:
    report.checks.append("memory")
    try:
        memory = open_memory(config)
    except MemstrataError as exc:
        report.findings.append(
            Finding("memory_unusable", "error", f"The curated memory cannot be opened: {exc}")
        )
        return
    all_entries: list[tuple[Target, str]] = []
    # The PostgreSQL memory keeps rows, not files: the file checks apply to files only.
    load_errors: dict[str, str] = getattr(memory, "load_errors", {})
    path_of = getattr(memory, "path", None)
    for target in TARGETS:
        name = FILE_NAMES[target]
        if target in load_errors:
            where = path_of(target) if callable(path_of) else name
            report.findings.append(
                Finding(
                    "memory_unreadable",
                    "error",
                    f"{name} cannot be read: {load_errors[target]}",
                    fix=f"ls -l {shlex.quote(str(where))}",
                )
            )
            continue
        entries = memory.entries(target)
        all_entries += [(target, e) for e in entries]
        _check_budget(memory.usage(target), target, name, report)
        if callable(path_of):
            _check_exact_repeats(path_of(target), target, name, report)
        for entry in entries:
            findings = scanner.scan_for_threats(entry, "strict")
            if findings:
                ids = ", ".join(f.pattern_id for f in findings)
                report.findings.append(
                    Finding(
                        "scanner_finding",
                        "error",
                        f"{name} entry {_short(entry)!r} matches threat pattern(s) {ids}; "
                        "it is blocked from the prompt.",
                        fix=_remove_command(target, entry),
                        details={"target": target, "entry": entry, "patterns": ids},
                    )
                )
    for (ta, a), (tb, b), similarity in near_duplicates(all_entries):
        exact = similarity == 1.0
        where = FILE_NAMES[ta] if ta == tb else f"{FILE_NAMES[ta]} and {FILE_NAMES[tb]}"
        report.findings.append(
            Finding(
                "duplicate_entry" if exact else "near_duplicate_entry",
                "warning",
                f"{where}: {_short(b)!r} "
                + ("repeats" if exact else f"nearly repeats ({similarity:.0%} of words shared)")
                + f" {_short(a)!r}; it spends the budget twice.",
                fix=_remove_command(tb, b),
                auto=exact and ta == tb,  # across files, which copy goes is a choice
                details={"keep": [ta, a], "remove": [tb, b], "similarity": similarity},
            )
        )


def _check_budget(usage: Any, target: Target, name: str, report: DoctorReport) -> None:
    key = "memory_char_limit" if target == "memory" else "user_char_limit"
    details = {"target": target, "chars": usage.chars, "limit": usage.limit}
    if usage.over_limit:
        report.findings.append(
            Finding(
                "memory_over_budget",
                "error",
                f"{name} holds {usage.chars:,} of {usage.limit:,} characters: the entries "
                "past the budget are left out of the prompt.",
                fix=f"memstrata config set memory.{key} {usage.chars}"
                f"  # or: memstrata memory remove TEXT --target {target}",
                details=details,
            )
        )
    elif usage.chars >= BUDGET_WARNING * usage.limit:
        report.findings.append(
            Finding(
                "memory_nearly_full",
                "warning",
                f"{name} uses {usage}: new entries will soon be refused.",
                fix=f"memstrata memory list  # then: memstrata memory remove TEXT --target "
                f"{target}",
                details=details,
            )
        )
    else:
        report.findings.append(
            Finding("memory_budget", "info", f"{name} uses {usage}.", details=details)
        )


def _check_exact_repeats(path: Path, target: Target, name: str, report: DoctorReport) -> None:
    try:
        raw = fileio.read_text(path)
    except MemstrataError:
        return
    if raw is None:
        return
    parts = split_raw(raw)
    repeated = len(parts) - len(set(parts))
    if repeated:
        report.findings.append(
            Finding(
                "repeated_in_file",
                "info",
                f"{name} stores {repeated} entr{'y' if repeated == 1 else 'ies'} twice "
                "(read once; the copy goes at the next write).",
                details={"target": target},
            )
        )


def _stale_temps(folders: Iterable[Path], now: float) -> list[Path]:
    stale: list[Path] = []
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            if not (name.startswith(".") and name.endswith(fileio.TEMP_SUFFIX)):
                continue
            path = folder / name
            try:
                age = now - path.stat().st_mtime
            except OSError:
                continue
            if age >= STALE_TEMP_SECONDS:
                stale.append(path)
    return sorted(stale)


def _temp_folders(home: Path) -> list[Path]:
    folders = [home]
    try:
        folders += sorted(p for p in home.iterdir() if p.is_dir() and not p.is_symlink())
    except OSError:
        pass
    return folders


def _check_files(home: Path, report: DoctorReport) -> None:
    report.checks.append("stale files")
    for path in _stale_temps(_temp_folders(home), time.time()):
        report.findings.append(
            Finding(
                "stale_temp_file",
                "warning",
                f"{path} was left by a writer that died mid-write.",
                fix="memstrata doctor --fix",
                auto=True,
                details={"path": str(path)},
            )
        )
    for lock in sorted(home.glob("*/*.lock")) + sorted(home.glob("*.lock")):
        if lock.is_symlink():
            report.findings.append(
                Finding(
                    "lock_symlink",
                    "error",
                    f"{lock} is a symlink, so writes refuse to lock it.",
                    fix=f"rm {shlex.quote(str(lock))}",
                )
            )
            continue
        try:
            with fileio.file_lock(lock, timeout=0.2):
                pass
        except LockTimeoutError:
            report.findings.append(
                Finding(
                    "lock_held",
                    "warning",
                    f"{lock} is held by a running process; writes to its file wait for it.",
                    fix=f"fuser -v {shlex.quote(str(lock))}  # find the process; stop it if hung",
                )
            )
        except MemstrataError:
            continue


def _check_plugins(home: Path, report: DoctorReport) -> None:
    """User plugins left unloaded: writable by others (anyone could run code as this
    user through them) or losing every name they declare (they never ran)."""
    from memstrata.providers.plugins import plugin_problems

    report.checks.append("plugins")
    for problem in plugin_problems(home):
        unsafe = "can be written by other users" in problem or "belongs to uid" in problem
        fix = problem.rsplit(": ", 1)[-1] if unsafe else None
        report.findings.append(
            Finding(
                "plugin_unsafe" if unsafe else "plugin_shadowed",
                "error" if unsafe else "warning",
                problem,
                fix=fix if fix and fix.startswith(("chmod", "chown")) else None,
            )
        )


def run_doctor(home: Path | None = None) -> DoctorReport:
    """Run every check on ``home`` (default: ``$MEMSTRATA_HOME``); nothing is changed."""
    root = Path(home) if home is not None else memstrata_home()
    report = DoctorReport(home=root)
    if not root.exists():
        report.checks.append("home")
        report.findings.append(
            Finding(
                "no_home",
                "info",
                f"{root} does not exist yet: nothing is stored.",
                fix='memstrata memory add "..."  # or any command that writes',
            )
        )
        return report
    config = _check_config(root, report)
    _check_store(config, report)
    _check_memory(config, report)
    _check_files(root, report)
    _check_plugins(root, report)
    order = {s: i for i, s in enumerate(SEVERITIES)}
    report.findings.sort(key=lambda f: order[f.severity])
    return report


def apply_fixes(report: DoctorReport) -> list[str]:
    """Apply the automatable fixes of ``report``; return one line per fix applied.

    Removes stale temp files (under the file's lock, so no live writer loses its
    temp file), rebuilds inconsistent indexes, and removes exact duplicate entries
    (the later copy). Everything else needs a human decision and is left alone.
    """
    done: list[str] = []
    codes = {f.code for f in report.findings}
    for finding in report.findings:
        if finding.code == "stale_temp_file":
            path = Path(finding.details["path"])
            # ".MEMORY.md.<random>.tmp" belongs to MEMORY.md; when that file has a lock,
            # take it so a writer that is alive after all keeps its temp file.
            target = path.parent / path.name[1:].rsplit(".", 2)[0]
            lock = target.with_name(target.name + ".lock")
            try:
                if lock.exists():
                    with fileio.file_lock(lock, timeout=5.0):
                        path.unlink(missing_ok=True)
                else:
                    path.unlink(missing_ok=True)
            except (MemstrataError, OSError):
                continue
            done.append(f"removed {path}")
    if "index_inconsistent" in codes:
        with _open_store(Config.load(report.home)) as store:
            counts = store.reindex()
        done.append(f"rebuilt the full-text indexes ({sum(counts.values())} rows)")
    duplicates = [f for f in report.findings if f.code == "duplicate_entry" and f.auto]
    if duplicates:
        memory = open_memory(Config.load(report.home))
        for finding in duplicates:
            target, entry = finding.details["remove"]
            try:
                memory.remove(target, entry)
            except MemstrataError:
                continue  # changed meanwhile: the next run reports what is left
            done.append(f"removed a duplicate entry from {FILE_NAMES[target]}: {_short(entry)!r}")
    report.fixed = done
    return done
