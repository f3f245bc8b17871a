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

Two harnesses. By default old and new code are two modules of this one
process, their passes alternating (``profile_versions``); two copies of the
same code can then differ in speed for a whole run, wherever the interpreter
placed them. With ``--processes`` every decision writes the old and the new
code out as two checkouts, each with its pytest suite of the inputs
(``unseen.checkout``), and profiles them as ``perfwatch profile --old-dir``
does: one pytest process per version and round, driven pass by pass in
lockstep (``profile_alternately``), rounds of ``--round-passes`` passes
(``--passes`` and ``--max-passes`` rounded to whole rounds, the sequential
timing going on a round at a time), judged by rounds as the paired rule
judges such profiles; the full suite is profiled by pytest on the old
checkout, and the ground truth is timed like the samples, in
``--truth-passes`` rounds.

    python benchmarks/eval_run_or_skip_unseen.py [--decisions 10] [--input-seed 2] [--processes]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

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
from perfwatch.profiler.alternate import Alternation, Version, profile_alternately
from perfwatch.profiler.core import profile_inputs, profile_versions
from perfwatch.readers.input_profile import read_input_profile
from unseen import CODE_BASES, UPDATES, Inputs, call, checkout, inputs, load, node_id

# the null case: the same code as a module of its own, so that the two "versions" are
# separate objects as with a real update
UNCHANGED = "unchanged"


@dataclass(frozen=True)
class Timing:
    """How each sampled input is timed (see perfwatch.profiler.core.profile_versions)."""

    passes: int
    max_passes: int
    min_pass_s: float
    precision: float | None
    # with --processes: timing passes per round, one pytest process per version and round
    round_passes: int = 1


# input id -> (old code's timing passes, new code's, paired pass by pass; the rounds they
# form, one process per version and round, or None: one process)
Pairs = dict[str, tuple[list[float], list[float], int | None]]


class InProcess:
    """Old and new code as two modules of this process, passes alternating."""

    def __init__(self, code_base: str, made: Inputs, updates: list[str]) -> None:
        self.made = made
        self.old = load(code_base)
        self.new = {name: load(code_base, None if name == UNCHANGED else name) for name in updates}

    def versions(self, update: str, input_id: str) -> dict[str, Callable[[], object]]:
        argument = self.made[input_id][1]
        return {"old": call(self.old, argument), "new": call(self.new[update], argument)}

    def truth(self, update: str, passes: int, min_pass_s: float) -> Pairs:
        pairs: Pairs = {}
        for input_id, (_, _, size) in self.made.items():
            pair = profile_versions(
                self.versions(update, input_id),
                input_id=input_id,
                size=size,
                repeats=passes,
                min_pass_s=min_pass_s,
                timing_only=True,
            )
            pairs[input_id] = (pair["old"].cpu_times_s or [], pair["new"].cpu_times_s or [], None)
        return pairs

    def baseline(self, repeats: int) -> list[InputProfile]:
        calls = {i: call(self.old, argument) for i, (_, argument, _) in self.made.items()}
        sizes = {i: size for i, (_, _, size) in self.made.items()}
        return list(profile_inputs(calls, sizes=sizes, repeats=repeats).values())

    def sample(
        self, update: str, sample: list[str], timing: Timing
    ) -> tuple[list[InputProfile], list[InputProfile]]:
        reference, updated = [], []
        for input_id in sample:
            pair = profile_versions(
                self.versions(update, input_id),
                input_id=input_id,
                size=self.made[input_id][2],
                repeats=timing.passes,
                min_pass_s=timing.min_pass_s,
                max_repeats=timing.max_passes,
                precision=timing.precision,
            )
            reference.append(pair["old"])
            updated.append(pair["new"])
        return reference, updated


