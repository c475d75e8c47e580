"""A run's report does not read the token-times column whole: only the ITL histogram needs it, and it reads
``requests.parquet`` a batch at a time, drawing every gap up to ``MAX_ITL_DRAWN`` and every k-th past it."""

import numpy as np
import pyarrow.parquet as pq

import servelab.records.rundir as rundir
import servelab.report.html as html
from servelab.analysis.compare import request_samples
from servelab.records.stream import iter_tables
from tests.unit.report.fake_runs import write_run


def _spy(monkeypatch):
    drawn, read = {}, []
    hist = html.plots.histogram

    def histogram(values, path, *, title, total=None, **kw):
        drawn[title] = (np.asarray(values), total)
        return hist(values, path, title=title, **kw, **({} if total is None else {"total": total}))

    real_read = rundir.read_parquet

    def read_parquet(path, columns=None):
        read.append((str(path), columns))
        return real_read(path, columns)

    monkeypatch.setattr(html.plots, "histogram", histogram)
    monkeypatch.setattr(rundir, "read_parquet", read_parquet)
    # batches of 7 rows: the every-k-th draw runs across batch edges
    monkeypatch.setattr(html, "iter_tables", lambda p, c: iter_tables(p, c, batch_rows=7), raising=False)
    return drawn, read


def test_report_draws_itl_streamed_and_every_kth_gap_past_the_cap(tmp_path, monkeypatch):
    d = write_run(tmp_path / "run", 8)  # 8 users x 12 requests, one failed (id 13): 95 ok x 47 gaps
    whole = request_samples(pq.read_table(d / "requests.parquet"), "closed")
    drawn, read = _spy(monkeypatch)
    monkeypatch.setattr(html, "MAX_ITL_DRAWN", 1000, raising=False)
    html.write_run_report(d)
    itl, total = drawn["Inter-token latency"]
    assert total == 95 * 47 == 4465
    # k = ceil(4465 / 1000) = 5: gaps 0, 5, 10, ... of the run in file order, 893 of them
    assert itl.size == 893 and np.array_equal(itl, whole["itl_ms"][::5])
    assert np.array_equal(drawn["Time to first token"][0], whole["ttft_ms"])  # every request's TTFT
    requests_reads = [cols for p, cols in read if p.endswith("requests.parquet")]
    assert requests_reads == []  # its columns are read a row group at a time (test_report_streamed_read)


def test_report_draws_every_gap_under_the_cap(tmp_path, monkeypatch):
    d = write_run(tmp_path / "run", 8)
    whole = request_samples(pq.read_table(d / "requests.parquet"), "closed")
    drawn, _ = _spy(monkeypatch)
    html.write_run_report(d)
    itl, total = drawn["Inter-token latency"]
    assert total == 4465 and np.array_equal(itl, whole["itl_ms"])  # the same values as a whole read

