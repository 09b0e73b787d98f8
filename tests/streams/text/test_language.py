import pytest

from streams.text import language


@pytest.mark.parametrize(
    "text, lang",
    [
        ("How do I reset my password?", "en"),
        ("我想订一家北京的酒店", "zh"),
        ("帮我查一下iPhone 15的价格", "zh"),  # mixed: the Chinese carries most of it
        ("Please translate 你好 into French for the customer email", "en"),
        ("こんにちは、世界", "ja"),
        ("안녕하세요", "ko"),
        ("Привет, мир", "ru"),
        ("12345 !!!", "und"),
        ("", "und"),
    ],
)
def test_detect(text, lang):
    assert language.detect(text) == lang


def test_units_english_are_lowercased_words():
    assert language.units("Reset MY password, don't wait!") == ["reset", "my", "password", "don't", "wait"]


def test_units_chinese_are_bigrams_and_lone_characters():
    assert language.units("预订酒店，好") == ["预订", "订酒", "酒店", "好"]


def test_search_units_add_each_cjk_character_and_leave_other_scripts_alone():
    assert language.units("预订酒店，好", unigrams=True) == ["预订", "订酒", "酒店", "预", "订", "酒", "店", "好"]
    assert language.units("iPhone 15 的价格", unigrams=True) == ["iphone", "15", "的价", "价格", "的", "价", "格"]
    english = "Reset MY password, don't wait!"
    assert language.units(english, unigrams=True) == language.units(english)


def test_units_mixed_and_full_width():
    assert language.units("查ｉＰｈｏｎｅ１５的价格") == ["查", "iphone15", "的价", "价格"]
    assert language.units("iPhone 15 的价格") == ["iphone", "15", "的价", "价格"]


def test_content_units_drop_stop_words_in_both_languages():
    assert language.units("What is the price of the ticket", content=True) == ["price", "ticket"]
    assert language.units("我的订单", content=True) == ["的订", "订单"]  # 我的: two stop characters


@pytest.mark.parametrize(
    "text, values",
    [
        ("一共三万五千元", ["35000"]),
        ("住三晚，两个人", ["3", "2"]),
        ("一个人去", []),  # 一 + classifier is the article "a"
        ("百分之十五的折扣", ["15"]),
        ("二零一五年", ["2015"]),
        ("十二亿", ["1200000000"]),
        ("一起去看一下", []),
        ("I paid 1,200 dollars for twenty tickets", ["1200", "20"]),
        ("订单号１２３４５", ["12345"]),
    ],
)
def test_numbers(text, values):
    assert language.numbers(text) == values


def test_lexicons_come_from_the_data_files():
    zh, en = language.lexicon("zh"), language.lexicon("en")
    assert zh.numbers["万"] == 10_000 and zh.numbers["亿"] == 100_000_000 and zh.numbers["两"] == 2
    assert "没有" in zh.negations and "不" in zh.negations and "嗯" in zh.fillers and "的" in zh.stopwords
    assert en.numbers["twenty"] == 20 and en.numbers["thousand"] == 1000 and "not" in en.negations
    assert "um" in en.fillers and "the" in en.stopwords
    assert language.lexicon("xx") == language.Lexicon("xx")  # a language without a file: empty lists


@pytest.mark.parametrize(
    "word, stem", [("blockers", "block"), ("running", "run"), ("cities", "city"), ("the", "the"), ("Owner's", "owner")]
)
def test_stem(word, stem):
    assert language.stem(word) == stem


@pytest.mark.parametrize("text", ["I hope this helps!", "Café “naïve” – 42 ≥ 7", "Привет", ""])
def test_no_cjk_character_means_no_cjk_language(text):
    assert not language.has_cjk(text) and not language.is_cjk(language.detect(text))


@pytest.mark.parametrize("text", ["希望对您有帮助！", "帮我查一下iPhone 15的价格", "ありがとう", "감사합니다"])
def test_cjk_characters_are_found(text):
    assert language.has_cjk(text) and language.is_cjk(language.detect(text))


def test_simplified_maps_traditional_one_character_for_one():
    text = "希望這些資訊對你有所幫助！Hello 3"
    out = language.simplified(text)
    assert out == "希望这些资讯对你有所帮助！Hello 3" and len(out) == len(text)
    assert language.simplified("plain English, no CJK") == "plain English, no CJK"
    assert language.simplified("简体中文不变") == "简体中文不变"
