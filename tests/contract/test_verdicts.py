"""The change-point lifecycle (detected, confirmed, updated, retracted) and deterministic ids."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfwatch.adapters.verdict_feed import is_alert, summary_fields
from perfwatch.contract.codec import dumps
from perfwatch.contract.models import ChangePointEvidence, SeriesRef, VerdictKind
from perfwatch.contract.validation import load_schema, validate_verdict
from perfwatch.contract.verdicts import (
    CONFIRMED,
    DETECTED,
    RETRACTED,
    UPDATED,
    BeliefChange,
    Episodes,
    Finding,
    Incident,
    VerdictPolicy,
    advance_findings,
    episodes_of,
    finding_id,
    incident_id,
    incident_verdict,
    joins_incident,
    leaves_incident,
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


def confirmed(*evidence: ChangePointEvidence) -> list[Finding]:
    return [Finding(e, f"{e.index:032x}", "confirmed", 0) for e in evidence]


def diff(
    findings: list[Finding],
    current: list[ChangePointEvidence],
    length: int = 60,
    policy: VerdictPolicy = POLICY,
) -> tuple[list[BeliefChange], list[Finding]]:
    return advance_findings(findings, current, policy, series_key="s", length=length)


def evidence_of(findings: list[Finding]) -> list[ChangePointEvidence]:
    return [f.evidence for f in findings]


def document(change: BeliefChange, length: int = 60) -> dict:
    verdict = make_verdict(
        change,
        series=SeriesRef("db.insert", "p99_ms", {"branch": "main"}),
        series_key="db.insert/p99_ms",
        series_length=length,
        record_run_id=f"run-{length - 1}",
        parameters={"window_len": 50, "max_pvalue": 0.001},
        emitted_at=T0,
    )
    return verdict.to_json()


def test_new_change_point_is_detected_unconfirmed() -> None:
    changes, findings = diff([], [cp(10)], length=40)
    assert kinds(changes) == [(DETECTED, 10)]
    assert changes[0].previous is None
    assert findings == [Finding(cp(10), finding_id("s", "run-10", 40), "detected", 40)]
    assert document(changes[0], 40)["finding"] == {
        "id": finding_id("s", "run-10", 40),
        "state": "detected",
        "confirmed": False,
        "stable_runs": 0,
    }
    assert not is_alert(document(changes[0], 40))


def test_detected_is_confirmed_after_k_stable_runs_with_a_small_enough_pvalue() -> None:
    _, findings = diff([], [cp(10, pvalue=1e-3)], length=40)
    for length in range(41, 40 + POLICY.confirm_runs):
        changes, findings = diff(findings, [cp(10, pvalue=1e-8)], length=length)
        assert changes == [] or [c.kind for c in changes] == [UPDATED]
        assert findings[0].state == "detected"
    length = 40 + POLICY.confirm_runs
    changes, findings = diff(findings, [cp(10, pvalue=2e-8, change_pct=21.0)], length=length)
    assert kinds(changes) == [(CONFIRMED, 10)]
    assert changes[0].current == cp(10, pvalue=2e-8, change_pct=21.0)  # current evidence
    assert findings[0].state == "confirmed"
    confirmed_doc = document(changes[0], length)
    assert confirmed_doc["finding"]["confirmed"] and validate_verdict(confirmed_doc) == []
    # with a commit, its incident's verdict is the alert; without one, this is
    assert confirmed_doc["finding"]["incident"] == incident_id("c10")
    assert not is_alert(confirmed_doc)
    no_commit = replace(
        changes[0], finding=replace(findings[0], evidence=replace(cp(10), commit=None))
    )
    assert is_alert(document(no_commit, length))


def test_a_weak_change_point_stays_unconfirmed() -> None:
    _, findings = diff([], [cp(10, pvalue=5e-6)], length=40)
    changes, findings = diff(findings, [cp(10, pvalue=5e-6)], length=80)
    assert changes == [] and findings[0].state == "detected"


def test_a_move_restarts_the_stable_runs_of_a_detected_finding() -> None:
    _, findings = diff([], [cp(10, pvalue=1e-8)], length=40)
    changes, findings = diff(findings, [cp(12, pvalue=1e-8)], length=43)
    assert kinds(changes) == [(UPDATED, 12)]
    assert changes[0].changed == ("moved",)
    assert findings[0].since == 43 and findings[0].finding_id == finding_id("s", "run-10", 40)
    changes, findings = diff(findings, [cp(12, pvalue=1e-8)], length=45)
    assert changes == []  # 5 runs after detection, 2 after the move
    changes, _ = diff(findings, [cp(12, pvalue=1e-8)], length=48)
    assert kinds(changes) == [(CONFIRMED, 12)]


def test_an_unconfirmed_retraction_is_no_alert_a_confirmed_one_is() -> None:
    _, findings = diff([], [cp(10)], length=40)
    changes, _ = diff(findings, [], length=42)
    assert kinds(changes) == [(RETRACTED, 10)]
    assert document(changes[0], 42)["finding"]["state"] == "retracted"
    assert not is_alert(document(changes[0], 42))
    changes, _ = diff(confirmed(replace(cp(10), commit=None)), [], length=42)
    assert is_alert(document(changes[0], 42))


def test_an_update_of_only_the_pvalue_is_on_the_stream_but_no_alert() -> None:
    changes, _ = diff(confirmed(cp(10, pvalue=1e-5)), [cp(10, pvalue=1e-7)])
    assert kinds(changes) == [(UPDATED, 10)] and changes[0].changed == ("pvalue",)
    assert not is_alert(document(changes[0]))
    changes, _ = diff(confirmed(cp(10, pvalue=1e-5)), [cp(10, change_pct=25.0, pvalue=1e-7)])
    assert changes[0].changed == ("size", "pvalue") and is_alert(document(changes[0]))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 30), st.floats(1e-9, 1e-3)), max_size=3),
        min_size=1,
        max_size=40,
    )
)
def test_a_change_point_that_never_stays_k_runs_never_alerts(
    steps: list[list[tuple[int, float]]],
) -> None:
    """Noise: change points come and go; as long as none stays at its run for
    confirm_runs further runs, nothing reaches an alerting consumer."""
    findings: list[Finding] = []
    lived: dict[str, int] = {}
    for length, found in enumerate(steps, start=40):
        # each run index carries a change point for fewer than confirm_runs runs
        current = {}
        for index, pvalue in found:
            run = f"run-{index}"
            if lived.get(run, 0) < POLICY.confirm_runs - 1:
                current[index] = replace(cp(index, pvalue=pvalue), run_id=run)
        for run in list(lived):
            if run not in {e.run_id for e in current.values()}:
                lived[run] = POLICY.confirm_runs  # gone: never again
        for e in current.values():
            lived[e.run_id] = lived.get(e.run_id, 0) + 1
        changes, findings = diff(findings, sorted(current.values(), key=lambda e: e.index), length)
        assert not any(is_alert(document(change, length)) for change in changes)


@pytest.mark.parametrize(
    ("new", "changed"),
    [
        (cp(10, change_pct=21.9), ()),  # within 10% of 20%
        (cp(10, change_pct=22.1), ("size",)),
        (cp(10, change_pct=-20.0), ("size", "direction")),  # sign and direction flipped
        (cp(10, pvalue=1e-6 * 1.01), ()),  # less than one decade
        (cp(10, pvalue=1e-6), ("pvalue",)),  # one decade
        (cp(10, pvalue=1e-5 * 5), ()),
    ],
)
def test_material_change_rule(new: ChangePointEvidence, changed: tuple[str, ...]) -> None:
    changes, _ = diff(confirmed(cp(10)), [new])
    assert kinds(changes) == ([(UPDATED, 10)] if changed else [])
    assert changes == [] or changes[0].changed == changed


def test_small_changes_need_the_absolute_tolerance_too() -> None:
    # 0.2 -> 0.6 percent is +200% relative but below half a percentage point.
    changes, _ = diff(confirmed(cp(10, change_pct=0.2)), [cp(10, change_pct=0.6)])
    assert changes == []


def test_pvalues_below_the_floor_are_all_certain() -> None:
    changes, _ = diff(confirmed(cp(10, pvalue=1e-10)), [cp(10, pvalue=1e-40)])
    assert changes == []


def test_drift_accumulates_against_what_was_published() -> None:
    findings = confirmed(cp(10, change_pct=20.0))
    for step in (20.8, 21.6, 22.4):
        changes, findings = diff(findings, [cp(10, change_pct=step)])
    assert kinds(changes) == [(UPDATED, 10)]
    assert changes[0].previous.forward_change_percent == 20.0
    assert findings[0].evidence.forward_change_percent == 22.4


def test_nearby_change_point_with_same_sign_moved() -> None:
    changes, findings = diff(confirmed(cp(10)), [cp(13)])
    assert kinds(changes) == [(UPDATED, 13)]
    assert changes[0].previous.run_id == "run-10"
    assert evidence_of(findings) == [cp(13)]
    assert findings[0].finding_id == confirmed(cp(10))[0].finding_id  # the same finding


def test_far_or_opposite_change_point_is_retracted_and_detected() -> None:
    far, _ = diff(confirmed(cp(10)), [cp(16)])
    assert kinds(far) == [(RETRACTED, 10), (DETECTED, 16)]
    flipped, findings = diff(confirmed(cp(10)), [cp(11, change_pct=-20.0)])
    assert kinds(flipped) == [(RETRACTED, 10), (DETECTED, 11)]
    assert evidence_of(findings) == [cp(11, change_pct=-20.0)]


def test_vanished_change_point_is_retracted() -> None:
    changes, findings = diff(confirmed(cp(10), cp(40)), [cp(40)])
    assert kinds(changes) == [(RETRACTED, 10)]
    assert changes[0].current is None and changes[0].previous == cp(10)
    assert evidence_of(findings) == [cp(40)]


def test_moves_pair_nearest_first() -> None:
    changes, _ = diff(confirmed(cp(10), cp(14)), [cp(13)])
    assert kinds(changes) == [(RETRACTED, 10), (UPDATED, 13)]
    assert changes[1].previous.run_id == "run-14"


def test_findings_saved_before_the_lifecycle_are_confirmed() -> None:
    finding = Finding.from_json(cp(10).to_json(), "s")
    assert finding.state == "confirmed" and finding.evidence == cp(10)
    assert Finding.from_json(finding.to_json(), "s") == finding


def test_shift_after_insert() -> None:
    published = confirmed(cp(5), cp(10))
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
        BeliefChange(CONFIRMED, cp(10), cp(10, pvalue=1e-4), confirmed(cp(10))[0]),
        BeliefChange(UPDATED, cp(10), cp(10, pvalue=1e-4), confirmed(cp(10))[0], ("pvalue",)),
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


def moved_level(index: int, before: float, after: float, run: str | None = None):
    change = 100 * (after - before) / before
    return replace(cp(index, change_pct=change, run_id=run), mean_before=before, mean_after=after)


def test_a_regression_and_its_return_to_the_old_level_are_one_episode() -> None:
    regression, fix = confirmed(moved_level(10, 100.0, 120.0), moved_level(16, 120.0, 101.0))
    later = confirmed(moved_level(40, 101.0, 110.0))[0]
    episodes = episodes_of([regression, fix, later], POLICY)
    fixed = {
        "state": "fixed",
        "regression": {
            "finding_id": regression.finding_id,
            "index": 10,
            "run_id": "run-10",
            "commit": "c10",
            "forward_change_percent": 20.0,
        },
        "fix": {
            "finding_id": fix.finding_id,
            "index": 16,
            "run_id": "run-16",
            "commit": "c16",
            "forward_change_percent": pytest.approx(-100 * 19 / 120),
        },
    }
    assert episodes.by_finding[regression.finding_id] == fixed
    assert episodes.by_finding[fix.finding_id] == fixed
    assert episodes.by_finding[later.finding_id]["state"] == "open"
    # the status is the open regression, not the latest change
    assert episodes.status["state"] == "regressed"
    assert episodes.status["worst"]["finding_id"] == later.finding_id


def test_a_partial_return_does_not_fix_and_the_worst_open_regression_is_the_status() -> None:
    big, partial = confirmed(moved_level(10, 100.0, 130.0), moved_level(20, 130.0, 120.0))
    episodes = episodes_of([big, partial], POLICY)
    assert episodes.by_finding[big.finding_id]["state"] == "open"
    assert partial.finding_id not in episodes.by_finding
    assert episodes.status["worst"]["finding_id"] == big.finding_id
    assert episodes_of([], POLICY).status == {"state": "clear"}
    # an improvement alone is no episode and leaves the series clear
    improvement = confirmed(moved_level(10, 100.0, 90.0))
    assert episodes_of(improvement, POLICY) == Episodes({}, {"state": "clear"})


def test_a_fix_past_the_old_level_closes_stacked_regressions_as_one_episode() -> None:
    first, second, fix = confirmed(
        moved_level(10, 100.0, 105.0),
        moved_level(20, 105.0, 112.0),
        moved_level(30, 112.0, 95.0),  # better than before the first: fixes both
    )
    episodes = episodes_of([first, second, fix], POLICY)
    assert episodes.by_finding[first.finding_id]["fix"]["finding_id"] == fix.finding_id
    assert episodes.by_finding[second.finding_id]["fix"]["finding_id"] == fix.finding_id
    # the fix carries the episode of the oldest regression it closes
    assert episodes.by_finding[fix.finding_id]["regression"]["finding_id"] == first.finding_id
    assert episodes.status == {"state": "clear"}
    # within half the step but not within the noise (stddev 0.5): still open
    regression, short = confirmed(moved_level(10, 100.0, 120.0), moved_level(16, 120.0, 101.0))
    quiet = [
        replace(f, evidence=replace(f.evidence, stddev_before=0.5, stddev_after=0.5))
        for f in (regression, short)
    ]
    assert episodes_of(quiet, POLICY).status["state"] == "regressed"


def test_the_fix_verdict_names_the_episode() -> None:
    regression, fix = confirmed(moved_level(10, 100.0, 120.0), moved_level(16, 120.0, 101.0))
    change = BeliefChange(CONFIRMED, fix.evidence, fix.evidence, fix)
    doc = document(change)
    verdict = make_verdict(
        change,
        series=SeriesRef("db.insert", "p99_ms", {}),
        series_key="s",
        series_length=60,
        record_run_id="run-59",
        parameters={},
        emitted_at=T0,
        episodes=episodes_of([regression, fix], POLICY),
    ).to_json()
    assert "episode" not in doc
    assert verdict["episode"]["state"] == "fixed" and verdict["series_status"] == {"state": "clear"}
    assert validate_verdict(verdict) == []
    fields = summary_fields(verdict)
    assert fields["label"] == "FIXED"
    assert fields["detail"] == "(regression +20.0% at run run-10, fixed at run run-16)"


def test_confirmed_findings_join_and_retracted_or_moved_ones_leave_their_incident() -> None:
    detected = Finding(cp(10), "a" * 32, "detected", 40)
    on = replace(detected, state="confirmed")
    assert joins_incident(BeliefChange(DETECTED, cp(10), None, detected)) is None
    assert joins_incident(BeliefChange(CONFIRMED, cp(10), cp(10), on)) == cp(10)
    assert joins_incident(BeliefChange(UPDATED, cp(10), cp(10), on, ("size",))) is None
    moved = BeliefChange(UPDATED, cp(12), cp(10), on, ("moved",))
    assert (joins_incident(moved), leaves_incident(moved)) == (cp(12), cp(10))
    assert leaves_incident(BeliefChange(RETRACTED, None, cp(10), on)) == cp(10)
    assert leaves_incident(BeliefChange(RETRACTED, None, cp(10), detected)) is None
    assert document(BeliefChange(CONFIRMED, cp(10), cp(10), on))["finding"]["incident"] == (
        incident_id("c10")
    )


def test_incident_verdicts_are_deterministic_and_valid() -> None:
    def build(members: dict, joined: list[str], when: datetime = T0) -> dict:
        return incident_verdict(
            Incident("c10", members),
            opened=len(members) == 1,
            joined=joined,
            left=[],
            series=SeriesRef("api", "p99", {}),
            record_run_id="run-12",
            emitted_at=when,
        ).to_json()

    one = {"a" * 32: Incident.member(SeriesRef("api", "p99", {}), "a" * 32, cp(10))}
    two = {**one, "b" * 32: Incident.member(SeriesRef("db", "p50", {}), "b" * 32, cp(10, 5.0))}
    first, second = build(one, ["a" * 32]), build(two, ["b" * 32])
    assert (first["kind"], second["kind"]) == ("incident.opened", "incident.updated")
    assert first["incident"]["id"] == second["incident"]["id"] == incident_id("c10")
    assert [m["test"] for m in second["incident"]["members"]] == ["api", "db"]
    assert validate_verdict(first) == [] and validate_verdict(second) == []
    again = build(dict(reversed(two.items())), ["b" * 32], datetime(2030, 1, 1, tzinfo=UTC))
    assert again["verdict_id"] == second["verdict_id"] != first["verdict_id"]
    assert is_alert(first) and is_alert(second)


@pytest.mark.parametrize("document", ["README.md", "docs/records.md"])
def test_every_verdict_kind_is_documented_for_consumers(document: str) -> None:
    """A consumer reads the kinds it may receive in the README and the record reference."""
    kinds = load_schema("verdict")["properties"]["kind"]["examples"]
    text = (Path(__file__).parents[2] / document).read_text(encoding="utf-8")
    assert [kind for kind in kinds if f"`{kind}`" not in text] == []


def test_kinds_are_an_open_set_of_dotted_names() -> None:
    """A consumer validating with this schema accepts a kind a later perfwatch publishes
    (and ignores it); the kinds this one publishes are the schema's examples."""
    from _verdict_samples import verdict

    assert load_schema("verdict")["properties"]["kind"]["examples"] == list(get_args(VerdictKind))
    doc = verdict("change_point.detected")
    doc["kind"] = "change_point.foreseen"
    assert validate_verdict(doc) == []
    for malformed in ("Change_point.detected", "change point", "a.b.c", "", "change_point."):
        doc["kind"] = malformed
        assert [problem.path for problem in validate_verdict(doc)] == ["$.kind"], malformed
