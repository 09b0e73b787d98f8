import numpy as np
import pytest

from streams.cache.calibration import Pair
from streams.cache.embedders import HashingEmbedder
from streams.cache.training import certifiable, held_for_calibration, train
from streams.cache.verifier import FEATURES

TOPICS = (
    "router",
    "printer",
    "laptop",
    "camera",
    "tablet",
    "monitor",
    "speaker",
    "keyboard",
    "phone",
    "watch",
    "scanner",
    "modem",
    "drone",
    "console",
    "projector",
    "headset",
)


def pairs() -> list[Pair]:
    """Duplicates asked in near-identical words (label 1), and different questions that share the topic
    (label 0): the fitted verifier must rank the first above the second."""
    out = []
    for t in TOPICS:
        out.append(Pair(f"How do I reset my {t} to factory settings?", f"how do I reset my {t} to factory settings", 1))
        out.append(
            Pair(
                f"What is the warranty period of the {t} sold here?", f"Which {t} colours are sold here this season?", 0
            )
        )
        out.append(Pair(f"如何把{t}恢复出厂设置？", f"如何把{t}恢复出厂设置", 1))
        out.append(Pair(f"这里卖的{t}保修期是多久？", f"这里这一季卖哪些颜色的{t}？", 0))
    return out


def test_the_verifier_is_fitted_on_the_candidates_the_live_decision_meets():
    verifier, summary = train(HashingEmbedder(), pairs(), floor=0.2)
    assert summary["pairs"] == 64 and summary["candidates"] >= 20 and 0 < summary["right"] < summary["candidates"]
    assert verifier.weights.shape == (len(FEATURES),) and verifier.weights[FEATURES.index("cosine")] > 0


def test_the_calibration_half_is_kept_out_of_the_fit_and_ranked_out_of_sample():
    """English and Chinese pairs: the held half's candidates come back as verdicts, never fitted on, and the
    fitted weights rank its right candidates above its wrong ones."""
    data = pairs()
    held = [p for p in data if held_for_calibration(p)]
    assert 0.3 < len(held) / len(data) < 0.7 and any("设置" in p.text_a for p in held)
    verifier, summary = train(HashingEmbedder(), data, floor=0.2)
    rows, agreed = verifier.calibration
    assert len(rows) == summary["calibration_candidates"] > 0 and agreed.sum() == summary["calibration_right"]
    assert 0 < agreed.sum() < len(agreed)
    scores = verifier.probabilities(rows)
    assert scores[agreed].min() > scores[~agreed].max()


def test_the_summary_says_what_the_calibration_verdicts_certify_per_bound():
    """English and Chinese pairs: the first test's outcome per bound, looser bounds serving at least as much."""
    verifier, summary = train(HashingEmbedder(), pairs(), floor=0.2, bounds=(0.05, 0.3), confidence=0.9)
    rows = verifier.calibration[0]
    certifies = summary["certifies"]
    assert set(certifies) == {"0.05", "0.3"}
    assert certifies["0.3"]["served"] >= certifies["0.05"]["served"] >= 0
    assert all(c["errors"] <= c["served"] <= len(rows) for c in certifies.values())


def test_one_wrong_verdict_in_ten_at_the_top_certifies_no_five_percent_bound():
    """Quora's labels: about one in ten of the best-scored candidates is labelled different. Certified at 0.2,
    never at 0.05, however many such verdicts; clean verdicts certify 0.05."""
    scores = np.linspace(1.0, 0.5, 1000)
    noisy = np.arange(1000) % 10 != 3
    assert certifiable(scores, noisy, (0.05,))["0.05"] == {"served": 0, "errors": 0}
    looser = certifiable(scores, noisy, (0.2,))["0.2"]
    assert looser["served"] == 1000 and looser["errors"] == 100
    clean = certifiable(scores, np.ones(1000, dtype=bool), (0.05,))["0.05"]
    assert clean == {"served": 1000, "errors": 0}


def test_too_few_candidates_name_the_fix():
    with pytest.raises(ValueError, match="give more labelled pairs"):
        train(HashingEmbedder(), pairs()[:2], floor=0.2)
