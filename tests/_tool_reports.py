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
