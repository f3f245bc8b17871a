"""Commit ranges of findings and the incidents they form (pure functions)."""

from __future__ import annotations

import random
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from _verdict_samples import EMITTED_AT, evidence
from perfwatch.adapters.verdict_feed import summary_fields
from perfwatch.contract.codec import dumps
from perfwatch.contract.models import SeriesRef
from perfwatch.contract.validation import validate_verdict
from perfwatch.contract.verdicts import (
    CommitRange,
    Incident,
    incident_commit,
    incident_id,
    incident_verdict,
    overlapping_groups,
    spanned,
)


def span(after: int, last: int, at: float = 0.0, at_after: float | None = None) -> CommitRange:
    """The range after..last of commits `c<i>` run at hour i (+ `at`, the series' offset)."""
    before = at if at_after is None else at_after
    return CommitRange(f"c{last}", last + at, f"c{after}", after + before)


def test_a_range_holds_its_last_commit_and_the_ones_run_between() -> None:
    skipped = span(1, 3)  # a series that ran c1, then c3
    assert skipped.holds("c3", 99.0)  # its last commit, whenever another series ran it
    assert skipped.holds("c2", 2.0)
    assert not skipped.holds("c1", 1.5)  # its first run before the change: never
    assert not skipped.holds("c4", 4.0)
    assert not skipped.holds("c0", 0.0)
    assert skipped.to_json() == {"after": "c1", "last": "c3"}
    assert CommitRange("c3", 3.0).to_json() == {"last": "c3"}
    assert CommitRange.from_state(skipped.to_state()) == skipped


def test_neighbouring_commits_stay_apart_when_runs_interleave_in_time() -> None:
    every = span(1, 2)  # c1..c2, runs on the hour
    early = span(2, 3, at=-0.1)  # c2..c3, runs 6 minutes before the hour
    # by time alone (1, 2] and (1.9, 2.9] overlap; c2 is early's run before its change
    assert not every.overlaps(early)
    assert not early.overlaps(every)
    assert every.overlaps(span(1, 3, at=0.3))  # a series that skipped c2
    assert every.overlaps(span(1, 2, at=0.4))  # the same commit


def test_time_places_commits_on_the_ranges_own_branch_only() -> None:
    """Runs of a release branch in the same hours as main's are no neighbours of main's
    commits; a commit both branches ran is one commit on either."""
    main = CommitRange("c3", 3.0, "c1", 1.0, "main")
    release = CommitRange("r3", 3.2, "r1", 1.2, "release-1.2")
    assert main.holds("c2", 2.0, "main")
    assert not main.holds("r2", 2.0, "release-1.2")
    assert not main.overlaps(release) and not release.overlaps(main)
    assert main.overlaps(CommitRange("c3", 7.0, "r2", 2.0, "release-1.2"))  # the same commit
    assert main.overlaps(CommitRange("c2", 2.1, "c1", 1.1, "main"))
    # stored before branches: no branch, grouped with the series that name none
    legacy = CommitRange.from_state(["c3", 3.0, "c1", 1.0])
    assert legacy == CommitRange("c3", 3.0, "c1", 1.0)
    assert legacy.overlaps(CommitRange("c2", 2.1, "c1", 1.1)) and not legacy.overlaps(release)
    assert CommitRange.from_state(release.to_state()) == release


def test_a_bridging_range_joins_two_groups_named_after_the_earliest_commit() -> None:
    ranges = {"every": span(1, 2), "early": span(2, 3, at=-0.1), "later": span(7, 8)}
    assert overlapping_groups(ranges, ranges) == [["early"], ["every"], ["later"]]
    ranges["nightly"] = span(1, 3, at=0.2)
    assert overlapping_groups(ranges, ["every"]) == [["early", "every", "nightly"]]
    assert overlapping_groups(ranges, ["later", "early"]) == [
        ["early", "every", "nightly"],
        ["later"],
    ]
    group = [ranges[f] for f in ("early", "every", "nightly")]
    assert incident_commit(group) == "c2"
    assert spanned(group) == {"after": "c1", "last": "c3"}
    assert overlapping_groups(ranges, ["gone"]) == []


@st.composite
def ranges_on_a_line(draw: st.DrawFn) -> tuple[dict[str, CommitRange], list[tuple[int, int]]]:
    """Ranges of commits 0..11 by series that run each commit within 24 minutes of its
    hour; the integer intervals they truly cover."""
    count = draw(st.integers(1, 8))
    ranges, truth = {}, []
    for i in range(count):
        after = draw(st.integers(0, 10))
        last = draw(st.integers(after + 1, 11))
        jitter = st.floats(-0.4, 0.4, allow_nan=False)
        ranges[f"f{i}"] = span(after, last, at=draw(jitter), at_after=draw(jitter))
        truth.append((after, last))
    return ranges, truth


@given(ranges_on_a_line(), st.randoms(use_true_random=False))
def test_groups_are_those_of_the_true_commit_order_in_any_order(
    drawn: tuple[dict[str, CommitRange], list[tuple[int, int]]], rng: random.Random
) -> None:
    ranges, truth = drawn
    # the reference: intervals (a, b] of the true order, joined when they intersect
    parent = list(range(len(truth)))

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    for i, (a, b) in enumerate(truth):
        for j, (c, d) in enumerate(truth):
            if a < d and c < b:
                parent[root(i)] = root(j)
    expected = sorted(
        sorted(f"f{i}" for i in range(len(truth)) if root(i) == r)
        for r in {root(i) for i in range(len(truth))}
    )
    ids = list(ranges)
    rng.shuffle(ids)
    shuffled = {f: ranges[f] for f in ids}
    assert sorted(overlapping_groups(shuffled, ids)) == expected
    # any one member finds its whole group, whatever else is known
    for group in expected:
        assert overlapping_groups(shuffled, [group[-1]]) == [group]


def test_an_incident_merged_into_another_says_so() -> None:
    series = SeriesRef("api", "p99", {})
    member = Incident.member(series, "a" * 32, evidence(), commit_range=span(1, 3))
    assert member["commit_range"] == {"after": "c1", "last": "c3"}
    emptied = Incident("c2", {}, {"after": "c1", "last": "c2"})
    into = Incident("c1", {"a" * 32: member}, {"after": "c0", "last": "c3"})

    def event(merged_into: Incident | None) -> dict[str, Any]:
        verdict = incident_verdict(
            emptied,
            opened=False,
            joined=[],
            left=["b" * 32],
            series=series,
            record_run_id="r9",
            emitted_at=EMITTED_AT,
            merged_into=merged_into,
        )
        return dict(orjson.loads(dumps(verdict)))

    merged = event(into)
    assert merged == event(into)
    assert validate_verdict(merged) == []
    assert merged["incident"]["merged_into"] == {"id": incident_id("c1"), "commit": "c1"}
    assert summary_fields(merged)["summary"] == (
        "INCIDENT (commit c2: merged into the incident of commit c1)"
    )
    # an incident emptied by a retraction is another event
    assert event(None)["verdict_id"] != merged["verdict_id"]
    shown = incident_verdict(
        into, opened=True, joined=["a" * 32], left=[], series=series,
        record_run_id="r9", emitted_at=EMITTED_AT,
    )  # fmt: skip
    assert summary_fields(orjson.loads(dumps(shown)))["summary"].startswith(
        "INCIDENT (commits c0..c3: 1 series (1 new): REGRESSION api p99 +12.3%"
    )
