"""The amd-cdna3 roofline constants come from public MI300X measurements (hardware.yaml cites them)."""

import pytest

from servelab.sim.catalog import default_catalog
from servelab.sim.costmodel import CostModel
from servelab.sim.target import parse_sim_target

SPEC = "sim:llama-3.1-70b@8xmi300x,tp=8,dtype=fp8,kv_dtype=fp8,backend=roofline"


def test_cdna3_constants_are_the_sourced_values():
    fam = default_catalog().families["amd-cdna3"]
    # HBM: MI300X BabelStream 81% of peak x Hopper's fitted 0.70 / H100's measured 86.7% = 0.654 -> 0.65.
    assert fam.mem_eff == pytest.approx(0.65)
    # GEMMs: ~45% of peak measured on MI300X; decode at Hopper's decode/prefill ratio 0.45 / 0.70.
    assert fam.compute_eff == pytest.approx(0.45)
    assert fam.decode_compute_eff == pytest.approx(0.29)
    # xGMI: ~48 of 64 GB/s a link usable.
    assert fam.comm_eff == pytest.approx(0.75)
    assert "2510.27583" in fam.source and "mi300x-rccl-xgmi" in fam.source


def test_mi300x_roofline_uses_the_sourced_bandwidth_and_gemm_rates():
    cost = CostModel(parse_sim_target(SPEC))
    # 5.3 TB/s x 0.65 = 3.445 TB/s of weight and KV reads.
    assert cost.bw == pytest.approx(3.445e12)
    # Decode-sized GEMMs (<= 64 rows) at 0.29 of peak, prefill-sized (>= 2048 rows) at 0.45.
    assert cost._eff(1) == pytest.approx(0.29)
    assert cost._eff(4096) == pytest.approx(0.45)


def test_mi300x_mesh_all_reduce_spreads_over_all_seven_links():
    # Two-shot (reduce-scatter + all-gather) over the 8-GPU mesh: each GPU sends 7/8 of S twice, split over
    # its 7 links of 64 GB/s x 0.75 = 48 GB/s a direction, i.e. over 336 GB/s together (not one link's 48).
    # S = 64 decodes x 16384 hidden x 2 B = 2,097,152 B: 15/3 us + 1.75 x S / 336e9 = 5 + 10.92 = 15.92 us.
    cost = CostModel(parse_sim_target("sim:llama-3.1-405b@8xmi300x,tp=8,dtype=fp8,backend=roofline"))
    s = 64 * 16384 * 2.0
    assert cost._allreduce(s, 8) == pytest.approx(5e-6 + 1.75 * s / 336e9, rel=1e-9)
    assert cost._allreduce(s, 8) == pytest.approx(15.92e-6, abs=0.01e-6)
