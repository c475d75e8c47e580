"""Intervals for proportions: accuracy and agreement (Wilson score), and differences of accuracies
(Newcombe's hybrid score intervals, paired when both targets answered the same items).

Score intervals rather than the bootstrap: answer sets are small (tens to hundreds of items) and accuracies
sit near 0 or 1, where the bootstrap of a proportion collapses to a point (all items right: ``[1, 1]``)
and the normal approximation leaves ``[0, 1]``. The Wilson interval keeps its coverage there.

References: E. B. Wilson (1927); R. G. Newcombe, "Interval estimation for the difference between
independent proportions" and "Improved confidence intervals for the difference between binomial
proportions based on paired data", Statistics in Medicine 17 (1998), methods 10.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy.stats import norm

DEFAULT_CONFIDENCE = 0.95


def _z(confidence: float) -> float:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return float(norm.ppf(0.5 + confidence / 2))


def wilson_interval(k: int, n: int, confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float]:
    """Wilson score interval of the proportion ``k / n``; ``(0, 1)`` when ``n == 0``."""
    if n < 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return 0.0, 1.0
    z = _z(confidence)
    p = k / n
    z2n = z * z / n
    centre = (p + z2n / 2) / (1 + z2n)
    half = z * math.sqrt(p * (1 - p) / n + z2n / (4 * n)) / (1 + z2n)
    # Clamp rounding at the edges: k = 0 gives exactly 0, k = n exactly 1.
    lo = 0.0 if k == 0 else max(0.0, centre - half)
    hi = 1.0 if k == n else min(1.0, centre + half)
    return lo, hi


def proportion(k: int, n: int, confidence: float = DEFAULT_CONFIDENCE) -> dict:
    """``{value, lo, hi, k, n, confidence, method}``; value is None when ``n == 0``."""
    lo, hi = wilson_interval(k, n, confidence)
    return {"value": k / n if n else None, "lo": lo if n else None, "hi": hi if n else None,
            "k": k, "n": n, "confidence": confidence, "method": "wilson"}


def _newcombe(p1: float, p2: float, w1: tuple[float, float], w2: tuple[float, float], phi: float
              ) -> tuple[float, float]:
    """Interval of ``p1 - p2`` from each proportion's Wilson interval and their correlation ``phi``."""
    (l1, u1), (l2, u2) = w1, w2
    d = p1 - p2
    below = (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2
    above = (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2
    return max(-1.0, d - math.sqrt(max(0.0, below))), min(1.0, d + math.sqrt(max(0.0, above)))


def difference_independent(k1: int, n1: int, k2: int, n2: int,
                           confidence: float = DEFAULT_CONFIDENCE) -> dict:
    """Interval of ``k1/n1 - k2/n2`` for two independent samples (Newcombe's hybrid score)."""
    if n1 == 0 or n2 == 0:
        return {"diff": None, "lo": None, "hi": None, "n": (n1, n2), "method": "newcombe-independent"}
    p1, p2 = k1 / n1, k2 / n2
    lo, hi = _newcombe(p1, p2, wilson_interval(k1, n1, confidence), wilson_interval(k2, n2, confidence), 0.0)
    return {"diff": p1 - p2, "lo": lo, "hi": hi, "n": (n1, n2), "method": "newcombe-independent"}


def difference_paired(x: Sequence[bool], y: Sequence[bool], confidence: float = DEFAULT_CONFIDENCE) -> dict:
    """Interval of ``mean(x) - mean(y)`` where ``x[i]`` and ``y[i]`` judge the same item (Newcombe's
    paired method 10: the Wilson intervals of each side, combined with the items' correlation)."""
    if len(x) != len(y):
        raise ValueError(f"paired samples differ in length: {len(x)} vs {len(y)}")
    n = len(x)
    if n == 0:
        return {"diff": None, "lo": None, "hi": None, "n": 0, "method": "newcombe-paired"}
    both = sum(1 for a, b in zip(x, y, strict=True) if a and b)
    only_x = sum(1 for a, b in zip(x, y, strict=True) if a and not b)
    only_y = sum(1 for a, b in zip(x, y, strict=True) if b and not a)
    neither = n - both - only_x - only_y
    kx, ky = both + only_x, both + only_y
    margins = kx * (n - kx) * ky * (n - ky)
    if margins == 0:
        phi = 0.0
    else:
        cross = both * neither - only_x * only_y
        # Newcombe's continuity-corrected correlation: shrink a positive one by n/2.
        num = max(cross - n / 2, 0.0) if cross > 0 else float(cross)
        phi = num / math.sqrt(margins)
    lo, hi = _newcombe(
        kx / n, ky / n, wilson_interval(kx, n, confidence), wilson_interval(ky, n, confidence), phi
    )
    return {"diff": (kx - ky) / n, "lo": lo, "hi": hi, "n": n, "discordant": (only_x, only_y),
            "method": "newcombe-paired"}
