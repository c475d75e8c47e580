#!/usr/bin/env python3
"""docs/architecture.md's package table, with the "imports" column computed from the code.

Every top-level package and module of ``servelab`` gets a row; its "imports" cell lists the other top-level
parts it imports directly (grimp, the graph import-linter checks: module-level and function-level imports),
ground modules (``errors``, ``clock``) last. The "owns" cells are the doc's own words, kept as they are.

    python3 scripts/package_table.py           # print the table
    python3 scripts/package_table.py --write   # rewrite the imports column in docs/architecture.md
    python3 scripts/package_table.py --check   # exit 1 when the doc's table differs from the code

tests/unit/test_architecture_doc.py runs the check.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
GROUND = ("errors", "clock")
_ROW = re.compile(r"^\| `(?P<name>[a-z_]+)`(?P<kind> \(module\))? \| (?P<owns>.*) \| (?P<imports>[^|]*) \|$")


def real_imports() -> dict[str, list[str]]:
    """Top-level part -> the other top-level parts it imports directly, ground modules last."""
    import grimp

    graph = grimp.build_graph("servelab")
    deps: dict[str, set[str]] = defaultdict(set)
    for module in graph.modules:
        parts = module.split(".")
        if len(parts) < 2:
            continue
        deps[parts[1]]  # noqa: B018 - every part gets an entry, even with no imports
        for imported in graph.find_modules_directly_imported_by(module):
            other = imported.split(".")
            if len(other) >= 2 and other[1] != parts[1]:
                deps[parts[1]].add(other[1])
    return {k: sorted(v - set(GROUND)) + [g for g in GROUND if g in v] for k, v in deps.items()}


def cell(imports: list[str]) -> str:
    return ", ".join(imports) if imports else "—"


def rows_in_doc(text: str) -> dict[str, re.Match[str]]:
    return {m["name"]: m for m in (_ROW.match(line) for line in text.splitlines()) if m}


def updated(text: str, imports: dict[str, list[str]]) -> str:
    """``text`` with each row's imports cell replaced by the code's, and a row for each missing part."""
    out, seen, last_row = [], set(), -1
    for line in text.splitlines():
        m = _ROW.match(line)
        if m and m["name"] in imports:
            seen.add(m["name"])
            line = f"| `{m['name']}`{m['kind'] or ''} | {m['owns']} | {cell(imports[m['name']])} |"
            last_row = len(out)
        out.append(line)
    missing = [f"| `{k}` | (describe it) | {cell(v)} |" for k, v in sorted(imports.items()) if k not in seen]
    out[last_row + 1:last_row + 1] = missing
    return "\n".join(out) + "\n"


def problems(text: str, imports: dict[str, list[str]]) -> list[str]:
    rows = rows_in_doc(text)
    out = [f"`{k}` has no row" for k in sorted(set(imports) - set(rows))]
    out += [f"`{k}` has a row but is not in the code" for k in sorted(set(rows) - set(imports))]
    for k in sorted(set(rows) & set(imports)):
        if rows[k]["imports"].strip() != cell(imports[k]):
            out.append(f"`{k}` imports: doc says {rows[k]['imports'].strip()!r}, code: {cell(imports[k])!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    imports = real_imports()
    text = DOC.read_text()
    if args.write:
        DOC.write_text(updated(text, imports))
        return 0
    if args.check:
        found = problems(text, imports)
        for p in found:
            print(p, file=sys.stderr)
        if found:
            print("fix: python3 scripts/package_table.py --write", file=sys.stderr)
        return 1 if found else 0
    print("| package | imports |\n|---|---|")
    for k, v in sorted(imports.items()):
        print(f"| `{k}` | {cell(v)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
