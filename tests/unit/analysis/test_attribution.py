"""Attribution: disjoint parts that sum to the latency, nested communication, growth shares <= 100%.

Records are built the way a server reports them: queue + prefill + decode span arrival to finish, the
preempted time lies INSIDE decode (or prefill) and communication inside the steps, so neither may be added
on top (the old code did, and its shares summed to more than 100%)."""

import pytest

from servelab.analysis.attribution import (
    request_attribution,
    request_parts,
    session_attribution,
    session_parts,
    tail_attribution,
)
from servelab.records.rundir import REQUEST_SCHEMA, SESSION_SCHEMA, rows_to_table
from servelab.records.schema import OK, TIMEOUT, RequestRecord, SessionRecord, record_to_row, session_to_row

MS = 1_000_000


def _req(i: int, *, lag=0, queue=5, prefill=20, decode=100, preempt=0, comm=0, net=2, truth=True, **kw):
    """``decode`` and ``prefill`` are the server's phase spans; ``preempt`` lies inside decode."""
    intended = 10**15 + i * 1000 * MS
    sent = intended + lag * MS
    first = sent + (queue + prefill) * MS
    end = first + (decode + net) * MS
    gt = dict(srv_queue_ns=queue * MS, srv_prefill_ns=prefill * MS, srv_decode_ns=decode * MS,
              srv_preempted_ns=preempt * MS, srv_comm_ns=comm * MS) if truth else {}
    return RequestRecord(
        request_id=i,
        status=OK,
        intended_ns=intended,
        sent_ns=sent,
        first_token_ns=int(first),
        end_ns=int(end),
        **gt,
        **kw,
    )


