import pytest

from streams.cache.calibration import Pair
from streams.cache.embedders import HashingEmbedder
from streams.cache.training import train
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
    return out


def test_the_verifier_is_fitted_on_the_candidates_the_live_decision_meets():
    weights, summary = train(HashingEmbedder(), pairs(), floor=0.2)
    assert summary["pairs"] == 32 and summary["candidates"] >= 20 and 0 < summary["right"] < summary["candidates"]
    assert weights.shape == (len(FEATURES),) and weights[FEATURES.index("cosine")] > 0


def test_too_few_candidates_name_the_fix():
    with pytest.raises(ValueError, match="give more labelled pairs"):
        train(HashingEmbedder(), pairs()[:2], floor=0.2)
