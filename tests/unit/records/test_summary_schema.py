"""summary.json has a schema shipped in the package, and a real run's summary conforms to it."""

from __future__ import annotations

import json

from servelab.cli.main import main
from servelab.records.summary import SCHEMA_PATH, dig, schema_errors, summary_schema


def test_the_schema_ships_in_the_package_and_is_a_valid_schema():
    import jsonschema

    assert SCHEMA_PATH.parent.name == "records" and SCHEMA_PATH.is_file()
    jsonschema.Draft202012Validator.check_schema(summary_schema())


def test_a_real_runs_summary_conforms(tmp_path):
    assert (
        main(
            [
                "run",
                "--requests",
                "24",
                "--concurrency",
                "4",
                "--input-tokens",
                "32",
                "--output-tokens",
                "8",
                "--out",
                str(tmp_path),
                "--no-report",
            ]
        )
        == 0
    )
    summary = json.loads(next(tmp_path.glob("*/summary.json")).read_text())
    assert schema_errors(summary) == []
    assert summary["requests"]["sent"] == 24


def test_a_broken_summary_is_reported_where_it_breaks():
    bad = {
        "requests": {"sent": -1, "ok": 0, "failed": {}, "cancelled": 0},
        "metrics": {},
        "throughput": {},
        "tokens": {"input": 0, "output": 0, "source": "guess"},
        "errors": {"by_status": {}},
        "valid": "yes",
        "invalid_reasons": [],
        "units": {},
    }
    errs = schema_errors(bad)
    assert any(e.startswith("requests/sent:") for e in errs)
    assert any(e.startswith("tokens/source:") for e in errs)
    assert any(e.startswith("valid:") for e in errs)
    assert any("'run' is a required property" in e for e in errs)
    assert any("requests_per_s" in e for e in errs)


def test_dig_reads_optional_paths():
    d = {"a": {"b": {"c": 3}}, "x": 1}
    assert dig(d, "a", "b", "c") == 3 and dig(d, "a", "z") is None and dig(d, "x", "y") is None
    assert dig(None, "a") is None and dig(d) is d
