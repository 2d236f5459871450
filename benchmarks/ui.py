"""Benchmark ``memstrata ui`` on a large store: the session list and recall pages over HTTP.

Usage::

    nice -n 5 python benchmarks/ui.py [--messages 1000000] [--home PATH] [--repeats 30]
                                      [--output benchmarks/results/ui.md]

Builds (or reuses, when ``PATH/state.db`` exists) the store benchmark's corpus
(``corpus.py``, loaded as ``store.py`` loads it: one ``append_messages`` call per
session), starts the ``memstrata ui`` console script on that home, and times complete
HTTP requests (request sent to last byte read, the page rendered by the server) on one
kept-alive connection: the session list (first page, a deep page, a source filter, a
date span) and recall queries (English and Chinese, the store benchmark's planted
questions). Target: median and p95 of each at most 300 ms.

The machine may be shared: figures are medians and p95 of ``--repeats`` requests after
three warm-up requests, and the load average is recorded.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus  # the benchmark's own generator, importable by path
import store as store_bench  # its bulk build

TARGET_MS = 300.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def build(home: Path, messages: int) -> dict[str, Any]:
    """The store at ``home/state.db``: reused when it exists, else built."""
    db = home / "state.db"
    if db.exists():
        return {"reused": True}
    home.mkdir(parents=True, exist_ok=True)
    result = store_bench.ours_build(db, messages)
    result.pop("corpus", None)
    return {"reused": False, **result}


class Ui:
    """The console script serving ``home``, and a kept-alive connection to it."""

    def __init__(self, home: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MEMSTRATA_"))}
        env["MEMSTRATA_HOME"] = str(home)
        script = Path(sys.executable).parent / "memstrata"
        self.proc = subprocess.Popen(
            [str(script), "ui", "--no-open"], env=env, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/\?token=(\S+)", line)
        if found is None:
            self.proc.kill()
            raise SystemExit(f"memstrata ui did not start: {line}")
        self.port, token = int(found.group(1)), found.group(2)
        self.headers = {
            "Host": f"127.0.0.1:{self.port}",
            "Cookie": f"memstrata_ui_{self.port}={token}",
        }
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)

    def get(self, path: str) -> tuple[float, int, str]:
        """Milliseconds for one request, its status and body."""
        start = time.perf_counter()
        self.conn.request("GET", path, headers=self.headers)
        response = self.conn.getresponse()
        body = response.read()
        elapsed = (time.perf_counter() - start) * 1000
        return elapsed, response.status, body.decode("utf-8", "replace")

    def close(self) -> None:
        self.conn.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def time_path(ui: Ui, path: str, repeats: int) -> dict[str, Any]:
    for _ in range(3):
        _, status, body = ui.get(path)
        if status != 200:
            raise SystemExit(f"{path} answered {status}: {body[:400]}")
    times = []
    for _ in range(repeats):
        elapsed, status, body = ui.get(path)
        assert status == 200, path
        times.append(elapsed)
    return {
        "path": path,
        "median_ms": statistics.median(times),
        "p95_ms": percentile(times, 0.95),
        "max_ms": max(times),
        "bytes": len(body.encode()),
        "rows": body.count('class="session-row"') + body.count('class="card result"'),
    }


def date_span(ui: Ui) -> tuple[str, str]:
    """A two-day span of activity ending at the oldest row of the first page."""
    _, _, body = ui.get("/sessions")
    days = re.findall(r"<td>(\d{4}-\d{2}-\d{2}) \d{2}:\d{2}</td>", body)
    if not days:
        raise SystemExit("the listing shows no dates to pick a span from")
    until = dt.date.fromisoformat(days[-1])
    return (until - dt.timedelta(days=1)).isoformat(), until.isoformat()


def run(home: Path, repeats: int, queries_per_class: int) -> dict[str, Any]:
    ui = Ui(home)
    try:
        since, until = date_span(ui)
        listing = {
            "first page": "/sessions",
            "page 40 (rows 2,001-2,050)": "/sessions?page=40",
            "source filter": "/sessions?source=telegram",
            "date span": "/sessions?" + urlencode({"since": since, "until": until}),
        }
        pages = {name: time_path(ui, path, repeats) for name, path in listing.items()}
        asked = corpus.queries()
        recall: dict[str, Any] = {}
        for query_class in ("question", "cjk3", "cjk2", "glued", "word"):
            for query in asked[query_class][:queries_per_class]:
                path = "/recall?" + urlencode({"q": query})
                recall[f"{query_class}: {query}"] = time_path(ui, path, repeats)
    finally:
        ui.close()
    return {"sessions": pages, "recall": recall}


def render(results: dict[str, Any]) -> str:
    lines = [
        "# memstrata ui: page latency on a large store",
        "",
        f"Run {results['when']} on {results['messages']:,} messages "
        f"({results['session_count']:,} sessions; the store benchmark's corpus), "
        f"{results['repeats']} requests per page after 3 warm-up requests, one kept-alive "
        f"HTTP connection to the `memstrata ui` console script; load average "
        f"{results['load']} on a shared machine.",
        "",
        f"Command: `{results['command']}`",
        "",
        f"Target: median and p95 of each page at most {TARGET_MS:.0f} ms.",
        "",
        "| page | median ms | p95 ms | max ms | rows | bytes | target |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    verdicts = []
    for section, title in (("sessions", "Sessions"), ("recall", "Recall")):
        for name, r in results[section].items():
            ok = r["median_ms"] <= TARGET_MS and r["p95_ms"] <= TARGET_MS
            verdicts.append(ok)
            label = f"{title}: {name}".replace("|", "\\|")
            lines.append(
                f"| {label} | {r['median_ms']:.1f} | {r['p95_ms']:.1f} | {r['max_ms']:.1f} | "
                f"{r['rows']} | {r['bytes']:,} | {'met' if ok else 'over'} |"
            )
    lines += [
        "",
        f"Verdict: {sum(verdicts)} of {len(verdicts)} pages within {TARGET_MS:.0f} ms "
        "(median and p95).",
        "",
        "Recall pages run `session_search` without a summary model (the excerpt the model "
        "would get), and the store's `rank` once more for each result's score parts. The "
        "session list reads one page of conversations (50 rows) through "
        "`list_sessions_rich`; the date span through its `active_since`/`active_until`.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--home", type=Path, default=None, help="reuse or build the store here")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--queries", type=int, default=3, help="queries per class")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="memstrata-ui-bench-") as scratch:
        home = args.home if args.home is not None else Path(scratch) / "home"
        built = build(home, args.messages)
        print(f"store: {built}", file=sys.stderr)
        from memstrata.store.sqlite.store import SessionStore

        with SessionStore(home / "state.db") as store:
            stats = store.stats()
        measured = run(home, args.repeats, args.queries)
    results = {
        "when": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "messages": int(stats.get("messages", args.messages)),
        "session_count": int(stats.get("sessions", 0)),
        "repeats": args.repeats,
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "command": "nice -n 5 python benchmarks/ui.py "
        + " ".join(
            "PATH" if a.startswith("/") else a for a in (argv if argv is not None else sys.argv[1:])
        ),
        **measured,
    }
    text = render(results)
    if args.output is not None:
        args.output.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
