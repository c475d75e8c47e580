"""The decision advice prices in readable dollars and the sweep's own unit: a plain sweep printed
'at $4.064e-05 vs $2.241e-05 per task' (no tasks there, exponent form); now 3 significant figures per 1M
output tokens (per 1M requests without tokens), and per task only in an agent sweep."""

from __future__ import annotations

from servelab.analysis.decision import PointData, decision_table
from servelab.analysis.decision_advice import advice_from_table


def _point(target: str, gpus: int, req_s: float, tok_s: float, ttft_p95: float) -> PointData:
    s = {"throughput": {"requests_per_s": req_s, "output_tokens_per_s": tok_s},
         "metrics": {"ttft_ms": {"p50": ttft_p95 / 2, "p95": ttft_p95}}, "requests": {"ok": 96}}
    return PointData(target=target, level=8, model="m", gpus=gpus, nodes=1, summary=s)


def _plain() -> dict:
    # 2 $/GPU-hour. a: 1 GPU, 10 req/s, 2,000 tok/s -> $/request 2/3600/10 = 0.0000556, $/1M out tok 0.278;
    # b: 2 GPUs, 12.5 req/s, 2,500 tok/s -> 4/3600/12.5 = 0.0000889, 4/3600/2,500 x 1e6 = 0.444; b has the
    # lower TTFT p95 (40 vs 100 ms), a the lower cost
    return decision_table([_point("a@1xh100", 1, 10.0, 2000.0, 100.0),
                           _point("b@2xh100", 2, 12.5, 2500.0, 40.0)], gpu_hour_usd=2.0)


def _text(advice: list[dict], kind: str) -> str:
    return next(a["text"] for a in advice if a["kind"] == kind)


def test_a_plain_sweep_prices_per_million_output_tokens_not_per_task():
    adv = _plain()["advice"]
    assert _text(adv, "choice").startswith("Choice by lowest $ per request among healthy targets: a@1xh100")
    assert _text(adv, "latency") == (
        "b@2xh100 only when TTFT p95 matters more than cost: lower TTFT p95 at level 8 (at 8: 40 ms vs "
        "100 ms for a@1xh100 at $0.444 vs $0.278 per 1M output tokens).")
    assert _text(adv, "crossover").endswith("and on $ per request at no level measured.")
    assert "e-0" not in " ".join(a["text"] for a in adv)


def test_without_token_figures_a_plain_sweep_prices_per_million_requests():
    # a sweep.json written before usd_per_1m_output_tokens: $/request x 1e6, to 3 significant figures
    t = _plain()
    for r in t["rows"]:
        del r["usd_per_1m_output_tokens"]
    assert "at $88.9 vs $55.6 per 1M requests)." in _text(advice_from_table(t), "latency")
