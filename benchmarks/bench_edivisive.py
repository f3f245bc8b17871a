"""perfwatch E-Divisive vs apache-otava 0.8, side by side, in one run.

    python benchmarks/bench_edivisive.py            # full run (a few minutes: Otava is slow)
    python benchmarks/bench_edivisive.py --quick    # smaller sizes, for a smoke test
    python benchmarks/bench_edivisive.py --json out.json

Cases (same data, same parameters for both; perfwatch in compat="otava" mode,
and the results are checked to be identical):
  full-N        full analysis of one series of N points (100 .. 100 000)
  batch         1 000 series of 500 points each
  append        a 1 000-point series grown one point at a time
                (perfwatch SeriesAnalyzer.append vs Otava AnalyzedSeries.append);
                the series is built by appending from 900 points, the time is
                per append
Also reported: perfwatch default mode (not compared: its results differ by design).
The ratio is Otava time / perfwatch time (median of repeats; Otava's time is for
one run where a repeat would take too long). Otava runs in an environment of its
own (it pins older numpy and scipy), made on first use or named by
PERFWATCH_OTAVA_PYTHON (tests/otava_reference.py); both sides time their own
calls on the same data, so process start-up and data transfer are not counted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from perfwatch.detectors.analyzer import SeriesAnalyzer
from perfwatch.detectors.edivisive import EDivisiveParams, detect_change_points

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from otava_reference import OtavaReference

COMPAT = EDivisiveParams(compat="otava")
DEFAULT = EDivisiveParams()


def make_series(rng: np.random.Generator, n: int) -> np.ndarray:
    """Benchmark-like history: noise, a few steps, spikes and a short regression."""
    x = 100.0 + rng.normal(0.0, 2.0, n)
    for _ in range(max(1, n // 200)):
        at = int(rng.integers(1, n))
        x[at:] += float(rng.choice([-1, 1])) * float(rng.uniform(2, 10))
    for _ in range(max(1, n // 100)):
        x[int(rng.integers(0, n))] += float(rng.uniform(10, 30))
    at = int(rng.integers(0, max(1, n - 5)))
    x[at : at + 4] += 8.0
    return x


def timeit(fn, min_time: float = 0.3, max_reps: int = 50) -> float:
    """Median seconds per call (at least 3 calls, about min_time in total)."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    reps = int(min(max_reps, max(3, min_time / max(first, 1e-7))))
    times = [first]
    for _ in range(reps - 1):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def otava_cps(otava: OtavaReference, values: np.ndarray) -> list[tuple[int, float, float]]:
    return [(c["index"], c["pvalue"], c["magnitude"]) for c in otava.change_points(values)]


def ours(values: np.ndarray, params: EDivisiveParams = COMPAT) -> list[tuple[int, float, float]]:
    return [(c.index, c.pvalue, c.magnitude) for c in detect_change_points(values, params)]


def same(a, b) -> bool:
    return len(a) == len(b) and all(
        x[0] == y[0] and (x[1] == y[1] or abs(x[1] - y[1]) <= 1e-9 * abs(x[1])) and x[2] == y[2]
        for x, y in zip(a, b, strict=True)
    )


def bench_full(otava: OtavaReference, rng, n: int, otava_reps: int) -> dict:
    x = make_series(rng, n)
    ours(x)  # warm
    request = {"op": "time_change_points", "values": x.tolist(), "repeats": otava_reps}
    t_otava = statistics.median(otava.ask(request)["seconds"])
    t_ours = timeit(lambda: detect_change_points(x, COMPAT))
    t_default = timeit(lambda: detect_change_points(x, DEFAULT))
    return {
        "case": f"full-{n}",
        "otava_s": t_otava,
        "perfwatch_s": t_ours,
        "ratio": t_otava / t_ours,
        "perfwatch_default_s": t_default,
        "identical": same(otava_cps(otava, x), ours(x)),
    }


