from streams.backends.lexical import LexicalBackend, words


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
    scores = LexicalBackend().score("晚上睡不着，脑子停不下来怎么办", [
        "这家餐厅的烤鸭很有名", "入睡前听一些轻松的音乐，让大脑放松", "明天的航班改到了下午"]).scores
    assert scores[1] > 0 and scores[1] > max(scores[0], scores[2])


def test_words_are_the_search_units_in_both_scripts():
    assert words("Reset my PASSWORD") == ["reset", "my", "password"]
    assert words("入睡") == ["入睡", "入", "睡"]


def test_saying_the_same_thing_twice_scores_no_higher():
    # full length normalisation: a long candidate's chance matches do not crowd the beam
    for query, text in (("我想预订北京的酒店", "您预订的北京酒店已经确认。"), ("reset my password", "We reset your password.")):
        once, twice, other = LexicalBackend().score(query, [text, text + text, "无关 unrelated"]).scores
        assert once > other and abs(once - twice) < 1e-9
