"""Orchestration: one run end to end (target, workload, run loop, records, summary, report).

``cli`` and ``sweep`` call :func:`servelab.bench.run.execute`; it may import every package but ``cli``.
"""
