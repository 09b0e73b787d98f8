import numpy as np
import pytest

from streams.cache.embedders import ByLanguageEmbedder, load_embedder


@pytest.fixture(scope="module")
def by_language(minilm, e5):
    return load_embedder("by-language")


def test_english_embeds_with_minilm_and_chinese_with_e5(by_language, minilm, e5):
    texts = ["How do I reset my password?", "如何重置密码", "怎样修改登录密码", "What is the refund policy?"]
    vectors = by_language.embed(texts)
    assert isinstance(by_language, ByLanguageEmbedder) and vectors.shape == (4, 384)
    assert np.allclose(vectors[[0, 3]], minilm.embed([texts[0], texts[3]]), atol=1e-5)
    assert np.allclose(vectors[[1, 2]], e5.embed(texts[1:3]), atol=1e-5)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
    assert float(vectors[1] @ vectors[2]) > 0.85  # Chinese paraphrases are near in e5's space
