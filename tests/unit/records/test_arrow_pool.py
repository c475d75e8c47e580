"""The end of a run merges on Arrow's default pool, then allocates from the C library (what the merge left
free goes back to the system) for the summary and report, and reads whole Parquet files without loading
pyarrow.dataset."""

import platform
import subprocess
import sys

import pyarrow as pa
import pytest

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


_FREED_BLOCKS = r"""
import os, sys
from servelab.records.stream import use_system_arrow_pool
page = os.sysconf("SC_PAGE_SIZE")
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page / 2**20
if sys.argv[1] == "switch":
    use_system_arrow_pool()
big = bytearray(16 << 20)  # mapped; freeing it makes glibc raise its threshold to 16 MiB
del big
before = rss_mb()
blocks = [bytearray(1 << 20) for _ in range(33)]  # 33 MiB in 1 MiB blocks
del blocks[:32]  # the last one stays: the heap cannot shrink from its top
print(round(rss_mb() - before, 1))
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator only")
def test_after_the_switch_freed_big_blocks_go_back_to_the_system():
    """The summary, evidence and report free big blocks (a row group's decoded token times, numpy arrays).
    Once glibc had freed one big mapped block it served blocks up to that size from its heap, which kept
    them after they were freed: 32 MiB freed in 1 MiB blocks stayed resident. After use_system_arrow_pool
    such blocks are mapped on their own and given back when freed."""
    def kept(arg: str) -> float:
        out = subprocess.run([sys.executable, "-c", _FREED_BLOCKS, arg], capture_output=True, text=True,
                             check=True)
        return float(out.stdout.split()[-1])

    assert kept("no-switch") > 24  # glibc's own behaviour, which the switch changes
    assert kept("switch") < 4