class Processes:
    """Old and new code as two checkouts, one pytest process per version, in lockstep (as
    ``perfwatch profile --old-dir``); fresh checkouts for every measurement."""

    def __init__(self, code_base: str, made: Inputs, round_passes: int) -> None:
        self.code_base = code_base
        self.made = made
        self.round_passes = round_passes

    def sample(
        self, update: str, sample: list[str], timing: Timing
    ) -> tuple[list[InputProfile], list[InputProfile]]:
        with tempfile.TemporaryDirectory(prefix="perfwatch-unseen-") as scratch:
            root = Path(scratch)
            old = checkout(root / "old", self.code_base, None, self.made)
            new = checkout(
                root / "new", self.code_base, None if update == UNCHANGED else update, self.made
            )
            only = root / "sample.txt"
            only.write_text("".join(f"{node_id(i)}\n" for i in sample), encoding="utf-8")
            alternation = Alternation(
                rounds=-(-timing.passes // timing.round_passes),
                repeats=timing.round_passes,
                warmup=1,
                min_pass_s=timing.min_pass_s,
                max_rounds=timing.max_passes // timing.round_passes,
                precision=timing.precision,
            )
            run = profile_alternately(
                [Version("old", old), Version("new", new)], [], only=only, alternation=alternation
            )
        if run.dropped or any(run.failed_rounds.values()):
            raise RuntimeError(f"{update}: inputs not profiled in every round: {run.dropped}")
        return _plain(run.profiles["old"].profiles), _plain(run.profiles["new"].profiles)

    def truth(self, update: str, passes: int, min_pass_s: float) -> Pairs:
        # ``passes`` rounds: the process, not the pass, is what repeats here
        total = passes * self.round_passes
        whole = Timing(total, total, min_pass_s, None, self.round_passes)
        old, new = self.sample(update, list(self.made), whole)
        return {
            o.input_id: (o.cpu_times_s or [], n.cpu_times_s or [], o.timing_rounds)
            for o, n in zip(old, new, strict=True)
        }

    def baseline(self, repeats: int) -> list[InputProfile]:
        """The old checkout's full suite, profiled by pytest as `perfwatch profile` does."""
        with tempfile.TemporaryDirectory(prefix="perfwatch-unseen-") as scratch:
            version = Version(
                "old", checkout(Path(scratch) / "old", self.code_base, None, self.made)
            )
            output = Path(scratch) / "baseline.json"
            subprocess.run(
                [
                    version.python,
                    "-m",
                    "pytest",
                    f"--perfwatch-profile={output}",
                    f"--perfwatch-repeats={repeats}",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                ],
                cwd=version.directory,
                env=version.command_environment(),
                stdout=subprocess.DEVNULL,
                check=True,
            )
            return _plain(read_input_profile(output).profiles)


def _plain(profiles: list[InputProfile]) -> list[InputProfile]:
    """Profiles named by input id, not by the checkout suite's node id."""
    return [replace(p, input_id=p.input_id.rsplit("[", 1)[1].rstrip("]")) for p in profiles]


def truth(made: Inputs, pairs: Pairs, acceptable: float) -> tuple[str, dict[str, float]]:
    """The update's real effect: per kind, the median paired change of all its inputs
    (passes as long as the decisions': single calls of a tenth of a millisecond put a
    +8% slowdown at +3.5% on a loaded machine)."""
    changes: dict[str, list[float]] = {}
    for input_id, (kind, _, _) in made.items():
        old, new, rounds = pairs[input_id]
        change = paired_change(old, new, paired=True, rounds=rounds)
        changes.setdefault(kind, []).append(change.estimate)
    per_kind = {kind: float(np.median(values)) for kind, values in changes.items()}
    return ("run" if max(per_kind.values()) > acceptable else "skip"), per_kind


def decide(
    harness: InProcess | Processes,
    update: str,
    baseline: list[InputProfile],
    clustering: InputClustering,
    sample: list[str],
    timing: Timing,
) -> tuple[Recommendation, str, float, float]:
    """Paired recommendation and paper decision on one sample; seconds spent profiling it,
    mean timing passes per version and input."""
    started = time.perf_counter()
    reference, updated = harness.sample(update, sample, timing)
    spent = time.perf_counter() - started
    paired = RunOrSkipRecommender().recommend(clustering, baseline, updated, reference=reference)
    paper = RunOrSkipRecommender(rule="paper", acceptable_slowdown=0.38).recommend(
        clustering, baseline, updated, reference=reference
    )
    passes = float(np.mean([len(p.cpu_times_s or ()) for p in updated]))
    return paired, paper.decision, spent, passes


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
    parser.add_argument(
        "--truth-passes",
        type=int,
        default=11,
        help="ground truth: timing passes per version (with --processes: rounds)",
    )
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
    parser.add_argument(
        "--processes",
        action="store_true",
        help="each version in a pytest process of its own, in lockstep, as "
        "`perfwatch profile --old-dir` (default: two modules of this process)",
    )
    parser.add_argument(
        "--round-passes",
        type=int,
        default=5,
        help="with --processes: timing passes per round; --passes and --max-passes are "
        "rounded up and down to whole rounds",
    )
    args = parser.parse_args()
    max_passes = args.passes if args.max_passes is None else args.max_passes
    timing = Timing(
        args.passes,
        max_passes,
        args.min_pass_ms / 1000,
        args.acceptable_slowdown if max_passes > args.passes else None,
        args.round_passes,
    )
    print(f"harness: {'one process per version' if args.processes else 'one process'}")

    rows = []
    for code_base in args.code_bases:
        made = inputs(code_base, per_kind=args.per_kind, seed=args.input_seed, scale=args.scale)
        harness = (
            Processes(code_base, made, args.round_passes)
            if args.processes
            else InProcess(code_base, made, list(args.updates))
        )
        kinds_of = sorted({kind for kind, _, _ in made.values()})
        print(f"\n== {code_base}: {len(made)} inputs of kinds {', '.join(kinds_of)}")
        truths = {}
        for name in args.updates:
            started = time.perf_counter()
            pairs = harness.truth(name, args.truth_passes, timing.min_pass_s)
            truths[name] = truth(made, pairs, args.acceptable_slowdown)
            kinds = ", ".join(f"{kind} {change:+.1%}" for kind, change in truths[name][1].items())
            print(
                f"  truth {name:<16} {truths[name][0]:<4}  median change per kind: {kinds} "
                f"(every input, old and new, {args.truth_passes} passes: "
                f"{time.perf_counter() - started:.1f} s)"
            )
        right = {name: [0, 0] for name in args.updates}
        costs = {name: 0.0 for name in args.updates}
        passes = {name: 0.0 for name in args.updates}
        for decision in range(args.decisions):
            started = time.perf_counter()
            baseline = harness.baseline(args.baseline_repeats)
            full = time.perf_counter() - started
            clustering = InputClustering().fit(*input_table(baseline))
            chosen = sample_inputs(clustering, per_cluster=args.per_cluster, seed=decision)
            sample = [i for members in chosen.values() for i in members]
            for name in args.updates:
                paired, paper, spent, used = decide(
                    harness, name, baseline, clustering, sample, timing
                )
                right[name][0] += paired.decision == truths[name][0]
                if paired.decision != truths[name][0]:
                    print(f"  decision {decision}, {name}: wrong: {paired.summary()}")
                    for vote in paired.drivers:
                        print(f"    {vote.input_id}: {vote.reason}")
                right[name][1] += paper == truths[name][0]
                costs[name] += spent
                passes[name] += used
                # every decision as it is made: a run stopped early still counts
                print(
                    f"  decision {decision}, {name}: paired {paired.decision}, paper {paper} "
                    f"(truth {truths[name][0]}); sample profiled in {spent:.1f} s, "
                    f"{used:.1f} passes per input"
                )
            quality = clustering.silhouette_
            print(
                f"  decision {decision}: {len(clustering.clusters_)} groups, silhouette "
                f"{quality if quality is None else round(quality, 2)}, sample {len(sample)}, "
                f"full-suite profile {full:.1f} s; paired right so far "
                f"{ {n: r[0] for n, r in right.items()} }",
                flush=True,
            )
        for name in args.updates:
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
    for code_base, name, (expected, per_kind), (paired_right, paper_right), cost, used in rows:
        kinds = ", ".join(f"{change:+.1%}" for change in per_kind.values())
        print(
            f"| {code_base} | {name} | {expected} | {kinds} | {paired_right}/{args.decisions} | "
            f"{paper_right}/{args.decisions} | {cost:.2f} s | {used:.1f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