def bench_batch(otava: OtavaReference, rng, count: int, n: int) -> dict:
    series = [make_series(rng, n) for _ in range(count)]
    reply = otava.ask({"op": "time_batch", "series": [s.tolist() for s in series]})
    t_otava = reply["seconds"]

    def run(params):
        return [detect_change_points(s, params) for s in series]

    run(COMPAT)
    t_ours = timeit(lambda: run(COMPAT), min_time=1.0, max_reps=5)
    t_default = timeit(lambda: run(DEFAULT), min_time=1.0, max_reps=5)
    mine = run(COMPAT)
    identical = all(
        same(
            [(c["index"], c["pvalue"], c["magnitude"]) for c in a],
            [(c.index, c.pvalue, c.magnitude) for c in b],
        )
        for a, b in zip(reply["change_points"], mine, strict=True)
    )
    return {
        "case": f"batch-{count}x{n}",
        "otava_s": t_otava,
        "perfwatch_s": t_ours,
        "ratio": t_otava / t_ours,
        "perfwatch_default_s": t_default,
        "identical": identical,
    }


def bench_append(otava: OtavaReference, rng, n: int, start: int) -> dict:
    x = make_series(rng, n)
    # Otava: AnalyzedSeries over one metric, then append one point at a time
    appended = otava.ask({"op": "time_appends", "values": x.tolist(), "start": start})
    t_otava = appended["seconds_per_append"]

    def grow(params):
        a = SeriesAnalyzer(params)
        a.append(x[:start])
        t0 = time.perf_counter()
        for i in range(start, n):
            a.append(x[i : i + 1])
        return (time.perf_counter() - t0) / (n - start), a

    grow(COMPAT)
    t_ours, a = min((grow(COMPAT) for _ in range(3)), key=lambda r: r[0])
    t_default, _ = min((grow(DEFAULT) for _ in range(3)), key=lambda r: r[0])
    full = ours(x)
    mine = [(c.index, c.pvalue, c.magnitude) for c in a.change_points_]
    otava_full = otava_cps(otava, x)
    return {
        "case": f"append-1-to-{n}",
        "otava_s": t_otava,
        "perfwatch_s": t_ours,
        "ratio": t_otava / t_ours,
        "perfwatch_default_s": t_default,
        # the analyzer equals a full recomputation, which equals Otava's full analysis
        # (Otava's own incremental append may differ from its full analysis)
        "identical": same(mine, full) and same(full, otava_full),
        "otava_append_equals_otava_full": appended["indices"] == [i for i, _, _ in otava_full],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes only")
    ap.add_argument("--json", help="write the results to this file")
    ap.add_argument("--seed", type=int, default=20240601)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    sizes = [100, 1_000, 10_000] if args.quick else [100, 1_000, 10_000, 100_000]
    results = []
    with OtavaReference() as otava:
        for n in sizes:
            results.append(bench_full(otava, rng, n, otava_reps=3 if n <= 10_000 else 1))
            _print(results[-1])
        results.append(bench_batch(otava, rng, 100 if args.quick else 1_000, 500))
        _print(results[-1])
        results.append(bench_append(otava, rng, 1_000, 900 if not args.quick else 960))
        _print(results[-1])
    bars = {"full-100": 10, "full-1000": 10, "full-10000": 20, "full-100000": 20}
    ok = True
    for r in results:
        bar = 20 if r["case"].startswith(("batch", "append")) else bars.get(r["case"], 10)
        r["bar"] = bar
        r["meets_bar"] = r["ratio"] >= bar and r["identical"]
        ok &= r["meets_bar"]
    print(f"\nall bars met: {ok}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if ok else 1


def _print(r: dict) -> None:
    print(
        f"{r['case']:>18}  otava {r['otava_s'] * 1e3:10.3f} ms"
        f"  perfwatch {r['perfwatch_s'] * 1e3:9.4f} ms"
        f"  ratio {r['ratio']:7.1f}x  identical={r['identical']}"
        f"  (default mode {r['perfwatch_default_s'] * 1e3:.4f} ms)",
        flush=True,
    )


if __name__ == "__main__":
    raise SystemExit(main())
