"""The end of a run allocates Arrow memory from the C library (freed memory goes back to the system for the
summary and report that follow), and reads whole Parquet files without loading pyarrow.dataset."""

import subprocess
import sys

import pyarrow as pa

import servelab.bench.finish as finish
from servelab.records.stream import system_arrow_pool


def test_system_pool_inside_and_the_pool_before_restored():
    before = pa.default_memory_pool().backend_name
    with system_arrow_pool():
        assert pa.default_memory_pool().backend_name == "system"
    assert pa.default_memory_pool().backend_name == before


def test_finish_run_summarises_on_the_system_pool(monkeypatch):
    seen = []

    class Stop(Exception):
        pass

    def fake(*a, **k):
        seen.append(pa.default_memory_pool().backend_name)
        raise Stop

    monkeypatch.setattr(finish, "_finish_run", fake, raising=False)
    monkeypatch.setattr(finish, "merge_journals", fake)  # the first thing finish_run did before
    try:
        finish.finish_run(None, [], {})  # type: ignore[arg-type]
    except (Stop, AttributeError):
        pass
    assert seen == ["system"]


def test_reading_a_run_does_not_load_pyarrow_dataset(tmp_path):
    from tests.unit.report.fake_runs import write_run

    d = write_run(tmp_path / "run", 2)
    code = ("import sys; from servelab.records.rundir import read_run; "
            f"r = read_run({str(d)!r}); print(r.requests.num_rows, 'pyarrow.dataset' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["24", "False"]
