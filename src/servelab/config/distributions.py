"""Length and duration distributions, chosen by ``kind``. Sampling lives in ``servelab.workload``."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from servelab.config.base import Strict

# Sane bounds on every distribution parameter (tokens, seconds, counts): past these, samples overflow the
# 64-bit integers they become, or a run could never finish. docs/exit-codes.md lists them.
MAX_VALUE = 1e9
MAX_SIGMA = 4.0  # lognormal: p99/p50 = e^(2.33 sigma) = 11,000 at sigma 4


class Fixed(Strict):
    kind: Literal["fixed"] = "fixed"
    value: float = Field(ge=0, le=MAX_VALUE, description="The one value every sample takes.")


class Uniform(Strict):
    kind: Literal["uniform"] = "uniform"
    low: float = Field(ge=0, le=MAX_VALUE, description="Smallest value (inclusive).")
    high: float = Field(ge=0, le=MAX_VALUE, description="Largest value (inclusive).")

    @model_validator(mode="after")
    def _order(self) -> Uniform:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self


class Normal(Strict):
    kind: Literal["normal"] = "normal"
    mean: float = Field(ge=0, le=MAX_VALUE, description="Mean.")
    std: float = Field(ge=0, le=MAX_VALUE, description="Standard deviation.")
    min: float = Field(default=0, ge=0, le=MAX_VALUE, description="Samples are clipped to at least this.")
    max: float | None = Field(
        default=None, ge=0, le=MAX_VALUE, description="Samples are clipped to at most this."
    )


class LogNormal(Strict):
    kind: Literal["lognormal"] = "lognormal"
    median: float = Field(gt=0, le=MAX_VALUE, description="Median of the samples (exp(mu)).")
    sigma: float = Field(ge=0, le=MAX_SIGMA, description="Standard deviation of log(sample).")
    min: float = Field(default=0, ge=0, le=MAX_VALUE, description="Samples are clipped to at least this.")
    max: float | None = Field(
        default=None, ge=0, le=MAX_VALUE, description="Samples are clipped to at most this."
    )


class Exponential(Strict):
    kind: Literal["exponential"] = "exponential"
    mean: float = Field(gt=0, le=MAX_VALUE, description="Mean of the samples.")
    max: float | None = Field(
        default=None, ge=0, le=MAX_VALUE, description="Samples are clipped to at most this."
    )


class Empirical(Strict):
    kind: Literal["empirical"] = "empirical"
    values: list[Annotated[float, Field(le=MAX_VALUE)]] = Field(
        min_length=1, description="Samples are drawn uniformly from these values."
    )
    weights: list[float] | None = Field(default=None, description="Optional relative weight per value.")

    @model_validator(mode="after")
    def _weights(self) -> Empirical:
        if any(v < 0 for v in self.values):
            raise ValueError("values must all be >= 0")
        if self.weights is not None:
            if len(self.weights) != len(self.values):
                raise ValueError(
                    f"weights has {len(self.weights)} entries but values has {len(self.values)}"
                )
            if any(w < 0 for w in self.weights) or sum(self.weights) <= 0:
                raise ValueError("weights must be >= 0 with a positive sum")
        return self


Distribution = Annotated[
    Fixed | Uniform | Normal | LogNormal | Exponential | Empirical, Field(discriminator="kind")
]


def as_distribution(value: object) -> object:
    """Let a bare number stand for ``{kind: fixed, value: N}``."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {"kind": "fixed", "value": value}
    return value
