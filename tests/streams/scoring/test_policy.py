import pytest

from streams.scoring import policy
from streams.scoring.factory import known_decision_types


def test_bundled_file_lists_the_pipeline_decision_types():
    assert {"inventory_transfer", "risk_interception", "ranking", "customer_service"} <= known_decision_types()
    assert "made_up" not in known_decision_types()


def test_types_override_only_what_they_name():
    config = policy.parse("""
defaults: {coarse_k_max: 7, timeout_ms: 500}
types:
  a: {timeout_ms: 100}
  b:
""")
    assert config.policy("a") == policy.Policy(coarse_k_max=7, timeout_ms=100)
    assert config.policy("b") == policy.Policy(coarse_k_max=7, timeout_ms=500)
    assert config.policy("unknown") == config.default
    assert config.tiers == {"coarse": "lexical", "fine": "auto", "fine_multilingual": "auto", "escalation": "none"}


@pytest.mark.parametrize(
    "text,message",
    [
        ("types: {a: {beam: 3}}", "unknown policy keys"),
        ("defaults: {coarse_k_min: 9, coarse_k_max: 8}", "coarse_k_min"),
        ("defaults: {rollout_percent: 150}", "rollout_percent"),
    ],
)
def test_bad_policies_name_the_problem(text, message):
    with pytest.raises(ValueError, match=message):
        policy.parse(text)


def test_file_path_is_read(tmp_path):
    path = tmp_path / "types.yaml"
    path.write_text("types: {only_this: {}}\n")
    assert policy.known_decision_types(str(path)) == {"only_this"}
