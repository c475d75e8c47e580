"""Samplers for the length and duration distributions of ``servelab.config.distributions``.

``make_sampler(dist, rng)`` turns a config distribution into an object that draws from a seeded numpy
generator: ``sample()`` one float, ``sample_n(n)`` an array, ``mean()`` the exact mean of what is drawn
(clipping included) or None where it has no closed form. Clipped kinds clip (mass beyond a bound sits on
the bound); they do not truncate. Token counts go through :func:`int_sample` / :func:`int_sample_n`.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from servelab.config.distributions import Empirical, Exponential, Fixed, LogNormal, Normal, Uniform
from servelab.errors import ConfigError


class Sampler(Protocol):
    def sample(self) -> float:
        """One draw."""

    def sample_n(self, n: int) -> np.ndarray:
        """``n`` draws as a float64 array."""

    def mean(self) -> float | None:
        """Exact mean of the draws, or None when unknown."""


def _phi(x: float) -> float:
    """Standard normal density."""
    return math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def _cdf(x: float) -> float:
    """Standard normal CDF (handles +-inf)."""
    if x == math.inf:
        return 1.0
    if x == -math.inf:
        return 0.0
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _check_n(n: int) -> int:
    if not isinstance(n, int | np.integer) or isinstance(n, bool) or n < 0:
        raise ValueError(f"sample_n needs a count >= 0, got {n!r}")
    return int(n)


class _Base:
    """Shared clipping for the kinds with optional bounds."""

    __slots__ = ("_rng", "_lo", "_hi")

    def __init__(self, rng: np.random.Generator, lo: float, hi: float | None) -> None:
        self._rng = rng
        self._lo = lo
        self._hi = math.inf if hi is None else hi

    def _clip1(self, x: float) -> float:
        return min(max(x, self._lo), self._hi)

    def _clipn(self, a: np.ndarray) -> np.ndarray:
        return np.clip(a, self._lo, self._hi, out=a)


class FixedSampler(_Base):
    __slots__ = ("_v",)

    def __init__(self, d: Fixed, rng: np.random.Generator) -> None:
        super().__init__(rng, d.value, d.value)
        self._v = float(d.value)

    def sample(self) -> float:
        return self._v

    def sample_n(self, n: int) -> np.ndarray:
        return np.full(_check_n(n), self._v, dtype=np.float64)

    def mean(self) -> float:
        return self._v


class UniformSampler(_Base):
    __slots__ = ()

    def __init__(self, d: Uniform, rng: np.random.Generator) -> None:
        super().__init__(rng, d.low, d.high)

    def sample(self) -> float:
        # rng.uniform draws from [low, high); the clip keeps a float edge case inside the closed range.
        return self._clip1(float(self._rng.uniform(self._lo, self._hi)))

    def sample_n(self, n: int) -> np.ndarray:
        return self._clipn(self._rng.uniform(self._lo, self._hi, _check_n(n)))

    def mean(self) -> float:
        return 0.5 * (self._lo + self._hi)


class NormalSampler(_Base):
    __slots__ = ("_mu", "_sd")

    def __init__(self, d: Normal, rng: np.random.Generator) -> None:
        if d.max is not None and d.max < d.min:
            raise ConfigError(
                f"normal distribution: max ({d.max}) is below min ({d.min})", hint="give max >= min"
            )
        super().__init__(rng, d.min, d.max)
        self._mu, self._sd = float(d.mean), float(d.std)

    def sample(self) -> float:
        return self._clip1(float(self._rng.normal(self._mu, self._sd)))

    def sample_n(self, n: int) -> np.ndarray:
        return self._clipn(self._rng.normal(self._mu, self._sd, _check_n(n)))

    def mean(self) -> float:
        mu, sd, lo, hi = self._mu, self._sd, self._lo, self._hi
        if sd == 0:
            return self._clip1(mu)
        a, b = (lo - mu) / sd, (hi - mu) / sd
        inside = mu * (_cdf(b) - _cdf(a)) + sd * (_phi(a) - (0.0 if b == math.inf else _phi(b)))
        upper = 0.0 if hi == math.inf else hi * (1.0 - _cdf(b))
        return lo * _cdf(a) + inside + upper


class LogNormalSampler(_Base):
    __slots__ = ("_mu", "_sigma")

    def __init__(self, d: LogNormal, rng: np.random.Generator) -> None:
        if d.max is not None and d.max < d.min:
            raise ConfigError(
                f"lognormal distribution: max ({d.max}) is below min ({d.min})", hint="give max >= min"
            )
        super().__init__(rng, d.min, d.max)
        self._mu, self._sigma = math.log(d.median), float(d.sigma)

    def sample(self) -> float:
        return self._clip1(float(self._rng.lognormal(self._mu, self._sigma)))

    def sample_n(self, n: int) -> np.ndarray:
        return self._clipn(self._rng.lognormal(self._mu, self._sigma, _check_n(n)))

    def mean(self) -> float:
        mu, s, lo, hi = self._mu, self._sigma, self._lo, self._hi
        if s == 0:
            return self._clip1(math.exp(mu))
        za = (math.log(lo) - mu) / s if lo > 0 else -math.inf
        zb = (math.log(hi) - mu) / s if hi != math.inf else math.inf
        # E[X; lo < X < hi] = exp(mu + s^2/2) * (Phi(zb - s) - Phi(za - s)).
        inside = math.exp(mu + 0.5 * s * s) * (_cdf(zb - s) - _cdf(za - s))
        upper = 0.0 if hi == math.inf else hi * (1.0 - _cdf(zb))
        return lo * _cdf(za) + inside + upper


class ExponentialSampler(_Base):
    __slots__ = ("_scale",)

    def __init__(self, d: Exponential, rng: np.random.Generator) -> None:
        super().__init__(rng, 0.0, d.max)
        self._scale = float(d.mean)

    def sample(self) -> float:
        return self._clip1(float(self._rng.exponential(self._scale)))

    def sample_n(self, n: int) -> np.ndarray:
        return self._clipn(self._rng.exponential(self._scale, _check_n(n)))

    def mean(self) -> float:
        if self._hi == math.inf:
            return self._scale
        # E[min(X, m)] for an exponential of mean s.
        return self._scale * (1.0 - math.exp(-self._hi / self._scale))


class EmpiricalSampler:
    """Weighted draw from a list of values: one uniform and a binary search per draw."""

    __slots__ = ("_rng", "_values", "_cum", "_mean")

    def __init__(self, d: Empirical, rng: np.random.Generator) -> None:
        self._rng = rng
        self._values = np.asarray(d.values, dtype=np.float64)
        w = np.ones(len(d.values)) if d.weights is None else np.asarray(d.weights, dtype=np.float64)
        p = w / w.sum()
        self._cum = np.cumsum(p)
        self._cum[-1] = 1.0  # guard float round-off so a uniform of 0.99999... still finds a value
        self._mean = float(np.dot(p, self._values))

    def sample(self) -> float:
        i = int(np.searchsorted(self._cum, self._rng.random(), side="right"))
        return float(self._values[min(i, len(self._values) - 1)])

    def sample_n(self, n: int) -> np.ndarray:
        idx = np.searchsorted(self._cum, self._rng.random(_check_n(n)), side="right")
        np.minimum(idx, len(self._values) - 1, out=idx)
        return self._values[idx]

    def mean(self) -> float:
        return self._mean


_KINDS: dict[type, type] = {
    Fixed: FixedSampler,
    Uniform: UniformSampler,
    Normal: NormalSampler,
    LogNormal: LogNormalSampler,
    Exponential: ExponentialSampler,
    Empirical: EmpiricalSampler,
}


def make_sampler(dist: object, rng: np.random.Generator) -> Sampler:
    """A sampler for ``dist`` (any kind in ``servelab.config.distributions``) drawing from ``rng``."""
    cls = _KINDS.get(type(dist))
    if cls is None:
        kinds = ", ".join(sorted(k.model_fields["kind"].default for k in _KINDS))
        raise ConfigError(
            f"cannot sample from {type(dist).__name__} ({dist!r}); expected one of the distribution kinds "
            f"{kinds}",
            hint="build the distribution through the config models (e.g. {kind: lognormal, median: 512, "
            "sigma: 0.5})",
        )
    return cls(dist, rng)


def int_sample(sampler: Sampler) -> int:
    """One draw rounded to an integer token count of at least 1."""
    return max(1, int(round(sampler.sample())))


def int_sample_n(sampler: Sampler, n: int) -> np.ndarray:
    """``n`` draws rounded to int64 token counts, each at least 1."""
    a = np.rint(sampler.sample_n(n))
    np.maximum(a, 1.0, out=a)
    return a.astype(np.int64)
