"""The report's charts draw what they say: the per-request timeline's legend has each phase's own colour."""

from __future__ import annotations

import pytest
from matplotlib.colors import to_hex

from servelab.report import charts


def test_timeline_legend_shows_each_phase_in_its_bar_colour(tmp_path, monkeypatch):
    drawn = {}
    real_save = charts._save

    def keep(fig, path):
        ax = fig.axes[0]
        drawn["legend"] = {t.get_text(): to_hex(h.get_facecolor())
                           for t, h in zip(ax.get_legend().get_texts(), ax.get_legend().legend_handles,
                                           strict=True)}
        drawn["bars"] = {to_hex(p.get_facecolor()) for p in ax.patches}
        return real_save(fig, path)

    monkeypatch.setattr(charts, "_save", keep)
    rows = [{"label": "#0", "phases": [("client wait", 0.0, 0.5), ("failed", 0.5, 1.0)]},
            {"label": "#1", "phases": [("client wait", 0.0, 0.2), ("waiting + prefill", 0.2, 0.4),
                                       ("decode", 0.4, 2.0)]}]
    out = charts.request_timeline(rows, tmp_path / "t.png", total=2)
    assert out.stat().st_size > 0
    assert drawn["legend"] == {"client wait": "#c7c7c7", "waiting + prefill": "#e377c2", "decode": "#1f77b4",
                               "failed": "#7f0000"}
    assert set(drawn["legend"].values()) == drawn["bars"]


def test_timeline_caption_names_the_failed_colour_only_when_requests_failed(tmp_path):
    import pyarrow as pa

    from servelab.records.rundir import RunData
    from servelab.report.html_charts import timeline_section
    from servelab.report.html_page import Page

    def run(status):
        n = len(status)
        t = pa.table({"request_id": list(range(n)), "warmup": [False] * n, "status": status,
                      "intended_ns": [i * 10**8 for i in range(n)], "sent_ns": [i * 10**8 for i in range(n)],
                      "first_token_ns": [i * 10**8 + 5 * 10**7 for i in range(n)],
                      "end_ns": [i * 10**8 + 9 * 10**7 for i in range(n)]})
        return RunData(tmp_path, {}, {}, t, None, None, True)

    for status, says in ((["ok"] * 4, False), (["ok", "http_error", "ok", "ok"], True)):
        page = Page(tmp_path / "report.html")
        timeline_section(page, run(status))
        text = "".join(page.parts)
        assert "blue: decoding" in text
        assert ("dark red: failed" in text) is says


def test_server_series_counts_an_aliased_metric_once_and_averages_kv_usage_over_engines():
    import pyarrow as pa

    from servelab.report.html_charts import server_series

    rows = []
    for t, kv0, kv1 in ((0, 0.2, 0.4), (5, 0.3, 0.5)):
        for raw in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"):  # one gauge, two names
            rows += [(t, "kv_cache_usage", raw, '{"engine":"0"}', kv0),
                     (t, "kv_cache_usage", raw, '{"engine":"1"}', kv1)]
        rows += [(t, "requests_running", "vllm:num_requests_running", '{"engine":"0"}', 3.0),
                 (t, "requests_running", "vllm:num_requests_running", '{"engine":"1"}', 4.0)]
    cols = ("t_ns", "name", "raw_name", "labels", "value")
    tel = pa.table({k: [r[i] for r in rows] for i, k in enumerate(cols)})
    got = server_series(tel)
    # KV: the mean of the two engines (0.2 and 0.4 -> 0.3), not the sum over both names (1.2)
    assert got["kv_cache_usage"] == {0: pytest.approx(0.3), 5: pytest.approx(0.4)}
    assert got["requests_running"] == {0: 7.0, 5: 7.0}  # running requests add up over engines


def test_pareto_front_is_drawn_as_the_attainable_staircase(tmp_path, monkeypatch):
    # (10 tok/s per user, 100 tok/s per GPU) and (20, 50): between them, 50 tok/s per GPU is attainable at
    # 20 tok/s per user, 100 only up to 10; the step must fall at x = 10, not run on at 100 to x = 20
    from matplotlib.cbook import STEP_LOOKUP_MAP

    drawn = {}
    real_save = charts._save

    def keep(fig, path):
        front = next(ln for ln in fig.axes[0].get_lines() if ln.get_label() == "Pareto front")
        xs, ys = STEP_LOOKUP_MAP[front.get_drawstyle()](front.get_xdata(), front.get_ydata())
        drawn["corners"] = {(float(x), float(y)) for x, y in zip(xs, ys, strict=True)}
        return real_save(fig, path)

    monkeypatch.setattr(charts, "_save", keep)
    series = [{"label": "a", "points": [(10.0, 100.0, "1"), (20.0, 50.0, "2")]}]
    charts.pareto_chart(series, tmp_path / "p.png")
    assert (10.0, 50.0) in drawn["corners"] and (20.0, 100.0) not in drawn["corners"]


