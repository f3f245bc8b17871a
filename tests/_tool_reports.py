"""Reports written by the real benchmark tools, for the converter and publish tests.

pytest-benchmark and Google Benchmark's Python bindings come from PyPI (the
`dev` extra), hyperfine from Debian (`apt-get install -y hyperfine`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

PYTEST_BENCHMARK_TESTS = """
import pytest

def test_sum(benchmark):
    benchmark(sum, range(100))

@pytest.mark.benchmark(group="sorting")
@pytest.mark.parametrize("size", [10, 100])
def test_sorted(benchmark, size):
    benchmark(sorted, range(size, 0, -1))
"""

GOOGLE_BENCHMARK_SCRIPT = """
import google_benchmark as benchmark

@benchmark.register
@benchmark.option.arg(64)
@benchmark.option.arg(128)
@benchmark.option.complexity(benchmark.oN)
def scan(state):
    data = list(range(state.range(0)))
    while state:
        sum(data)
    state.items_processed = state.iterations * state.range(0)
    state.complexity_n = state.range(0)
    state.set_label("sum")

@benchmark.register
def broken(state):
    while state:
        state.skip_with_error("no database")
        break

@benchmark.register
@benchmark.option.unit(benchmark.kMicrosecond)
def counted(state):
    while state:
        pass
    state.counters["widgets"] = 3

if __name__ == "__main__":
    benchmark.main()
