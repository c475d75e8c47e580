"""Every simulated run says how far to trust it: its fidelity class and the measured check-set error of its
slice (sim/fidelity.MEASURED, from benchmarks/sim_fidelity.py), or none where no published row is close."""

import pytest

from servelab.report.terminal import _fidelity_check
from servelab.sim.fidelity import MEASURED, fidelity, measured
from servelab.sim.target import parse_sim_target


@pytest.mark.parametrize(
    "target, backend, cls, pct, rows, same",
    [
        # dense on Hopper: only TensorRT-LLM rows exist, so vLLM's run borrows them and says so
        ("sim:llama-3.1-8b@1xh100", "roofline", "calibrated", 8.2, 16, False),
        ("sim:llama-3.1-8b@1xh100,engine=trtllm", "roofline", "calibrated", 8.2, 16, True),
        ("sim:deepseek-v3@8xh200,dtype=fp8", "roofline", "approximate", 15.6, 12, True),
        ("sim:deepseek-v3@8xh200,dtype=fp8,engine=trtllm", "silicon", "silicon", 7.1, 25, True),
        ("sim:gpt-oss-120b@2xb200,engine=trtllm", "roofline", "approximate", 11.4, 48, True),
        ("sim:llama-3.1-70b@8xmi300x", "roofline", "prior", 17.0, 4, True),
    ],
)
def test_fidelity_class_and_its_measured_slice(target, backend, cls, pct, rows, same):
    f = fidelity(parse_sim_target(target), backend)
    assert f["class"] == cls
    assert f["check"] == {"median_abs_error_pct": pct, "published_rows": rows, "slice": f["check"]["slice"],
                          "same_engine": same}


def test_no_published_row_no_figure():
    f = fidelity(parse_sim_target("sim:llama-3.1-8b@8xtpu-v6e"), "roofline")
    assert f["class"] == "unvalidated" and f["check"] is None
    assert measured("silicon", "amd-cdna3", False, "vllm") is None  # silicon never prices AMD
    # the AMD rows are MI300X's: an MI355X (CDNA4) run borrows nothing from them
    f = fidelity(parse_sim_target("sim:llama-3.1-70b@8xmi355x"), "roofline")
    assert f["class"] == "unvalidated" and f["check"] is None
    assert _fidelity_check(None) == ""


def test_terminal_line_states_the_figure_and_a_borrowed_engine():
    check = measured("roofline", "nvidia-hopper", False, "vllm")
    assert _fidelity_check(check) == ("; 8.2% median error on 16 published results: "
                                      "TensorRT-LLM throughput, "
                                      "another engine")


def test_measured_figures_are_percentages_of_real_rows():
    for (backend, _kind, _moe, eng), (pct, n, what) in MEASURED.items():
        assert backend in ("silicon", "roofline") and eng in ("vllm", "sglang", "trtllm")
        assert 0 < pct < 100 and n >= 3 and what


def test_the_benchmark_names_figures_runs_report_that_it_no_longer_measures(capsys):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    import sim_fidelity

    key = ("roofline", "hopper", False, "trtllm")
    pct, n, _ = MEASURED[key]
    same = [("roofline dense hopper trtllm throughput", "check", pct / 100)] * n
    same += [("roofline moe hopper vllm TTFT", "check", 0.9)]  # latency-at-concurrency slices: not reported
    assert sim_fidelity.stale_fidelity_figures(same) == []
    assert "up to date" in capsys.readouterr().out
    moved = same[:-1] + [("roofline dense hopper trtllm throughput", "check", 0.5)]  # n + 1 rows
    assert sim_fidelity.stale_fidelity_figures(moved) == [
        f"roofline dense hopper trtllm throughput: {pct}% (n={n + 1}), runs report {pct}% (n={n})"]
    new = [("roofline dense tpu vllm throughput", "check", 0.3)]
    assert sim_fidelity.stale_fidelity_figures(new) == [
        "roofline dense tpu vllm throughput: 30.0% (n=1) is not in servelab.sim.fidelity.MEASURED"]
