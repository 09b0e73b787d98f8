import orjson

from schemas.records import Request
from schemas.validate import decode
from workers import workload


def test_workload_is_deterministic_valid_and_has_repeats():
    a, b = workload.generate(200, seed=5), workload.generate(200, seed=5)
    assert [orjson.loads(x)["state"] for x in a] == [orjson.loads(x)["state"] for x in b]
    requests = [decode(raw, Request, 1_048_576) for raw in a]
    assert len({r.request_id for r in requests}) == 200
    types = {r.decision_type for r in requests}
    assert types == {"inventory_transfer", "risk_interception", "ranking"}
    bodies = [orjson.dumps([r.decision_type, r.state, [c.text for c in r.candidates]]) for r in requests]
    assert len(set(bodies)) < 170, "a share of the workload must repeat earlier requests"