"""


def run(command: list[str], cwd: Path) -> str:
    completed = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, f"{command} failed:\n{completed.stdout}\n{completed.stderr}"
    return completed.stdout.strip()


def git(cwd: Path, *args: str) -> str:
    return run(["git", "-c", "user.email=ci@example.org", "-c", "user.name=CI", *args], cwd)


def pytest_benchmark_report(work: Path, *, detached: bool = False) -> tuple[Path, str]:
    """Three benchmarks (one parametrised twice) run in a git repository on branch
    `perf-branch`, or on its commit checked out alone (`detached`, as CI checkouts are):
    the report and the commit."""
    (work / "test_speed.py").write_text(textwrap.dedent(PYTEST_BENCHMARK_TESTS))
    git(work, "init", "-q", "-b", "perf-branch")
    git(work, "add", "test_speed.py")
    git(work, "commit", "-qm", "bench")
    if detached:
        git(work, "checkout", "-q", "--detach")
    run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            "--rootdir",
            str(work),
            "test_speed.py",
            "--benchmark-json=report.json",
            "--benchmark-min-rounds=2",
            "--benchmark-max-time=0.001",
            "--benchmark-warmup=off",
        ],
        work,
    )
    return work / "report.json", git(work, "rev-parse", "HEAD")


def google_benchmark_report(work: Path, repetitions: int) -> Path:
    script = work / "bench.py"
    script.write_text(GOOGLE_BENCHMARK_SCRIPT)
    out = work / f"report-{repetitions}.json"
    run(
        [
            sys.executable,
            script.name,
            "--benchmark_min_time=0.001s",
            f"--benchmark_repetitions={repetitions}",
            f"--benchmark_out={out}",
            "--benchmark_out_format=json",
        ],
        work,
    )
    return out


def hyperfine_reports(work: Path) -> dict[str, Path]:
    """`list`: two commands from a parameter list, 3 runs each; `once`: one named run."""
    if shutil.which("hyperfine") is None:
        message = "hyperfine is not installed (apt-get install -y hyperfine)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    base = ["hyperfine", "--style", "none", "-N", "--warmup", "0"]
    run(
        [*base, "--runs", "3", "-L", "word", "a,b", "--export-json", "list.json", "echo {word}"],
        work,
    )
    run([*base, "--runs", "1", "-n", "noop", "--export-json", "once.json", "true"], work)
    return {"list": work / "list.json", "once": work / "once.json"}


# JMH needs a Java build of the benchmarks, so its reports are made here from the numbers of
# real runs, in the layout of the JSON that JMH writes (`-rf json`, release 1.37): a score it
# could not compute is the string "NaN", and the sampled mode keeps a histogram of times.
JMH_VM = {
    "jmhVersion": "1.37",
    "jvm": "/usr/lib/jvm/java-17-openjdk-amd64/bin/java",
    "jvmArgs": ["-Xmx2g"],
    "jdkVersion": "17.0.15",
    "vmName": "OpenJDK 64-Bit Server VM",
    "vmVersion": "17.0.15+6-Debian-1deb12u1",
}
JMH_PERCENTILES = (
    *("0.0", "50.0", "90.0", "95.0", "99.0", "99.9", "99.99", "99.999", "99.9999", "100.0"),
)
NAN = "NaN"  # how JMH writes a score it could not compute


def jmh_metric(
    score: float | str, error: float | str, unit: str, forks: list[list[Any]]
) -> dict[str, Any]:
    """A primary or secondary metric: its score and error, and each fork's iteration
    scores (for the sampled mode, each iteration's histogram of [time, count] pairs)."""
    histogram = any(isinstance(iteration, list) for fork in forks for iteration in fork)
    values = sorted(
        time
        for fork in forks
        for iteration in fork
        for time, _count in (iteration if histogram else [(iteration, 1)])
    )
    confidence: list[float | str] = [NAN, NAN]
    if isinstance(score, float) and isinstance(error, float):
        confidence = [score - error, score + error]
    percentiles: dict[str, float | str] = {
        name: values[min(len(values) - 1, int(float(name) / 100 * len(values)))] if values else NAN
        for name in JMH_PERCENTILES
    }
    return {
        "score": score,
        "scoreError": error,
        "scoreConfidence": confidence,
        "scorePercentiles": percentiles,
        "scoreUnit": unit,
        "rawDataHistogram" if histogram else "rawData": forks,
    }


def jmh_result(
    benchmark: str,
    mode: str,
    primary: dict[str, Any],
    secondary: dict[str, Any],
    *,
    params: dict[str, str] | None = None,
    threads: int = 1,
    vm: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One result as JMH writes it, with the fields in its order."""
    vm = JMH_VM if vm is None else vm
    forks = primary.get("rawData") or primary["rawDataHistogram"]
    single_shot = mode == "ss"
    result: dict[str, Any] = {
        **{key: vm[key] for key in ("jmhVersion",) if key in vm},
        "benchmark": benchmark,
        "mode": mode,
        "threads": threads,
        "forks": len(forks),
        **{key: value for key, value in vm.items() if key != "jmhVersion"},
        "warmupIterations": 0 if single_shot else 3,
        "warmupTime": "single-shot" if single_shot else "1 s",
        "warmupBatchSize": 1,
        "measurementIterations": len(forks[0]),
        "measurementTime": "single-shot" if single_shot else "1 s",
        "measurementBatchSize": 1,
    }
    if params:
        result["params"] = params
    return {**result, "primaryMetric": primary, "secondaryMetrics": secondary}


# SortBench in two parameter combinations with the gc profiler (its gc.time could not be
# computed), HashBench in two modes, a sampled latency, and a single-shot run whose one
# iteration leaves the error "NaN".
JMH_RESULTS = [
    jmh_result(
        "org.example.bench.SortBench.sort",
        "thrpt",
        jmh_metric(
            18236.58509436521,
            412.9183322019281,
            "ops/s",
            [
                [18103.644172, 18466.305819, 18377.898110],
                [17990.120331, 18216.921014, 18264.621217],
            ],
        ),
        {
            "gc.alloc.rate": jmh_metric(
                71.23519866040935,
                1.610311829412011,
                "MB/sec",
                [[70.72, 72.14, 71.79], [70.28, 71.16, 71.30]],
            ),
            "gc.alloc.rate.norm": jmh_metric(
                4096.000891421877,
                0.000482161334029,
                "B/op",
                [[4096.0009, 4096.0006, 4096.0011], [4096.0009, 4096.0010, 4096.0009]],
            ),
            "gc.count": jmh_metric(6.0, NAN, "counts", [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]),
            "gc.time": jmh_metric(NAN, NAN, "ms", [[], []]),
        },
        params={"order": "random", "size": "1000"},
    ),
    jmh_result(
        "org.example.bench.SortBench.sort",
        "thrpt",
        jmh_metric(
            97.40215811834127,
            3.0718826590315683,
            "ops/s",
            [[95.881260, 97.123408, 97.856432], [98.901203, 96.910042, 97.740601]],
        ),
        {
            "gc.alloc.rate": jmh_metric(
                37.19962104528183,
                1.173216330812704,
                "MB/sec",
                [[36.61, 37.09, 37.37], [37.77, 37.01, 37.32]],
            ),
            "gc.alloc.rate.norm": jmh_metric(
                400472.3118820542,
                0.8736702104312918,
                "B/op",
                [[400472.77, 400472.31, 400471.90], [400472.03, 400472.62, 400472.23]],
            ),
        },
        params={"order": "random", "size": "100000"},
    ),
    jmh_result(
        "org.example.bench.HashBench.murmur",
        "thrpt",
        jmh_metric(
            41.87351904273307, 2.507814026915023, "ops/us", [[41.722188, 41.801194, 42.097174]]
        ),
        {"gc.alloc.rate.norm": jmh_metric(1.0e-5, 2.0e-6, "B/op", [[9.0e-6, 1.0e-5, 1.1e-5]])},
        threads=4,
    ),
    jmh_result(
        "org.example.bench.HashBench.murmur",
        "avgt",
        jmh_metric(
            95.5380172212514, 5.882360927181745, "ns/op", [[95.142180, 95.634171, 95.837700]]
        ),
        {"gc.alloc.rate.norm": jmh_metric(2.4e-5, 4.0e-6, "B/op", [[2.2e-5, 2.4e-5, 2.6e-5]])},
        threads=4,
    ),
    jmh_result(
        "org.example.bench.CacheBench.lookup",
        "sample",
        jmh_metric(
            0.04071259163591921,
            0.0012617290185037457,
            "ms/op",
            [
                [
                    [
                        [0.034816, 1803],
                        [0.039936, 11207],
                        [0.043008, 1492],
                        [0.0768, 121],
                        [1.277952, 1],
                    ],
                    [[0.03584, 1688], [0.039936, 11410], [0.041984, 1377], [0.0768, 97]],
                ]
            ],
        ),
        {},
        params={"entries": "65536"},
    ),
    jmh_result(
        "org.example.bench.StartupBench.loadConfiguration",
        "ss",
        jmh_metric(231.446187, NAN, "ms/op", [[231.446187]]),
        {},
    ),
]

# Older releases wrote no JMH and JVM versions and named the profilers' metrics with a
# leading middle dot; a @Group benchmark reports each of its methods' rates (`poll`) as
# secondary metrics, and a perf counter (`cpi`) is a ratio of its own.
JMH_OLD_RESULTS = [
    jmh_result(
        "org.example.bench.QueueBench.offerPoll",
        "thrpt",
        jmh_metric(
            5512.907311402012,
            201.33160183406208,
            "ops/ms",
            [[5440.13, 5509.32, 5591.21, 5475.88, 5547.99]],
        ),
        {
            "\u00b7gc.alloc.rate.norm": jmh_metric(
                16.000113,
                0.000021,
                "B/op",
                [[16.000101, 16.000112, 16.000126, 16.000109, 16.000117]],
            ),
            "poll": jmh_metric(
                318.2281002139114,
                40.11762015398512,
                "ops/ms",
                [[301.19, 314.78, 334.88, 312.44, 327.84]],
            ),
            "\u00b7cpi": jmh_metric(0.412, NAN, "clks/insn", [[0.412]]),
        },
        threads=2,
        vm={},
    )
]


def jmh_reports(work: Path) -> dict[str, Path]:
    """`current`: the JMH 1.37 report; `old`: one in the layout of older releases."""
    written = {}
    for name, results in (("current", JMH_RESULTS), ("old", JMH_OLD_RESULTS)):
        written[name] = work / f"jmh-{name}.json"
        # JMH's layout: four spaces, " : " between a key and its value, non-ASCII as is
        text = json.dumps(results, indent=4, separators=(",", " : "), ensure_ascii=False)
        written[name].write_text(text + "\n", encoding="utf-8")
    return written
