"""Reports written by the real benchmark tools, for the converter and publish tests.

pytest-benchmark and Google Benchmark's Python bindings come from PyPI (the
`dev` extra), hyperfine from Debian (`apt-get install -y hyperfine`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

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


def pytest_benchmark_report(work: Path) -> tuple[Path, str]:
    """Three benchmarks (one parametrised twice) run in a git repository on branch
    `perf-branch`: the report and the commit."""
    (work / "test_speed.py").write_text(textwrap.dedent(PYTEST_BENCHMARK_TESTS))
    git(work, "init", "-q", "-b", "perf-branch")
    git(work, "add", "test_speed.py")
    git(work, "commit", "-qm", "bench")
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


# JMH needs a Java build of the benchmarks, so its reports are written here by hand, in the
# layout of the JSON that JMH writes (`-rf json`, release 1.37): SortBench in two parameter
# combinations with the gc profiler, HashBench in two modes, a sampled latency with its
# histogram, and a single-shot run whose one iteration leaves the error "NaN".
JMH_REPORT = """[
    {
        "jmhVersion" : "1.37",
        "benchmark" : "org.example.bench.SortBench.sort",
        "mode" : "thrpt",
        "threads" : 1,
        "forks" : 2,
        "jvm" : "/usr/lib/jvm/java-17-openjdk-amd64/bin/java",
        "jvmArgs" : [
            "-Xmx2g"
        ],
        "jdkVersion" : "17.0.15",
        "vmName" : "OpenJDK 64-Bit Server VM",
        "vmVersion" : "17.0.15+6-Debian-1deb12u1",
        "warmupIterations" : 3,
        "warmupTime" : "1 s",
        "warmupBatchSize" : 1,
        "measurementIterations" : 3,
        "measurementTime" : "1 s",
        "measurementBatchSize" : 1,
        "params" : {
            "order" : "random",
            "size" : "1000"
        },
        "primaryMetric" : {
            "score" : 18234.51779127005,
            "scoreError" : 412.9183322019281,
            "scoreConfidence" : [
                17821.599459068122,
                18647.436123471978
            ],
            "scorePercentiles" : {
                "0.0" : 17990.120331447253,
                "50.0" : 18240.77114601329,
                "90.0" : 18466.30581972091,
                "95.0" : 18466.30581972091,
                "99.0" : 18466.30581972091,
                "99.9" : 18466.30581972091,
                "99.99" : 18466.30581972091,
                "99.999" : 18466.30581972091,
                "99.9999" : 18466.30581972091,
                "100.0" : 18466.30581972091
            },
            "scoreUnit" : "ops/s",
            "rawData" : [
                [
                    18103.64417210437,
                    18466.30581972091,
                    18377.89811032142
                ],
                [
                    17990.120331447253,
                    18216.92101488561,
                    18264.62121714097
                ]
            ]
        },
        "secondaryMetrics" : {
            "gc.alloc.rate" : {
                "score" : 71.23519866040935,
                "scoreError" : 1.6103118294120113,
                "scoreConfidence" : [
                    69.62488683099734,
                    72.84551048982136
                ],
                "scorePercentiles" : {
                    "0.0" : 70.28014380111634,
                    "50.0" : 71.25977711082107,
                    "90.0" : 72.14007010441512,
                    "95.0" : 72.14007010441512,
                    "99.0" : 72.14007010441512,
                    "99.9" : 72.14007010441512,
                    "99.99" : 72.14007010441512,
                    "99.999" : 72.14007010441512,
                    "99.9999" : 72.14007010441512,
                    "100.0" : 72.14007010441512
                },
                "scoreUnit" : "MB/sec",
                "rawData" : [
                    [
                        70.72299154082213,
                        72.14007010441512,
                        71.79656350706063
                    ],
                    [
                        70.28014380111634,
                        71.16224883637017,
                        71.30917417267169
                    ]
                ]
            },
            "gc.alloc.rate.norm" : {
                "score" : 4096.000891421877,
                "scoreError" : 0.00048216133402935065,
                "scoreConfidence" : [
                    4096.000409260543,
                    4096.001373583211
                ],
                "scorePercentiles" : {
                    "0.0" : 4096.000593871113,
                    "50.0" : 4096.000897125421,
                    "90.0" : 4096.001102384751,
                    "95.0" : 4096.001102384751,
                    "99.0" : 4096.001102384751,
                    "99.9" : 4096.001102384751,
                    "99.99" : 4096.001102384751,
                    "99.999" : 4096.001102384751,
                    "99.9999" : 4096.001102384751,
                    "100.0" : 4096.001102384751
                },
                "scoreUnit" : "B/op",
                "rawData" : [
                    [
                        4096.000903014412,
                        4096.000593871113,
                        4096.001102384751
                    ],
                    [
                        4096.000891236430,
                        4096.000960418112,
                        4096.000897125421
                    ]
                ]
            },
            "gc.count" : {
                "score" : 6.0,
                "scoreError" : "NaN",
                "scoreConfidence" : [
                    "NaN",
                    "NaN"
                ],
                "scorePercentiles" : {
                    "0.0" : 1.0,
                    "50.0" : 1.0,
                    "90.0" : 1.0,
                    "95.0" : 1.0,
                    "99.0" : 1.0,
                    "99.9" : 1.0,
                    "99.99" : 1.0,
                    "99.999" : 1.0,
                    "99.9999" : 1.0,
                    "100.0" : 1.0
                },
                "scoreUnit" : "counts",
                "rawData" : [
                    [
                        1.0,
                        1.0,
                        1.0
                    ],
                    [
                        1.0,
                        1.0,
                        1.0
                    ]
                ]
            },
            "gc.time" : {
                "score" : "NaN",
                "scoreError" : "NaN",
                "scoreConfidence" : [
                    "NaN",
                    "NaN"
                ],
                "scorePercentiles" : {
                    "0.0" : "NaN",
                    "50.0" : "NaN",
                    "90.0" : "NaN",
                    "95.0" : "NaN",
                    "99.0" : "NaN",
                    "99.9" : "NaN",
                    "99.99" : "NaN",
                    "99.999" : "NaN",
                    "99.9999" : "NaN",
                    "100.0" : "NaN"
                },
                "scoreUnit" : "ms",
                "rawData" : [
                    [
                    ],
                    [
                    ]
                ]
            }
        }
    },
    {
        "jmhVersion" : "1.37",
        "benchmark" : "org.example.bench.SortBench.sort",
        "mode" : "thrpt",
        "threads" : 1,
        "forks" : 2,
        "jvm" : "/usr/lib/jvm/java-17-openjdk-amd64/bin/java",
        "jvmArgs" : [
            "-Xmx2g"
        ],
        "jdkVersion" : "17.0.15",
        "vmName" : "OpenJDK 64-Bit Server VM",
        "vmVersion" : "17.0.15+6-Debian-1deb12u1",
        "warmupIterations" : 3,
        "warmupTime" : "1 s",
        "warmupBatchSize" : 1,
        "measurementIterations" : 3,
        "measurementTime" : "1 s",
        "measurementBatchSize" : 1,
        "params" : {
            "order" : "random",
            "size" : "100000"
        },
        "primaryMetric" : {
            "score" : 97.40215811834127,
            "scoreError" : 3.0718826590315683,
            "scoreConfidence" : [
                94.3302754593097,
                100.47404077737284
            ],
            "scorePercentiles" : {
                "0.0" : 95.88126011027154,
                "50.0" : 97.4899204103415,
                "90.0" : 98.90120337760311,
                "95.0" : 98.90120337760311,
                "99.0" : 98.90120337760311,
                "99.9" : 98.90120337760311,
                "99.99" : 98.90120337760311,
                "99.999" : 98.90120337760311,
                "99.9999" : 98.90120337760311,
                "100.0" : 98.90120337760311
            },
            "scoreUnit" : "ops/s",
            "rawData" : [
                [
                    95.88126011027154,
                    97.12340871146625,
                    97.85643210921675
                ],
                [
                    98.90120337760311,
                    96.91004288071334,
                    97.74060152077661
                ]
            ]
        },
        "secondaryMetrics" : {
            "gc.alloc.rate" : {
                "score" : 37.19962104528183,
                "scoreError" : 1.173216330812704,
                "scoreConfidence" : [
                    36.02640471446913,
                    38.37283737609453
                ],
                "scorePercentiles" : {
                    "0.0" : 36.61694107419121,
                    "50.0" : 37.23366018342614,
                    "90.0" : 37.77258906341012,
                    "95.0" : 37.77258906341012,
                    "99.0" : 37.77258906341012,
                    "99.9" : 37.77258906341012,
                    "99.99" : 37.77258906341012,
                    "99.999" : 37.77258906341012,
                    "99.9999" : 37.77258906341012,
                    "100.0" : 37.77258906341012
                },
                "scoreUnit" : "MB/sec",
                "rawData" : [
                    [
                        36.61694107419121,
                        37.09250184327066,
                        37.37481852358162
                    ],
                    [
                        37.77258906341012,
                        37.01186574721101,
                        37.32901001002637
                    ]
                ]
            },
            "gc.alloc.rate.norm" : {
                "score" : 400472.3118820542,
                "scoreError" : 0.8736702104312918,
                "scoreConfidence" : [
                    400471.4382118438,
                    400473.1855522646
                ],
                "scorePercentiles" : {
                    "0.0" : 400471.9012277303,
                    "50.0" : 400472.3103129371,
                    "90.0" : 400472.7721403201,
                    "95.0" : 400472.7721403201,
                    "99.0" : 400472.7721403201,
                    "99.9" : 400472.7721403201,
                    "99.99" : 400472.7721403201,
                    "99.999" : 400472.7721403201,
                    "99.9999" : 400472.7721403201,
                    "100.0" : 400472.7721403201
                },
                "scoreUnit" : "B/op",
                "rawData" : [
                    [
                        400472.7721403201,
                        400472.3103129371,
                        400471.9012277303
                    ],
                    [
                        400472.0319218807,
                        400472.6210983116,
                        400472.2345911454
                    ]
                ]
            }
        }
    },
    {
        "jmhVersion" : "1.37",
        "benchmark" : "org.example.bench.HashBench.murmur",
        "mode" : "thrpt",
        "threads" : 4,
        "forks" : 1,
        "jvm" : "/usr/lib/jvm/java-17-openjdk-amd64/bin/java",
        "jvmArgs" : [
        ],
        "jdkVersion" : "17.0.15",
        "vmName" : "OpenJDK 64-Bit Server VM",
        "vmVersion" : "17.0.15+6-Debian-1deb12u1",
        "warmupIterations" : 2,
        "warmupTime" : "500 ms",
        "warmupBatchSize" : 1,
        "measurementIterations" : 3,
        "measurementTime" : "500 ms",
        "measurementBatchSize" : 1,
        "primaryMetric" : {
            "score" : 41.87351904273307,
            "scoreError" : 2.507814026915023,
            "scoreConfidence" : [
                39.36570501581805,
                44.38133306964809
            ],
            "scorePercentiles" : {
                "0.0" : 41.72218807735101,
                "50.0" : 41.80119420261843,
                "90.0" : 42.09717484822977,
                "95.0" : 42.09717484822977,
                "99.0" : 42.09717484822977,
                "99.9" : 42.09717484822977,
                "99.99" : 42.09717484822977,
                "99.999" : 42.09717484822977,
                "99.9999" : 42.09717484822977,
                "100.0" : 42.09717484822977
            },
            "scoreUnit" : "ops/us",
            "rawData" : [
                [
                    41.72218807735101,
                    41.80119420261843,
                    42.09717484822977
                ]
            ]
        },
        "secondaryMetrics" : {
            "gc.alloc.rate.norm" : {
                "score" : 1.0E-5,
                "scoreError" : 2.0E-6,
                "scoreConfidence" : [
                    8.0E-6,
                    1.2E-5
                ],
                "scorePercentiles" : {
                    "0.0" : 9.0E-6,
                    "50.0" : 1.0E-5,
                    "90.0" : 1.1E-5,
                    "95.0" : 1.1E-5,
                    "99.0" : 1.1E-5,
                    "99.9" : 1.1E-5,
                    "99.99" : 1.1E-5,
                    "99.999" : 1.1E-5,
                    "99.9999" : 1.1E-5,
                    "100.0" : 1.1E-5
                },
                "scoreUnit" : "B/op",
                "rawData" : [
                    [
                        9.0E-6,
                        1.0E-5,
                        1.1E-5
                    ]
                ]
            }
        }
    },
    {
        "jmhVersion" : "1.37",
        "benchmark" : "org.example.bench.HashBench.murmur",
        "mode" : "avgt",
        "threads" : 4,
        "forks" : 1,
        "jvm" : "/usr/lib/jvm/java-17-openjdk-amd64/bin/java",
        "jvmArgs" : [
        ],
        "jdkVersion" : "17.0.15",
        "vmName" : "OpenJDK 64-Bit Server VM",
        "vmVersion" : "17.0.15+6-Debian-1deb12u1",
        "warmupIterations" : 2,
        "warmupTime" : "500 ms",
        "warmupBatchSize" : 1,
        "measurementIterations" : 3,
        "measurementTime" : "500 ms",
        "measurementBatchSize" : 1,
        "primaryMetric" : {
            "score" : 95.5380172212514,
            "scoreError" : 5.882360927181745,
            "scoreConfidence" : [
                89.65565629406966,
                101.42037814843315
            ],
            "scorePercentiles" : {
                "0.0" : 95.14218006178402,
                "50.0" : 95.63417127320612,
                "90.0" : 95.83770032876406,
                "95.0" : 95.83770032876406,
                "99.0" : 95.83770032876406,
                "99.9" : 95.83770032876406,
                "99.99" : 95.83770032876406,
                "99.999" : 95.83770032876406,
                "99.9999" : 95.83770032876406,
                "100.0" : 95.83770032876406
            },
            "scoreUnit" : "ns/op",
            "rawData" : [
                [
                    95.14218006178402,
                    95.63417127320612,
                    95.83770032876406
                ]
            ]
        },
        "secondaryMetrics" : {
            "gc.alloc.rate.norm" : {
                "score" : 2.4E-5,
                "scoreError" : 4.0E-6,
                "scoreConfidence" : [
                    2.0E-5,
                    2.8E-5
                ],
                "scorePercentiles" : {
                    "0.0" : 2.2E-5,
                    "50.0" : 2.4E-5,
                    "90.0" : 2.6E-5,
                    "95.0" : 2.6E-5,
                    "99.0" : 2.6E-5,
                    "99.9" : 2.6E-5,
                    "99.99" : 2.6E-5,
                    "99.999" : 2.6E-5,
                    "99.9999" : 2.6E-5,
                    "100.0" : 2.6E-5
                },
                "scoreUnit" : "B/op",
                "rawData" : [
                    [
                        2.2E-5,
                        2.4E-5,
                        2.6E-5
                    ]
                ]
            }
        }
    },
    {
        "jmhVersion" : "1.37",
        "benchmark" : "org.example.bench.CacheBench.lookup",
        "mode" : "sample",
        "threads" : 1,
        "forks" : 1,
        "jvm" : "/usr/lib/jvm/java-17-openjdk-amd64/bin/java",
        "jvmArgs" : [
        ],
        "jdkVersion" : "17.0.15",
        "vmName" : "OpenJDK 64-Bit Server VM",
        "vmVersion" : "17.0.15+6-Debian-1deb12u1",
        "warmupIterations" : 1,
        "warmupTime" : "1 s",
        "warmupBatchSize" : 1,
        "measurementIterations" : 2,
        "measurementTime" : "1 s",
        "measurementBatchSize" : 1,
        "params" : {
            "entries" : "65536"
        },
        "primaryMetric" : {
            "score" : 0.04071259163591921,
            "scoreError" : 0.0012617290185037457,
            "scoreConfidence" : [
                0.03945086261741546,
                0.04197432065442296
            ],
            "scorePercentiles" : {
                "0.0" : 0.034816,
                "50.0" : 0.039936,
                "90.0" : 0.041984,
                "95.0" : 0.043008,
                "99.0" : 0.0768,
                "99.9" : 0.2125951999999969,
                "99.99" : 0.9175316863999776,
                "99.999" : 1.2779520000000001,
                "99.9999" : 1.2779520000000001,
                "100.0" : 1.2779520000000001
            },
            "scoreUnit" : "ms/op",
            "rawDataHistogram" : [
                [
                    [
                        [0.034816, 1803],
                        [0.039936, 11207],
                        [0.043008, 1492],
                        [0.0768, 121],
                        [1.277952, 1]
                    ],
                    [
                        [0.035840, 1688],
                        [0.039936, 11410],
                        [0.041984, 1377],
                        [0.0768, 97]
                    ]
                ]
            ]
        },
        "secondaryMetrics" : {
        }
    },
    {
        "jmhVersion" : "1.37",
        "benchmark" : "org.example.bench.StartupBench.loadConfiguration",
        "mode" : "ss",
        "threads" : 1,
        "forks" : 1,
        "jvm" : "/usr/lib/jvm/java-17-openjdk-amd64/bin/java",
        "jvmArgs" : [
        ],
        "jdkVersion" : "17.0.15",
        "vmName" : "OpenJDK 64-Bit Server VM",
        "vmVersion" : "17.0.15+6-Debian-1deb12u1",
        "warmupIterations" : 0,
        "warmupTime" : "single-shot",
        "warmupBatchSize" : 1,
        "measurementIterations" : 1,
        "measurementTime" : "single-shot",
        "measurementBatchSize" : 1,
        "primaryMetric" : {
            "score" : 231.446187,
            "scoreError" : "NaN",
            "scoreConfidence" : [
                "NaN",
                "NaN"
            ],
            "scorePercentiles" : {
                "0.0" : 231.446187,
                "50.0" : 231.446187,
                "90.0" : 231.446187,
                "95.0" : 231.446187,
                "99.0" : 231.446187,
                "99.9" : 231.446187,
                "99.99" : 231.446187,
                "99.999" : 231.446187,
                "99.9999" : 231.446187,
                "100.0" : 231.446187
            },
            "scoreUnit" : "ms/op",
            "rawData" : [
                [
                    231.446187
                ]
            ]
        },
        "secondaryMetrics" : {
        }
    }
]
"""

# The layout of older releases (before jmhVersion and the JVM fields were written): the
# profilers' metrics are named with a leading middle dot, and a @Group benchmark reports
# the rate of each of its methods (here `poll`) as a secondary metric.
JMH_OLD_REPORT = """[
    {
        "benchmark" : "org.example.bench.QueueBench.offerPoll",
        "mode" : "thrpt",
        "threads" : 2,
        "forks" : 1,
        "warmupIterations" : 5,
        "warmupTime" : "1 s",
        "warmupBatchSize" : 1,
        "measurementIterations" : 5,
        "measurementTime" : "1 s",
        "measurementBatchSize" : 1,
        "primaryMetric" : {
            "score" : 5512.907311402012,
            "scoreError" : 201.33160183406208,
            "scoreConfidence" : [
                5311.57570956795,
                5714.238913236074
            ],
            "scorePercentiles" : {
                "0.0" : 5440.126101837711,
                "50.0" : 5509.320048818311,
                "90.0" : 5591.212180010241,
                "95.0" : 5591.212180010241,
                "99.0" : 5591.212180010241,
                "99.9" : 5591.212180010241,
                "99.99" : 5591.212180010241,
                "99.999" : 5591.212180010241,
                "99.9999" : 5591.212180010241,
                "100.0" : 5591.212180010241
            },
            "scoreUnit" : "ops/ms",
            "rawData" : [
                [
                    5440.126101837711,
                    5509.320048818311,
                    5591.212180010241,
                    5475.884106412334,
                    5547.994119931463
                ]
            ]
        },
        "secondaryMetrics" : {
            "\u00b7gc.alloc.rate.norm" : {
                "score" : 16.000113,
                "scoreError" : 0.000021,
                "scoreConfidence" : [
                    16.000092,
                    16.000134
                ],
                "scorePercentiles" : {
                    "0.0" : 16.000101,
                    "50.0" : 16.000112,
                    "90.0" : 16.000126,
                    "95.0" : 16.000126,
                    "99.0" : 16.000126,
                    "99.9" : 16.000126,
                    "99.99" : 16.000126,
                    "99.999" : 16.000126,
                    "99.9999" : 16.000126,
                    "100.0" : 16.000126
                },
                "scoreUnit" : "B/op",
                "rawData" : [
                    [
                        16.000101,
                        16.000112,
                        16.000126,
                        16.000109,
                        16.000117
                    ]
                ]
            },
            "poll" : {
                "score" : 318.2281002139114,
                "scoreError" : 40.11762015398512,
                "scoreConfidence" : [
                    278.1104800599263,
                    358.3457203679965
                ],
                "scorePercentiles" : {
                    "0.0" : 301.19082214087646,
                    "50.0" : 314.7791220120319,
                    "90.0" : 334.8812660071123,
                    "95.0" : 334.8812660071123,
                    "99.0" : 334.8812660071123,
                    "99.9" : 334.8812660071123,
                    "99.99" : 334.8812660071123,
                    "99.999" : 334.8812660071123,
                    "99.9999" : 334.8812660071123,
                    "100.0" : 334.8812660071123
                },
                "scoreUnit" : "ops/ms",
                "rawData" : [
                    [
                        301.19082214087646,
                        314.7791220120319,
                        334.8812660071123,
                        312.44128601873214,
                        327.8410147907988
                    ]
                ]
            },
            "\u00b7cpi" : {
                "score" : 0.412,
                "scoreError" : "NaN",
                "scoreConfidence" : [
                    "NaN",
                    "NaN"
                ],
                "scorePercentiles" : {
                    "0.0" : 0.412,
                    "50.0" : 0.412,
                    "90.0" : 0.412,
                    "95.0" : 0.412,
                    "99.0" : 0.412,
                    "99.9" : 0.412,
                    "99.99" : 0.412,
                    "99.999" : 0.412,
                    "99.9999" : 0.412,
                    "100.0" : 0.412
                },
                "scoreUnit" : "clks/insn",
                "rawData" : [
                    [
                        0.412
                    ]
                ]
            }
        }
    }
]
"""


def jmh_reports(work: Path) -> dict[str, Path]:
    """`current`: the JMH 1.37 report; `old`: one in the layout of older releases."""
    written = {}
    for name, text in (("current", JMH_REPORT), ("old", JMH_OLD_REPORT)):
        written[name] = work / f"jmh-{name}.json"
        written[name].write_text(text, encoding="utf-8")
    return written
