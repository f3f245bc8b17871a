"""perfwatch's change points against Apache Otava's on realistic synthetic histories.

    python benchmarks/eval_edivisive_histories.py --seeds 1000:1200 --orig-seeds 1000:1200 --jobs 2

The histories come from ``perf_histories.py`` (noise families, drifts, seasons, level
shifts of 1-30 %, reverted regressions, missing runs). In the same run, on the same
histories:

- perfwatch's default mode, as ``perfwatch analyze`` and the stream run it: a missing
  run is left out of the series (indices are mapped back to runs for scoring);
- Apache Otava 0.8 with its defaults, run by Otava itself (``tests/otava_reference.py``):
  its analysis fills a missing run in from the one before;
- Otava's original E-Divisive (permutation tests, no windows) on the ``--orig-seeds``
  histories of the ``--orig-groups`` only, since it takes a second or more per history;
  ``--orig-variant NAME=permutations:N,max_pvalue:P`` runs it with other tests too
  (``permutations:999`` lets it show p <= 0.001; its own function fixes 100);
- any perfwatch parameter variants named with ``--variant NAME=key:value,...``, and
  Otava 0.8 with other options of its ``compute_change_points`` (``window_len``,
  ``max_pvalue``, ``min_magnitude``) named with ``--otava-variant NAME=key:value,...``,
  e.g. to compare the two at the same false-positive rate;
- a simple baseline, penalised least squares (``--least-squares PENALTY``: the exact
  segmentation into levels that minimises the residual sum of squares plus PENALTY
  sigma^2 log n per change point).

Scores, with a found change point counting for a true one at most ``--margin`` runs
away (5), each matched once: precision, recall and F1 over all change points of a group
pooled; the covering of the true segmentation by the found one (the length-weighted best
Jaccard overlap of each true segment, averaged over histories); false positives per
1 000 runs. Then the recall of steps by size in noise standard deviations, and a check
that perfwatch's compat mode gives Otava's indices on every history. Tune on one seed
range (0:200 was used), report on another (1000:1200). ``--jobs N`` shares the histories
among N processes, each with an Otava worker of its own; the scores do not change.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from perf_histories import GROUPS, NOISE_FAMILIES, History, histories
from perfwatch.detectors.edivisive import EDivisiveParams, detect_change_points

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from otava_reference import OtavaReference

SIGMA_BINS = ((0.0, 1.0), (1.0, 2.0), (2.0, 3.0), (3.0, float("inf")))
DEFAULT = "perfwatch default"
OTAVA = "otava 0.8 (itself)"
ORIG = "otava permutation"
Detector = Callable[[History], list[int]]


def perfwatch_detector(params: EDivisiveParams) -> Detector:
    """perfwatch as its readers feed it: the runs that have a value, indices mapped back."""

    def detect(history: History) -> list[int]:
        present = np.flatnonzero(~np.isnan(history.values))
        found = detect_change_points(history.values[present], params)
        return [int(present[change.index]) for change in found]

    return detect


def least_squares_change_points(
    x: np.ndarray, penalty: float, min_segment_len: int = 3
) -> list[int]:
    """The segmentation of ``x`` into levels that minimises the residual sum of squares plus
    ``penalty`` times sigma^2 log n per change point (optimal partitioning, the exact
    minimiser; Jackson et al., "An algorithm for optimal partitioning of data on an
    interval"), every segment at least ``min_segment_len`` long. Sigma is estimated from
    the differences of neighbouring runs (their median absolute value), which a few level
    shifts do not move: the simple baseline of penalised likelihood, with Gaussian noise in
    mind."""
    n = len(x)
    centred = x - np.median(x)
    scale = float(np.median(np.abs(np.diff(centred)))) / (0.6745 * np.sqrt(2.0))
    cost_per_change = penalty * max(scale, 1e-12) ** 2 * np.log(n)
    sums = np.concatenate(([0.0], np.cumsum(centred)))
    squares = np.concatenate(([0.0], np.cumsum(centred**2)))
    best = np.full(n + 1, np.inf)
    best[0] = -cost_per_change  # the first segment starts no change
    previous = np.zeros(n + 1, dtype=int)
    for end in range(min_segment_len, n + 1):
        starts = np.arange(end - min_segment_len + 1)
        lengths = end - starts
        residual = squares[end] - squares[starts] - (sums[end] - sums[starts]) ** 2 / lengths
        total = best[starts] + residual + cost_per_change
        chosen = int(np.argmin(total))
        best[end], previous[end] = total[chosen], chosen
    points = []
    end = n
    while end > 0:
        end = int(previous[end])
        if end > 0:
            points.append(end)
    return sorted(points)


def least_squares_detector(penalty: float) -> Detector:
    """The baseline on the runs that have a value, indices mapped back."""

    def detect(history: History) -> list[int]:
        present = np.flatnonzero(~np.isnan(history.values))
        found = least_squares_change_points(history.values[present], penalty)
        return [int(present[i]) for i in found]

    return detect


def matched_truth(truth: Sequence[int], found: Sequence[int], margin: int) -> set[int]:
    """Positions in ``truth`` matched one-to-one to a found change point within ``margin``
    runs, closest pairs first."""
    pairs = sorted(
        (abs(t - f), i, j)
        for i, t in enumerate(truth)
        for j, f in enumerate(found)
        if abs(t - f) <= margin
    )
    used_truth: set[int] = set()
    used_found: set[int] = set()
    for _, i, j in pairs:
        if i not in used_truth and j not in used_found:
            used_truth.add(i)
            used_found.add(j)
    return used_truth


def covering(truth: Sequence[int], found: Sequence[int], n: int) -> float:
    """Covering of the true segmentation of runs 0..n by the found one."""

    def segments(points: Sequence[int]) -> list[tuple[int, int]]:
        edges = [0, *sorted(p for p in set(points) if 0 < p < n), n]
        return list(pairwise(edges))

    mine = segments(found)
    total = 0.0
    for a, b in segments(truth):
        best = 0.0
        for c, d in mine:
            overlap = min(b, d) - max(a, c)
            if overlap > 0:
                best = max(best, overlap / (max(b, d) - min(a, c)))
        total += (b - a) * best
    return total / n


@dataclass
class Tally:
    true: int = 0
    found: int = 0
    hits: int = 0
    runs: int = 0
    coverings: list[float] = field(default_factory=list)
    by_sigma: list[tuple[float, float, bool]] = field(default_factory=list)  # sigmas, rel., hit

    def add(self, history: History, found: list[int], margin: int) -> None:
        hit = matched_truth(history.truth, found, margin)
        self.true += len(history.truth)
        self.found += len(found)
        self.hits += len(hit)
        self.runs += len(history.values)
        self.coverings.append(covering(history.truth, found, len(history.values)))
        self.by_sigma += [
            (c.sigmas, abs(c.relative), i in hit) for i, c in enumerate(history.changes)
        ]

    def scores(self) -> dict[str, float]:
        precision = self.hits / self.found if self.found else float("nan")
        recall = self.hits / self.true if self.true else float("nan")
        f1 = (
            2 * precision * recall / (precision + recall)
            if self.found and self.true and precision + recall
            else float("nan")
        )
        return {
            "f1": f1,
            "precision": precision,
            "recall": recall,
            "covering": float(np.mean(self.coverings)) if self.runs else float("nan"),
            "fp_per_1000": (
                1000 * (self.found - self.hits) / self.runs if self.runs else float("nan")
            ),
            "histories": len(self.coverings),
            "true": self.true,
            "found": self.found,
        }

    def recall_by_sigma(self) -> list[tuple[str, float, int]]:
        rows = []
        for low, high in SIGMA_BINS:
            inside = [hit for sigmas, _, hit in self.by_sigma if low <= sigmas < high]
            label = f"{low:g}-{high:g}" if high != float("inf") else f">{low:g}"
            rows.append((label, float(np.mean(inside)) if inside else float("nan"), len(inside)))
        return rows

    def extremes(self) -> dict[str, float]:
        """The smallest change found and the largest missed, in noise sigmas and in %."""
        caught = [(s, r) for s, r, hit in self.by_sigma if hit]
        missed = [(s, r) for s, r, hit in self.by_sigma if not hit]
        return {
            "smallest_caught_sigmas": min(s for s, _ in caught),
            "smallest_caught_percent": 100 * min(r for _, r in caught),
            "largest_missed_sigmas": max(s for s, _ in missed),
            "largest_missed_percent": 100 * max(r for _, r in missed),
        }


def parse_range(text: str) -> range:
    start, _, stop = text.partition(":")
    return range(int(start), int(stop))


def parse_variant(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME=key:value,key:value`` -> the name and its settings."""
    name, _, spec = text.partition("=")
    settings: dict[str, Any] = {}
    for item in filter(None, spec.split(",")):
        key, _, value = item.partition(":")
        settings[key] = json.loads(value)
    return name, settings


def fmt(value: float) -> str:
    return "-" if value != value else f"{value:.3f}"


@dataclass(frozen=True)
class Methods:
    """What to run on each history: perfwatch's settings and Otava's options, by name."""

    perfwatch: dict[str, dict[str, Any]]
    otava: dict[str, dict[str, Any]]
    least_squares: dict[str, float]  # the baseline's penalties
    orig: dict[str, dict[str, Any]]  # the permutation mode's options; on a subset only

    @property
    def names(self) -> list[str]:
        """The methods run on every history."""
        return [*self.perfwatch, OTAVA, *self.otava, *self.least_squares]


@dataclass
class Findings:
    """What each method found on one history, its time, and whether compat mode gave
    Otava's own indices."""

    found: dict[str, list[int]]
    seconds: dict[str, float]
    compat_differs: bool


class HistoryRunner:
    """Every method on one history at a time, with one Otava worker of its own."""

    def __init__(self, methods: Methods) -> None:
        self._otava = OtavaReference()
        self._detectors: dict[str, Detector] = {
            name: perfwatch_detector(EDivisiveParams(**settings))
            for name, settings in methods.perfwatch.items()
        }
        self._detectors[OTAVA] = self._otava_with({})
        for name, options in methods.otava.items():
            self._detectors[name] = self._otava_with(options)
        for name, penalty in methods.least_squares.items():
            self._detectors[name] = least_squares_detector(penalty)
        for name, options in methods.orig.items():
            self._detectors[name] = self._orig_with(options)
        self._orig = set(methods.orig)
        self._compat = EDivisiveParams(compat="otava")

    def _otava_with(self, options: dict[str, Any]) -> Detector:
        otava = self._otava
        return lambda h: [c["index"] for c in otava.change_points(h.values, **options)]

    def _orig_with(self, options: dict[str, Any]) -> Detector:
        otava = self._otava
        return lambda h: otava.change_points_orig(h.values, seed=h.seed, **options)

    def run(self, history: History, with_orig: bool) -> Findings:
        found: dict[str, list[int]] = {}
        seconds: dict[str, float] = {}
        for name, detect in self._detectors.items():
            if name in self._orig and not with_orig:
                continue
            started = time.perf_counter()
            found[name] = detect(history)
            seconds[name] = time.perf_counter() - started
        ours = detect_change_points(history.values, self._compat)  # filled as Otava fills
        return Findings(found, seconds, [c.index for c in ours] != found[OTAVA])

    def close(self) -> None:
        self._otava.close()


_runner: HistoryRunner | None = None  # one per worker process


def _start_runner(methods: Methods) -> None:
    global _runner
    _runner = HistoryRunner(methods)


def _run_in_worker(history: History, with_orig: bool) -> Findings:
    assert _runner is not None
    return _runner.run(history, with_orig)


def all_findings(
    methods: Methods, todo: list[History], with_orig: list[bool], jobs: int
) -> Iterator[Findings]:
    """Each history's findings, in the order of ``todo`` (the permutation mode's too where
    ``with_orig`` says), over ``jobs`` processes."""
    if jobs == 1:
        runner = HistoryRunner(methods)
        try:
            yield from map(runner.run, todo, with_orig)
        finally:
            runner.close()
        return
    with ProcessPoolExecutor(jobs, initializer=_start_runner, initargs=(methods,)) as pool:
        yield from pool.map(_run_in_worker, todo, with_orig)


def run(args: argparse.Namespace) -> dict[str, Any]:
    seeds = parse_range(args.seeds)
    orig_seeds = parse_range(args.orig_seeds) if args.orig_seeds else range(0)
    methods = Methods(
        perfwatch={DEFAULT: {}, **dict(map(parse_variant, args.variant))},
        otava=dict(map(parse_variant, args.otava_variant)),
        least_squares={f"least squares, penalty {p:g}": p for p in args.least_squares},
        orig={ORIG: {}, **dict(map(parse_variant, args.orig_variant))},
    )
    orig_groups = args.orig_groups.split(",") if args.orig_groups else GROUPS
    names = methods.names
    tallies = {(m, g): Tally() for m in names for g in GROUPS}
    in_subset = [*names, *methods.orig] if orig_seeds else []
    orig_tallies = {(m, g): Tally() for m in in_subset for g in GROUPS}
    family_tallies = {(m, f): Tally() for m in names for f in NOISE_FAMILIES}
    seconds = dict.fromkeys([*names, *methods.orig], 0.0)
    compat_differs = 0
    todo = list(histories(GROUPS, seeds))
    with_orig = [h.seed in orig_seeds and h.group in orig_groups for h in todo]
    for history, in_orig_subset, findings in zip(
        todo, with_orig, all_findings(methods, todo, with_orig, args.jobs), strict=True
    ):
        compat_differs += findings.compat_differs
        for name, found in findings.found.items():
            seconds[name] += findings.seconds[name]
            if name not in methods.orig:
                tallies[(name, history.group)].add(history, found, args.margin)
                if history.group in ("mixed", "steps"):
                    family_tallies[(name, history.noise)].add(history, found, args.margin)
            if in_orig_subset:
                orig_tallies[(name, history.group)].add(history, found, args.margin)
    return {
        "seeds": args.seeds,
        "orig_seeds": args.orig_seeds,
        "margin": args.margin,
        "variants": args.variant,
        "otava_variants": args.otava_variant,
        "orig_variants": args.orig_variant,
        "orig_groups": list(orig_groups),
        "least_squares": args.least_squares,
        "scores": {group: {m: tallies[(m, group)].scores() for m in names} for group in GROUPS},
        "orig_scores": {
            group: {m: orig_tallies[(m, group)].scores() for m in in_subset}
            for group in orig_groups
        }
        if orig_seeds
        else {},
        "by_noise_family": {
            family: {m: family_tallies[(m, family)].scores() for m in names}
            for family in NOISE_FAMILIES
        },
        "recall_by_sigma": {
            m: _merged(tallies[(m, "mixed")], tallies[(m, "steps")]).recall_by_sigma()
            for m in names
        },
        "orig_recall_by_sigma": {
            m: _merged(orig_tallies[(m, "mixed")], orig_tallies[(m, "steps")]).recall_by_sigma()
            for m in in_subset
        },
        "extremes": {
            m: _merged(tallies[(m, "mixed")], tallies[(m, "steps")]).extremes() for m in names
        },
        "compat_differs_from_otava": compat_differs,
        "seconds": seconds,
    }


def _merged(*tallies: Tally) -> Tally:
    merged = Tally()
    for tally in tallies:
        merged.by_sigma += tally.by_sigma
    return merged


def print_recall_by_sigma(by_method: dict[str, list[tuple[str, float, int]]], seeds: str) -> None:
    print(f"\nstep recall by size in noise sigma (groups mixed + steps, seeds {seeds})\n")
    methods = list(by_method)
    print("| size | changes | " + " | ".join(methods) + " |")
    print("|---|---:|" + "---:|" * len(methods))
    for i, (label, _, count) in enumerate(by_method[methods[0]]):
        cells = [fmt(by_method[m][i][1]) for m in methods]
        print(f"| {label} | {count} | " + " | ".join(cells) + " |")


def report(result: dict[str, Any]) -> None:
    print(f"seeds {result['seeds']}, margin {result['margin']} runs")
    for title, key in (
        ("all methods", "scores"),
        ("by noise family, groups mixed + steps", "by_noise_family"),
        ("permutation subset", "orig_scores"),
    ):
        if not result[key]:
            continue
        seeds = result["orig_seeds"] if key == "orig_scores" else result["seeds"]
        print(f"\n{title} (seeds {seeds})\n")
        print("| group | method | F1 | precision | recall | covering | FP / 1000 runs |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for group, by_method in result[key].items():
            for method, s in by_method.items():
                print(
                    f"| {group} | {method} | {fmt(s['f1'])} | {fmt(s['precision'])} | "
                    f"{fmt(s['recall'])} | {fmt(s['covering'])} | {fmt(s['fp_per_1000'])} |"
                )
    print_recall_by_sigma(result["recall_by_sigma"], result["seeds"])
    if result["orig_recall_by_sigma"]:
        print_recall_by_sigma(result["orig_recall_by_sigma"], result["orig_seeds"])
    print("\nsmallest change found / largest missed (groups mixed + steps)\n")
    for method, e in result["extremes"].items():
        print(
            f"{method}: smallest found {e['smallest_caught_sigmas']:.2f} sigma, "
            f"{e['smallest_caught_percent']:.2f} %; largest missed "
            f"{e['largest_missed_sigmas']:.2f} sigma, {e['largest_missed_percent']:.2f} %"
        )
    print(f"\ncompat mode differs from Otava on {result['compat_differs_from_otava']} histories")
    print("seconds: " + ", ".join(f"{m} {s:.1f}" for m, s in result["seconds"].items()))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1000:1200", help="seed range START:STOP per group")
    parser.add_argument("--orig-seeds", default="", help="seed range for Otava's permutation mode")
    parser.add_argument(
        "--orig-groups", default="", help="GROUP,... for the permutation mode (all groups)"
    )
    parser.add_argument(
        "--orig-variant",
        action="append",
        default=[],
        help="NAME=permutations:N,max_pvalue:P for the permutation mode on its subset",
    )
    parser.add_argument("--margin", type=int, default=5)
    parser.add_argument("--variant", action="append", default=[], help="NAME=key:value,...")
    parser.add_argument(
        "--otava-variant",
        action="append",
        default=[],
        help="NAME=key:value,... of Otava's compute_change_points options",
    )
    parser.add_argument(
        "--least-squares",
        type=float,
        action="append",
        default=[],
        metavar="PENALTY",
        help="also the penalised least-squares baseline, PENALTY sigma^2 log n per change",
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="processes, each with its own Otava worker"
    )
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    result = run(args)
    report(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
