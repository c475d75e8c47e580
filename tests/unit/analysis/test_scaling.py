import pytest

from servelab.analysis.scaling import peak_scaling, scaling_bend, scaling_rows
from servelab.errors import ConfigError


def _topos():
    # single node saturates at 1000 tok/s; 2 nodes scale well, 4 nodes lose half to communication
    return {
        1: {16: 800.0, 64: 1000.0},
        2: {16: 1500.0, 64: 1900.0},
        4: {16: 1600.0, 64: 2000.0},
    }


def test_rows_per_level_against_single_node():
    rows = {(r["nodes"], r["level"]): r for r in scaling_rows(_topos())}
    assert rows[(1, 64.0)]["efficiency"] == pytest.approx(1.0)
    assert rows[(2, 16.0)]["efficiency"] == pytest.approx(1500 / 1600)
    assert rows[(4, 64.0)]["efficiency"] == pytest.approx(2000 / 4000)


def test_peaks_and_bend():
    peaks = peak_scaling(_topos())
    assert [p["efficiency"] for p in peaks] == pytest.approx([1.0, 0.95, 0.5])
    bend = scaling_bend(_topos())
    assert bend["nodes"] == 2 and bend["first_poor"] == 4 and "50%" in bend["reason"]


def test_no_bend_when_linear_and_base_not_one():
    topos = {2: {8: 200.0}, 4: {8: 400.0}, 8: {8: 790.0}}
    assert scaling_rows(topos)[-1]["efficiency"] == pytest.approx(790 / 800)
    b = scaling_bend(topos)
    assert b["nodes"] is None and "no bend" in b["reason"]


def test_bad_topologies():
    with pytest.raises(ConfigError):
        scaling_rows({})
    with pytest.raises(ConfigError):
        scaling_rows({0: {1: 1.0}})
    assert scaling_bend({1: {1: 5.0}})["nodes"] is None


def test_peak_efficiency_is_at_the_same_level():
    # 1 node peaks at 64 (1000) and falls to 800 at 256; 2 nodes peak at 256 (2640)
    peaks = peak_scaling({1: {64: 1000.0, 256: 800.0}, 2: {64: 1500.0, 256: 2640.0}})
    two = peaks[1]
    assert two["peak_level"] == 256 and two["ideal"] == pytest.approx(1600)
    assert two["efficiency"] == pytest.approx(2640 / 1600)  # same level: 165 %
    assert two["peak_vs_peak"] == pytest.approx(1.32)  # the old headline: peaks at different levels
    assert peak_scaling({1: {64: 1000.0}, 2: {128: 2000.0}})[1]["efficiency"] is None  # base never ran 128
