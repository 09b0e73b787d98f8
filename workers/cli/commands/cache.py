"""`jev cache`: build labeled pairs, calibrate the L2 threshold per embedder, evaluate the L2 decision, and
replay labelled pairs as traffic through the live L2 decision with learned thresholds."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np
import orjson

from streams.cache import calibration, training
from streams.cache.embedders import EMBEDDERS, load_embedder
from streams.cache.evidence import PooledEvidence
from streams.cache.guards import verify
from streams.cache.learning import ThresholdLearner
from streams.cache.modelcheck import check_name, decision_name, load_model_check
from streams.cache.replay import replay
from streams.cache.semantic import SemanticCache
from streams.cache.verifier import load_verifier, save_verifier

TRAIN_HELP = """\
Fit the L2 verifier's starting weights from labelled pairs, and save them in the data dir (verifier.json).

Every text_a is cached and every text_b asks; the best verified neighbour each one meets (what the live L2
decision judges) is a training row, right only when it is the pair's own text_a and the pair is labelled 1.
A logistic regression over the verifier's features (cosines, word overlap, words and key terms only one
side has, length ratio, language and decision kind) is fitted to the rows of half the pairs (by hash), each
feature standardized by those rows' mean and spread; the other half's rows are saved with the weights as
calibration verdicts. Live, they open the test that certifies the served threshold (so hits can be served
before live verdicts come); live verdicts join the same test, and refit the weights, pulled towards these.
Weights (in --json too) apply to the standardized features; the scale is saved beside them and live refits
and scores read features on it. errors_top_N: wrong rows among the N the weights rank highest
in the calibration half (out of sample). certifies: per error bound (JEV_CACHE_MAX_ERROR, 0.05, 0.1, 0.2, at
JEV_CACHE_ERROR_CONFIDENCE), what the calibration verdicts alone would let L2 serve ("served" candidates,
"errors" among them): served 0 at your bound means these labels cannot certify it before live verdicts do
(on qqp-dev, about one in ten of the most similar candidates is labelled different: no 5% bound passes).
Fit on development pairs and report on others (bench/cache_replay.py holds out 30% of qqp-dev).

  jev cache train-verifier qqp_dev.jsonl --json
"""

REPLAY_HELP = """\
Replay a labelled pairs file as traffic through the live L2 decision, with thresholds learned from verdicts.

Every text_a is asked and answered first (it fills the cache). Then every text_b is asked. A hit is right
only when the entry it hit is its own text_a and the pair is labelled 1. The learner starts with the
verifier's calibration verdicts only (pairs its weights were not fitted on: train-verifier), and serves no L2
hit until verdicts show that a threshold keeps the false-hit rate at or below JEV_CACHE_MAX_ERROR with
JEV_CACHE_ERROR_CONFIDENCE. Live verdicts come from two places:
  - served hits, at --shadow-rate (the label stands in for the shadow comparison with the naive answer);
  - misses whose verified neighbour the learned threshold refused, or that were refused to explore
    (JEV_CACHE_EXPLORE_RATE of what it would serve): the miss is answered anyway and its answer compared
    with the neighbour's (the label stands in for that comparison; --no-explore: off).
Verdicts from earlier questions drive the thresholds of later ones: order matters (--seed shuffles).

Near-misses (a candidate refused with a verifier probability within --promote-margin below the serving
threshold) are judged as the live stage judges them (its naive twin's answer compared with the cached one):
here the label stands in, only where the candidate is the pair's own text_a (another pair's candidate is not
labelled and is never promoted); judged the same, the text_b becomes a key of the text_a's answer, and a later
request asking it (up to case and spacing) is served through it, right by the label of the pair that promoted
it (promoted, promoted_hits, promoted_false_hits; promoted_strict_false_hits: those whose own pair names
another text_a, wrong by the own-text_a rule above). The judgement lands before the next text_b is asked.

Candidates are scored by the learned verifier (weights from `jev cache train-verifier`, else the shipped
ones) and one threshold on its probability is certified from all verdicts (streams/cache/evidence.py).

