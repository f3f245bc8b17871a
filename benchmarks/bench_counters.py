"""Time and memory of the clustered-counter check as the number of counters grows.

    python benchmarks/bench_counters.py [--counters 100 1000 3000] [--observations 600]

For each size: one baseline run and one target run of that many counters x observations
(default parameters: steady state, blocks of 10, redundancy analysis, clustering, one
model per candidate), timing ``fit`` and ``check`` and the peak memory traced. The data:
counters in groups driven by shared latent factors (one group per ten counters), some
nearly copies of another, some noisy, like a big system's counters.

Reference, measured in the same run: the redundancy analysis done literally (refit a
regression of every counter on the others after each removal, statsmodels OLS) on 40
counters, against the inverse-matrix downdates that fit uses; the ratio is printed.
"""

from __future__ import annotations

import argparse
import resource
import time
import tracemalloc
from collections.abc import Sequence

import numpy as np
import statsmodels.api as sm

from perfwatch.detectors.counters import (
    CounterRegressionCheck,
    CounterSamples,
    correlation_matrix,
    redundancy_analysis,
)


def counters(seed: int, count: int, observations: int) -> CounterSamples:
    """``count`` counters driven by ``count // 10`` latent AR(1) factors."""
    rng = np.random.default_rng(seed)
    groups = max(1, count // 10)
    factors = np.empty((observations, groups))
    factors[0] = rng.normal(size=groups)
    for t in range(1, observations):
        factors[t] = 0.9 * factors[t - 1] + 0.44 * rng.normal(size=groups)
    structure = np.random.default_rng(0)  # the same counters in every run
    group = structure.integers(0, groups, count)
    loading = structure.uniform(0.5, 2.0, count)
    noise = structure.choice([0.05, 0.3, 1.0], count, p=[0.2, 0.5, 0.3])
    level = structure.uniform(10, 1000, count)
    values = level * (
        1 + 0.1 * (loading * factors[:, group] + noise * rng.normal(size=(observations, count)))
    )
    return CounterSamples(
        [f"\\\\bench\\Object({i // 50})\\Counter {i}" for i in range(count)], values
    )


def literal_redundancy(values: np.ndarray, threshold: float) -> list[int]:
    """The redundancy analysis loop of Shang et al. (ICPE 2015) as written: one OLS per
    remaining counter per removal."""
    present = list(range(values.shape[1]))
    removed = []
    while len(present) > 1:
        r2 = [
            sm.OLS(values[:, c], sm.add_constant(values[:, [o for o in present if o != c]]))
            .fit()
            .rsquared
            for c in present
        ]
        best = int(np.argmax(r2))
        if r2[best] <= threshold:
            return removed
        removed.append(present.pop(best))
    return removed


def measure(count: int, observations: int) -> dict[str, float]:
    baseline, target = counters(1, count, observations), counters(2, count, observations)
    tracemalloc.start()
    started = time.perf_counter()
    check = CounterRegressionCheck().fit([baseline])
    fitted = time.perf_counter()
    result = check.check(target)
    done = time.perf_counter()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "fit": fitted - started,
        "check": done - fitted,
        "peak_mb": peak / 2**20,
        "kept": len(check.kept_),
        "clusters": len(check.clusters_),
        "judged": sum(c.error is not None for c in result.clusters),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counters", type=int, nargs="+", default=[100, 1000, 3000])
    parser.add_argument("--observations", type=int, default=600)
    parser.add_argument(
        "--reference-counters",
        type=int,
        default=40,
        help="size of the literal redundancy analysis measured for reference (slow)",
    )
    args = parser.parse_args(argv)

    print(f"one baseline and one target run of {args.observations} observations")
    header = ("counters", "fit s", "check s", "total s", "peak MB", "kept", "clusters")
    print(" ".join(f"{h:>9}" for h in header))
    for count in args.counters:
        m = measure(count, args.observations)
        print(
            f"{count:>9} {m['fit']:>9.2f} {m['check']:>9.2f} {m['fit'] + m['check']:>9.2f} "
            f"{m['peak_mb']:>9.0f} {m['kept']:>9} {m['clusters']:>9}"
        )
    resident = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"process peak resident memory: {resident:.0f} MB")

    smallest = args.reference_counters
    values = counters(1, smallest, args.observations).values
    started = time.perf_counter()
    literal = literal_redundancy(values, 0.9)
    literal_s = time.perf_counter() - started
    started = time.perf_counter()
    steps = redundancy_analysis(correlation_matrix(values), 0.9)
    downdates_s = time.perf_counter() - started
    same = [s.index for s in steps] == literal
    print(
        f"\nredundancy analysis of {smallest} counters: refit per counter per removal "
        f"{literal_s:.2f} s, inverse downdates {downdates_s:.4f} s "
        f"({literal_s / downdates_s:.0f}x faster; same removals: {'yes' if same else 'NO'})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
