"""The run report reads only the request columns its sections use, a row group at a time (issue 12 item 4:
the end of a run's peak memory was the report reading requests.parquet whole), and the page it writes is
the one the whole table gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

import servelab.records.rundir as rundir
from servelab.analysis.attribution import int_columns
from servelab.records.rundir import read_run
from servelab.report.html import REPORT_COLUMNS, write_report, write_run_report
from tests.unit.report.fake_runs import write_run


def _refuse_whole_requests(monkeypatch) -> None:
    whole = rundir.read_parquet

    def refuse(path, *a, **k):
        if Path(path).name == "requests.parquet":
            raise AssertionError("requests.parquet read whole by the report")
        return whole(path, *a, **k)

    monkeypatch.setattr(rundir, "read_parquet", refuse)


def test_the_run_report_reads_requests_a_row_group_at_a_time_and_only_its_columns(tmp_path, monkeypatch):
    d = write_run(tmp_path / "run", 8)
    seen: list[list[str]] = []
    real = rundir._read_streamed

    def spy(path, columns, schema):
        seen.append(list(columns))
        return real(path, columns, schema)

    _refuse_whole_requests(monkeypatch)
    monkeypatch.setattr(rundir, "_read_streamed", spy)
    assert write_run_report(d).exists()
    assert len(seen) == 1 and set(seen[0]) == set(REPORT_COLUMNS)
    assert "token_times_ns" not in seen[0] and "finish_reason" not in seen[0]


def test_the_report_of_the_streamed_columns_is_the_report_of_the_whole_table(tmp_path):
    d = write_run(tmp_path / "run", 8)
    whole = read_run(d)  # every column, the whole file at once
    assert whole.requests.num_rows == 96 and not whole.dropped
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = write_report(whole, tmp_path / "a" / "report.html").read_text()
    b = write_run_report(d, tmp_path / "b" / "report.html").read_text()
    assert "Where the slow requests spend their time" in b
    assert a.replace(str(tmp_path / "a"), "DIR") == b.replace(str(tmp_path / "b"), "DIR")


def test_int_columns_of_an_arrow_table_hand_worked():
    t = pa.Table.from_batches([
        pa.record_batch({"x": pa.array([5, None], pa.int64()), "status": ["ok", "timeout"],
                         "warmup": pa.array([None, True])}),
        pa.record_batch({"x": pa.array([-3], pa.int64()), "status": ["ok"], "warmup": pa.array([False])}),
    ])
    c = int_columns(t, ("x", "missing"))
    assert c["x"].dtype == np.int64 and c["x"].tolist() == [5, 0, -3]
    assert c["x?"].tolist() == [False, True, False]
    assert c["missing"].tolist() == [0, 0, 0] and c["missing?"].tolist() == [True, True, True]
    assert c["status"].tolist() == ["ok", "timeout", "ok"] and c["warmup"].tolist() == [False, True, False]


def test_servelab_report_of_a_finished_run_streams_its_columns(tmp_path, monkeypatch):
    from servelab.cli.main import main

    d = write_run(tmp_path / "run", 8)
    (tmp_path / "a").mkdir()
    a = write_report(read_run(d), tmp_path / "a" / "report.html").read_text()
    _refuse_whole_requests(monkeypatch)
    assert main(["report", str(d)]) in (0, None)
    b = (d / "report.html").read_text()
    assert a.replace(str(tmp_path / "a"), "DIR") == b.replace(str(d), "DIR")
