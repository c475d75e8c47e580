"""The CLI end to end against the in-process simulator (virtual time: fast and deterministic)."""

import json

import pyarrow.parquet as pq
import pytest

from servelab.cli.main import main
from servelab.records.rundir import read_run

SMALL = ["--requests", "24", "--input-tokens", "64", "--output-tokens", "16"]


def _run_dir(capsys) -> str:
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if x.startswith("run written to "))
    return line.removeprefix("run written to ").strip()


def test_run_writes_a_complete_run_directory_with_the_summary_contract(tmp_path, capsys):
    assert main(["run", "--out", str(tmp_path), "--concurrency", "4", "--json", *SMALL]) == 0
    out = capsys.readouterr()
    summary = json.loads(out.out)
    run_dir = next(x for x in out.err.splitlines() if x.startswith("run written to ")).split(" to ", 1)[1]
    for key in ("sent", "ok", "failed", "cancelled"):
        assert key in summary["requests"]
    assert summary["requests"]["sent"] == 24 == summary["requests"]["ok"]
    for m in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "queue_ms"):
        assert set(summary["metrics"][m]) >= {"mean", "p50", "p90", "p95", "p99", "max", "n"}
    assert set(summary["throughput"]) >= {"requests_per_s", "output_tokens_per_s", "input_tokens_per_s",
                                          "total_tokens_per_s"}
    assert summary["tokens"]["source"] == "usage" and summary["valid"] is True
    server = summary["server"]  # the engine's own counters, scraped on virtual time, agree with the client
    assert server["available"] and server["engine"] == "servelab-sim"
    assert server["token_agreement"]["generation_tokens_total"]["relative_difference"] == 0
    assert server["counters"]["request_success_total"] == 24
    data = read_run(run_dir)
    assert data.complete and data.requests.num_rows == 24
    assert data.manifest["target"]["engine"] == "servelab-sim"
    assert data.manifest["config"]["load"]["concurrency"] == 4
    assert pq.read_table(f"{run_dir}/requests.parquet").num_rows == 24
    assert (tmp_path / run_dir.split("/")[-1] / "report.html").exists()


def test_same_seed_same_figures(tmp_path, capsys):
    outs = []
    for _ in range(2):
        assert (
            main(["run", "--out", str(tmp_path), "--concurrency", "3", "--seed", "7", "--json", *SMALL]) == 0
        )
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0]["metrics"]["e2e_ms"] == outs[1]["metrics"]["e2e_ms"]
    assert outs[0]["tokens"] == outs[1]["tokens"]


def test_show_prints_a_stored_run(tmp_path, capsys):
    assert main(["run", "--out", str(tmp_path), "--no-report", *SMALL]) == 0
    run_dir = _run_dir(capsys)
    assert main(["show", run_dir]) == 0
    assert "TTFT" in capsys.readouterr().out


def test_open_loop_records_intended_send_times(tmp_path, capsys):
    assert main(["run", "--out", str(tmp_path), "--rate", "50", "--arrival", "gamma", "--burstiness", "0.5",
                 "--no-report", *SMALL]) == 0
    data = read_run(_run_dir(capsys))
    t = data.requests.to_pydict()
    assert all(s >= i for s, i in zip(t["sent_ns"], t["intended_ns"], strict=True))
    assert len(set(t["intended_ns"])) == 24


@pytest.mark.parametrize("args,needle", [
    (["--rate", "-1"], "load.rate"),
    (["--output-tokens", "0"], "workload.output_tokens"),
    (["--concurrency", "0"], "load.concurrency"),
    (["--target", "sim:no-such-model@1xh100"], "llama-3.1-8b"),
    (["--target", "sim:llama-3.1-8b@1xh100,bogus=1"], "max_num_seqs"),
    (["--target", "ftp://x"], "target.url"),
    (["--sessions", "2"], "--profile"),
    (["--profile", "no-such-profile"], "coding-agent"),
])
def test_bad_input_exits_2_with_a_message_naming_the_field(tmp_path, capsys, args, needle):
    assert main(["run", "--out", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert needle.lower() in err.lower() and "Traceback" not in err


def test_bad_config_file_keys_and_percentiles(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("percentiles: [50, 120]\nworkload:\n  inputs: 5\n")
    assert main(["run", "--config", str(cfg), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "percentiles" in err and "workload.inputs" in err


def test_unreachable_http_target_is_a_clear_error(tmp_path, capsys):
    assert main(["run", "--target", "http://127.0.0.1:9/v1", "--out", str(tmp_path), "--requests", "2"]) == 2
    err = capsys.readouterr().err
    assert "127.0.0.1:9" in err and "Traceback" not in err


def test_agent_profile_run_reports_sessions(tmp_path, capsys):
    assert main(["run", "--profile", "chat", "--sessions", "4", "--max-sessions", "8", "--out", str(tmp_path),
                 "--json", "--no-report"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["sessions"]["started"] == 8
    assert s["sessions"]["completed"] + s["sessions"]["failed"] + s["sessions"]["timed_out"] <= 8
    assert set(s["time_split"]) >= {"model", "tool", "waiting"}


@pytest.mark.parametrize("args", [["run", "--bogus"], ["run", "--concurrency", "abc"], ["nosuchcommand"]])
def test_usage_errors_exit_2_without_traceback(args, capsys):
    assert main(args) == 2
    assert "Traceback" not in capsys.readouterr().err
