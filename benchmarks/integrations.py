"""Hermes Agent with the memstrata provider vs Hermes' built-in recall, on LoCoMo.

Usage:
    python benchmarks/integrations.py PATH/locomo-dev.json
        [--limit-questions N] [--output benchmarks/results/integrations.md]

Each LoCoMo conversation gets a fresh ``HERMES_HOME`` with the plugin written by
``memstrata hermes install`` (the real console script). In Hermes 0.19.0's own
interpreter (scripts/hermes_venv.py: cached venv, or ``MEMSTRATA_TEST_HERMES_PYTHON``), the
harness (``integrations_harness.py``) feeds every turn both to Hermes' ``state.db`` (as
its agent loop writes a turn) and to the provider through Hermes' ``MemoryManager``
(``sync_all``; ``commit_session_boundary_async`` between sessions), then asks each
question of Hermes' ``session_search`` tool and of the provider's
``memstrata_session_search`` tool, same run, same turns, top 5 sessions each.

Turns: LoCoMo's two speakers alternate; each pair (first speaker's line, the reply) is
one Hermes turn, each line written "<speaker>: <text>" (a shared photo adds "[shares a
photo of <caption>]"), exactly as benchmarks/recall.py does. Questions: category 5
(adversarial) is left out; gold sessions come from the evidence dia_ids.

Query forms:

* ``verbatim``: the question as a user would type it;
* ``content words ORed``: Hermes' fair best form: the question's content words (memstrata's
  stopword list removed) joined with OR, since Hermes' FTS5 ANDs the words of a query.

Scores as benchmarks/recall.py: R@k = share of questions with a gold session in the top k;
Rall@5 = share of a question's gold sessions in the top 5, averaged; NDCG@5.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memstrata.query.compile import STOPWORDS

HERE = Path(__file__).resolve().parent
FORMS = ("verbatim", "content words ORed")
MEMSTRATA = Path(sys.executable).parent / "memstrata"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KEYS = ("R@1", "R@3", "R@5", "Rall@5", "NDCG@5")


def _hermes_venv() -> Any:
    spec = importlib.util.spec_from_file_location(
        "hermes_venv", HERE.parent / "scripts" / "hermes_venv.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Conversation:
    """One LoCoMo sample: sessions as (id, lines) and questions as (text, category, gold)."""

    name: str
    sessions: list[tuple[str, list[str]]]
    questions: list[tuple[str, int, set[str]]]


def load(path: Path, limit_questions: int | None) -> list[Conversation]:
    """LoCoMo samples; category 5 and questions without evidence are left out."""
    convs = []
    budget = limit_questions
    for n, sample in enumerate(json.loads(path.read_text(encoding="utf-8"))):
        conv = sample["conversation"]
        numbers = sorted(int(m[1]) for k in conv if (m := re.fullmatch(r"session_(\d+)", k)))
        sessions = []
        for num in numbers:
            lines = []
            for turn in conv[f"session_{num}"]:
                text = f"{turn['speaker']}: {turn.get('text', '')}"
                if turn.get("blip_caption"):
                    text += f" [shares a photo of {turn['blip_caption']}]"
                lines.append(text)
            sessions.append((f"session_{num}", lines))
        questions = []
        for qa in sample["qa"]:
            # Evidence ids are read leniently: "D:11:26" and "D8:6; D9:17" occur.
            found = re.finditer(
                r"D\s*:?\s*(\d+)\s*:\s*\d+", " ".join(map(str, qa.get("evidence", [])))
            )
            gold = {f"session_{int(m[1])}" for m in found}
            if qa.get("category") == 5 or not gold or (budget is not None and budget <= 0):
                continue
            questions.append((str(qa["question"]), int(qa["category"]), gold))
            budget = None if budget is None else budget - 1
        if questions:
            convs.append(Conversation(str(sample.get("sample_id", n)), sessions, questions))
    return convs


@dataclass
class Scores:
    """Per-question metrics by category."""

    rows: dict[int, list[dict[str, float]]] = field(default_factory=lambda: defaultdict(list))

    def add(self, category: int, ranked: list[str], gold: set[str]) -> None:
        row = {f"R@{k}": float(bool(gold & set(ranked[:k]))) for k in (1, 3, 5)}
        row["Rall@5"] = len(gold & set(ranked[:5])) / len(gold)
        dcg = sum(1 / math.log2(i + 2) for i, s in enumerate(ranked[:5]) if s in gold)
        row["NDCG@5"] = dcg / sum(1 / math.log2(i + 2) for i in range(min(len(gold), 5)))
        self.rows[category].append(row)

    def all(self, category: int | None = None) -> list[dict[str, float]]:
        if category is None:
            return [r for rows in self.rows.values() for r in rows]
        return self.rows.get(category, [])

    def mean(self, category: int | None = None) -> dict[str, float]:
        rows = self.all(category)
        return {k: sum(r[k] for r in rows) / len(rows) if rows else 0.0 for k in KEYS}

    def count(self, category: int | None = None) -> int:
        return len(self.all(category))


def or_form(question: str) -> str:
    """The question's content words, ORed (FTS5 syntax Hermes accepts)."""
    words = [w for w in re.findall(r"\w+", question) if w.lower() not in STOPWORDS]
    return " OR ".join(dict.fromkeys(words)) or question


