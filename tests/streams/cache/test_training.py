import pytest

from streams.cache.calibration import Pair
from streams.cache.embedders import HashingEmbedder
from streams.cache.training import held_for_calibration, train
from streams.cache.verifier import FEATURES

TOPICS = ("router", "printer", "laptop", "camera", "tablet", "monitor", "speaker", "keyboard", "phone", "watch",
          "scanner", "modem", "drone", "console", "projector", "headset")


def pairs() -> list[Pair]:
    """Duplicates asked in near-identical words (label 1), and different questions that share the topic
    (label 0): the fitted verifier must rank the first above the second."""
    out = []
    for t in TOPICS:
        out.append(Pair(f"How do I reset my {t} to factory settings?", f"how do I reset my {t} to factory settings", 1))
        out.append(Pair(f"What is the warranty period of the {t} sold here?",
                        f"Which {t} colours are sold here this season?", 0))
        out.append(Pair(f"如何把{t}恢复出厂设置？", f"如何把{t}恢复出厂设置", 1))
        out.append(Pair(f"这里卖的{t}保修期是多久？", f"这里这一季卖哪些颜色的{t}？", 0))
    return out


def test_the_verifier_is_fitted_on_the_candidates_the_live_decision_meets():
    weights, summary, _ = train(HashingEmbedder(), pairs(), floor=0.2)
    assert summary["pairs"] == 64 and summary["candidates"] >= 20 and 0 < summary["right"] < summary["candidates"]
    assert weights.shape == (len(FEATURES),) and weights[FEATURES.index("cosine")] > 0


def test_the_calibration_half_is_kept_out_of_the_fit_and_ranked_out_of_sample():
    """English and Chinese pairs: the held half's candidates come back as verdicts, never fitted on, and the
    fitted weights rank its right candidates above its wrong ones."""
    data = pairs()
    held = [p for p in data if held_for_calibration(p)]
    assert 0.3 < len(held) / len(data) < 0.7 and any("设置" in p.text_a for p in held)
    weights, summary, (rows, agreed) = train(HashingEmbedder(), data, floor=0.2)
    assert len(rows) == summary["calibration_candidates"] > 0 and agreed.sum() == summary["calibration_right"]
    assert 0 < agreed.sum() < len(agreed)
    scores = rows @ weights
    assert scores[agreed].min() > scores[~agreed].max()


def test_too_few_candidates_name_the_fix():
    with pytest.raises(ValueError, match="give more labelled pairs"):
        train(HashingEmbedder(), pairs()[:2], floor=0.2)
