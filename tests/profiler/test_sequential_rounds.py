"""Sequential timing by rounds (``time_in_rounds``, ``still_too_wide``) on constructed rounds.

Each round of a constructed input times the old code at 1.0 and 1.2 ms and the new
code at r times those, so the round's median log ratio of paired passes, the unit
the interval is built on, is ln r. With n rounds the interval is
exp(mean ± t(0.975, n - 1) · sd / √n) - 1 of those logs; the bounds in the tests
below were worked out by hand from that formula (t(0.975, 1) = 12.706,
t(0.975, 2) = 4.303).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfwatch.contract.models import InputProfile
from perfwatch.detectors.inputs import paired_change
from perfwatch.profiler.alternate import (
    Alternation,
    merge_rounds,
    still_too_wide,
    time_in_rounds,
)
from perfwatch.readers.input_profile import InputProfileFile

OLD_PASSES = (1.0e-3, 1.2e-3)
NEW_PASSES = OLD_PASSES


def profile(input_id: str, times: Sequence[float]) -> InputProfile:
    return InputProfile(
        input_id=input_id,
        size=1.0,
        wall_time_s=min(times),
        cpu_time_s=min(times),
        peak_memory_bytes=0.0,
        statements=10,
        function_calls=1,
        loop_iterations=0,
        conditionals=0,
        cpu_times_s=list(times),
        wall_times_s=list(times),
    )


class ConstructedRounds:
    """Round ``number`` of input ``i`` has the ratio ``ratios[i][number]``; keeps what each
    round was asked for and, per version, the rounds' profiles."""

    def __init__(self, ratios: Mapping[str, Sequence[float]]) -> None:
        self.ratios = ratios
        self.asked: list[frozenset[str] | None] = []
        self.rounds_of: dict[str, list[InputProfileFile]] = {}

    def __call__(self, number: int, wanted: frozenset[str] | None) -> dict[str, InputProfileFile]:
        self.asked.append(wanted)
        ids = sorted(self.ratios if wanted is None else wanted)
        passes = {
            "old": {i: OLD_PASSES for i in ids},
            "new": {i: tuple(self.ratios[i][number] * t for t in NEW_PASSES) for i in ids},
        }
        files = {
            version: InputProfileFile.create(
                kind="update_sample", profiles=[profile(i, times[i]) for i in ids]
            )
            for version, times in passes.items()
        }
        for version, file in files.items():
            self.rounds_of.setdefault(version, []).append(file)
        return files


def timing(rounds: int, max_rounds: int, precision: float | None = None) -> Alternation:
    """The rounds to take; a constructed round has the passes of ``OLD_PASSES``."""
    return Alternation(
        rounds=rounds,
        repeats=len(OLD_PASSES),
        warmup=0,
        max_rounds=max_rounds,
        precision=precision,
    )


def test_the_hand_checked_intervals() -> None:
    # ln 1.100 = 0.09531, ln 1.102 = 0.09713: mean 0.09622, sd 0.001284,
    # half-width 12.706 · 0.001284 / √2 = 0.01154: [+8.84%, +11.38%]
    narrow = paired_change(
        [*OLD_PASSES, *OLD_PASSES],
        [1.100e-3, 1.320e-3, 1.102e-3, 1.3224e-3],
        paired=True,
        rounds=2,
    )
    assert narrow.low == pytest.approx(0.08837, abs=1e-5)
    assert narrow.high == pytest.approx(0.11378, abs=1e-5)
    # ln 1.05, ln 1.06, ln 1.055: mean 0.05353, sd 0.004739,
    # half-width 4.303 · 0.004739 / √3 = 0.01177: [+4.26%, +6.75%]
    three = paired_change(
        [*OLD_PASSES] * 3,
        [r * t for r in (1.05, 1.06, 1.055) for t in NEW_PASSES],
        paired=True,
        rounds=3,
    )
    assert three.low == pytest.approx(0.04264, abs=1e-5)
    assert three.high == pytest.approx(0.06749, abs=1e-5)


# After two rounds: "narrow" [+8.84%, +11.38%] (2.5% wide); "settles" (ln 1.05, ln 1.06:
# half-width 12.706 · 0.006702 / √2 = 0.0602) [-0.67%, +12.05%], 12.7% wide, and after
# its third round [+4.26%, +6.75%], 2.5% wide; "jumpy" (1.0, 1.3, 1.0, 1.3) is [-78%,
# +504%], then [-25%, +59%], then [-10%, +45%], never 5% wide. The later ratios of
# "narrow" and "settles" would widen them: they must not be measured.
RATIOS = {
    "narrow": (1.100, 1.102, 1.5, 0.5),
    "settles": (1.05, 1.06, 1.055, 2.0),
    "jumpy": (1.0, 1.3, 1.0, 1.3),
}
WIDE = frozenset({"settles", "jumpy"})


