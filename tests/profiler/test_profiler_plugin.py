"""The pytest plugin, run on small generated test suites."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from perfwatch.profiler.alternate import pytest_command
from perfwatch.readers.input_profile import read_input_profile

pytest_plugins = ["pytester"]

SUITE = """
import pytest

CALLS = []

def work(n):
    total = 0
    for i in range(n):
        total += i
    return total

@pytest.mark.parametrize("n", [10, 200])
def test_sizes(n):
    CALLS.append(n)
    assert work(n) == n * (n - 1) // 2

def test_reported_size(record_property):
    record_property("input_size", 4096)
    work(5)

def test_calls_so_far():
    pass
"""


def test_without_the_option_tests_run_once_and_nothing_is_written(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_once="""
CALLS = []

def test_first():
    CALLS.append(1)

def test_second():
    assert CALLS == [1]
"""
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    assert not list(pytester.path.glob("*.json"))


def test_every_test_and_input_is_profiled(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest(
        "--perfwatch-profile=out.json", "--perfwatch-repeats=3", "--perfwatch-warmup=1"
    )
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["perfwatch: 4 input profiles (full_suite) written to *out.json"])
    profile_file = read_input_profile(pytester.path / "out.json")
    by_id = {p.input_id: p for p in profile_file.profiles}
    assert set(by_id) == {
        "test_suite.py::test_sizes[10]",
        "test_suite.py::test_sizes[200]",
        "test_suite.py::test_reported_size",
        "test_suite.py::test_calls_so_far",
    }
    small, large = by_id["test_suite.py::test_sizes[10]"], by_id["test_suite.py::test_sizes[200]"]
    assert (small.size, large.size) == (10.0, 200.0)
    assert (small.loop_iterations, large.loop_iterations) == (10, 200)
    assert large.statements > small.statements
    assert by_id["test_suite.py::test_reported_size"].size == 4096.0
    assert profile_file.kind == "full_suite"
    assert profile_file.measurement["timing_repeats"] == 3
    # the command to profile the same suite again, without this plugin's options
    assert profile_file.command is not None and profile_file.command[0] == "pytest"
    assert not [arg for arg in profile_file.command if arg.startswith("--perfwatch")]


def test_the_test_body_runs_once_per_pass(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE + "\ndef test_zz_count():\n    assert CALLS == []\n")
    pytester.makepyfile(
        test_after="""
import test_suite

def test_pass_count():
    # warm-up 2 + timing 3 + memory + counting = 7 calls per input, an input's
    # passes together (pytest 8.0 collects the two inputs in the other order)
    calls = test_suite.CALLS
    assert sorted(calls) == [10] * 7 + [200] * 7
    assert calls[:7] == [calls[0]] * 7
"""
    )
    result = pytester.runpytest(
        "--perfwatch-profile=out.json",
        "--perfwatch-repeats=3",
        "--perfwatch-warmup=2",
        "test_suite.py::test_sizes",
        "test_after.py",
    )
    result.assert_outcomes(passed=3)


def test_only_listed_inputs_are_profiled(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    (pytester.path / "sample.txt").write_text(
        "# sampled inputs\ntest_suite.py::test_sizes[200]\ntest_suite.py::test_gone\n"
    )
    result = pytester.runpytest(
        "--perfwatch-profile=update.json", "--perfwatch-only=sample.txt", "--perfwatch-repeats=1"
    )
    result.assert_outcomes(passed=1, deselected=3)
    result.stdout.fnmatch_lines(["*1 ids listed in the sample file (`perfwatch profile --only`*"])
    profile_file = read_input_profile(pytester.path / "update.json")
    assert profile_file.kind == "update_sample"
    assert [p.input_id for p in profile_file.profiles] == ["test_suite.py::test_sizes[200]"]


def test_a_failing_test_fails_and_is_left_out(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_mixed="""
def test_good():
    pass

def test_bad():
    assert False