def turns(lines: list[str]) -> list[list[str]]:
    """Consecutive lines paired into (user, assistant) turns; an odd last line stands alone."""
    return [[lines[i], lines[i + 1] if i + 1 < len(lines) else ""] for i in range(0, len(lines), 2)]


def run_conversation(python: Path, conv: Conversation) -> dict[str, Any]:
    """One conversation through the harness in Hermes' interpreter."""
    prefix = re.sub(r"[^A-Za-z0-9_-]", "-", conv.name)
    job = {
        "sessions": [
            {"id": f"{prefix}-{sid}", "turns": turns(msgs)} for sid, msgs in conv.sessions
        ],
        "queries": {
            "verbatim": [q for q, _, _ in conv.questions],
            "content words ORed": [or_form(q) for q, _, _ in conv.questions],
        },
    }
    with tempfile.TemporaryDirectory() as home:
        installed = subprocess.run(
            [str(MEMSTRATA), "hermes", "install", "--hermes-home", home],
            capture_output=True,
            text=True,
            check=False,
        )
        if installed.returncode != 0:
            raise SystemExit(f"memstrata hermes install failed:\n{installed.stderr}")
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
        env["HERMES_HOME"] = home
        proc = subprocess.run(
            [str(python), str(HERE / "integrations_harness.py")],
            input=json.dumps(job),
            capture_output=True,
            text=True,
            env=env,
            cwd=home,
            timeout=3600,
            check=False,
        )
    if proc.returncode != 0:
        raise SystemExit(f"harness failed:\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["prefix"] = prefix
    return result


def metrics_table(results: dict[str, Scores], seconds: dict[str, list[float]]) -> str:
    keys = list(KEYS)
    lines = [
        "| system | query | n | " + " | ".join(keys) + " | median ms |",
        "|---|---|---|" + "---|" * len(keys) + "---|",
    ]
    for name, sc in results.items():
        system, form = name.split("/", 1)
        m = sc.mean()
        vals = " | ".join(f"{m[k]:.3f}" for k in keys)
        median = statistics.median(seconds[name]) * 1000
        lines.append(f"| {system} | {form} | {sc.count()} | {vals} | {median:.1f} |")
    lines += ["", "R@5 per category:", ""]
    cats = list(CATEGORIES)
    lines.append("| system | query | " + " | ".join(f"{CATEGORIES[c]} ({c})" for c in cats) + " |")
    lines.append("|---|---|" + "---|" * len(cats))
    for name, sc in results.items():
        system, form = name.split("/", 1)
        cells = [f"{sc.mean(c)['R@5']:.3f} (n={sc.count(c)})" for c in cats]
        lines.append(f"| {system} | {form} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--limit-questions", type=int, default=None)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)

    python = Path(_hermes_venv().ensure_python())
    version = subprocess.run(
        [
            str(python),
            "-c",
            "from importlib.metadata import version; print(version('hermes-agent'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    convs = load(args.data, args.limit_questions)
    names = [f"{s}/{f}" for f in FORMS for s in ("provider", "hermes")]
    results = {n: Scores() for n in names}
    seconds: dict[str, list[float]] = {n: [] for n in names}
    sync_s = drain_s = 0.0
    turns_total = 0
    started = time.perf_counter()
    for conv in convs:
        out = run_conversation(python, conv)
        sync_s += out["sync_call_s"]
        drain_s += out["drain_s"]
        turns_total += sum(len(turns(lines)) for _, lines in conv.sessions)
        for name in names:
            for (_, category, gold), ranked in zip(
                conv.questions, out["ranked"][name], strict=True
            ):
                # The harness prefixed session ids with the conversation's name.
                plain = [r.removeprefix(f"{out['prefix']}-") for r in ranked]
                results[name].add(category, plain, gold)
            seconds[name] += out["seconds"][name]
        print(f"{conv.name}: {len(conv.questions)} questions", file=sys.stderr)
    elapsed = time.perf_counter() - started

    table = metrics_table(results, seconds)
    questions = sum(len(c.questions) for c in convs)
    verbatim_provider = results["provider/verbatim"].mean()["R@5"]
    verbatim_hermes = results["hermes/verbatim"].mean()["R@5"]
    best_hermes = results["hermes/content words ORed"].mean()["R@5"]
    paragraphs = [
        "# Hermes Agent with the memstrata provider vs Hermes' built-in recall",
        f"Data: `{args.data.name}`, {len(convs)} LoCoMo conversations, {turns_total} turns, "
        f"{questions} questions (category 5 excluded); one fresh `HERMES_HOME` per "
        f"conversation. Hermes Agent {version} (PyPI), run in its own interpreter.",
        "Same run, same turns: every turn went to Hermes' `state.db` as its agent loop "
        "writes it, and to the memstrata provider through Hermes' `MemoryManager.sync_all` "
        "(new sessions through `commit_session_boundary_async`, as `/new` does). Each "
        "question was asked of Hermes' `session_search` tool (discover mode) and of the "
        "provider's `memstrata_session_search` tool through `MemoryManager.handle_tool_call`, "
        "top 5 sessions each, from a session holding none of the turns.",
        "Query forms: **verbatim** (the question as typed) and **content words ORed** "
        "(Hermes' fair best form: its FTS5 search ANDs the words of a query, so a natural "
        "question rarely matches; the question's content words, memstrata's stopword list "
        "removed, joined with OR is the best a user or model can hand it).",
        table,
        f"Headline: on the verbatim question the provider finds a gold session in its top 5 "
        f"for {verbatim_provider:.3f} of the questions against {verbatim_hermes:.3f} for "
        f"Hermes' built-in search; given its best query form, Hermes reaches "
        f"{best_hermes:.3f}.",
        "Why the provider's figure is below memstrata's own LoCoMo benchmark "
        "(benchmarks/results/recall.md, R@5 0.943): there each session is stored at its "
        "LoCoMo date and messages written on a date the question names rank higher. Hermes "
        "hands a provider a turn without its time, so here every turn carries the moment it "
        "was synced, and neither system can use the dates.",
        f"Cost of syncing through the provider: Hermes' `sync_all` returned in "
        f"{sync_s * 1000 / max(turns_total, 1):.2f} ms per turn on the calling thread (the "
        f"write runs on Hermes' background worker); draining the queued writes after the "
        f"last turn of a conversation took {drain_s:.1f} s in all. Wall time of the run: "
        f"{elapsed:.0f} s. The latency column is the median per tool call: Hermes' includes "
        "its anchored-window reads, the provider's its verbatim excerpts "
        "(`summarize: false`, so no model call).",
        "Reproduce: `python benchmarks/integrations.py ../shared/data/locomo-dev.json "
        "--output benchmarks/results/integrations.md` (builds the Hermes environment on "
        "first use, see `scripts/hermes_venv.py`).",
    ]
    report = "\n\n".join(paragraphs) + "\n"
    print(report)
    if args.output:
        args.output.write_text(report, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
