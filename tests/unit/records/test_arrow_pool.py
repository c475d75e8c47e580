"""The end of a run merges on Arrow's default pool, then allocates from the C library (what the merge left
free goes back to the system) for the summary and report, and reads whole Parquet files without loading
pyarrow.dataset."""

import subprocess
import sys

import pyarrow as pa

import servelab.bench.finish as finish
from servelab.records.stream import arrow_pool_restored, use_system_arrow_pool


def test_system_pool_after_the_switch_and_the_pool_before_restored():
    before = pa.default_memory_pool().backend_name
    with arrow_pool_restored():
        use_system_arrow_pool()
        assert pa.default_memory_pool().backend_name == "system"
    assert pa.default_memory_pool().backend_name == before


def test_finish_run_merges_on_the_default_pool_and_goes_on_on_the_system_pool(monkeypatch, tmp_path):
    default = pa.default_memory_pool().backend_name
    seen = []

    class Stop(Exception):
        pass

    def merge(*a, **k):
        seen.append(("merge", pa.default_memory_pool().backend_name))
        return 0, 0

    def after(*a, **k):  # the next step after the merge
        seen.append(("after", pa.default_memory_pool().backend_name))
        raise Stop

    class Spec:
        config, run_dir, workers = None, tmp_path, 1

    monkeypatch.setattr(finish, "merge_journals", merge)
    monkeypatch.setattr(finish, "merge_outcomes", after)
    try:
        finish.finish_run(Spec(), [], {})  # type: ignore[arg-type]
    except Stop:
        pass
    assert seen == [("merge", default), ("after", "system")]
    assert pa.default_memory_pool().backend_name == default


def test_reading_a_run_does_not_load_pyarrow_dataset(tmp_path):
    from tests.unit.report.fake_runs import write_run

    d = write_run(tmp_path / "run", 2)
    code = ("import sys; from servelab.records.rundir import read_run; "
            f"r = read_run({str(d)!r}); print(r.requests.num_rows, 'pyarrow.dataset' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["24", "False"]
