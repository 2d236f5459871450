"""Regenerate the generated parts of docs/ from the code.

Run `python scripts/gen_docs.py` after changing config defaults; `tests/test_docs.py` fails
while a generated part is stale. Generated parts sit between marker comments:
`<!-- generated:NAME -->` ... `<!-- /generated:NAME -->`.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from memstrata.config import DEFAULTS  # noqa: E402


def config_key_rows() -> list[tuple[str, str, object, str]]:
    """(section, key, default, description) from DEFAULTS and the comments above each key."""
    source = (ROOT / "src" / "memstrata" / "config.py").read_text(encoding="utf-8")
    lines = source.splitlines()
    tree = ast.parse(source)
    rows: list[tuple[str, str, object, str]] = []
    for node in ast.walk(tree):
        target = getattr(node, "target", None) or (getattr(node, "targets", [None]) or [None])[0]
        if not (isinstance(target, ast.Name) and target.id == "DEFAULTS"):
            continue
        assert isinstance(node.value, ast.Dict)  # type: ignore[attr-defined]
        for skey, sval in zip(node.value.keys, node.value.values, strict=True):  # type: ignore[attr-defined]
            assert isinstance(skey, ast.Constant) and isinstance(sval, ast.Dict)
            for key in sval.keys:
                assert isinstance(key, ast.Constant)
                comment: list[str] = []
                i = key.lineno - 2
                while i >= 0 and lines[i].strip().startswith("#"):
                    comment.insert(0, lines[i].strip().lstrip("#").strip())
                    i -= 1
                rows.append(
                    (skey.value, key.value, DEFAULTS[skey.value][key.value], " ".join(comment))
                )
    return rows


def config_table() -> str:
    out = ["| key | default | environment variable | meaning |", "|---|---|---|---|"]
    for section, key, default, text in config_key_rows():
        env = f"MEMSTRATA_{section.upper()}__{key.upper()}"
        shown = repr(default) if not isinstance(default, bool) else str(default).lower()
        cell = text.replace("|", "\\|")
        out.append(f"| `{section}.{key}` | `{shown}` | `{env}` | {cell} |")
    return "\n".join(out)


GENERATORS = {"config-keys": config_table}


def render(text: str) -> str:
    for name, fn in GENERATORS.items():
        pattern = re.compile(
            rf"(<!-- generated:{name} -->\n)(?:.*?\n)?(<!-- /generated:{name} -->)", re.DOTALL
        )
        text = pattern.sub(lambda m, fn=fn: m.group(1) + fn() + "\n" + m.group(2), text)
    return text


def main() -> int:
    changed = 0
    for path in sorted((ROOT / "docs").glob("*.md")):
        old = path.read_text(encoding="utf-8")
        new = render(old)
        if new != old:
            path.write_text(new, encoding="utf-8")
            print(f"updated {path.relative_to(ROOT)}")
            changed += 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
