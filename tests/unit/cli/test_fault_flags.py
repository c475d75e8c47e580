"""--idle-timeout and --max-response-bytes reach the target config the HTTP transport reads."""

from __future__ import annotations

import pytest

from servelab.cli.options import build_run_config
from servelab.errors import ServelabError


def test_flags_set_the_idle_timeout_and_the_byte_cap():
    cfg = build_run_config(None, {"target": "http://127.0.0.1:8000/v1", "idle_timeout": 7.5,
                                  "max_response_bytes": 1 << 20})
    assert cfg.target.timeouts.idle_s == 7.5 and cfg.target.max_response_bytes == 1 << 20


def test_defaults_when_not_given():
    cfg = build_run_config(None, {"target": "http://127.0.0.1:8000/v1"})
    assert cfg.target.timeouts.idle_s == 60.0 and cfg.target.max_response_bytes == 64 * 1024 * 1024


@pytest.mark.parametrize(
    "flag, value", [("idle_timeout", 0), ("idle_timeout", -1), ("max_response_bytes", 10)]
)
def test_out_of_range_values_are_refused(flag, value):
    with pytest.raises(ServelabError):
        build_run_config(None, {"target": "http://127.0.0.1:8000/v1", flag: value})
