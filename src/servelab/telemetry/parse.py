"""Prometheus text exposition -> flat samples in servelab's vocabulary (prometheus_client's parser)."""

from __future__ import annotations

from dataclasses import dataclass

from servelab.telemetry.vocabulary import canonical

_HIST_SUFFIXES = ("_bucket", "_sum", "_count")


@dataclass(frozen=True, slots=True)
class Sample:
    raw_name: str  # the series name as the server wrote it (with _sum/_count/_bucket)
    name: str | None  # canonical name (histograms: "<canon>_sum" / "_count" / "_bucket"), or None if unmapped
    labels: tuple[tuple[str, str], ...]
    value: float


def parse_metrics(text: str) -> list[Sample]:
    """Every sample of a /metrics page; unparseable pages raise ValueError (the scraper records it)."""
    # imported at the first page (a scraper's baseline, before the load starts): a run with telemetry off,
    # and every worker but shard 0, never loads it
    from prometheus_client.parser import text_string_to_metric_families

    out: list[Sample] = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = dict(s.labels)
            name, scale = _canon_name(fam.name, s.name, labels)
            out.append(Sample(s.name, name, tuple(sorted(labels.items())), float(s.value) * scale))
    return out


def _canon_name(family: str, series: str, labels: dict[str, str]) -> tuple[str | None, float]:
    for base in (series, family, f"{family}_total"):
        c = canonical(base, labels)
        if c is not None and c.kind != "histogram":
            return c.name, c.scale
    for suffix in _HIST_SUFFIXES:
        if series.endswith(suffix):
            c = canonical(series[: -len(suffix)], labels)
            if c is not None and c.kind == "histogram":
                return c.name + suffix, 1.0
    return None, 1.0
