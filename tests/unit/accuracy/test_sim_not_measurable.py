"""Accuracy against the simulator: its text is filler, so quality is reported as not measurable (never
"0% vs 0%, within noise"); against answers a real engine gave, the paired interval stays."""

from servelab.accuracy.compare import NOT_MEASURABLE, flag_quality_drop
from servelab.accuracy.dataset import load_dataset
from servelab.accuracy.runner import accuracy_for_target
from servelab.config.models import TargetConfig


def test_simulator_accuracy_is_not_measurable():
    items = load_dataset(None, n=4, seed=0)
    fp8 = accuracy_for_target(TargetConfig(url="sim"), items)
    bf16 = accuracy_for_target(TargetConfig(url="sim"), items)
    assert fp8["summary"]["measurable"] is False and fp8["summary"]["note"] == NOT_MEASURABLE
    q = flag_quality_drop(bf16, fp8)
    assert q["verdict"] == NOT_MEASURABLE and q["flagged"] is False and q["diff"] is None


def test_real_answers_keep_the_paired_interval():
    def res(correct):
        return {"summary": {"measurable": True}, "results": [{"id": i, "answer": str(c), "correct": c}
                                                             for i, c in enumerate(correct)]}

    q = flag_quality_drop(res([True] * 40), res([True] * 20 + [False] * 20))
    assert q["verdict"] == "quality drop" and q["flagged"] and q["diff"] == -0.5 and q["lo"] < -0.5 < q["hi"]
