"""Knee over any swept axis, with a latency vote that works in a closed loop and a bootstrap confidence.

Hand-built sweep: throughput doubles with the axis up to 32, then is flat at 3,200 tok/s (the knee is 32,
between 16 and 64); TTFT p95 is 200 ms up to 32 and doubles per step after (queueing); the client queue
p50 is 0 at every point, as in every closed loop."""

from servelab.sweep.knee_of import knee_axis, knees_for

LEVELS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def _summary(x: int, ok: int = 10_000) -> dict:
    ttft = 200.0 if x <= 32 else 200.0 * x / 32
    return {"throughput": {"output_tokens_per_s": 100.0 * min(x, 32)},
            "metrics": {"ttft_ms": {"p50": ttft / 2, "p95": ttft}, "queue_ms": {"p50": 0.0},
                        "e2e_ms": {"p95": 10 * ttft}},
            "requests": {"ok": ok}}


def _points(axis: str, fixed: dict) -> list[dict]:
    return [{"status": "ok", "params": {**fixed, axis: x}, "level": fixed.get("concurrency", x),
             "summary": _summary(x)} for x in LEVELS]


def test_max_num_seqs_sweep_has_a_knee():
    pts = _points("max_num_seqs", {"concurrency": 256})
    assert knee_axis(pts) == "max_num_seqs"
    knees, first, reason = knees_for(pts)
    assert (
        len(knees) == 1 and knees[0]["axis"] == "max_num_seqs" and knees[0]["params"] == {"concurrency": 256}
    )
    assert first["level"] == 32 and first["low"] == 16 and first["high"] == 64 and reason is None


def test_closed_loop_latency_vote_uses_ttft_not_the_zero_client_queue():
    knees, first, _ = knees_for(_points("concurrency", {}))
    lat = first["signals"]["latency"]
    # TTFT p95 elasticity: 0 before the knee, 1 after (doubles per doubling): queueing confirms
    assert lat["metric"] == "latency_p95" and lat["growth_before"] == 0.0 and lat["growth_after"] == 1.0
    assert lat["agrees"] is True and "confirms" in first["reason"]


def test_server_queue_votes_first_when_measured():
    pts = _points("concurrency", {})
    for e in pts:
        x = e["params"]["concurrency"]
        e["summary"]["evidence"] = {"server_queue_ms": {"p50": 1.0 if x <= 32 else 1.0 * (x / 32) ** 2}}
    _, first, _ = knees_for(pts)
    assert (
        first["signals"]["latency"]["metric"] == "queue"
        and first["signals"]["latency"]["growth_after"] == 2.0
    )


def test_bootstrap_confidence_and_range():
    _, first, _ = knees_for(_points("concurrency", {}))
    b = first["bootstrap"]
    # 10,000 completions per level: 1 % counting noise cannot move a knee between power-of-two levels
    assert b["share"] == 1.0 and b["range"] == [32.0, 32.0] and b["draws"] == 200
    pts = _points("concurrency", {})
    for e in pts:
        e["summary"]["requests"]["ok"] = 4  # 50 % noise: the knee wanders
    _, noisy, _ = knees_for(pts)
    assert (
        noisy["bootstrap"]["share"] < 1.0 and noisy["bootstrap"]["range"][0] < noisy["bootstrap"]["range"][1]
    )


def test_split_advice_names_max_num_seqs_for_both_endpoints():
    from servelab.sweep.knee_of import split_for

    pts = _points("max_num_seqs", {"concurrency": 256})
    for e in pts:  # TTFT p95 100 ms up to 4 sequences, then doubling: 200 at 8, 400 at 16, 800 at 32 ...
        x = e["params"]["max_num_seqs"]
        e["summary"]["metrics"]["ttft_ms"]["p95"] = 100.0 * max(x, 4) / 4
    (sp,) = split_for(pts, {"ttft_ms": 500, "percentile": 95})
    assert sp["interactive"] == 16 and sp["bulk"] == 32  # 400 ms <= 500 < 800 ms; the throughput knee
    assert (
        sp["interactive_throughput"] == 1600
        and sp["bulk_throughput"] == 3200
        and sp["throughput_share"] == 0.5
    )
    assert sp["text"].startswith(
        "interactive endpoint: max_num_seqs 16 (the largest meeting ttft_ms p95 <= 500"
    )
    assert "bulk endpoint: max_num_seqs 32 (throughput knee, 3,200 tok/s)" in sp["text"]
    assert split_for(_points("concurrency", {}), {"ttft_ms": 500}) == []  # not a max-num-seqs sweep


def test_split_interactive_is_the_largest_meeting_even_when_low_values_queue():
    from servelab.sweep.knee_of import split_for

    pts = _points("max_num_seqs", {"concurrency": 16})
    ttft = {
        1: 5000.0,
        2: 3000.0,
        4: 100.0,
        8: 200.0,
        16: 400.0,
        32: 800.0,
        64: 1600.0,
        128: 3200.0,
        256: 6400.0,
    }
    for e in pts:  # 1 and 2 sequences queue 16 users: TTFT misses there too
        e["summary"]["metrics"]["ttft_ms"]["p95"] = ttft[e["params"]["max_num_seqs"]]
    (sp,) = split_for(pts, {"ttft_ms": 500, "percentile": 95})
    assert sp["interactive"] == 16 and "misses at 1, 2, 32, 64, 128, 256" in sp["slo_check"]


def test_closed_loop_split_never_names_an_interactive_setting_above_the_bulk_one():
    # 16 closed-loop users: TTFT p95 200 ms up to 32 sequences, 400 ms at 64, 800 ms at 128 (the module's
    # sweep); SLO TTFT p95 <= 500 ms. Largest meeting: 64, above the throughput knee 32, which meets it too
    # (200 ms). Before: "interactive endpoint: max_num_seqs 64; bulk endpoint: max_num_seqs 32". One
    # endpoint at 32 serves both.
    from servelab.sweep.knee_of import split_for

    (sp,) = split_for(_points("max_num_seqs", {"concurrency": 16}), {"ttft_ms": 500, "percentile": 95})
    assert sp["split_helps"] is False and sp["interactive"] == sp["bulk"] == 32
    assert sp["text"] == ("no split needed: the throughput knee max_num_seqs 32 meets ttft_ms p95 <= 500 "
                          "too; one endpoint at max_num_seqs 32 (3,200 tok/s) serves interactive and bulk "
                          "traffic")
