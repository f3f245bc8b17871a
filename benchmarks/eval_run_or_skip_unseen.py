"""Run-or-skip on two code bases it was not built with, five kinds of code update each.

The code bases (benchmarks/unseen): ``exprcalc``, an expression tokenizer,
parser and evaluator, and ``series``, numeric kernels over float series; each
has inputs of three kinds and five updates (benchmarks/unseen/__init__.py):
a bottleneck that adds statements, a slowdown confined to one kind of input,
a slowdown executing the same statements, a refactor and a speed-up; and the
old code judged against itself (``unchanged``).

Ground truth, by repeats: every input profiled on the old and the new code,
passes alternating (``--truth-passes``, each of ``--min-pass-ms``); an update
needs the suite ("run") when the median change of some kind of input exceeds
the acceptable slow-down. Instruction counts (callgrind) are not used: the same-statements
update changes the cost of C calls, which a count of Python lines cannot see
and an instruction count sees only in part.

Each decision: the old code's full suite profiled in interleaved rounds,
clustered, a sample of ``--per-cluster`` inputs per cluster (sampling seed =
the decision's number) profiled on the old and new code alternately
(``--passes`` each; with ``--max-passes``, more while the input's interval is
wider than the acceptable slow-down; with ``--min-pass-ms``, short inputs over
several calls per pass), judged by the paired rule (the default) and by the
paper's literal rule (time thresholds, slope check, 38%) on the same profiles.

    python benchmarks/eval_run_or_skip_unseen.py [--decisions 10] [--input-seed 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from perfwatch.contract.models import InputProfile
from perfwatch.detectors.inputs import (
    InputClustering,
    Recommendation,
    RunOrSkipRecommender,
    input_table,
    paired_change,
    sample_inputs,
)
from perfwatch.profiler.core import profile_inputs, profile_versions
from unseen import CODE_BASES, UPDATES, Inputs, call, inputs, load

# the null case: the same code as a module of its own, so that the two "versions" are
# separate objects as with a real update
UNCHANGED = "unchanged"


def versions(old: ModuleType, new: ModuleType, argument: object) -> dict[str, Callable[[], object]]:
    return {"old": call(old, argument), "new": call(new, argument)}


def truth(
    made: Inputs,
    old: ModuleType,
    new: ModuleType,
    passes: int,
    acceptable: float,
    min_pass_s: float,
) -> tuple[str, dict[str, float]]:
    """The update's real effect: per kind, the median paired change of all its inputs
    (passes of ``min_pass_s``, as the decisions time them: single calls of a tenth of a
    millisecond put a +8% slowdown at +3.5% on a loaded machine)."""
    changes: dict[str, list[float]] = {}
    for input_id, (kind, argument, size) in made.items():
        pair = profile_versions(
            versions(old, new, argument),
            input_id=input_id,
            size=size,
            repeats=passes,
            min_pass_s=min_pass_s,
            timing_only=True,
        )
        change = paired_change(
            pair["old"].cpu_times_s or [], pair["new"].cpu_times_s or [], paired=True
        )
        changes.setdefault(kind, []).append(change.estimate)
    per_kind = {kind: float(np.median(values)) for kind, values in changes.items()}
    return ("run" if max(per_kind.values()) > acceptable else "skip"), per_kind


def decide(
    made: Inputs,
    old: ModuleType,
    new: ModuleType,
    baseline: list[InputProfile],
    clustering: InputClustering,
    sample: list[str],
    timing: Timing,
) -> tuple[Recommendation, str, float, float]:
    """Paired recommendation and paper decision on one sample; seconds spent profiling it,
    mean timing passes per version and input."""
    started = time.perf_counter()
    reference, update = [], []
    for input_id in sample:
        _, argument, size = made[input_id]
        pair = profile_versions(
            versions(old, new, argument),
            input_id=input_id,
            size=size,
            repeats=timing.passes,
            min_pass_s=timing.min_pass_s,
            max_repeats=timing.max_passes,
            precision=timing.precision,
        )
        reference.append(pair["old"])
        update.append(pair["new"])
    spent = time.perf_counter() - started
    paired = RunOrSkipRecommender().recommend(clustering, baseline, update, reference=reference)
    paper = RunOrSkipRecommender(rule="paper", acceptable_slowdown=0.38).recommend(
        clustering, baseline, update, reference=reference
    )
    passes = float(np.mean([len(p.cpu_times_s or ()) for p in update]))
    return paired, paper.decision, spent, passes


@dataclass(frozen=True)
class Timing:
    """How each sampled input is timed (see perfwatch.profiler.core.profile_versions)."""

    passes: int
    max_passes: int
    min_pass_s: float
    precision: float | None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=10, help="decisions per case")
    parser.add_argument("--per-kind", type=int, default=20, help="inputs per kind")
    parser.add_argument("--input-seed", type=int, default=2, help="input generator seed")
    parser.add_argument("--scale", type=float, default=1.0, help="input sizes times this")
    parser.add_argument("--baseline-repeats", type=int, default=3)
    parser.add_argument("--passes", type=int, default=15, help="timing passes per version")
    parser.add_argument(
        "--max-passes",
        type=int,
        default=None,
        help="go on timing, up to this many passes, while an input's interval is wider than "
        "the acceptable slow-down (default: --passes, no more)",
    )
    parser.add_argument(
        "--min-pass-ms",
        type=float,
        default=0.0,
        help="calls per timing pass so that a pass lasts this long (default 0: one call)",
    )
    parser.add_argument("--truth-passes", type=int, default=11)
    parser.add_argument("--per-cluster", type=int, default=3)
    parser.add_argument("--acceptable-slowdown", type=float, default=0.05)
    parser.add_argument("--code-bases", nargs="+", choices=CODE_BASES, default=CODE_BASES)
    parser.add_argument(
        "--updates",
        nargs="+",
        choices=(*UPDATES, UNCHANGED),
        default=(*UPDATES, UNCHANGED),
        help=f"code updates to judge; {UNCHANGED!r}: the old code loaded a second time",
    )
    args = parser.parse_args()
    max_passes = args.passes if args.max_passes is None else args.max_passes
    timing = Timing(
        args.passes,
        max_passes,
        args.min_pass_ms / 1000,
        args.acceptable_slowdown if max_passes > args.passes else None,
    )

    rows = []
    for code_base in args.code_bases:
        made = inputs(code_base, per_kind=args.per_kind, seed=args.input_seed, scale=args.scale)
        old = load(code_base)
        updates = {
            name: load(code_base, None if name == UNCHANGED else name) for name in args.updates
        }
        kinds_of = sorted({kind for kind, _, _ in made.values()})
        print(f"\n== {code_base}: {len(made)} inputs of kinds {', '.join(kinds_of)}")
        truths = {}
        for name, new in updates.items():
            truths[name] = truth(
                made, old, new, args.truth_passes, args.acceptable_slowdown, timing.min_pass_s
            )
            kinds = ", ".join(f"{kind} {change:+.1%}" for kind, change in truths[name][1].items())
            print(f"  truth {name:<16} {truths[name][0]:<4}  median change per kind: {kinds}")
        right = {name: [0, 0] for name in updates}
        costs = {name: 0.0 for name in updates}
        passes = {name: 0.0 for name in updates}
        for decision in range(args.decisions):
            calls = {i: call(old, argument) for i, (_, argument, _) in made.items()}
            sizes = {i: size for i, (_, _, size) in made.items()}
            started = time.perf_counter()
            baseline = list(
                profile_inputs(calls, sizes=sizes, repeats=args.baseline_repeats).values()
            )
            full = time.perf_counter() - started
            clustering = InputClustering().fit(*input_table(baseline))
            chosen = sample_inputs(clustering, per_cluster=args.per_cluster, seed=decision)
            sample = [i for members in chosen.values() for i in members]
            for name, new in updates.items():
                paired, paper, spent, used = decide(
                    made, old, new, baseline, clustering, sample, timing
                )
                right[name][0] += paired.decision == truths[name][0]
                if paired.decision != truths[name][0]:
                    print(f"  decision {decision}, {name}: wrong: {paired.summary()}")
                    for vote in paired.drivers:
                        print(f"    {vote.input_id}: {vote.reason}")
                right[name][1] += paper == truths[name][0]
                costs[name] += spent
                passes[name] += used
            quality = clustering.silhouette_
            print(
                f"  decision {decision}: {len(clustering.clusters_)} groups, silhouette "
                f"{quality if quality is None else round(quality, 2)}, sample {len(sample)}, "
                f"full-suite profile {full:.1f} s; paired right so far "
                f"{ {n: r[0] for n, r in right.items()} }"
            )
        for name in updates:
            rows.append(
                (
                    code_base,
                    name,
                    truths[name],
                    right[name],
                    costs[name] / args.decisions,
                    passes[name] / args.decisions,
                )
            )
    print(
        "\n| code base | update | truth | median change per kind | paired rule | paper's rule "
        "| sample profiling (old + new) | passes per input |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for code_base, name, (expected, per_kind), (paired, paper), cost, used in rows:
        kinds = ", ".join(f"{change:+.1%}" for change in per_kind.values())
        print(
            f"| {code_base} | {name} | {expected} | {kinds} | {paired}/{args.decisions} | "
            f"{paper}/{args.decisions} | {cost:.2f} s | {used:.1f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
