import pytest

from streams.scoring import cascade


@pytest.mark.parametrize(
    "scores,temperature,expected",
    [
        ([1.0, 1.0, 1.0, 1.0], 1.0, 0.25),
        ([10.0, 0.0], 1.0, 1.0),
        ([], 1.0, 0.0),
    ],
)
def test_confidence(scores, temperature, expected):
    assert cascade.confidence(scores, temperature) == pytest.approx(expected, abs=1e-3)


def test_difficulty_is_low_for_a_clear_winner_and_high_for_a_flat_field():
    clear = cascade.difficulty([9.0, 1.0, 0.5, 0.4, 0.2, 0.1], state_tokens=10)
    flat = cascade.difficulty([1.0, 0.99, 0.98, 0.97, 0.96, 0.95], state_tokens=10)
    assert 0.0 <= clear < flat <= 1.0
    assert cascade.difficulty([1.0, 1.0, 1.0], 10) == 1.0
    assert cascade.difficulty([3.0], 10) == 0.0


def test_longer_state_and_more_candidates_are_harder():
    scores = [5.0, 3.0, 2.0, 1.0]
    assert cascade.difficulty(scores, 3000) > cascade.difficulty(scores, 10)
    assert cascade.difficulty(scores * 20, 10) != cascade.difficulty(scores, 10)


@pytest.mark.parametrize(
    "hardness,k_min,k_max,n,expected",
    [
        (0.0, 5, 8, 20, 5),
        (1.0, 5, 8, 20, 8),
        (0.6, 5, 30, 40, 20),
        (1.0, 5, 30, 12, 12),
        (0.0, 5, 8, 3, 3),
    ],
)
def test_beam_width(hardness, k_min, k_max, n, expected):
    assert cascade.beam_width(hardness, k_min, k_max, n) == expected


def test_mmr_keeps_an_alternative_instead_of_a_near_duplicate():
    texts = ["cheap flights to paris", "cheap flights to paris today", "paris hotel deals", "unrelated"]
    scores = [1.0, 0.95, 0.7, 0.0]
    assert cascade.mmr_select(scores, texts, 2, relevance_weight=1.0) == [0, 1]
    assert cascade.mmr_select(scores, texts, 2, relevance_weight=0.5) == [0, 2]


def test_mmr_returns_everything_ranked_when_k_covers_all():
    assert cascade.mmr_select([0.1, 0.9, 0.5], ["a", "b", "c"], 5, 0.8) == [1, 2, 0]
