"""How much the TensorRT-LLM published rows hinge on the engine's host (CPU) time per running sequence.

An engine with an overlap scheduler (TensorRT-LLM's default) hides its per-step host work (scheduling, input
preparation, sampler and response bookkeeping: ``step_cpu_us + step_cpu_per_seq_us`` x the rank's running
sequences) behind the GPU's step, until the host work is the longer of the two: then the host sets the pace.
Small-active-parameter MoE models at TensorRT-LLM's batch of 2,048 (gpt-oss on B200) have GPU steps of
~30 ms, the same order as 2,048 sequences' host work at ~15 us each, so their simulated throughput turns on
a figure the catalog only has a prior for (catalog/engines.yaml: 0.5 us per sequence).

For each row this prints the simulated error with the profile's prior and with each value of ``--values``
(a what-if set in the target as ``step_cpu_per_seq_us=``; nothing is fitted), and the ceiling the published
figure itself puts on that cost: a scheduler process that emits one token per running sequence per step
cannot spend more than 1 / (its output tokens per second) per sequence on the host, or it could not have
reached the published rate (``bound us``; attention-DP ranks are separate schedulers, each its share).
Then the median |error| of each slice per value, as benchmarks/sim_fidelity.py slices them.

By default the TensorRT-LLM rows of at most 6,000 tokens a request (big batches of short requests, where
host time can matter; the 32 such rows of stop 19 took ~7 minutes with silicon here); ``--all`` adds the
long ones (8K and 32K, GPU-bound).

    PYTHONPATH=src python3 benchmarks/sim_host_overhead.py [--backend silicon|roofline] [--values 5,10,15,20]
        [--only N-4,N-8 | --all]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import fidelity_cases as fc  # noqa: E402
from servelab.sim import silicon  # noqa: E402
from servelab.sim.deployment import Deployment  # noqa: E402
from servelab.sim.stepcost import make_step_cost  # noqa: E402

SHORT = 6000  # isl + osl of the default rows


def host_bound_us(case: fc.Case, dep: Deployment) -> float | None:
    """Most host time per running sequence per step (us) at which one scheduler still reaches the row's
    published output rate; None for a metric that is not an output rate."""
    if case.metric == "out_tok_s_per_gpu":
        total = case.published * dep.world
    elif case.metric == "out_tok_s":
        total = case.published
    else:
        return None
    return 1e6 / (total / max(1, dep.attn_dp))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("silicon", "roofline"),
                    default="silicon" if silicon.installed() else "roofline")
    ap.add_argument("--values", default="5,10,15,20,30",
                    help="host time per running sequence per step to try, microseconds, comma-separated")
    ap.add_argument("--only", default="",
                    help="row ids, comma-separated (default: the short TensorRT-LLM rows)")
    ap.add_argument("--all", action="store_true", help="every TensorRT-LLM row, the long ones too")
    args = ap.parse_args()
    try:
        values = [float(v) for v in args.values.split(",") if v.strip()]
    except ValueError:
        ap.error(f"--values: expected microseconds separated by commas (e.g. 5,10,20), got {args.values!r}")
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    _, cases = fc.load()
    rows = [c for c in cases if (c.id in only if only else c.source.startswith("trtllm-perf")
                                 and (args.all or c.isl + c.osl <= SHORT))]
    if not rows:
        ap.error(f"--only: no row named {sorted(only)} in benchmarks/fidelity_cases.yaml (ids like N-8, T-1)")

    print(f"backend {args.backend}; error of the simulated figure against the published one, by host time "
          "per running sequence per step (us)")
    head = f"{'id':<5} {'figure':<58} {'bound us':>8} {'prior':>14}" + "".join(f"{v:>9g}" for v in values)
    print(head)
    slices: dict[str, list[list[float]]] = {}
    for c in rows:
        dep = fc.deployment(c, args.backend)
        try:
            make_step_cost(dep)
        except Exception as exc:  # noqa: BLE001 - silicon does not cover it: say so, go on
            print(f"{c.id:<5} {c.what[:58]:<58}  (not covered: {str(exc).splitlines()[0][:60]})")
            continue
        prior = dep.host_step_us[1]
        errs = [fc.simulate(c, dep) / c.published - 1]
        errs += [fc.simulate(c, replace(dep, step_cpu_per_seq_us=v)) / c.published - 1 for v in values]
        bound = host_bound_us(c, dep)
        cells = "".join(f"{100 * e:>+8.1f}%" for e in errs[1:])
        at_prior = f"{prior:g}: {100 * errs[0]:+.1f}%"
        print(f"{c.id:<5} {c.what[:58]:<58} {bound or float('nan'):>8.1f} {at_prior:>14}{cells}")
        key = f"{fc.kind_of(dep)} {fc.family_of(dep)}"
        slices.setdefault(key, []).append(errs)
    print("\nmedian |error| by slice")
    print(f"{'slice':<22} {'n':>3} {'prior':>8}" + "".join(f"{v:>9g}" for v in values))
    for key, errs in sorted(slices.items()):
        med = [100 * statistics.median(abs(e[i]) for e in errs) for i in range(len(values) + 1)]
        print(f"{key:<22} {len(errs):>3} {med[0]:>7.1f}%" + "".join(f"{m:>8.1f}%" for m in med[1:]))


if __name__ == "__main__":
    main()