The last line of --json is the summary: pairs, hits, false_hits, precision (right hits / hits; null
without hits), recall (right hits / pairs labelled 1), hit_ratio (L2 hits / requests), per_request_error
(false hits / requests), target_error, how the threshold moved, curve: [requests, hit ratio, precision]
along the run, and certification: at the first threshold the learner's latest fit tested, its verdicts, the
disagreements among them and the most the bound allows there (why nothing is served, when nothing is; the
plain output says it in words).

  jev cache replay --pairs $JEV_SHARED_DATA/qqp-dev/pairs.jsonl --shadow-rate 0.02 --json
With --decisions FILE the replay judges decisions instead of labels: a JSONL of decision requests in arrival
order goes through the cache stage's own L2 logic (its embedder, the decide pool's verifier and prior, its
learner and exploration). Every request that is not an exact repeat (L1, counted apart as exact_hits) is decided
by the naive path (the top tier over every candidate); a miss is answered with that decision and fills the
cache, a served L2 hit is right when its cached decision is the naive decision for the new request. --json:
requests, hits, wrong_hits, hit_ratio (L2 hits / requests), agreement, agreement_lower (one-sided 95% Wilson),
first_hit_at (index of the first served hit), tokens_saved (what the naive path spent on the requests L2
answered), with the decide pool's threshold and prior. Fields a request does not have are ignored.

  jev cache reworded --lang zh --slice heldout --out /tmp/zh-heldout.jsonl
  jev cache replay --decisions /tmp/zh-heldout.jsonl --embedder by-language --json
"""

REWORDED_HELP = """\
Write reworded decision traffic: FAQ-routing decision requests over five candidates (two plausible confusers,
three at random), each followed later by another request over the same candidates whose state rewords it or
nearly does (another meaning), so about half the requests reword an earlier one. English from Quora pairs
(qqp-dev), Chinese from zh-dev's questions reworded by rules (openers, closers, colloquial synonyms; a third
move the meaning: a negation flipped, a number changed). Deterministic for a seed; every item is in the tune
or the held-out slice by a hash of its first question, whatever the seed.

  jev cache reworded --lang en --slice tune --items 1500 --out /tmp/en-tune.jsonl
  jev cache train-verifier --decisions /tmp/en-tune.jsonl --embedder by-language --json
  jev cache reworded --lang en --slice heldout --items 1000 --out /tmp/en-heldout.jsonl
  jev cache replay --decisions /tmp/en-heldout.jsonl --embedder by-language --json
