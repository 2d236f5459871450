"""What the gold sessions missing from the keyword top 5 share with their question.

Usage::

    python benchmarks/recall_misses.py PATH/locomo-dev.json [--half a|b]

For every LoCoMo question (category 5 left out) and every gold session the shipped
keyword search leaves out of its top 5, counts the question's content words (stopwords
and the speakers' names left out) that some message of that session holds, as the word
index reads them (stemmed). A miss whose session shares no content word with the
question is one that only meaning can find; one that shares words lost the ranking to
sessions holding the same words. Prints the counts overall and per category.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import recall  # noqa: E402  (the benchmarks' own loader and ranker, by path)
from memstrata.query.compile import STOPWORDS  # noqa: E402

KINDS = ("no content word shared", "one shared", "two or more shared")


def kind(shared: int) -> str:
    return KINDS[min(shared, 2)]


def count(path: Path, half: str | None) -> tuple[Counter[str], Counter[tuple[int, str]]]:
    """Missing gold sessions by what they share with the question, overall and per
    category."""
    ranker = recall.rank_memstrata()
    overall: Counter[str] = Counter()
    per_category: Counter[tuple[int, str]] = Counter()
    for conv in recall.load(path, None, half):
        with tempfile.TemporaryDirectory() as folder, recall.open_store(Path(folder), None) as st:
            recall.fill(st, conv)
            names = {
                text.split(":")[0].strip().lower() for _, _, ms in conv.sessions for _, text in ms
            }
            with st.read_conn() as conn:

                def sessions_of(word: str) -> set[str]:
                    rows = conn.execute(
                        "SELECT DISTINCT m.session_id FROM messages_fts f "
                        "JOIN messages m ON m.id = f.rowid WHERE messages_fts MATCH ?",
                        ('"' + word.replace('"', '""') + '"',),
                    ).fetchall()
                    return {str(r[0]) for r in rows}

                for question, category, gold in conv.questions:
                    missing = gold - set(ranker(st, question)[:5])
                    if not missing:
                        continue
                    words = {w.lower() for w in re.findall(r"[A-Za-z0-9']+", question)}
                    content = [w for w in words if w not in STOPWORDS and w not in names]
                    holders = {w: sessions_of(w) for w in content if len(w) > 1}
                    for session in missing:
                        k = kind(sum(session in held for held in holders.values()))
                        overall[k] += 1
                        per_category[(category, k)] += 1
    return overall, per_category


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", type=Path, help="a LoCoMo-format JSON file")
    parser.add_argument("--half", choices=("a", "b"), default=None)
    args = parser.parse_args(argv)
    overall, per_category = count(args.path, args.half)
    total = sum(overall.values())
    print(f"gold sessions missing from the top 5: {total}")
    for k in KINDS:
        print(f"  {k}: {overall[k]} ({overall[k] / total:.0%})" if total else f"  {k}: 0")
    for (category, k), n in sorted(per_category.items()):
        print(f"  category {category}, {k}: {n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
