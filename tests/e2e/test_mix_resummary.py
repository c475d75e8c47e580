"""A mix run's summary recomputed from its stored records (`servelab show`/`report` on a directory without
summary.json) keeps the per-class figures (`classes`), the same as the summary written at the end."""

from __future__ import annotations

from tests.e2e.resummary import written_and_recomputed


def test_recomputed_summary_of_a_mix_run_keeps_its_classes(tmp_path, capsys):
    written, again, _ = written_and_recomputed(
        ["run", "--target", "sim:llama-3.1-8b@1xh100", "--mix", "chat:2,batch-summarize:2",
         "--no-mix-baseline", "--duration", "20"], tmp_path, capsys)
    assert set(again.get("classes") or {}) == {"chat", "batch-summarize"}
    for name in ("chat", "batch-summarize"):
        assert again["classes"][name]["requests"] == written["classes"][name]["requests"]
        assert again["classes"][name]["requests"]["sent"] > 0