"""

EMBEDDER_HELP = (
    f"auto, {', '.join(EMBEDDERS)} (by-language: minilm for English, e5 for Chinese and other "
    "languages; default: JEV_CACHE_EMBEDDER)"
)


def register(sub) -> None:
    p = sub.add_parser("cache", help="semantic cache: labeled pairs, threshold calibration, evaluation")
    cmds = p.add_subparsers(dest="cache_command", metavar="ACTION", required=True)

    pairs = cmds.add_parser("pairs", help="write a labeled pairs file (JSONL) from a public data set")
    pairs.add_argument(
        "--from-stsb",
        action="store_true",
        required=True,
        help="STS-B under JEV_SHARED_DATA/sts-b: score >= 4 -> label 1, <= 2 -> 0, middle skipped",
    )
    pairs.add_argument("--split", default="dev", choices=["train", "dev", "test"])
    pairs.add_argument("--out", help="output file (default: stdout)")
    pairs.set_defaults(func=run_pairs)

    for name, func, text in (
        ("calibrate", run_calibrate, "pick and save the L2 threshold for a target precision"),
        ("evaluate", run_evaluate, "precision, recall, hit rate and latency of the L2 decision"),
    ):
        c = cmds.add_parser(name, help=text)
        c.add_argument("--pairs", required=True, help='JSONL of {"text_a", "text_b", "label": 0|1}')
        c.add_argument("--embedder", help=EMBEDDER_HELP)
        c.add_argument(
            "--model-check",
            help="second-opinion model after the lexical checks: none, auto, or an "
            "embedder name (default: JEV_CACHE_MODEL_CHECK)",
        )
        c.add_argument("--no-verify", action="store_true", help="cosine only, no verification checks")
        c.add_argument("--json", action="store_true", help="print JSON lines, the summary last")
        c.set_defaults(func=func)
        if name == "calibrate":
            c.add_argument("--target-precision", type=float, default=0.95)
        else:
            c.add_argument(
                "--threshold",
                type=float,
                default=0.0,
                help="cosine threshold (default: the calibrated one for the embedder)",
            )
            c.add_argument("--show", type=int, default=10, help="false hits and misses to list in the table")
    register_replay(cmds)
    w = cmds.add_parser(
        "reworded",
        help="write reworded decision traffic (JSONL requests) from the shared data, for replay --decisions",
        description=REWORDED_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    w.add_argument("--lang", choices=["en", "zh"], required=True, help="en: Quora pairs (qqp-dev); zh: zh-dev")
    w.add_argument(
        "--slice",
        choices=["tune", "heldout"],
        required=True,
        help="tune on one, report on the other (30%% of items held out by a hash of their first question)",
    )
    w.add_argument("--items", type=int, default=0, help="items (two requests each) to write (default 0: all)")
    w.add_argument("--seed", type=int, default=0, help="orders and samples the slice (never moves items across)")
    w.add_argument("--shared", help="the shared data folder (default: JEV_SHARED_DATA)")
    w.add_argument("--out", required=True, help="the JSONL file to write")
    w.set_defaults(func=run_reworded)


def register_replay(cmds) -> None:
    r = cmds.add_parser(
        "replay",
        help="replay labelled pairs through the live L2 decision with learned thresholds",
        description=REPLAY_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = r.add_mutually_exclusive_group(required=True)
    source.add_argument("--pairs", help='JSONL of {"text_a", "text_b", "label": 0|1}')
    source.add_argument(
        "--decisions",
        help="JSONL of decision request records in arrival order (`jev cache reworded` writes such a file): every "
        "miss is decided by the naive path and fills the cache, every L2 hit is judged by whether its decision "
        "equals the naive path's for the new request; fields a request does not have are ignored",
    )
    r.add_argument(
        "--shadow-rate",
        type=float,
        default=0.02,
        help="share of served hits whose verdict is learned (default 0.02, as JEV_SHADOW_RATE)",
    )
    r.add_argument("--max-error", type=float, help="false-hit rate bound (default: JEV_CACHE_MAX_ERROR)")
    r.add_argument("--confidence", type=float, help="confidence of the bound (default: JEV_CACHE_ERROR_CONFIDENCE)")
    r.add_argument("--embedder", help=EMBEDDER_HELP)
    r.add_argument(
        "--model-check",
        help="second embedder whose cosine the verifier reads: none, auto, or an "
        "embedder name (default: JEV_CACHE_MODEL_CHECK)",
    )
    r.add_argument(
        "--floor",
        type=float,
        default=0.0,
        help="lowest cosine a candidate may have (default: the calibrated threshold of the embedder)",
    )
    r.add_argument(
        "--seed",
        type=int,
        help="--pairs: shuffle the order text_b is asked in (default: file order); --decisions: "
        "which served hits are shadow-sampled",
    )
    r.add_argument("--no-explore", action="store_true", help="learn from shadow verdicts of served hits only")
    r.add_argument(
        "--promote-margin",
        type=float,
        help="near-miss band below the serving threshold, in verifier probability; 0 = no promotion "
        "(default: JEV_CACHE_PROMOTE_MARGIN)",
    )
    r.add_argument("--json", action="store_true", help="print the summary as JSON (last line)")
    r.set_defaults(func=run_replay)

    t = cmds.add_parser(
        "train-verifier",
        help="fit the L2 verifier's starting weights from labelled pairs",
        description=TRAIN_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    t.add_argument(
        "pairs",
        nargs="?",
        help='JSONL of {"text_a", "text_b", "label": 0|1}: development pairs, never the ones you report on',
    )
    t.add_argument(
        "--decisions",
        help="fit the decide pool's verifier instead (saved as <embedder>:decide) from decision request records "
        "(`jev cache reworded --slice tune`): every L2 candidate met while replaying them is a row, right when its "
        "cached decision equals the naive path's; rows of half the entries (by hash) are its calibration verdicts",
    )
    t.add_argument("--embedder", help=EMBEDDER_HELP)
    t.add_argument(
        "--model-check",
        help="second embedder whose cosine is a feature: none, auto, or an embedder "
        "name (default: JEV_CACHE_MODEL_CHECK)",
    )
    t.add_argument(
        "--floor",
        type=float,
        default=0.0,
        help="lowest cosine a candidate may have (default: the calibrated threshold of the embedder)",
    )
    t.add_argument("--json", action="store_true", help="print the summary as JSON (last line)")
    t.set_defaults(func=run_train_verifier)


def run_replay(args, settings) -> int:
    """Either replay (--pairs or --decisions): one check of the arguments, one error path, one way to print."""
    if not 0 <= args.shadow_rate <= 1:
        print(f"error: shadow rate must be in [0, 1], got {args.shadow_rate}: set --shadow-rate", file=sys.stderr)
        return 1
    try:
        summary, lines = (_replay_decisions if args.decisions else _replay_pairs)(args, settings)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(orjson.dumps(summary).decode() if args.json else "\n".join(lines))
    return 0


def _replay_pairs(args, settings) -> tuple[dict, list[str]]:
    """(the summary of replaying --pairs, its plain lines)."""
    pairs = calibration.read_pairs(args.pairs)
    embedder = load_embedder(args.embedder or settings.cache_embedder)
    floor = args.floor or calibration.ThresholdStore(settings.data_dir).threshold(
        embedder.name, settings.cache_semantic_threshold
    )
    learner = ThresholdLearner(
        args.max_error or settings.cache_max_error,
        args.confidence or settings.cache_error_confidence,
        explore=settings.cache_explore_rate,
    )
    check_ = check_name(args.model_check or settings.cache_model_check, embedder.name)
    evidence = PooledEvidence(load_verifier(decision_name(embedder.name, check_), settings.data_dir), learner)
    margin = settings.cache_promote_margin if args.promote_margin is None else args.promote_margin
    cache = SemanticCache(
        embedder,
        floor,
        evidence=evidence,
        max_entries=max(len(pairs), 1),
        check=load_model_check(check_, 0.0),
        promote_margin=margin,
    )
    summary = replay(
        cache,
        pairs,
        args.shadow_rate,
        seed=args.seed,
        explore=not args.no_explore,
        progress=_progress(len(pairs), "replaying text_b questions"),
    )
    summary = {
        **summary,
        "embedder": embedder.name,
        "model_check": check_ or None,
        "floor": floor,
        "verifier": evidence.verifier.name,
        "verifier_fits": evidence.verifier.fits,
        "certifying_verdicts": evidence.stats()["verdicts"],
        "calibration_verdicts": evidence.calibration_verdicts,
        "certifying_disagreements": evidence.stats()["disagreements"],
        "pairs_file": str(args.pairs),
        "refusals": dict(cache.refusals),
    }
    precision = "n/a (no hits)" if summary["precision"] is None else f"{summary['precision']:.3f}"
    lines = [
        f"{summary['pairs']} pairs: {summary['hits']} hits, {summary['false_hits']} false; precision "
        f"{precision}, recall {summary['recall']:.3f} at target error {summary['target_error']} "
        f"(confidence {summary['confidence']}); threshold now {summary['final_threshold']}; {summary['promoted']} "
        f"near-misses promoted of {summary['promotion_judgements']} judged, {summary['promoted_hits']} hits "
        f"through them ({summary['promoted_false_hits']} false)"
    ]
    if summary["final_threshold"] is None:
        lines.append(uncertified(summary["certification"], summary["target_error"], summary["confidence"]))
    return summary, lines


def _decision_settings(args, settings):
    """The settings with this command's overrides (embedder, bound, confidence): what a stage process would run."""
    overrides = {
        "cache_embedder": args.embedder or settings.cache_embedder,
        "cache_max_error": getattr(args, "max_error", None) or settings.cache_max_error,
        "cache_error_confidence": getattr(args, "confidence", None) or settings.cache_error_confidence,
    }
    if args.model_check:
        overrides["cache_model_check"] = args.model_check
    return dataclasses.replace(settings, **overrides)


