"""Refit the Hopper roofline constants on the fitting sets of benchmarks/sim_fidelity.py at once: the silicon
step times of the H100 rows and the published fitting figures (C-1, C-2). Loss: mean squared log error of the
silicon rows + mean squared log error of the published fitting figures (equal weight). Prints every candidate.

    PYTHONPATH=src python benchmarks/sim_fit_hopper.py
"""

from __future__ import annotations

import itertools
import math
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import sim_calibration as cal  # noqa: E402
import sim_fidelity as fid  # noqa: E402
from servelab.sim.target import parse_sim_target  # noqa: E402

GRID = {"mem_eff": (0.7, 0.8, 0.85), "layer_overhead_us": (10, 30, 50), "lowp_compute_eff": (0.5, 0.75, 1.0)}


def main() -> None:
    rows = [
        r for r in fid.silicon_grid() if r["family"] == "nvidia-hopper" and fid.HARDWARE[r["hw"]] == "fit"
    ]
    base = parse_sim_target("sim:llama-3.1-8b@1xh100").family
    best = None
    for vals in itertools.product(*GRID.values()):
        fam = replace(base, **dict(zip(GRID, vals, strict=True)))
        sil = sum(math.log(fid.roofline_s(r, fam) / r["silicon_s"]) ** 2 for r in rows) / len(rows)
        pub = [(cid, p, pred) for cid, p, pred in cal.fit_figures(fam)]
        pl = sum(math.log(pred / p) ** 2 for _, p, pred in pub) / len(pub)
        loss = sil + pl
        errs = " ".join(f"{cid} {100 * (pred / p - 1):+.0f}%" for cid, p, pred in pub)
        print(
            f"{dict(zip(GRID, vals, strict=True))} silicon rms {math.sqrt(sil):.3f} {errs} loss {loss:.4f}",
            flush=True,
        )
        if best is None or loss < best[0]:
            best = (loss, vals)
    print("best:", dict(zip(GRID, best[1], strict=True)))


if __name__ == "__main__":
    main()