def test_one_request_by_hand():
    # lag 10, queue 5, prefill 20, decode span 100 of which 40 preempted, comm 30 (inside), network 2
    d = request_parts([_req(0, lag=10, decode=100, preempt=40, comm=30)])
    got = {k: int(v[0]) // MS for k, v in d["parts"].items()}
    assert got == {"client_lag": 10, "server_queue": 5, "prefill": 20, "preemption": 40, "decode": 60,
                   "transport": 2}
    assert int(d["total"][0]) == 137 * MS == sum(int(v[0]) for v in d["parts"].values())
    assert int(d["nested"]["expert_exchange"][0]) == 30 * MS


def test_preemption_larger_than_decode_comes_out_of_prefill():
    # preempted 70 ms: 10 ms fill the decode span, the other 60 ms were spent before the first token
    d = request_parts([_req(0, prefill=80, decode=10, preempt=70)])
    got = {k: int(v[0]) // MS for k, v in d["parts"].items()}
    assert got["preemption"] == 70 and got["decode"] == 0 and got["prefill"] == 20


def test_server_figures_larger_than_the_client_saw_are_fitted():
    r = _req(0, queue=5, prefill=20, decode=100, net=0)
    r.srv_decode_ns = 200 * MS  # another machine's clock: 100 ms more than the client measured
    d = request_parts([r])
    got = {k: int(v[0]) // MS for k, v in d["parts"].items()}
    assert got["decode"] == 100 and got["transport"] == 0
    assert int(d["total"][0]) == sum(int(v[0]) for v in d["parts"].values())


def _runs(truth=True):
    # 95 ordinary requests (127 ms each); the 5 slowest were preempted 400 ms inside a 500 ms decode
    recs = [_req(i, truth=truth) for i in range(95)]
    recs += [_req(95 + i, decode=500, preempt=400, comm=30, truth=truth) for i in range(5)]
    recs.append(RequestRecord(request_id=999, status=TIMEOUT, intended_ns=10**15, sent_ns=10**15))
    recs.append(_req(1000, decode=5000, preempt=5000, warmup=True))  # warm-up: never counted
    return recs


def test_ground_truth_blames_preemption_and_shares_add_up():
    r = request_attribution(_runs())
    assert r["ground_truth"] is True and r["n"] == 100 and r["n_tail"] == 5
    assert r["tail_mean_ms"] == pytest.approx(527) and r["median_mean_ms"] == pytest.approx(127)
    assert r["dominant"] == "preemption"
    comps = {c["name"]: c for c in r["components"]}
    assert comps["preemption"]["tail_ms"] == pytest.approx(400) and comps["preemption"]["median_ms"] == 0
    assert comps["decode"]["tail_ms"] == pytest.approx(100)  # 500 - 400: not counted twice
    assert comps["transport"]["median_ms"] == pytest.approx(2)
    assert comps["expert_exchange"]["nested_in"] == "prefill+decode"
    assert comps["expert_exchange"]["tail_ms"] == pytest.approx(30)
    top = [c for c in r["components"] if "nested_in" not in c]
    assert sum(c["tail_share"] for c in top) == pytest.approx(1.0)
    assert comps["preemption"]["excess_share"] == pytest.approx(1.0)
    assert "preemption (evicted, waiting to resume) accounts for 400 ms of the 400 ms difference (100%" \
        in r["summary"]


def test_the_summary_sentence_gives_durations_to_three_significant_figures():
    from servelab.analysis.attribution import _dur

    assert [_dur(v) for v in (0, 0.31, 12.74, 400, 999.4, 2802.4, 2506, 1234567)] == [
        "0 ms", "0.310 ms", "12.7 ms", "400 ms", "999 ms", "2.80 s", "2.51 s", "1,235 s"]
    # tail: queue 2000 ms more than the median requests': the sentence reads in seconds
    recs = [_req(i) for i in range(95)] + [_req(95 + i, queue=2000, decode=110) for i in range(5)]
    words = request_attribution(recs)["summary"]
    assert "s on average against" in words and "of the 2.00 s difference" in words, words


def test_queueing_share_of_the_growth():
    # tail: queue 1000 (vs 5) and decode 110 (vs 100); growth 995 + 10 = 1005 ms -> queue 99.0 %
    recs = [_req(i) for i in range(95)] + [_req(95 + i, queue=1000, decode=110) for i in range(5)]
    r = request_attribution(recs)
    comps = {c["name"]: c for c in r["components"]}
    assert r["excess_ms"] == pytest.approx(1005)
    assert comps["server_queue"]["excess_share"] == pytest.approx(995 / 1005)
    assert comps["decode"]["excess_share"] == pytest.approx(10 / 1005)
    assert all(0 <= c["excess_share"] <= 1 for c in r["components"] if "nested_in" not in c)


def test_client_lag_is_separated():
    recs = [_req(i) for i in range(95)] + [_req(95 + i, lag=300) for i in range(5)]
    r = request_attribution(recs)
    assert r["dominant"] == "client_lag"


def test_without_ground_truth_it_is_an_estimate_and_reads_tables():
    table = rows_to_table([record_to_row(r) for r in _runs(truth=False)], REQUEST_SCHEMA)
    r = request_attribution(table)
    assert r["ground_truth"] is False and "estimate" in r["note"]
    names = {c["name"] for c in r["components"]}
    assert names == {"client_lag", "queue_prefill_est", "decode_est"}
    assert r["dominant"] == "decode_est"  # preemption happened between tokens
    assert sum(c["tail_share"] for c in r["components"]) == pytest.approx(1.0)


def test_too_few_requests():
    r = request_attribution([_req(i) for i in range(5)])
    assert r["components"] == [] and "too few" in r["summary"]


def _sess(i: int, model_ms: int, tool_ms: int, queue_ms: int = 0) -> SessionRecord:
    start = 10**15 + i * 10**10
    return SessionRecord(
        session_id=i,
        status="ok",
        start_ns=start,
        end_ns=start + (model_ms + tool_ms + 10) * MS,
        model_ns=model_ms * MS,
        tool_ns=tool_ms * MS,
        queue_ns=queue_ms * MS,
        turns=4,
    )


def test_session_queue_is_inside_model_time_not_added():
    # a 2510 ms task: 2000 ms of model turns of which 1500 queued at the server, 500 tool, 10 overhead
    d = session_parts([_sess(0, 2000, 500, queue_ms=1500)])
    got = {k: int(v[0]) // MS for k, v in d["parts"].items()}
    assert got == {"server_queue": 1500, "model": 500, "tool": 500, "retrieval": 0, "code": 0, "think": 0,
                   "backoff": 0, "other": 10}
    assert sum(got.values()) == 2510


def test_sessions_tail_dominated_by_tools():
    sess = [_sess(i, 2000, 500, 100) for i in range(57)] + [_sess(57 + i, 2000, 6000, 100) for i in range(3)]
    r = session_attribution(sess)
    assert r["dominant"] == "tool" and r["n_tail"] == 3
    assert r["tool_share_tail"] == pytest.approx(6000 / 8010, rel=1e-3)
    assert sum(c["tail_share"] for c in r["components"]) == pytest.approx(1.0)
    assert {c["name"] for c in r["components"]} == {"server_queue", "model", "tool", "other"}
    table = rows_to_table([session_to_row(s) for s in sess], SESSION_SCHEMA)
    both = tail_attribution(_runs(), table)
    assert both["sessions"]["dominant"] == "tool" and both["requests"]["dominant"] == "preemption"
