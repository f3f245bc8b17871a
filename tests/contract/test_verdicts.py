"""Change-of-belief diffing and deterministic verdict ids."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from perfwatch.contract.codec import dumps
from perfwatch.contract.models import ChangePointEvidence, SeriesRef
from perfwatch.contract.validation import validate_verdict
from perfwatch.contract.verdicts import (
    DETECTED,
    RETRACTED,
    UPDATED,
    BeliefChange,
    VerdictPolicy,
    diff_change_points,
    make_verdict,
    shift_after_insert,
    verdict_id,
)

POLICY = VerdictPolicy()
T0 = datetime(2024, 5, 1, 2, 0, tzinfo=UTC)


def cp(index: int, change_pct: float = 20.0, pvalue: float = 1e-5, run_id: str | None = None):
    return ChangePointEvidence(
        index=index,
        run_id=run_id or f"run-{index}",
        commit=f"c{index}",
        time=T0,
        forward_change_percent=change_pct,
        magnitude=abs(change_pct) / 100,
        mean_before=100.0,
        stddev_before=2.0,
        mean_after=100.0 * (1 + change_pct / 100),
        stddev_after=2.0,
        pvalue=pvalue,
        direction="regression" if change_pct > 0 else "improvement",
    )


def kinds(changes: list[BeliefChange]) -> list[tuple[str, int]]:
    return [(change.kind, change.index) for change in changes]


def test_new_change_point_is_detected_and_published() -> None:
    changes, published = diff_change_points([], [cp(10)], POLICY)
    assert kinds(changes) == [(DETECTED, 10)]
    assert changes[0].previous is None
    assert published == [cp(10)]


def test_same_change_point_again_is_silent() -> None:
    changes, published = diff_change_points([cp(10)], [cp(10, pvalue=2e-5)], POLICY)
    assert changes == []
    assert published == [cp(10)]  # the published evidence is kept, not the drifted one


@pytest.mark.parametrize(
    ("new", "material"),
    [
        (cp(10, change_pct=24.9), False),  # within 25% of 20%
        (cp(10, change_pct=25.1), True),
        (cp(10, change_pct=-20.0), True),  # sign and direction flipped
        (cp(10, pvalue=1e-8 * 1.01), False),  # less than three decades
        (cp(10, pvalue=1e-8), True),  # three decades
        (cp(10, pvalue=1e-4 * 1.5), False),
    ],
)
def test_material_change_rule(new: ChangePointEvidence, material: bool) -> None:
    changes, _ = diff_change_points([cp(10)], [new], POLICY)
    assert kinds(changes) == ([(UPDATED, 10)] if material else [])


def test_small_changes_need_the_absolute_tolerance_too() -> None:
    # 0.5 -> 0.8 percent is +60% relative but below one percentage point.
    changes, _ = diff_change_points([cp(10, change_pct=0.5)], [cp(10, change_pct=0.8)], POLICY)
    assert changes == []


def test_pvalues_below_the_floor_are_all_certain() -> None:
    changes, _ = diff_change_points([cp(10, pvalue=1e-10)], [cp(10, pvalue=1e-40)], POLICY)
    assert changes == []


def test_drift_accumulates_against_what_was_published() -> None:
    published = [cp(10, change_pct=20.0)]
    for step in (22.0, 24.0, 26.0):
        changes, published = diff_change_points(published, [cp(10, change_pct=step)], POLICY)
    assert kinds(changes) == [(UPDATED, 10)]
    assert changes[0].previous.forward_change_percent == 20.0
    assert published[0].forward_change_percent == 26.0


def test_nearby_change_point_with_same_sign_moved() -> None:
    changes, published = diff_change_points([cp(10)], [cp(13)], POLICY)
    assert kinds(changes) == [(UPDATED, 13)]
    assert changes[0].previous.run_id == "run-10"
    assert published == [cp(13)]


def test_far_or_opposite_change_point_is_retracted_and_detected() -> None:
    far, _ = diff_change_points([cp(10)], [cp(16)], POLICY)
    assert kinds(far) == [(RETRACTED, 10), (DETECTED, 16)]
    flipped, published = diff_change_points([cp(10)], [cp(11, change_pct=-20.0)], POLICY)
    assert kinds(flipped) == [(RETRACTED, 10), (DETECTED, 11)]
    assert published == [cp(11, change_pct=-20.0)]


def test_vanished_change_point_is_retracted() -> None:
    changes, published = diff_change_points([cp(10), cp(40)], [cp(40)], POLICY)
    assert kinds(changes) == [(RETRACTED, 10)]
    assert changes[0].current is None and changes[0].previous == cp(10)
    assert published == [cp(40)]


def test_moves_pair_nearest_first() -> None:
    changes, _ = diff_change_points([cp(10), cp(14)], [cp(13)], POLICY)
    assert kinds(changes) == [(RETRACTED, 10), (UPDATED, 13)]
    assert changes[1].previous.run_id == "run-14"


def test_shift_after_insert() -> None:
    published = [cp(5), cp(10)]
    assert [c.index for c in shift_after_insert(published, 11)] == [5, 10]
    assert [c.index for c in shift_after_insert(published, 10)] == [5, 11]
    assert [c.index for c in shift_after_insert(published, 0)] == [6, 11]


def test_verdict_ids_are_deterministic_and_depend_on_kind_series_evidence() -> None:
    detected = BeliefChange(DETECTED, cp(10), None)
    base = verdict_id(detected, "series-a", 50)
    assert base == verdict_id(BeliefChange(DETECTED, cp(10), None), "series-a", 50)
    assert len(base) == 32 and int(base, 16) >= 0
    # Float noise far below the rounding does not change the id.
    noisy = replace(cp(10), pvalue=1e-5 * (1 + 1e-12))
    assert verdict_id(BeliefChange(DETECTED, noisy, None), "series-a", 50) == base
    others = {
        verdict_id(BeliefChange(UPDATED, cp(10), cp(9)), "series-a", 50),
        verdict_id(detected, "series-b", 50),
        verdict_id(detected, "series-a", 51),
        verdict_id(BeliefChange(DETECTED, cp(10, change_pct=30.0), None), "series-a", 50),
        verdict_id(BeliefChange(DETECTED, cp(11), None), "series-a", 50),
    }
    assert base not in others and len(others) == 5


@pytest.mark.parametrize(
    "change",
    [
        BeliefChange(DETECTED, cp(10), None),
        BeliefChange(UPDATED, cp(12), cp(10)),
        BeliefChange(RETRACTED, None, cp(10)),
    ],
)
def test_verdict_documents_match_the_schema(change: BeliefChange) -> None:
    def build(emitted_at: datetime):
        return make_verdict(
            change,
            series=SeriesRef("db.insert", "p99_ms", {"branch": "main"}),
            series_key="db.insert/p99_ms",
            series_length=60,
            record_run_id="run-59",
            parameters={"window_len": 50, "max_pvalue": 0.001},
            emitted_at=emitted_at,
        )

    verdict = build(T0)
    assert validate_verdict(verdict.to_json()) == []
    assert dumps(verdict)
    # The clock is not evidence: the id does not depend on it.
    assert build(datetime(2030, 1, 1, tzinfo=UTC)).verdict_id == verdict.verdict_id
