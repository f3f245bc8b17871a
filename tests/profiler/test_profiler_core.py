"""The profiler's passes, its three ways of use, and input sizes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from perfwatch.profiler.core import (
    InputProfiler,
    MemoryPass,
    ProfileRun,
    TimingPass,
    arguments_size,
    input_size,
    profile_inputs,
    profile_versions,
)


def work(n: int) -> int:
    total = 0
    for i in range(n):
        total += i
    return total


def test_passes_run_in_order_and_build_a_profile() -> None:
    run = ProfileRun("input-1", 10.0, repeats=3, warmup=2)
    kinds = []
    for measured_pass in run:
        with measured_pass:
            kinds.append(measured_pass.kind)
            work(100)
    assert kinds == ["warmup", "warmup", "timing", "timing", "timing", "memory", "counting"]
    profile = run.profile
    assert profile is not None
    assert profile.input_id == "input-1" and profile.size == 10.0
    assert profile.statements == 1 + 101 + 100 + 1
    assert profile.loop_iterations == 100
    assert profile.function_calls == 1
    assert profile.cpu_time_s > 0 and profile.wall_time_s > 0


def test_a_pass_skipped_without_with_is_an_error() -> None:
    run = iter(ProfileRun("input-1", 1.0, repeats=1, warmup=1))
    next(run)
    with pytest.raises(RuntimeError, match="input 'input-1': the warmup pass was not run"):
        next(run)


def test_memory_pass_sees_an_allocation_freed_before_the_end() -> None:
    with MemoryPass() as memory:
        block = bytearray(2_000_000)
        del block
    assert memory.peak_memory_bytes is not None and memory.peak_memory_bytes >= 2_000_000


def test_timing_pass_measures_wall_and_cpu_time() -> None:
    with TimingPass() as timing:
        work(20_000)
    assert timing.timing is not None
    assert timing.timing.wall_time_s > 0 and timing.timing.cpu_time_s > 0


def test_profile_versions_alternates_the_versions_pass_by_pass() -> None:
    calls: list[str] = []
    profiles = profile_versions(
        {"old": lambda: calls.append("old"), "new": lambda: calls.append("new")},
        input_id="x",
        size=1,
        repeats=2,
        warmup=1,
    )
    # warm-up, two timing, memory and counting passes, each version in turn, the first to
    # go swapped every round (a pass's place in the round must not favour a version)
    assert calls == ["old", "new", "new", "old"] * 2 + ["old", "new"]
    assert set(profiles) == {"old", "new"}
    assert profiles["old"].input_id == profiles["new"].input_id == "x"


def test_profile_inputs_runs_every_input_once_per_round() -> None:
    calls: list[str] = []

    def call(name: str, n: int):
        return lambda: (calls.append(name), work(n))

    profiles = profile_inputs(
        {"small": call("small", 10), "large": call("large", 1000), "mid": call("mid", 100)},
        sizes={"small": 10, "large": 1000, "mid": 100},
        repeats=3,
        warmup=1,
    )
    # warm-up, three timing, memory and counting rounds, every input in each
    assert calls == ["small", "large", "mid"] * 6
    assert list(profiles) == ["small", "large", "mid"]
    assert [profiles[name].size for name in profiles] == [10.0, 1000.0, 100.0]
    assert [profiles[name].input_id for name in profiles] == ["small", "large", "mid"]
    # each input's counts come from its own counting pass
    loops = [profiles[name].loop_iterations for name in ("small", "mid", "large")]
    assert loops[0] < loops[1] < loops[2]


def test_profile_inputs_needs_a_size_for_every_input() -> None:
    with pytest.raises(ValueError, match="no size given for input 'b'"):
        profile_inputs({"a": lambda: None, "b": lambda: None}, sizes={"a": 1})


def test_with_blocks_decorator_and_call_give_the_same_counts() -> None:
    profiler = InputProfiler(repeats=2, warmup=0)
    for measured_pass in profiler.run("blocks", size=50):
        with measured_pass:
            work(50)
    called = profiler.profile(work, 50, input_id="call")

    @profiler.profiled(input_id=lambda n: f"decorated-{n}")
    def decorated(n: int) -> int:
        return work(n)

    assert decorated(50) == work(50)
    blocks, call, decorated_profile = profiler.profiles
    assert [p.input_id for p in profiler.profiles] == ["blocks", "call", "decorated-50"]
    assert call is called
    assert blocks.statements == call.statements == decorated_profile.statements - 1
    assert blocks.loop_iterations == call.loop_iterations == decorated_profile.loop_iterations
    assert call.size == decorated_profile.size == 50.0


def test_decorator_default_id_counts_the_calls() -> None:
    profiler = InputProfiler(repeats=1, warmup=0)
    profiled_work = profiler.profiled()(work)
    profiled_work(3)
    profiled_work(4)
    assert [p.input_id for p in profiler.profiles] == [
        f"{work.__qualname__}#1",
        f"{work.__qualname__}#2",
    ]


def test_a_failing_call_leaves_no_profile() -> None:
    profiler = InputProfiler(repeats=1, warmup=0)
    with pytest.raises(ZeroDivisionError):
        profiler.profile(lambda: 1 / 0, input_id="bad")
    assert profiler.profiles == []


@pytest.mark.parametrize(("repeats", "warmup"), [(0, 1), (1, -1)])
def test_bad_pass_numbers_are_rejected(repeats: int, warmup: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        InputProfiler(repeats=repeats, warmup=warmup)


def test_input_sizes(tmp_path: Path) -> None:
    payload = tmp_path / "payload.json"
    payload.write_bytes(b"x" * 123)
    assert input_size("héllo") == 6
    assert input_size(b"abc") == 3
    assert input_size(payload) == 123
    assert input_size(1000) == 1000
    assert input_size(None) == 0 and input_size(True) == 0
    assert input_size({"a": [1, 2]}) == len('{"a":[1,2]}')
    assert input_size(np.zeros(3)) == len("[0.0,0.0,0.0]")
    assert input_size(object()) > 0
    assert arguments_size(("ab", 5), {"c": b"xyz"}) == 2 + 5 + 3