def _replay_decisions(args, settings) -> tuple[dict, list[str]]:
    """(the summary of replaying --decisions, its plain lines)."""
    from workers.harness.decision_replay import replay_file

    summary = replay_file(
        _decision_settings(args, settings),
        args.decisions,
        args.shadow_rate,
        seed=args.seed or 0,
        progress=lambda n: _progress(n, "replaying decision requests"),
    )
    summary["decisions_file"] = str(args.decisions)
    agreement = "n/a (no hits)" if summary["agreement"] is None else f"{summary['agreement']:.3f}"
    lower = "" if summary["agreement_lower"] is None else f" (lower bound {summary['agreement_lower']:.3f})"
    return summary, [
        f"{summary['requests']} requests: {summary['hits']} L2 hits ({summary['hit_ratio']:.1%}), "
        f"{summary['wrong_hits']} decided otherwise by the naive path; agreement {agreement}{lower}; first hit at "
        f"request {summary['first_hit_at']}; {summary['tokens_saved']} tokens saved; {summary['exact_hits']} exact "
        f"repeats answered by L1"
    ]


def run_train_decisions(args, settings) -> int:
    from workers.harness.decision_replay import train_decisions

    try:
        name, verifier, summary = train_decisions(
            _decision_settings(args, settings),
            args.decisions,
            progress=lambda n: _progress(n, "mining L2 candidates"),
        )
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    path = save_verifier(settings.data_dir, name, verifier, {**summary, "source": str(args.decisions)})
    summary = {"decision": name, **summary, "weights": verifier.as_dict(), "saved": str(path)}
    if args.json:
        print(orjson.dumps(summary).decode())
    else:
        certified = summary["certifies"][str(settings.cache_max_error)]
        print(
            f"{name}: fitted on {summary['candidates']} candidates ({summary['right']} decided alike) from "
            f"{summary['requests']} requests; saved to {path}. Its {summary['calibration_candidates']} calibration "
            f"verdicts alone certify {certified['served']} candidates ({certified['errors']} decided otherwise)"
        )
    return 0


