import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from streams.models.lexical import LexicalBackend, words

ROOT = Path(__file__).resolve().parents[3]


def ranked(context: str, candidates: list[str]) -> list[int]:
    scores = LexicalBackend().score(context, candidates).scores
    return sorted(range(len(candidates)), key=lambda i: scores[i], reverse=True)


def test_english_candidates_rank_by_shared_words():
    candidates = ["the museum opens at nine", "how to reset a password", "reset the router to its defaults"]
    assert ranked("I forgot my password, how do I reset it?", candidates)[0] == 1
    assert LexicalBackend().score("tomato soup", candidates).scores == [0.0, 0.0, 0.0]


def test_chinese_candidates_rank_by_shared_bigrams():
    candidates = ["这家餐厅的烤鸭很有名", "您预订的酒店已经确认，入住时间是下午两点", "明天的航班改到了下午"]
    assert ranked("我想预订北京的酒店", candidates)[0] == 1


def test_a_chinese_answer_sharing_only_single_characters_is_not_tied_with_unrelated_ones():
    # 睡不着 / 入睡 and 脑子 / 脑力 share a character but no bigram: with bigrams alone every candidate scored 0
    scores = (
        LexicalBackend()
        .score(
            "晚上睡不着，脑子停不下来怎么办",
            ["这家餐厅的烤鸭很有名", "入睡前听一些轻松的音乐，让大脑放松", "明天的航班改到了下午"],
        )
        .scores
    )
    assert scores[1] > 0 and scores[1] > max(scores[0], scores[2])


def test_words_are_the_search_units_in_both_scripts():
    assert words("Reset my PASSWORD") == ["reset", "my", "password"]
    assert words("入睡") == ["入睡", "入", "睡"]


def test_saying_the_same_thing_twice_scores_no_higher():
    # full length normalisation: a long candidate's chance matches do not crowd the beam
    for query, text in (
        ("我想预订北京的酒店", "您预订的北京酒店已经确认。"),
        ("reset my password", "We reset your password."),
    ):
        once, twice, other = LexicalBackend().score(query, [text, text + text, "无关 unrelated"]).scores
        assert once > other and abs(once - twice) < 1e-9


STOCK = {"Berlin": 120, "Lyon": 3, "Madrid": 250, "Prague": 88, "Warsaw": 301}
TRANSFERS = {  # an inventory decision as the workload sends it: the transfers match different words of equal weight
    "en": (
        'State: {"days_of_cover":7,"note":"Lyon will run out of running shoes in 7 days at the current '
        'sell-through","product":"running shoes","short_warehouse":"Lyon","stock":{"Berlin":120,"Lyon":3,'
        '"Madrid":250,"Prague":88,"Warsaw":301}}',
        ["keep stock where it is and reorder from the supplier"]
        + [f"transfer running shoes from {w} ({n} units) to Lyon" for w, n in STOCK.items() if w != "Lyon"],
    ),
    "zh": (
        "状态：成都仓库的运动鞋7天后售罄。库存：北京120双，上海250双，杭州88双，武汉301双，成都3双。",
        ["保持库存不动，向供应商补货"]
        + [f"从{city}调拨运动鞋{n}双到成都" for city, n in (("北京", 120), ("上海", 250), ("杭州", 88), ("武汉", 301))],
    ),
}


@pytest.mark.parametrize("language", TRANSFERS)
def test_candidates_of_equal_term_weights_tie_exactly_and_the_first_listed_stays_first(language):
    context, candidates = TRANSFERS[language]
    scores = LexicalBackend().score(context, candidates).scores
    assert scores[1] > scores[0] and scores[1:] == [scores[1]] * 4
    assert ranked(context, candidates) == [1, 2, 3, 4, 0]


def test_scores_are_the_same_bits_under_every_string_hash_seed():
    # the scoring worker and `jev replay` run in different processes, each with its own hash seed
    script = (
        "import json, sys\nfrom streams.models.lexical import LexicalBackend\n"
        "for context, candidates in json.loads(sys.argv[1]).values():\n"
        "    print([s.hex() for s in LexicalBackend().score(context, candidates).scores])"
    )
    printed = {
        subprocess.run(
            [sys.executable, "-c", script, json.dumps(TRANSFERS)],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
        ).stdout
        for seed in range(8)
    }
    assert len(printed) == 1, printed
