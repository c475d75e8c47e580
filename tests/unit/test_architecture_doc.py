"""docs/architecture.md's package table says what the code imports (scripts/package_table.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("package_table", ROOT / "scripts" / "package_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_package_has_a_row_and_its_imports_are_the_codes():
    pt = _script()
    found = pt.problems(pt.DOC.read_text(), pt.real_imports())
    assert found == [], (
        "docs/architecture.md is stale (python3 scripts/package_table.py --write):\n" + "\n".join(found)
    )


def test_the_check_sees_a_drifted_row():
    pt = _script()
    imports = pt.real_imports()
    # The sim row claiming it imports records, and the telemetry row missing: both reported.
    lines = [ln if not ln.startswith("| `sim` |") else ln.rsplit("|", 2)[0] + "| records |"
             for ln in pt.DOC.read_text().splitlines()]
    assert any("`sim` imports" in p for p in pt.problems("\n".join(lines), imports))
    assert any(
        "`telemetry` has no row" in p
        for p in pt.problems("\n".join(ln for ln in lines if not ln.startswith("| `telemetry`")), imports)
    )
