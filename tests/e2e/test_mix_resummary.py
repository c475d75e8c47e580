"""A mix run's summary recomputed from its stored records (`servelab show`/`report` on a directory without
summary.json) keeps the per-class figures (`classes`), the same as the summary written at the end."""

from __future__ import annotations

import json

from servelab.bench.resummarize import summary_from_run
from servelab.cli.main import main
from servelab.records.rundir import read_run


def test_recomputed_summary_of_a_mix_run_keeps_its_classes(tmp_path, capsys):
    rc = main(["run", "--target", "sim:llama-3.1-8b@1xh100", "--mix", "chat:2,batch-summarize:2",
               "--no-mix-baseline", "--duration", "20", "--out", str(tmp_path), "--no-report"])
    capsys.readouterr()
    assert rc == 0
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    written = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").unlink()
    again = summary_from_run(read_run(run_dir))
    assert set(again.get("classes") or {}) == {"chat", "batch-summarize"}
    for name in ("chat", "batch-summarize"):
        assert again["classes"][name]["requests"] == written["classes"][name]["requests"]
        assert again["classes"][name]["requests"]["sent"] > 0