def test_a_narrow_interval_stops_and_a_wide_one_gets_another_round() -> None:
    measure = ConstructedRounds(RATIOS)
    measure(0, None)
    measure(1, None)
    assert still_too_wide(measure.rounds_of, measure.asked, 0.05, 0.95) == WIDE
    # a precision wider than every interval but the jumpy one's
    assert still_too_wide(measure.rounds_of, measure.asked, 0.2, 0.95) == {"jumpy"}
    # none without a precision
    assert still_too_wide(measure.rounds_of, measure.asked, None, 0.95) == frozenset()
    measure(2, WIDE)
    assert still_too_wide(measure.rounds_of, measure.asked, 0.05, 0.95) == {"jumpy"}


def test_rounds_go_on_for_the_wide_inputs_only_up_to_the_most_allowed() -> None:
    measure = ConstructedRounds(RATIOS)
    rounds_of, asked = time_in_rounds(measure, timing(rounds=2, max_rounds=4, precision=0.05))
    assert asked == measure.asked == [None, None, WIDE, frozenset({"jumpy"})]
    merged, dropped = merge_rounds(rounds_of, asked)
    assert not dropped and list(merged) == ["old", "new"]
    for version, file in merged.items():
        got = {p.input_id: p for p in file.profiles}
        assert {i: p.timing_rounds for i, p in got.items()} == {
            "narrow": 2,
            "settles": 3,
            "jumpy": 4,
        }
        assert file.measurement["alternated_rounds"] == 4
        assert file.measurement["timing_repeats"] == 8
        # the rounds' passes in round order
        for input_id, profile in got.items():
            ratios = [1.0] * 4 if version == "old" else RATIOS[input_id]
            passes = OLD_PASSES if version == "old" else NEW_PASSES
            assert profile.cpu_times_s == [
                r * t for r in ratios[: profile.timing_rounds or 0] for t in passes
            ]


def test_max_rounds_caps_the_rounds() -> None:
    _, asked = time_in_rounds(
        ConstructedRounds(RATIOS), timing(rounds=2, max_rounds=3, precision=0.05)
    )
    assert asked == [None, None, WIDE]
    # as many rounds as asked for, never more, when max_rounds is rounds
    _, asked = time_in_rounds(
        ConstructedRounds(RATIOS), timing(rounds=2, max_rounds=2, precision=0.05)
    )
    assert asked == [None, None]


def test_the_rounds_asked_for_are_all_measured_even_when_every_interval_is_narrow() -> None:
    # every interval is narrower than 1000% after two rounds; the third is asked for
    _, asked = time_in_rounds(
        ConstructedRounds(RATIOS), timing(rounds=3, max_rounds=4, precision=10.0)
    )
    assert asked == [None, None, None]
    # and without a precision, no more than asked for
    _, asked = time_in_rounds(ConstructedRounds(RATIOS), timing(rounds=2, max_rounds=4))
    assert asked == [None, None]


def test_fewer_most_rounds_than_rounds_is_refused() -> None:
    with pytest.raises(ValueError, match="max_rounds"):
        timing(rounds=2, max_rounds=1)


def width(ratios: Sequence[float], rounds: int) -> float:
    """The interval's width after the first ``rounds`` constructed rounds (infinite: none)."""
    change = paired_change(
        list(OLD_PASSES) * rounds,
        [r * t for r in ratios[:rounds] for t in NEW_PASSES],
        paired=True,
        rounds=rounds,
    )
    return math.inf if change.low is None or change.high is None else change.high - change.low


ratio = st.floats(min_value=0.7, max_value=1.4).map(lambda r: round(r, 3))


@settings(max_examples=60, deadline=None)
@given(
    ratios=st.lists(st.lists(ratio, min_size=6, max_size=6), min_size=1, max_size=4),
    rounds=st.integers(min_value=1, max_value=3),
    extra=st.integers(min_value=0, max_value=3),
    precision=st.sampled_from([0.02, 0.05, 0.2, 1.0]),
)
def test_an_input_gets_rounds_until_its_interval_is_narrow_enough(
    ratios: list[list[float]], rounds: int, extra: int, precision: float
) -> None:
    table = {f"input-{n}": tuple(r) for n, r in enumerate(ratios)}
    max_rounds = rounds + extra
    alternation = timing(rounds=rounds, max_rounds=max_rounds, precision=precision)
    rounds_of, asked = time_in_rounds(ConstructedRounds(table), alternation)
    merged, dropped = merge_rounds(rounds_of, asked)
    # the same measurements, the same rounds and profiles
    again, asked_again = time_in_rounds(ConstructedRounds(table), alternation)
    assert asked_again == asked
    assert {v: f.profiles for v, f in merge_rounds(again, asked_again)[0].items()} == {
        v: f.profiles for v, f in merged.items()
    }
    assert not dropped
    got = {p.input_id: p.timing_rounds or 0 for p in merged["new"].profiles}
    assert len(asked) == max(got.values())
    for input_id, count in got.items():
        assert rounds <= count <= max_rounds
        # each further round only while the rounds so far were too wide
        assert all(width(table[input_id], n) > precision for n in range(rounds, count))
        # stopped before the most rounds only when narrow enough
        assert count == max_rounds or width(table[input_id], count) <= precision
