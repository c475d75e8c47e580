import numpy as np
import pytest

from servelab.analysis.attribution import request_attribution, session_attribution, tail_attribution
from servelab.records.rundir import REQUEST_SCHEMA, SESSION_SCHEMA, rows_to_table
from servelab.records.schema import OK, TIMEOUT, RequestRecord, SessionRecord, record_to_row, session_to_row

MS = 1_000_000


def _req(i: int, *, lag=0, queue=5, prefill=20, decode=100, preempt=0, comm=0, net=2, truth=True, **kw):
    intended = 10**15 + i * 1000 * MS
    sent = intended + lag * MS
    srv = queue + prefill + decode + preempt + comm
    first = sent + (queue + prefill + net / 2) * MS
    end = sent + (srv + net) * MS
    gt = dict(srv_queue_ns=queue * MS, srv_prefill_ns=prefill * MS, srv_decode_ns=decode * MS,
              srv_preempted_ns=preempt * MS, srv_comm_ns=comm * MS) if truth else {}
    return RequestRecord(request_id=i, status=OK, intended_ns=intended, sent_ns=sent, first_token_ns=int(first),
                         end_ns=int(end), **gt, **kw)


def _runs(truth=True):
    # 95 ordinary requests; the 5 slowest were preempted (KV cache full) for 400 ms each
    rng = np.random.default_rng(0)
    recs = [_req(i, decode=int(rng.integers(90, 110)), truth=truth) for i in range(95)]
    recs += [_req(95 + i, decode=100, preempt=400, truth=truth) for i in range(5)]
    recs.append(RequestRecord(request_id=999, status=TIMEOUT, intended_ns=10**15, sent_ns=10**15))
    recs.append(_req(1000, preempt=5000, warmup=True))  # warm-up: never counted
    return recs


def test_ground_truth_blames_kv_preemption():
    r = request_attribution(_runs())
    assert r["ground_truth"] is True and r["n"] == 100
    assert r["dominant"] == "kv_preemption"
    comps = {c["name"]: c for c in r["components"]}
    assert comps["kv_preemption"]["tail_ms"] == pytest.approx(400)
    assert comps["kv_preemption"]["median_ms"] == 0
    assert comps["other"]["median_ms"] == pytest.approx(2, abs=0.01)  # network time left over
    assert "KV preemption accounts for" in r["summary"]
    assert sum(c["tail_share"] for c in r["components"]) == pytest.approx(1.0, abs=1e-6)


def test_client_lag_is_separated():
    recs = [_req(i) for i in range(95)] + [_req(95 + i, lag=300) for i in range(5)]
    r = request_attribution(recs)
    assert r["dominant"] == "client_queue"


def test_without_ground_truth_it_is_an_estimate_and_reads_tables():
    table = rows_to_table([record_to_row(r) for r in _runs(truth=False)], REQUEST_SCHEMA)
    r = request_attribution(table)
    assert r["ground_truth"] is False and "estimate" in r["note"]
    names = {c["name"] for c in r["components"]}
    assert names == {"client_queue", "queue_prefill_est", "decode_est"}
    assert r["dominant"] == "decode_est"  # preemption happened between tokens


def test_too_few_requests():
    r = request_attribution([_req(i) for i in range(5)])
    assert r["components"] == [] and "too few" in r["summary"]


def _sess(i: int, model_ms: int, tool_ms: int) -> SessionRecord:
    start = 10**15 + i * 10**10
    return SessionRecord(session_id=i, status="ok", start_ns=start, end_ns=start + (model_ms + tool_ms + 10) * MS,
                         model_ns=model_ms * MS, tool_ns=tool_ms * MS, turns=4)


def test_sessions_tail_dominated_by_tools():
    sess = [_sess(i, 2000, 500) for i in range(57)] + [_sess(57 + i, 2000, 6000) for i in range(3)]
    r = session_attribution(sess)
    assert r["dominant"] == "tool" and r["n_tail"] == 3
    assert r["tool_share_tail"] == pytest.approx(6000 / 8010, rel=1e-3)
    table = rows_to_table([session_to_row(s) for s in sess], SESSION_SCHEMA)
    both = tail_attribution(_runs(), table)
    assert both["sessions"]["dominant"] == "tool" and both["requests"]["dominant"] == "kv_preemption"
