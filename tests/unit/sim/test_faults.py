from __future__ import annotations

import math
from collections import Counter

import pytest

from servelab.errors import ConfigError, ServelabError
from servelab.sim.faults import (
    ERROR,
    MALFORMED,
    NO_FAULT,
    RESET,
    STALL,
    TRUNCATE,
    FaultConfig,
    FaultPlan,
    from_mapping,
    load_faults,
)

N = 20_000


def _kinds(cfg: FaultConfig, n: int = N) -> Counter:
    return Counter(cfg.plan(i).kind for i in range(n))


def test_default_config_injects_nothing():
    cfg = FaultConfig()
    assert not cfg.enabled
    assert all(cfg.plan(i) is NO_FAULT for i in range(100))
    assert NO_FAULT.clean


def test_plans_are_deterministic_in_seed_and_index():
    a = FaultConfig(seed=7, error_rate=0.2, reset_rate=0.2, stall_rate=0.1)
    b = FaultConfig(seed=7, error_rate=0.2, reset_rate=0.2, stall_rate=0.1)
    c = FaultConfig(seed=8, error_rate=0.2, reset_rate=0.2, stall_rate=0.1)
    pa = [a.plan(i) for i in range(500)]
    assert pa == [b.plan(i) for i in range(500)]
    # Order of asking does not matter: decisions depend on the index only.
    assert [a.plan(i) for i in reversed(range(500))] == list(reversed(pa))
    assert pa != [c.plan(i) for i in range(500)]


def _within(count: int, rate: float, n: int = N) -> bool:
    sd = math.sqrt(n * rate * (1 - rate))
    return abs(count - n * rate) <= 5 * sd + 1


def test_each_kind_happens_at_its_rate_and_kinds_are_exclusive():
    rates = {ERROR: 0.1, RESET: 0.05, STALL: 0.15, MALFORMED: 0.02, TRUNCATE: 0.08}
    cfg = FaultConfig(seed=3, error_rate=rates[ERROR], reset_rate=rates[RESET], stall_rate=rates[STALL],
                      malformed_rate=rates[MALFORMED], truncate_rate=rates[TRUNCATE])
    kinds = _kinds(cfg)
    for kind, rate in rates.items():
        assert _within(kinds[kind], rate), (kind, kinds[kind])
    assert _within(kinds[None], 1 - sum(rates.values()))
    assert sum(kinds.values()) == N


def test_rate_one_faults_every_request_with_its_shape():
    cfg = FaultConfig(stall_rate=1.0, stall_s=2.5, stall_after_chunks=3)
    plans = {cfg.plan(i) for i in range(200)}
    assert plans == {FaultPlan(STALL, after_chunks=3, stall_s=2.5)}
    cfg = FaultConfig(reset_rate=1.0, reset_after_chunks=0)
    assert {cfg.plan(i).kind for i in range(200)} == {RESET}
    assert {cfg.plan(i).after_chunks for i in range(200)} == {0}


def test_error_status_is_drawn_from_the_given_set():
    cfg = FaultConfig(error_rate=1.0, error_status=(429, 500, 503))
    seen = Counter(cfg.plan(i).status for i in range(3000))
    assert set(seen) == {429, 500, 503}
    assert all(_within(c, 1 / 3, 3000) for c in seen.values())


def test_slow_first_byte_is_independent_of_the_kind():
    cfg = FaultConfig(seed=1, error_rate=0.5, slow_first_byte_rate=0.5, slow_first_byte_s=0.25)
    plans = [cfg.plan(i) for i in range(N)]
    both = sum(1 for p in plans if p.kind == ERROR and p.first_byte_delay_s == 0.25)
    assert _within(both, 0.25)
    assert {p.first_byte_delay_s for p in plans} == {0.0, 0.25}


def test_a_delay_without_a_rate_delays_every_request():
    cfg = FaultConfig(slow_first_byte_s=0.1)
    assert cfg.enabled
    assert {cfg.plan(i) for i in range(50)} == {FaultPlan(first_byte_delay_s=0.1)}


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"error_rate": 1.5}, "error_rate"),
        ({"reset_rate": -0.1}, "reset_rate"),
        ({"error_rate": 0.6, "truncate_rate": 0.6}, "at most 1"),
        ({"stall_after_chunks": -1}, "stall_after_chunks"),
        ({"stall_s": -2.0}, "stall_s"),
        ({"error_status": (404,)}, "404"),
        ({"error_status": ()}, "error_status"),
    ],
)
def test_bad_values_raise_config_error_naming_the_key(kwargs, needle):
    with pytest.raises(ConfigError) as e:
        FaultConfig(**kwargs)
    assert needle in str(e.value)
    assert isinstance(e.value, ServelabError)


def test_yaml_file_then_flags_override(tmp_path):
    f = tmp_path / "faults.yaml"
    f.write_text("seed: 4\nerror_rate: 0.2\nerror_status: [429, 503]\nstall_s: 3\n")
    cfg = load_faults(f)
    assert (cfg.seed, cfg.error_rate, cfg.error_status, cfg.stall_s) == (4, 0.2, (429, 503), 3.0)
    cfg2 = load_faults(f, error_rate=0.5, error_status=500, stall_s=None)
    assert (cfg2.seed, cfg2.error_rate, cfg2.error_status, cfg2.stall_s) == (4, 0.5, (500,), 3.0)


def test_yaml_may_nest_under_a_faults_key(tmp_path):
    f = tmp_path / "faults.yaml"
    f.write_text("faults:\n  truncate_rate: 1\n  truncate_after_chunks: 2\n")
    cfg = load_faults(f)
    assert cfg.plan(0) == FaultPlan(TRUNCATE, after_chunks=2)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("error_rat: 0.1\n", "error_rat"),
        ("- 1\n- 2\n", "mapping"),
        ("stall_after_chunks: 1.5\n", "integer"),
        ("error_rate: high\n", "number"),
        ("error_rate: [0.1\n", "YAML"),
        ("error_status: [five]\n", "error_status"),
    ],
)
def test_bad_yaml_raises_config_error(tmp_path, text, needle):
    f = tmp_path / "faults.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_faults(f)
    assert needle in str(e.value)
    assert str(f) in str(e.value)


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot be read"):
        load_faults(tmp_path / "nope.yaml")


def test_empty_mapping_is_the_default():
    assert from_mapping({}) == FaultConfig()
