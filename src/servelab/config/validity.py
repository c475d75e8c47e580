"""The ``validity`` section: thresholds past which a run's figures are marked INVALID (exit 1).

Every rule and its default is listed in docs/exit-codes.md; the checks live in servelab.analysis.validity.
"""

from __future__ import annotations

from pydantic import Field

from servelab.config.base import Strict


class ValidityConfig(Strict):
    max_error_rate: float = Field(
        default=0.05, ge=0, le=1,
        description="Failed / (ok + failed) measured requests above this marks the run INVALID (cancelled "
        "requests are not counted). 0.05 = 5%.",
    )
    min_achieved_fraction: float = Field(
        default=0.9,
        ge=0,
        le=1,
        description="Open loop: completions must keep up with sends; an achieved rate below this fraction of "
        "the offered rate (beyond noise) marks the run INVALID (docs/exit-codes.md says how both are "
        "measured).",
    )