"""
    )
    result = pytester.runpytest("--perfwatch-profile=out.json", "--perfwatch-repeats=1")
    result.assert_outcomes(passed=1, failed=1)
    doc = orjson.loads((pytester.path / "out.json").read_bytes())
    assert [p["input_id"] for p in doc["profiles"]] == ["test_mixed.py::test_good"]


def test_bad_repeats_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    result = pytester.runpytest("--perfwatch-profile=out.json", "--perfwatch-repeats=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--perfwatch-repeats must be at least 1, got 0*"])


def test_a_short_test_is_called_several_times_per_timing_pass(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_short="""
CALLS = []

def test_short():
    CALLS.append(1)

def test_zz_count(record_property):
    record_property("calls", len(CALLS))
"""
    )
    result = pytester.runpytest(
        "--perfwatch-profile=out.json",
        "--perfwatch-repeats=3",
        "--perfwatch-warmup=1",
        "--perfwatch-min-pass-ms=1",
        "--junitxml=report.xml",
        "test_short.py",
    )
    result.assert_outcomes(passed=2)
    profile_file = read_input_profile(pytester.path / "out.json")
    short = {p.input_id: p for p in profile_file.profiles}["test_short.py::test_short"]
    calls = short.calls_per_pass
    # an empty test takes far less than 1 ms: many calls per pass
    assert calls is not None and calls >= 10
    assert len(short.cpu_times_s or ()) == 3
    assert profile_file.measurement["min_timing_pass_s"] == 0.001
    # warm-up, 3 passes of `calls` calls, memory, counting, after the calibration
    report = (pytester.path / "report.xml").read_text()
    counted = int(report.split('name="calls" value="')[1].split('"')[0])
    assert counted > 1 + 3 * calls + 2


def test_a_negative_minimum_pass_time_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    result = pytester.runpytest("--perfwatch-profile=out.json", "--perfwatch-min-pass-ms=-1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--perfwatch-min-pass-ms must be from 0 to 60000, got -1.0*"])


def test_the_example_suite_runs_warning_free_with_the_plain_install_plugins(
    tmp_path: Path,
) -> None:
    """Only perfwatch's own plugin, as after `pip install perfwatch pytest`: the example
    suite reads no pytest setting of the repository's dev tools (pytest-timeout's)."""
    suite = Path(__file__).parents[2] / "examples" / "config_service" / "perf_suite"
    output = tmp_path / "suite.json"
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "perfwatch.profiler.pytest_plugin",
         "-p", "no:cacheprovider", f"--perfwatch-profile={output}", "--perfwatch-repeats=1",
         str(suite)],
        env=os.environ | {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "CONFIG_SERVICE_INPUTS": "4"},
        capture_output=True, text=True, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "4 passed in" in completed.stdout
    assert "warning" not in completed.stdout.lower(), completed.stdout
    assert len(read_input_profile(output).profiles) == 4


def test_perfwatch_starts_pytest_as_python_m_pytest_does(tmp_path: Path) -> None:
    """Through pytest's own `__main__`: no deprecated entry point (pytest 9.1 warns about
    `pytest.console_main()`), the same exit statuses and the same program name."""
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    output = tmp_path / "inputs.json"

    def run(command: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command, "-p", "no:cacheprovider"],
            capture_output=True,
            text=True,
            check=False,
            cwd=tmp_path,
            timeout=120,
        )

    passed = run(
        pytest_command(
            sys.executable, ["-q", f"--perfwatch-profile={output}", "--perfwatch-repeats=1"]
        )
    )
    usage = run(pytest_command(sys.executable, ["--no-such-option"]))
    # What this pytest version itself prints for `python -m pytest` (8.x names the program
    # `__main__.py`, newer versions `python -m pytest`).
    expected_usage = run([sys.executable, "-m", "pytest", "--no-such-option"])

    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert passed.stderr == ""  # no warning of pytest's about how it was started
    assert "1 passed in" in passed.stdout
    assert len(read_input_profile(output).profiles) == 1
    assert usage.returncode == pytest.ExitCode.USAGE_ERROR
    assert expected_usage.returncode == pytest.ExitCode.USAGE_ERROR
    assert usage.stderr.splitlines()[:2] == expected_usage.stderr.splitlines()[:2]