def run_reworded(args, settings) -> int:
    from workers.harness.reworded_decisions import build, write

    try:
        records = build(args.shared or settings.shared_data, args.lang, args.slice, args.items, args.seed)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    n = write(records, args.out)
    reworded = sum(r["rewords"] for r in records)
    print(f"wrote {n} {args.lang} requests ({reworded} reword an earlier one) to {args.out}", file=sys.stderr)
    return 0


def uncertified(certification: dict, max_error: float, confidence: float) -> str:
    """Why no threshold was certified, and what would change it (ThresholdLearner.explain's findings)."""
    first = certification["first_test"]
    if first is None:
        return (
            f"no threshold certified: {certification['verdicts']} verdicts are too few to test one at "
            f"{max_error} with confidence {confidence}; replay more pairs"
        )
    return (
        f"no threshold certified: the {first['verdicts']} best-scored of {certification['verdicts']} verdicts "
        f"(verifier score >= {first['score']}) hold {first['disagreements']} disagreements "
        f"({first['disagreements'] / first['verdicts']:.1%}), where a {max_error} bound at confidence "
        f"{confidence} allows {first['allowed']}. A threshold is served once the best-scored verdicts hold no "
        f"more: raise --max-error, or rank better (jev cache train-verifier on pairs like these)"
    )


def run_train_verifier(args, settings) -> int:
    if args.decisions:
        return run_train_decisions(args, settings)
    if not args.pairs:
        print("error: give a pairs file, or --decisions FILE", file=sys.stderr)
        return 1
    try:
        pairs = calibration.read_pairs(args.pairs)
        embedder = load_embedder(args.embedder or settings.cache_embedder)
        check = check_name(args.model_check or settings.cache_model_check, embedder.name)
        decision = decision_name(embedder.name, check)
        floor = args.floor or calibration.ThresholdStore(settings.data_dir).threshold(
            embedder.name, settings.cache_semantic_threshold
        )
        verifier, summary = training.train(
            embedder,
            pairs,
            floor,
            check=load_model_check(check, 0.0),
            bounds=(settings.cache_max_error, *training.BOUNDS),
            confidence=settings.cache_error_confidence,
        )
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    path = save_verifier(settings.data_dir, decision, verifier, {**summary, "floor": floor, "source": str(args.pairs)})
    summary = {"decision": decision, "floor": floor, **summary, "weights": verifier.as_dict(), "saved": str(path)}
    if args.json:
        print(orjson.dumps(summary).decode())
    else:
        certified = summary["certifies"][str(settings.cache_max_error)]
        print(
            f"{decision}: fitted on {summary['candidates']} candidates ({summary['right']} right) from "
            f"{summary['pairs']} pairs; saved to {path}. Its {summary['calibration_candidates']} calibration "
            f"verdicts alone certify {certified['served']} candidates ({certified['errors']} wrong) at bound "
            f"{settings.cache_max_error}"
        )
    return 0


