"""Distill policies: bundled YAML, per-type overrides, TTL weights, clear errors."""

import pytest

from streams.distill.policy import Policy, load_policy


def test_default_and_override():
    default = load_policy("default")
    risk = load_policy("risk")
    assert default.budget == 768 and default.keep_resolved == 2
    assert risk.budget == 768 and risk.keep_resolved == 1 and "coupon" in risk.exclude_terms
    assert risk.tag_weights == default.tag_weights  # inherited
    assert load_policy("no_such_type") == Policy(
        decision_type="no_such_type",
        **{k: getattr(default, k) for k in default.__dataclass_fields__ if k != "decision_type"},
    )


@pytest.mark.parametrize(
    "hours,weight", [(None, 1.0), (1, 1.0), (24, 1.0), (25, 0.6), (72, 0.6), (100, 0.3), (24 * 8, 0.1)]
)
def test_ttl_weight(hours, weight):
    assert load_policy("default").ttl_weight(None if hours is None else hours * 3600) == weight


def test_ttl_floor_zero_expires():
    assert load_policy("risk").ttl_weight(80 * 3600) == 0.0


def test_unknown_key_names_the_known_ones(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("default:\n  budgett: 10\n")
    with pytest.raises(ValueError, match="unknown keys.*budgett.*known keys"):
        load_policy("default", str(path))


def test_user_file(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("default:\n  budget: 100\nsupport:\n  exclude_terms: [Weather]\n  ttl: [[48, 0.5], [1, 1.0]]\n")
    policy = load_policy("support", str(path))
    assert policy.budget == 100 and policy.exclude_terms == ("weather",)
    assert policy.ttl == ((1.0, 1.0), (48.0, 0.5))
