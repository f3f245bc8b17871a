"""Timing short inputs over several calls per pass, and timing on until the interval is narrow."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfwatch.contract.models import InputProfile
from perfwatch.detectors.inputs import paired_change
from perfwatch.profiler.core import (
    ProfileRun,
    TimingPass,
    calls_per_pass,
    needs_more_timing,
    profile_versions,
)


class StepClock:
    """A clock that advances by the given cost of every call made (no real time)."""

    def __init__(self) -> None:
        self.now = 0.0

    def call(self, cost_s: float):
        def spend() -> None:
            self.now += cost_s

        return spend

    def __call__(self) -> float:
        return self.now


def test_calls_per_pass_follows_one_two_five_until_a_pass_lasts_long_enough() -> None:
    clock = StepClock()
    # 0.11 ms per call: 5 calls take 0.55 ms, 10 take 1.1 ms >= 1 ms
    assert calls_per_pass([clock.call(0.00011)], 0.001, clock=clock) == 10
    # 0.3 ms: 2 calls 0.6 ms, 5 calls 1.5 ms
    assert calls_per_pass([clock.call(0.0003)], 0.001, clock=clock) == 5
    # a call of 2 ms is long enough alone
    assert calls_per_pass([clock.call(0.002)], 0.001, clock=clock) == 1
    # 1 µs: 1000 calls for 1 ms
    assert calls_per_pass([clock.call(0.000001)], 0.0010001, clock=clock) == 2000


def test_every_version_gets_the_calls_its_fastest_needs() -> None:
    clock = StepClock()
    slow, fast = clock.call(0.0006), clock.call(0.00011)
    assert calls_per_pass([slow, fast], 0.001, clock=clock) == 10
    assert calls_per_pass([fast, slow], 0.001, clock=clock) == 10


class LoadedMachine:
    """Process CPU time and wall-clock time apart: every call also waits for a core."""

    def __init__(self, wait_s: float) -> None:
        self.cpu = StepClock()
        self.wall = StepClock()
        self.wait_s = wait_s

    def call(self, cost_s: float):
        def spend() -> None:
            self.cpu.now += cost_s
            self.wall.now += cost_s + self.wait_s

        return spend


def test_waiting_for_a_core_does_not_shorten_the_passes() -> None:
    # At a load average of 20 on 2 cores a call of 0.11 ms can take 2 ms by the wall
    # clock: calibrated by it, one call made a "2 ms" pass that lasted 0.11 ms of the
    # CPU time the passes are judged by. Calibrated by CPU time, 20 calls: 2.2 ms.
    machine = LoadedMachine(wait_s=0.002)
    calls = calls_per_pass(
        [machine.call(0.00011)], 0.002, clock=machine.cpu, wall_clock=machine.wall
    )
    assert calls == 20
    # what the wall clock alone would have chosen
    assert calls_per_pass([machine.call(0.00011)], 0.002, clock=machine.wall) == 1


def test_a_call_that_only_waits_stops_the_calibration() -> None:
    # no CPU time at all (sleeping, input and output): stopped by the wall clock, once
    # the calls last 50 times the wanted pass
    machine = LoadedMachine(wait_s=0.001)
    calls = calls_per_pass([machine.call(0.0)], 0.002, clock=machine.cpu, wall_clock=machine.wall)
    assert calls == 100


def test_no_minimum_pass_time_means_one_call_and_no_calibration() -> None:
    called: list[int] = []
    assert calls_per_pass([lambda: called.append(1)], 0.0) == 1
    assert called == []


def test_a_run_with_several_calls_per_pass_asks_for_them_and_records_them() -> None:
    run = ProfileRun("short", 1.0, repeats=3, warmup=1, calls_per_pass=4)
    calls = {"warmup": 0, "timing": 0, "memory": 0, "counting": 0}
    for measured_pass in run:
        with measured_pass:
            for _ in range(measured_pass.calls):
                calls[measured_pass.kind] += 1
                sum(range(100))
    assert calls == {"warmup": 1, "timing": 12, "memory": 1, "counting": 1}
    profile = run.profile
    assert profile is not None and profile.calls_per_pass == 4
    assert profile.to_json()["calls_per_pass"] == 4
    assert len(profile.cpu_times_s or ()) == 3


def test_one_call_per_pass_is_not_written() -> None:
    run = ProfileRun("plain", 1.0, repeats=1, warmup=0)
    for measured_pass in run:
        with measured_pass:
            pass
    assert run.profile is not None and run.profile.calls_per_pass is None
    assert "calls_per_pass" not in run.profile.to_json()


def test_a_timing_pass_reports_the_time_of_one_call() -> None:
    started = time.perf_counter()
    with TimingPass(calls=1000) as many:
        inside = time.perf_counter()
        while time.perf_counter() - inside < 0.001:  # the block lasts at least 1 ms
            pass
    outer = time.perf_counter() - started
    assert many.timing is not None
    # a thousandth of what the block took: at least a thousandth of 1 ms, at most a
    # thousandth of the time around the block
    assert 1e-6 <= many.timing.wall_time_s <= outer / 1000
    with pytest.raises(ValueError, match="at least once"):
        TimingPass(calls=0)


def test_the_timing_cost_counts_every_call_of_every_pass() -> None:
    profile = InputProfile(
        "x", 1.0, 0.001, 0.001, 0.0, 0, 0, 0, 0,
        cpu_times_s=[0.001, 0.002], wall_times_s=[0.001, 0.002], calls_per_pass=10,
    )  # fmt: skip
    assert profile.timing_cost_s() == pytest.approx(0.03)
    single = InputProfile("y", 1.0, 0.004, 0.004, 0.0, 0, 0, 0, 0)
    assert single.timing_cost_s() == pytest.approx(0.004)


def test_versions_are_called_as_often_as_their_passes_say() -> None:
    counts = {"old": 0, "new": 0}

    def count(name: str):
        def call() -> None:
            counts[name] += 1

        return call

    profiles = profile_versions(
        {"old": count("old"), "new": count("new")},
        input_id="x",
        size=1,
        repeats=3,
        warmup=1,
        min_pass_s=0.0005,
    )
    calls = profiles["old"].calls_per_pass or 1
    assert calls == profiles["new"].calls_per_pass and calls > 1
    # warm-up, three timing passes of `calls` calls, memory and counting, after the
    # calibration's own calls (1, 2, 5, ... for the first version)
    for name in ("old", "new"):
        assert counts[name] > 1 + 3 * calls + 2


def test_timing_goes_on_until_an_interval_exists_and_is_narrow_enough() -> None:
    # With 5 pairs or fewer the sign test gives no 95% interval; with 6 it does. A
    # precision nothing can miss therefore stops at exactly 6 passes per version.
    profiles = profile_versions(
        {"old": lambda: sum(range(50)), "new": lambda: sum(range(60))},
        input_id="x",
        size=1,
        repeats=2,
        warmup=0,
        max_repeats=20,
        precision=1e9,
    )
    assert [len(p.cpu_times_s or ()) for p in profiles.values()] == [6, 6]
    # the memory and counting passes still follow the timing passes
    assert profiles["old"].statements > 0


def test_timing_stops_at_the_budget() -> None:
    order: list[str] = []
    profiles = profile_versions(
        {"old": lambda: order.append("old"), "new": lambda: order.append("new")},
        input_id="x",
        size=1,
        repeats=1,
        warmup=0,
        max_repeats=4,
        precision=1e9,  # 4 pairs never give an interval: the budget ends the timing
    )
    assert [len(p.cpu_times_s or ()) for p in profiles.values()] == [4, 4]
    # still alternating pass by pass: 4 timing passes, memory, counting
    assert order == ["old", "new", "new", "old"] * 3


def test_without_a_precision_the_repeats_are_all() -> None:
    profiles = profile_versions(
        {"old": lambda: None, "new": lambda: None},
        input_id="x",
        size=1,
        repeats=3,
        warmup=0,
        max_repeats=30,
    )
    assert [len(p.cpu_times_s or ()) for p in profiles.values()] == [3, 3]


def test_a_budget_below_the_repeats_is_rejected() -> None:
    with pytest.raises(ValueError, match="max_repeats"):
        profile_versions({"a": lambda: None}, input_id="x", size=1, repeats=5, max_repeats=3)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(min_value=2, max_value=40),
    st.floats(min_value=0.5, max_value=2.0),
    st.integers(min_value=0, max_value=2**32 - 1),
)
def test_needs_more_timing_is_the_width_of_the_paired_interval(
    passes: int, ratio: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    old = rng.uniform(0.001, 0.002, passes)
    noisy = old * ratio * rng.lognormal(0.0, 0.05, passes)
    change = paired_change(old, noisy, paired=True)
    if change.low is None or change.high is None:
        assert needs_more_timing([old, noisy], 10.0, 0.95)
    else:
        width = change.high - change.low
        assert needs_more_timing([old, noisy], width * 0.99, 0.95)
        assert not needs_more_timing([old, noisy], width * 1.01 + 1e-12, 0.95)
    # a change the same in every pass has an interval of width zero once it has one
    exact = old * ratio
    assert needs_more_timing([old, exact], 1e-9, 0.95) == (passes < 6)
    # versions are compared with the first: a third version that is too noisy decides
    assert needs_more_timing([old, exact, noisy * rng.lognormal(0, 1, passes)], 0.01, 0.95)
