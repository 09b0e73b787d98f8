"""Hierarchy descent: a multi-step decision over ids like region/warehouse/qty, one level per iteration, bounded by
the policy's max_iterations, with loop detection. Each level is a cascade ranking (streams.scoring.ranking)."""

from __future__ import annotations

from schemas.records import Work
from streams.scoring import policy as policy_mod
from streams.scoring.breakers import DecisionBreakers
from streams.scoring.ledger import Ledger
from streams.scoring.ranking import rank
from streams.scoring.steps import Deciding, Ranking
from streams.text import tokens


def descend(
    tiers, work: Work, lengths: list[int], pol: policy_mod.Policy, ledger: Ledger, breakers: DecisionBreakers
) -> Deciding[tuple[Ranking, int]]:
    """Returns (Ranking, iterations). Choosing the current prefix again (an id that is also a parent) is a loop:
    it ends the decision."""
    ids = [c.id for c in work.request.candidates]
    texts = [c.text for c in work.request.candidates]
    prefix, chain, ranking = "", [], None
    for iteration in range(1, pol.max_iterations + 1):
        options = children(ids, prefix)
        groups = list(options)
        if len(groups) == 1:
            choice = groups[0]
        else:
            labels = ["; ".join(texts[i] for i in options[g][:3]) for g in groups]
            sub_lengths = [tokens.count(t, work.model) for t in labels]
            ranking = yield from rank(tiers, work, list(range(len(groups))), sub_lengths, pol, ledger, breakers, labels)
            choice = groups[ranking.order[0]]
        chain.append(f"step{iteration}:{choice}")
        if choice == prefix or choice in ids and not children(ids, choice).keys() - {choice}:
            chain.append("loop-detected" if choice == prefix else "leaf")
            leaf = ids.index(choice)
            return Ranking(
                [leaf], {leaf: 1.0}, ranking.tier if ranking else "rules", ranking.confidence if ranking else 1.0, chain
            ), iteration
        prefix = choice
    under = [i for i, x in enumerate(ids) if x == prefix or x.startswith(prefix + "/")]
    final = yield from rank(tiers, work, under, lengths, pol, ledger, breakers)
    final.chain = chain + ["max_iterations"] + final.chain
    return final, pol.max_iterations


def children(ids: list[str], prefix: str) -> dict[str, list[int]]:
    """The next level under `prefix`: child prefix → candidate indices below it (the prefix itself when
    it is a candidate id too)."""
    depth = prefix.count("/") + 1 if prefix else 0
    groups: dict[str, list[int]] = {}
    for i, x in enumerate(ids):
        if x == prefix or x.startswith(prefix + "/" if prefix else ""):
            key = x if x == prefix else "/".join(x.split("/")[: depth + 1])
            groups.setdefault(key, []).append(i)
    return groups