def run_pairs(args, settings) -> int:
    pairs = calibration.stsb_pairs(Path(settings.shared_data) / "sts-b", args.split)
    lines = b"".join(orjson.dumps({"text_a": p.text_a, "text_b": p.text_b, "label": p.label}) + b"\n" for p in pairs)
    if args.out:
        Path(args.out).write_bytes(lines)
        print(f"wrote {len(pairs)} pairs ({sum(p.label for p in pairs)} positive) to {args.out}", file=sys.stderr)
    else:
        sys.stdout.buffer.write(lines)
    return 0


def _progress(total: int, description: str):
    """A progress bar on stderr, so --json stdout stays machine-readable."""
    from rich.console import Console
    from rich.progress import Progress

    progress = Progress(transient=True, console=Console(stderr=True))

    def wrap(items):
        with progress:
            yield from progress.track(items, total=total, description=description)

    return wrap


def _decision(args, settings) -> tuple:
    """The L2 embedder, the model check's name ("" for none) and the name thresholds are saved under."""
    embedder = load_embedder(args.embedder or settings.cache_embedder)
    check = "" if args.no_verify else check_name(args.model_check or settings.cache_model_check, embedder.name)
    return embedder, check, decision_name(embedder.name, check)


def run_calibrate(args, settings) -> int:
    pairs = calibration.read_pairs(args.pairs)
    embedder, check, decision = _decision(args, settings)
    scores = calibration.cosines(embedder, pairs)
    verified = (
        np.ones(len(pairs), dtype=bool) if args.no_verify else np.array([verify(p.text_a, p.text_b).ok for p in pairs])
    )
    labels = np.array([p.label for p in pairs])
    try:
        if check:
            check_scores = calibration.cosines(load_embedder(check), pairs)
            point = calibration.pick_thresholds(scores, check_scores, verified, labels, args.target_precision)
        else:
            point = calibration.pick_threshold(scores, verified, labels, args.target_precision)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    record = {
        **point,
        "target_precision": args.target_precision,
        "verify": not args.no_verify,
        "source": str(args.pairs),
    }
    store = calibration.ThresholdStore(settings.data_dir)
    store.save(decision, record)
    if args.json:
        print(
            orjson.dumps(
                {"embedder": embedder.name, "model_check": check or None, **record, "saved": str(store.path)}
            ).decode()
        )
    else:
        second = f", model check {check} {point['check_threshold']:.4f}" if check else ""
        print(
            f"{decision}: threshold {point['threshold']:.4f}{second} -> precision {point['precision']:.3f}, "
            f"recall {point['recall']:.3f}, hit rate {point['hit_rate']:.3f} on {point['pairs']} pairs; "
            f"saved to {store.path}"
        )
    return 0


def run_evaluate(args, settings) -> int:
    pairs = calibration.read_pairs(args.pairs)
    embedder, check, decision = _decision(args, settings)
    store = calibration.ThresholdStore(settings.data_dir)
    threshold = store.threshold(decision, args.threshold or settings.cache_semantic_threshold)
    model_check = load_model_check(check, store.check_threshold(decision))
    rows = calibration.decide(
        embedder,
        pairs,
        threshold,
        use_verify=not args.no_verify,
        progress=_progress(len(pairs), "L2 decisions"),
        check=model_check,
    )
    summary = {
        "embedder": embedder.name,
        "threshold": threshold,
        "verify": not args.no_verify,
        "model_check": check or None,
        "check_threshold": model_check.threshold if model_check else None,
        **calibration.summarize(rows),
    }
    if args.json:
        out = sys.stdout.buffer
        for row in rows:
            out.write(orjson.dumps(row) + b"\n")
        out.write(orjson.dumps(summary) + b"\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("kind", "cosine", "refused", "text_a", "text_b", title="false hits, then missed duplicates")
    false_hits = [r for r in rows if r["hit"] and not r["label"]]
    misses = sorted((r for r in rows if r["label"] and not r["hit"]), key=lambda r: -r["cosine"])
    for kind, chosen in (("false hit", false_hits), ("miss", misses)):
        for r in chosen[: args.show]:
            table.add_row(kind, f"{r['cosine']:.3f}", r["refused"], r["text_a"], r["text_b"])
    console = Console()
    console.print(table)
    summary_table = Table("metric", "value")
    for key, value in summary.items():
        summary_table.add_row(key, f"{value:.4f}" if isinstance(value, float) else str(value))
    console.print(summary_table)
    return 0
