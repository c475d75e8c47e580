"""`servelab check` as a regression gate against the simulator: an injected slowdown fails, a rerun passes."""

import json
import re
from pathlib import Path

from servelab.cli.main import main

TARGET = "sim:llama-3.1-8b@1xh100"
LOAD = ["--input-tokens", "256", "--output-tokens", "128", "--ignore-eos"]


def _run(out: Path, capsys, target: str = TARGET) -> str:
    code = main(["run", "--target", target, "--out", str(out), "--concurrency", "4", "--requests", "64",
                 "--no-report", *LOAD])
    err = capsys.readouterr().err
    assert code == 0, err
    m = re.search(r"run written to (\S+)", err)
    assert m, err
    return m.group(1)


def _check(capsys, base: str, cand: str) -> tuple[int, dict]:
    code = main(["check", base, cand, "--max-regression", "10%", "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_rerun_of_the_same_configuration_passes(tmp_path, capsys):
    base = _run(tmp_path / "base", capsys)
    again = _run(tmp_path / "again", capsys)
    code, result = _check(capsys, base, again)
    assert code == 0, result
    assert result["failures"] == []


def test_injected_two_fold_slowdown_fails(tmp_path, capsys):
    base = _run(tmp_path / "base", capsys)
    slow = _run(tmp_path / "slow", capsys, TARGET + ",slowdown=2")
    manifest = json.loads((Path(slow) / "manifest.json").read_text())
    assert '"slowdown": 2.0' in json.dumps(manifest)  # the what-if is recorded with the target's facts
    code, result = _check(capsys, base, slow)
    assert code == 1
    metrics = {f["metric"] for f in result["failures"]}
    assert "e2e_ms p50" in metrics, result
    e2e = next(f for f in result["failures"] if f["metric"] == "e2e_ms p50")
    assert 0.8 < e2e["change"] < 1.2, e2e  # every step twice as long: latency about doubles
    # The gate is directional: the slow run as baseline and the normal one as candidate is no regression.
    code, result = _check(capsys, slow, base)
    assert code == 0, result


def test_candidate_missing_a_baseline_level_fails(tmp_path, capsys):
    sweep = ["sweep", "--target", TARGET, "--requests", "16", "--no-report", "--json", *LOAD]
    assert main([*sweep, "--out", str(tmp_path / "wide"), "--concurrency", "1,4"]) == 0
    wide = json.loads(capsys.readouterr().out)
    assert main([*sweep, "--out", str(tmp_path / "narrow"), "--concurrency", "1"]) == 0
    narrow = json.loads(capsys.readouterr().out)
    wide_dir, narrow_dir = _sweep_dir(tmp_path / "wide", wide), _sweep_dir(tmp_path / "narrow", narrow)
    code, result = _check(capsys, wide_dir, narrow_dir)
    assert code == 1
    assert [f["metric"] for f in result["failures"]] == ["level"]
    assert result["failures"][0]["level"] == 4
    # The other way round every baseline level is present (the same configuration at level 1): it passes.
    code, result = _check(capsys, narrow_dir, wide_dir)
    assert code == 0, result


def _sweep_dir(out: Path, state: dict) -> str:
    for key in ("dir", "sweep_dir", "path"):
        if isinstance(state.get(key), str):
            return state[key]
    found = [p.parent for p in out.rglob("sweep.json")]
    assert len(found) == 1, found
    return str(found[0])
