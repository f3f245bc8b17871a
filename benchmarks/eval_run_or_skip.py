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

Expected: "run" for the bottleneck, "skip" for the refactor (``--rule paper``
judges with the paper's Algorithms 1 and 2 instead of the paired rule). Every input is
then profiled on the old and the new code in the same rounds, to print the
suite's real slowdown and the profiling time the sample saved.

    python benchmarks/eval_run_or_skip.py [--inputs 300] [--plot-dir DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

from config_service import evaluation, payloads, versions

from perfwatch.cli.recommend import plot_clusters
from perfwatch.detectors.inputs import InputClustering, RunOrSkipRecommender, input_table

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
    parser.add_argument("--rule", choices=("paired", "paper"), default="paired")
    parser.add_argument(
        "--acceptable-slowdown", type=float, help="default: 0.05, with --rule paper 0.38"
    )
    parser.add_argument("--plot-dir", type=Path, help="write cluster plots here")
    args = parser.parse_args()

    inputs = payloads.generate(args.inputs, seed=args.input_seed)
    print(f"Service: examples/config_service (uploader), {len(inputs)} generated payloads")
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

    acceptable = args.acceptable_slowdown
    if acceptable is None:
        acceptable = 0.38 if args.rule == "paper" else 0.05
    recommender = RunOrSkipRecommender(rule=args.rule, acceptable_slowdown=acceptable)
    results = []
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
            recommender=recommender,
            profile_every_input=True,
        )
        results.append(result)
        recommendation = result.recommendation
        assert result.full_suite is not None
        sampled = sum(len(ids) for ids in result.sample.values())
        print(f"\n== Code update: {update} ==")
        print(recommendation.seed_table())
        for vote in recommendation.votes:
            print(f"  {vote.label:<4} {vote.input_id:<17} {vote.decision:<4} {vote.reason}")
        print(
            f"Recommendation: {recommendation.summary()} "
            f"({recommendation.run_votes} of {len(recommendation.votes)} votes run; "
            f"drift {recommendation.drift:.3f}); expected {EXPECTED[update]}"
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
                recommendation,
                result.updated,
            )
    failures = [r.update for r in results if r.recommendation.decision != EXPECTED[r.update]]
    print(
        "\nBar met: bottleneck -> run, refactor -> skip"
        if not failures
        else f"\nBar NOT met for: {', '.join(failures)}"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
