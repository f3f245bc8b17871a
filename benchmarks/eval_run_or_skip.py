"""Run-or-skip evaluation on a real service, shaped like the CERN CMS case of Javed,
Singh, Reger and Toor, "To test, or not to test: A proactive approach for deciding
complete performance test initiation".

The service is examples/config_service (a conditions uploader). Its generated
payloads are profiled on the baseline code, clustered, and then two real code
updates are judged from a seeded sample of each cluster, the old and the new
code profiled alternately (the baseline in interleaved rounds, see
docs/run-or-skip.md §3):

- bottleneck: a constructor copies and fingerprints every IOV's data;
- refactor: `range(len(x))` loops become `enumerate(x)`.

Expected: "run" for the bottleneck, "skip" for the refactor. The same sampled
profiles are judged by the paired rule (the default) and by the paper's
Algorithms 1 and 2. Every input is then profiled on the old and the new code in
the same rounds, to print the suite's real slowdown and the profiling time the
sample saved. ``--runs N`` repeats it all with new profiles.

    python benchmarks/eval_run_or_skip.py [--inputs 300] [--runs 10] [--plot-dir DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

from config_service import evaluation, payloads, versions

from perfwatch.cli.recommend import plot_clusters
from perfwatch.detectors.inputs import (
    InputClustering,
    Recommendation,
    RunOrSkipRecommender,
    input_table,
)

EXPECTED = {"bottleneck": "run", "refactor": "skip"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=300, help="payloads to generate")
    parser.add_argument("--input-seed", type=int, default=1, help="payload generator seed")
    parser.add_argument(
        "--repeats", type=int, default=7, help="timing passes per input of a full suite"
    )
    parser.add_argument(
        "--sample-repeats", type=int, default=15, help="timing passes per sampled input"
    )
    parser.add_argument("--per-cluster", type=int, default=3, help="sampled inputs per cluster")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument(
        "--runs", type=int, default=1, help="repeat the whole evaluation (new profiles each run)"
    )
    parser.add_argument(
        "--paper-acceptable-slowdown",
        type=float,
        default=0.38,
        help="the paper's rule's acceptable slope drop (the paired rule keeps its default 5%%)",
    )
    parser.add_argument("--plot-dir", type=Path, help="write cluster plots here")
    args = parser.parse_args()

    inputs = payloads.generate(args.inputs, seed=args.input_seed)
    print(f"Service: examples/config_service (uploader), {len(inputs)} generated payloads")
    rules = {
        "paired": RunOrSkipRecommender(),
        "paper": RunOrSkipRecommender(
            rule="paper", acceptable_slowdown=args.paper_acceptable_slowdown
        ),
    }
    rows = [evaluate(args, inputs, rules, run) for run in range(1, args.runs + 1)]
    print(f"\n== {args.runs} run(s): decisions by rule on the same profiles ==")
    print("run  update      real change  paired rule                 paper's rule")
    for run, results in enumerate(rows, start=1):
        for update, (change, judged) in results.items():
            paired, paper = judged["paired"], judged["paper"]
            print(
                f"{run:<4} {update:<11} {change:>+10.1%}  "
                f"{paired.decision:<4} ({_cluster_votes(paired)})    "
                f"{paper.decision:<4} ({paper.run_votes} of {len(paper.votes)} votes run)"
            )
    failures = 0
    for name in rules:
        right = {
            update: sum(r[update][1][name].decision == EXPECTED[update] for r in rows)
            for update in EXPECTED
        }
        print(
            f"{name} rule: right in "
            + ", ".join(f"{update} {n}/{len(rows)}" for update, n in right.items())
        )
        if name == "paired":
            failures = sum(len(rows) - n for n in right.values())
    print("Bar met by the paired rule" if not failures else "Bar NOT met by the paired rule")
    return 1 if failures else 0


def _cluster_votes(recommendation: Recommendation) -> str:
    slower = sum(c.decision == "run" for c in recommendation.clusters)
    return f"{slower} of {len(recommendation.clusters)} clusters slower"


def evaluate(
    args: argparse.Namespace,
    inputs: list[tuple[str, str]],
    rules: dict[str, RunOrSkipRecommender],
    run: int,
) -> dict[str, tuple[float, dict[str, Recommendation]]]:
    """One run: the baseline profiled, both updates' samples judged by every rule on the
    same profiles, every input profiled on old and new code for the real change."""
    print(f"\n######## Run {run}")
    baseline = evaluation.profile_suite(versions.BASELINE, inputs, repeats=args.repeats)
    print(
        f"Baseline: every input profiled in {baseline.seconds:.1f} s "
        f"(interleaved rounds: warm-up, {args.repeats} timing, memory, counting)"
    )
    started = time.perf_counter()
    clustering = InputClustering().fit(*input_table(baseline.profiles))
    print(f"Clustering ({time.perf_counter() - started:.2f} s): {clustering.selection_}")
    for cluster in clustering.clusters_:
        kinds = sorted({member.split("-")[0] for member in cluster.members})
        print(f"  {cluster.name:<10} {cluster.size:>4} inputs  ({', '.join(kinds)})")
    if args.plot_dir is not None:
        args.plot_dir.mkdir(parents=True, exist_ok=True)
        plot_clusters(
            clustering, baseline.profiles, args.plot_dir / "clusters.png", "size", "statements"
        )
    results = {}
    for update in versions.UPDATES:
        result = evaluation.judge_update(
            update,
            clustering,
            baseline.profiles,
            inputs,
            per_cluster=args.per_cluster,
            seed=args.seed,
            repeats=args.sample_repeats,
            suite_repeats=args.repeats,
            recommender=rules["paired"],
            profile_every_input=True,
        )
        assert result.full_suite is not None
        judged = {"paired": result.recommendation}
        for name, recommender in rules.items():
            if name != "paired":  # the same sampled profiles, judged by the other rule
                judged[name] = recommender.recommend(
                    clustering,
                    baseline.profiles,
                    result.updated,
                    reference=result.reference,
                    per_cluster=args.per_cluster,
                )
        sampled = sum(len(ids) for ids in result.sample.values())
        print(f"\n== Code update: {update} (expected {EXPECTED[update]}) ==")
        for name, recommendation in judged.items():
            print(f"-- {name} rule")
            print(recommendation.seed_table())
            for vote in recommendation.votes:
                print(f"  {vote.label:<4} {vote.input_id:<17} {vote.decision:<4} {vote.reason}")
            print(
                f"Recommendation: {recommendation.summary()} "
                f"({recommendation.run_votes} of {len(recommendation.votes)} votes run; "
                f"drift {recommendation.drift:.3f})"
            )
        print(
            "Real change of the suite's CPU time (every input, old and new code in the same "
            f"rounds): {result.full_suite.slowdown:+.1%}"
        )
        saved = 1 - result.sample_seconds / result.full_suite.seconds
        print(
            f"Profiling time, old and new code: sample of {sampled} inputs "
            f"{result.sample_seconds:.1f} s; every input {result.full_suite.seconds:.1f} s; "
            f"saved {saved:.0%}"
        )
        if args.plot_dir is not None:
            plot_clusters(
                clustering,
                baseline.profiles,
                args.plot_dir / f"{update}.png",
                "size",
                "statements",
                judged["paired"],
                result.updated,
            )
        results[update] = (result.full_suite.slowdown, judged)
    return results


if __name__ == "__main__":
    raise SystemExit(main())
