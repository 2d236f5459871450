"""Secrets: one redaction for every secret-like key and DSN form, in text and JSON;
`config show`/`config set` never print one; `forget` clears them from memory history."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from helpers import PG_DSN, record
from memstrata.compress.prompt import redact_secrets
from memstrata.memory.files import FileMemory
from memstrata.scanner.redaction import (
    MASK,
    is_secret_key,
    redact_data,
    redact_dsn,
    redact_text,
)
from memstrata.store.postgres.database import redact

BIN = Path(sys.executable).parent
API_KEY = "sk-live-4f9a2c7e1b3d5f6a8c0e2b4d"
QDRANT_KEY = "qd-9c1e7a3b5d2f4e6a8b0c"
DB_PASSWORD = "p@ss:w0rd@with-ats"
MCP_TOKEN = "tok-3b7d9f1a5c8e2d4f6a0b1c3e5d7f9a2b"


def memstrata(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MEMSTRATA_"))}
    env["MEMSTRATA_HOME"] = str(home)
    done = subprocess.run(
        [str(BIN / "memstrata"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f"postgresql://alice:{DB_PASSWORD}@db.internal:5432/mem", DB_PASSWORD),
        (f"postgres://u:{DB_PASSWORD}@h/db?sslmode=require", "w0rd"),
        ("host=db user=alice password=s3cr3t-Pw dbname=mem", "s3cr3t-Pw"),
        ("host=db password='two words here' dbname=mem", "two words"),
        (f"llm.api_key = {API_KEY}", API_KEY),
        ("api_key: abcdef123456", "abcdef123456"),
        ('{"qdrant_api_key": "zz-secret-value"}', "zz-secret-value"),
        ('{"token":"opaque-value-1"}', "opaque-value-1"),
        ("GITLAB_TOKEN=glpat-abcdefghijk", "glpat-abcdefghijk"),
        ("client_secret = 'hunter22hunter22'", "hunter22hunter22"),
        ("Authorization: Bearer abc.def.ghi-opaque", "abc.def.ghi-opaque"),
        ("authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
        ("-H 'Authorization: token gho_shortish'", "gho_shortish"),
        ("X-Auth-Token: opaque-9", "opaque-9"),
        ("PGPASSWORD=letmein99 psql", "letmein99"),
        ("the key is AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ],
)
def test_every_secret_form_is_redacted(text: str, secret: str) -> None:
    """Each form loses its secret, through the one redaction every caller uses."""
    for redacted in (redact_text(text), redact_secrets(text)):
        assert secret not in redacted, redacted
        assert "REDACTED" in redacted
    as_json = json.dumps({"note": text})
    assert secret not in json.dumps(redact_data(json.loads(as_json)))
    record(kind="attack", category="Secret forms redacted in text and JSON", tried=1, stopped=1)


def test_counts_and_ordinary_words_are_kept() -> None:
    kept = "max_tokens=128000 input_tokens: 12.5 author=Ada token_budget=300 tokenizer=bpe"
    assert redact_text(kept) == kept
    assert redact_text("see http://host:8080/a@b/ and mailto:x@y") == (
        "see http://host:8080/a@b/ and mailto:x@y"
    )
    assert redact_dsn("postgresql://127.0.0.1:5432/db") == "postgresql://127.0.0.1:5432/db"


def test_the_dsn_redaction_of_the_store_handles_at_signs() -> None:
    """The password may hold '@' and ':'; the host stays readable."""
    shown = redact(f"postgresql://alice:{DB_PASSWORD}@db.internal:5432/mem")
    assert shown == f"postgresql://alice:{MASK}@db.internal:5432/mem"


def test_secret_like_keys() -> None:
    secret = [
        "api_key",
        "mem0.qdrant_api_key",
        "mcp.token",
        "apiKey",
        "X-Auth-Token",
        "PGPASSWORD",
        "client_secret",
        "private_key",
        "password",
        "Authorization",
    ]
    plain = [
        "max_tokens",
        "token_budget",
        "mcp.require_token",
        "author",
        "keyboard",
        "base_url",
        "model",
        "dsn",
    ]
    assert [k for k in secret if not is_secret_key(k)] == []
    assert [k for k in plain if is_secret_key(k)] == []


def test_structured_values_are_redacted_at_any_depth() -> None:
    data = {
        "llm": {"api_key": API_KEY, "base_url": "https://u:pw12345@proxy/v1", "model": "m"},
        "mem0": {"qdrant_api_key": QDRANT_KEY},
        "store": {"dsn": f"postgresql://alice:{DB_PASSWORD}@db:5432/mem"},
        "headers": [{"Authorization": f"Bearer {MCP_TOKEN}"}],
        "mcp": {"token": "", "require_token": True},
    }
    shown = json.dumps(redact_data(data))
    for secret in (API_KEY, QDRANT_KEY, DB_PASSWORD, "w0rd", MCP_TOKEN, "pw12345"):
        assert secret not in shown, shown
    assert '"model": "m"' in shown and "db:5432/mem" in shown
    assert '"require_token": true' in shown and '"token": ""' in shown


def test_config_set_and_show_never_print_a_secret(tmp_path: Path) -> None:
    """`config set` of a secret echoes it masked; `config show` and `--json` mask every
    secret-like key and the DSN password, and still show the rest."""
    home = tmp_path / "home"
    settings = [
        ("llm.api_key", API_KEY),
        ("mem0.qdrant_api_key", QDRANT_KEY),
        ("store.dsn", f"postgresql://alice:{DB_PASSWORD}@db.internal:5432/mem"),
        ("mcp.token", MCP_TOKEN),
    ]
    for key, value in settings:
        done = memstrata(home, "config", "set", key, value)
        assert done.returncode == 0, done.stderr
        assert value not in done.stdout + done.stderr
        assert "w0rd" not in done.stdout
        assert key in done.stdout and "REDACTED" in done.stdout
    text = memstrata(home, "config", "show")
    as_json = memstrata(home, "config", "show", "--json")
    for done in (text, as_json):
        assert done.returncode == 0, done.stderr
        for _, value in settings:
            assert value not in done.stdout
        assert "w0rd" not in done.stdout
        assert "db.internal:5432/mem" in done.stdout
    shown = json.loads(as_json.stdout)
    assert shown["llm"]["api_key"] == MASK
    assert shown["mem0"]["qdrant_api_key"] == MASK
    assert shown["store"]["dsn"] == f"postgresql://alice:{MASK}@db.internal:5432/mem"
    record(
        kind="attack",
        category="Secrets through config set / show / show --json",
        tried=3 * len(settings),
        stopped=3 * len(settings),
    )
    # The file itself keeps the real values: redaction is for display only.
    assert API_KEY in (home / "config.toml").read_text()


def _history_bytes(home: Path) -> bytes:
    return b"".join(
        p.read_bytes() for p in home.iterdir() if p.name.startswith("memory_history.db")
    )


def test_forget_purges_a_removed_secret_from_memory_history(tmp_path: Path) -> None:
    """A secret saved then removed with `memory remove` stays in memory_history.db;
    `forget --query` deletes those changes (and their undos), so the bytes leave the
    file, and keeps every other change."""
    home = tmp_path / "home"
    secret = "vault-pass-8d2f1c9b7a"
    assert memstrata(home, "memory", "add", "Deploys go through ops/deploy.sh").returncode == 0
    assert memstrata(home, "memory", "add", f"The vault password is {secret}").returncode == 0
    assert memstrata(home, "memory", "remove", "vault password").returncode == 0
    assert secret not in (home / "memories" / "MEMORY.md").read_text()
    assert secret.encode() in _history_bytes(home)  # what the attack found

    dry = memstrata(home, "forget", "--query", secret, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    planned = json.loads(dry.stdout)["plan"]["memory_changes"]
    assert len(planned) == 2  # the add and the remove both hold it

    done = memstrata(home, "forget", "--query", secret, "--yes", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["report"]["removed"]["memory_history"] == 2
    assert secret.encode() not in _history_bytes(home)
    memory = FileMemory(home)
    left = memory.history.list()
    assert len(left) == 1 and b"ops/deploy.sh" in (left[0].after or b"")
    with sqlite3.connect(home / "memory_history.db") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_forget_says_when_the_live_memory_still_holds_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert memstrata(home, "memory", "add", "api token is tk-55aa77bb99").returncode == 0
    done = memstrata(home, "forget", "--query", "tk-55aa77bb99", "--yes")
    assert done.returncode == 0, done.stderr
    assert "MEMORY.md still hold" in done.stderr
    assert "memstrata memory remove" in done.stderr


def test_forget_purges_postgres_memory_history() -> None:
    """The same on PostgreSQL rows: the changes holding the text, of this tenant only."""
    pytest.importorskip("psycopg")
    from memstrata.memory.postgres import PostgresMemory
    from memstrata.ops.forget import history_changes

    namespace = f"sec-{uuid.uuid4().hex[:8]}"
    other = f"sec-{uuid.uuid4().hex[:8]}"
    try:
        memory = PostgresMemory(PG_DSN, namespace=namespace)
    except Exception as exc:  # pragma: no cover - no server in this run
        pytest.skip(f"PostgreSQL unavailable: {exc}")
    neighbour = PostgresMemory(PG_DSN, namespace=other)
    try:
        memory.add("memory", "Deploys go through ops/deploy.sh")
        memory.add("memory", "The vault password is pg-secret-42")
        memory.remove("memory", "vault password")
        neighbour.add("memory", "The vault password is pg-secret-42")
        ids = history_changes(memory.history, "pg-secret-42")
        assert len(ids) == 2
        assert memory.history.purge(ids) == ids
        assert history_changes(memory.history, "pg-secret-42") == []
        assert memory.history.count() == 1
        assert len(history_changes(neighbour.history, "pg-secret-42")) == 1
    finally:
        for name, mem in ((namespace, memory), (other, neighbour)):
            mem.close()
            from helpers import drop_namespace

            drop_namespace(name)
