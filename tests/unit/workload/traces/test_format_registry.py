"""One registry for trace formats (issue 14): config.trace_formats names them; the loader table, each
loader's keyword options, the replay config, the CLI and docs/traces.md agree with it."""

from __future__ import annotations

import inspect
import re
import typing
from pathlib import Path

import pytest

from servelab.cli.trace_cmd import FORMAT_HELP, normalize_format
from servelab.config.models import ReplayWorkloadConfig
from servelab.config.trace_formats import FORMATS, LOADER_OPTIONS, TraceFormat
from servelab.errors import ConfigError, TraceError
from servelab.workload import traces
from servelab.workload.traces import _LOADERS, load_trace

ROOT = Path(__file__).resolve().parents[4]


def test_the_names_by_hand():
    assert FORMATS == ("azure", "mooncake", "claude-code", "mt-bench", "servelab", "jsonl")
    assert traces.FORMATS is FORMATS


def test_every_format_has_a_loader_and_every_loader_a_format():
    assert tuple(_LOADERS) == FORMATS


def test_each_loader_takes_the_options_the_table_names():
    assert tuple(LOADER_OPTIONS) == FORMATS
    for fmt, loader in _LOADERS.items():
        params = inspect.signature(loader).parameters
        keywords = tuple(p for p in params if params[p].kind is inspect.Parameter.KEYWORD_ONLY)
        assert keywords == LOADER_OPTIONS[fmt], fmt


def test_the_replay_config_accepts_exactly_the_formats():
    ann = ReplayWorkloadConfig.model_fields["format"].annotation
    assert ann is TraceFormat and typing.get_args(ann) == FORMATS
    for fmt in FORMATS:
        assert ReplayWorkloadConfig(path="t", format=fmt).format == fmt
    with pytest.raises(ValueError):
        ReplayWorkloadConfig(path="t", format="sharegpt")
    desc = ReplayWorkloadConfig.model_fields["options"].description
    assert "mooncake: block_tokens" in desc and "servelab: include_warmup" in desc


def test_cli_names_the_same_formats():
    assert FORMAT_HELP == "Trace format: azure, mooncake, claude-code, mt-bench, servelab or jsonl."
    assert [normalize_format(f.upper().replace("-", "_")) for f in FORMATS] == list(FORMATS)
    with pytest.raises(ConfigError, match="expected one of azure, mooncake, claude-code, mt-bench"):
        normalize_format("sharegpt")
    with pytest.raises(TraceError, match="expected one of azure, mooncake, claude-code, mt-bench"):
        load_trace("t", "sharegpt")


def test_docs_traces_md_lists_each_format_once_in_order():
    doc = (ROOT / "docs" / "traces.md").read_text()
    section = doc.split("\n## Formats\n", 1)[1].split("\n#", 1)[0]  # up to the next heading
    assert tuple(re.findall(r"^\| `([a-z-]+)` \|", section, flags=re.M)) == FORMATS