def test_pareto_legend_does_not_cover_the_points(tmp_path, monkeypatch):
    # two runs at nearly the same point, up and to the right (where a fixed upper-right legend sat)
    covered = {}
    real_save = charts._save

    def keep(fig, path):
        fig.canvas.draw()
        ax = fig.axes[0]
        box = ax.get_legend().get_window_extent()
        pts = ax.transData.transform([(96.5, 1460.0), (96.6, 1461.0)])
        covered["n"] = sum(box.contains(x, y) for x, y in pts)
        return real_save(fig, path)

    monkeypatch.setattr(charts, "_save", keep)
    series = [{"label": "20261204-085612", "points": [(96.5, 1460.0, "20261204-085612")]},
              {"label": "20261204-090451-seed2", "points": [(96.6, 1461.0, "20261204-090451-seed2")]}]
    charts.pareto_chart(series, tmp_path / "p.png")
    assert covered["n"] == 0


def _label_boxes(fig):
    fig.canvas.draw()
    ax = fig.axes[0]
    r = fig.canvas.get_renderer()
    return ax, [(t.get_text(), t.get_window_extent(r)) for t in ax.texts]


def test_pareto_point_labels_do_not_overlap(tmp_path, monkeypatch):
    # the README's max_num_seqs=16,64 sweep: both settings give the same figures up to 16 users, and
    # max_num_seqs=16 sits still at 32 and 64: four points drawn at one spot, two at each of three others
    seen = {}
    real_save = charts._save

    def keep(fig, path):
        ax, boxes = _label_boxes(fig)
        seen["texts"] = [t for t, _ in boxes]
        seen["overlaps"] = [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1:]
                            if ba.overlaps(bb)]
        inside = ax.get_window_extent()
        seen["outside"] = [t for t, b in boxes if not (inside.x0 <= b.x0 and b.x1 <= inside.x1
                                                      and inside.y0 <= b.y0 and b.y1 <= inside.y1)]
        return real_save(fig, path)

    monkeypatch.setattr(charts, "_save", keep)
    a = [(116.0, 451.0, "4"), (108.9, 836.0, "8"), (96.3, 1461.0, "16"), (96.2, 1471.0, "32"),
         (96.1, 1473.0, "64")]
    b = [(116.0, 451.0, "4"), (108.9, 836.0, "8"), (96.3, 1461.0, "16"), (78.6, 2283.0, "32"),
         (57.5, 3242.0, "64")]
    series = [{"label": "max_num_seqs=16", "points": a}, {"label": "max_num_seqs=64", "points": b}]
    charts.pareto_chart(series, tmp_path / "p.png")
    assert seen["overlaps"] == [] and seen["outside"] == []
    # points at one spot share one label, each level once
    assert sorted(seen["texts"]) == sorted(["4", "8", "16, 32, 64", "32", "64"])


def test_a_crowded_pareto_chart_labels_a_readable_subset(tmp_path, monkeypatch):
    seen = {}
    real_save = charts._save

    def keep(fig, path):
        _, boxes = _label_boxes(fig)
        seen["n"] = len(boxes)
        seen["overlaps"] = sum(ba.overlaps(bb) for i, (_, ba) in enumerate(boxes) for _, bb in boxes[i + 1:])
        return real_save(fig, path)

    monkeypatch.setattr(charts, "_save", keep)
    # 6 series x 8 levels along near-identical curves: 48 points in a small area
    series = [{"label": f"s{k}", "points": [(100 - 10 * i + k * 0.5, 400 * (i + 1) + k * 20, str(2 ** i))
                                            for i in range(8)]} for k in range(6)]
    charts.pareto_chart(series, tmp_path / "p.png")
    assert seen["overlaps"] == 0 and 0 < seen["n"] < 48


def test_server_metrics_scraped_only_before_and_after_the_load_are_not_shown_as_its_figures(tmp_path):
    import pyarrow as pa

    from servelab.report.html_charts import server_section
    from servelab.report.html_page import Page

    def section(times):
        rows = [(t, "kv_cache_usage", "vllm:kv_cache_usage_perc", '{"engine":"0"}', v) for t, v in times]
        tel = pa.table({k: [r[i] for r in rows]
                        for i, k in enumerate(("t_ns", "name", "raw_name", "labels", "value"))})
        page = Page(tmp_path / "report.html")
        server_section(page, tel)
        return "".join(page.parts)

    # a 3.25 s run: the idle scrape before it and the one after it, both 0
    idle = section([(0, 0.0), (3_250_000_000, 0.0)])
    assert "KV cache usage: not sampled under load (2 scrape(s)" in idle and "max 0" not in idle
    # one scrape inside: the few samples are the run's, summarised as before
    few = section([(0, 0.0), (10**9, 0.04), (3_250_000_000, 0.0)])
    assert "KV cache usage: 3 sample(s), mean 1.33 %, max 4 %" in few
