"""The MiniLM backend's forward passes packed by length give the model's own embeddings, in the caller's order."""
import numpy as np
import pytest

from streams.models import available

pytestmark = pytest.mark.skipif(not available("minilm"), reason="the embed extra (MiniLM) is not installed")

CONTEXT = ("Customer asks to move 40 pallets of frozen goods from the Hamburg warehouse before Friday; Hamburg is at "
           "92% capacity, Berlin at 40%, Munich closed for inventory until Monday. " * 3)
CONTEXT_ZH = "客户要求在周五前把四十托冷冻货物从汉堡仓库调出；汉堡仓库已满百分之九十二，柏林百分之四十，慕尼黑盘点关闭到周一。" * 2
CANDIDATES = ["transfer to Berlin", "hold", "review", "transfer to Munich", "block", "调往柏林", "暂缓", "人工复核"]


@pytest.mark.parametrize("budget", [1, 64, 512, 100_000])
def test_packed_passes_give_the_models_own_embeddings_in_order(budget):
    from streams.backends.embeddings import MiniLMBackend

    backend = MiniLMBackend(token_budget=budget)
    texts = [CANDIDATES[0], CONTEXT, *CANDIDATES[1:5], CONTEXT_ZH, *CANDIDATES[5:]]
    own = backend.encoder.encode(texts, batch_size=1, normalize_embeddings=True, convert_to_numpy=True)
    packed = backend.embed(texts)
    assert packed.shape == own.shape
    assert np.abs(packed - own).max() < 1e-5
    assert backend.embed([]).shape == (0, own.shape[1])


def test_a_pass_holds_what_fits_its_token_budget():
    from streams.backends.embeddings import MiniLMBackend

    backend = MiniLMBackend(token_budget=64)
    calls = []
    encode = backend.encoder.encode
    backend.encoder.encode = lambda texts, **kw: calls.append(list(texts)) or encode(texts, **kw)
    backend.embed([CONTEXT, *CANDIDATES])
    lengths = [[backend.tokens(t) for t in call] for call in calls]
    assert [CONTEXT] in calls  # the long context alone: the candidates are not padded to it
    assert all(len(call) * max(call) <= 64 or len(call) == 1 for call in lengths)
    assert sum(map(len, calls)) == 1 + len(CANDIDATES) and len(calls) < 1 + len(CANDIDATES)
