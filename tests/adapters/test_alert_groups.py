"""Alert groups: an incident's verdicts become one message, on time passed in by the test."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from _verdict_samples import INCIDENT_COMMIT as COMMIT
from _verdict_samples import IncidentStream, member_update, verdict
from perfwatch.adapters.alert_groups import AlertGroups, DueGroup
from perfwatch.adapters.verdict_feed import is_alert, summary_fields
from perfwatch.contract.validation import validate_verdict


def sizes(due: Sequence[DueGroup[int]]) -> list[int | None]:
    return [None if g.message is None else len(g.message["incident"]["members"]) for g in due]


def test_the_first_message_waits_and_says_the_incident_as_it_stands() -> None:
    stream, groups = IncidentStream(), AlertGroups[int](wait_s=30, interval_s=300)
    assert groups.offer(stream.change(joined=["a"]), 1, now=0)
    assert groups.offer(stream.change(joined=["b", "c"]), 2, now=12)
    assert groups.due(29.9) == []
    assert groups.offer(stream.change(joined=["d"]), 3, now=29.9)
    [due] = groups.due(30)
    assert due.held == [1, 2, 3]
    assert due.message is not None and due.message["kind"] == "incident.opened"
    assert "joined" not in due.message["incident"]
    assert summary_fields(due.message)["summary"] == (
        f"INCIDENT (commit {COMMIT}: 4 series: REGRESSION svc/a p99_ms +5.0%, "
        "REGRESSION svc/b p99_ms +5.0%, REGRESSION svc/c p99_ms +5.0%, "
        "REGRESSION svc/d p99_ms +5.0%)"
    )
    assert groups.due(10_000) == []
    assert groups.holding == 0


def test_a_message_is_a_valid_verdict_with_an_id_of_its_own() -> None:
    stream, groups = IncidentStream(), AlertGroups[int](wait_s=30, interval_s=300)
    a, b = "a" * 16, "b" * 16  # finding ids as the schema has them
    read = [stream.change(joined=[a]), member_update(a, 9.0), stream.change(joined=[b])]
    for held, document in enumerate(read):
        groups.offer(document, held, now=held)
    [due] = groups.due(30)
    assert due.message is not None
    assert validate_verdict(due.message) == []
    # it says what none of the verdicts read says (a's newest evidence, no `joined`):
    # a consumer keeping verdicts by id must not take it for one of them
    assert due.message["verdict_id"] not in {document["verdict_id"] for document in read}


def test_later_changes_are_batched_per_interval_and_posted_once_the_incident_doubled() -> None:
    stream, groups = IncidentStream(), AlertGroups[int](wait_s=30, interval_s=300)
    groups.offer(stream.change(joined=["a", "b", "c"]), 1, now=0)
    assert sizes(groups.due(30)) == [3]
    # 3 -> 4 -> 5: not yet twice what the team was told; acknowledged without a message
    groups.offer(stream.change(joined=["d"]), 2, now=40)
    groups.offer(stream.change(joined=["e"]), 3, now=100)
    assert groups.due(329.9) == []
    [quiet] = groups.due(330)
    assert (quiet.message, quiet.held) == (None, [2, 3])
    # 6: one update at the end of the interval, naming all three newcomers
    groups.offer(stream.change(joined=["f"]), 4, now=400)
    [update] = groups.due(630)
    assert update.held == [4]
    assert update.message is not None and update.message["kind"] == "incident.updated"
    assert update.message["incident"]["joined"] == ["d", "e", "f"]
    assert "6 series (3 new)" in summary_fields(update.message)["summary"]
    # the next interval starts from that message: 6 -> 12
    groups.offer(stream.change(joined=[f"g{i}" for i in range(5)]), 5, now=700)
    assert sizes(groups.due(930)) == [None]
    groups.offer(stream.change(joined=["h"]), 6, now=1000)
    assert sizes(groups.due(1000)) == [12]


def test_a_members_new_evidence_is_held_and_shown_in_the_next_message() -> None:
    stream, groups = IncidentStream(), AlertGroups[int](wait_s=30, interval_s=300)
    groups.offer(stream.change(joined=["a"]), 1, now=0)
    assert is_alert(member_update("a", 9.0))
    assert groups.offer(member_update("a", 9.0), 2, now=10)
    [first] = groups.due(30)
    assert first.held == [1, 2]
    assert first.message is not None
    assert first.message["incident"]["members"][0]["forward_change_percent"] == 9.0
    # after the message, new evidence alone is no news
    groups.offer(member_update("a", 14.0), 3, now=60)
    [later] = groups.due(330)
    assert (later.message, later.held) == (None, [3])
    groups.offer(stream.change(joined=["b"]), 4, now=400)
    [grown] = groups.due(630)
    assert grown.message is not None
    assert [m["forward_change_percent"] for m in grown.message["incident"]["members"]] == [
        14.0,
        5.0,
    ]


def test_a_member_that_joins_again_shows_the_evidence_it_joined_with() -> None:
    stream, groups = IncidentStream(), AlertGroups[int](wait_s=30, interval_s=300)
    groups.offer(stream.change(joined=["a"]), 1, now=0)
    groups.offer(member_update("a", 9.0), 2, now=1)
    groups.offer(stream.change(left=["a"]), 3, now=2)
    groups.offer(stream.change(joined=["a"], change=6.5), 4, now=3)
    [due] = groups.due(30)
    assert due.message is not None
    assert due.message["incident"]["members"][0]["forward_change_percent"] == 6.5


def test_a_members_evidence_goes_to_the_incident_that_lists_it() -> None:
    """A finding grouped by its commit range under an earlier commit's incident still
    names its own commit's incident; its evidence joins the group that lists it."""
    stream, groups = IncidentStream(), AlertGroups[int](wait_s=30, interval_s=300)
    groups.offer(stream.change(joined=["a", "b"]), 1, now=0)
    own_commit = "5be1aa07"
    assert groups.offer(member_update("b", 9.0, commit=own_commit), 2, now=10)
    [due] = groups.due(30)
    assert due.held == [1, 2]
    assert due.message is not None
    changes = {
        m["finding_id"]: m["forward_change_percent"] for m in due.message["incident"]["members"]
    }
    assert changes == {"a": 5.0, "b": 9.0}
    # once it left the incident, its evidence belongs to no group the forwarder knows
    groups.offer(stream.change(left=["b"]), 3, now=40)
    assert not groups.offer(member_update("b", 12.0, commit=own_commit), 4, now=50)


def test_a_change_point_of_an_incident_not_seen_is_not_held() -> None:
    groups = AlertGroups[int]()
    assert not groups.offer(member_update("a", 9.0), 1, now=0)
    assert not groups.offer(verdict("counter_regression.detected"), 2, now=0)
    assert groups.holding == 0


def test_an_incident_emptied_before_its_first_message_posts_nothing() -> None:
    stream, groups = IncidentStream(), AlertGroups[int](wait_s=30, interval_s=300)
    groups.offer(stream.change(joined=["a"]), 1, now=0)
    groups.offer(stream.change(left=["a"]), 2, now=5)
    [due] = groups.due(30)
    assert (due.message, due.held) == (None, [1, 2])


def test_an_emptied_incident_is_posted_with_what_left() -> None:
    stream, groups = IncidentStream(), AlertGroups[int](wait_s=30, interval_s=300)
    groups.offer(stream.change(joined=["a", "b"]), 1, now=0)
    groups.due(30)
    groups.offer(stream.change(left=["a"]), 2, now=50)
    groups.offer(stream.change(left=["b"]), 3, now=60)
    [due] = groups.due(330)
    assert due.message is not None
    assert due.message["incident"]["members"] == []
    assert due.message["incident"]["left"] == ["a", "b"]


def test_an_update_of_an_incident_not_seen_takes_what_it_had_before_as_posted() -> None:
    """After a restart: the incident's earlier messages were posted by the forwarder before."""
    stream = IncidentStream()
    stream.change(joined=["a", "b"])
    groups = AlertGroups[int](wait_s=30, interval_s=300)
    groups.offer(stream.change(joined=["c"]), 1, now=0)  # 2 -> 3
    [quiet] = groups.due(30)
    assert quiet.message is None
    groups.offer(stream.change(joined=["d"]), 2, now=40)  # 3 -> 4
    [update] = groups.due(330)
    assert update.message is not None and update.message["incident"]["joined"] == ["c", "d"]


# A change of members: join a new finding, or let the k-th current member leave.
CHANGES = st.lists(st.one_of(st.just(-1), st.integers(min_value=0, max_value=8)), max_size=40)


def incident_verdicts(changes: list[int]) -> list[dict[str, Any]]:
    stream, members, made = IncidentStream(), [], []
    for step, change in enumerate(changes):
        if change == -1 or not members:
            members.append(f"f{step:03d}")
            made.append(stream.change(joined=[members[-1]]))
        else:
            made.append(stream.change(left=[members.pop(change % len(members))]))
    return made


def growing(batches: Sequence[int], emptied: bool) -> list[dict[str, Any]]:
    """An incident growing by batches of findings, then maybe emptied one by one."""
    stream, verdicts, members = IncidentStream(), [], []
    for batch in batches:
        joined = [f"f{len(members) + i:03d}" for i in range(batch)]
        members += joined
        verdicts.append(stream.change(joined=joined))
    while emptied and members:
        verdicts.append(stream.change(left=[members.pop()]))
    return verdicts


def posted_sizes(verdicts: Sequence[dict[str, Any]], times: Sequence[float]) -> list[int]:
    groups = AlertGroups[int](wait_s=30, interval_s=300) if times else AlertGroups[int](0, 0)
    posted = []
    for position, document in enumerate(verdicts):
        now = times[position] if times else position
        posted += [len(g.message["incident"]["members"]) for g in groups.due(now) if g.message]
        groups.offer(document, position, now=now)
        posted += [len(g.message["incident"]["members"]) for g in groups.due(now) if g.message]
    return posted + [len(g.message["incident"]["members"]) for g in groups.flush() if g.message]


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=40), st.booleans())
def test_without_waiting_one_series_at_a_time_the_groups_post_what_is_alert_selects(
    count: int, emptied: bool
) -> None:
    verdicts = growing([1] * count, emptied)
    assert posted_sizes(verdicts, []) == [
        len(v["incident"]["members"]) for v in verdicts if is_alert(v)
    ]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=20),
    st.lists(st.floats(min_value=0, max_value=400), min_size=20, max_size=20),
)
def test_each_message_of_a_growing_incident_is_at_least_twice_the_one_before(
    batches: list[int], gaps: list[float]
) -> None:
    sizes = posted_sizes(growing(batches, False), list(np.cumsum(gaps)))
    assert sizes[0] >= 1
    assert all(later >= 2 * earlier for earlier, later in itertools.pairwise(sizes))
    assert len(sizes) <= 1 + math.log2(sum(batches) / sizes[0])


@settings(max_examples=200, deadline=None)
@given(CHANGES, st.lists(st.floats(min_value=0, max_value=400), max_size=40))
def test_every_verdict_is_released_once_and_messages_depend_only_on_the_verdicts(
    changes: list[int], gaps: list[float]
) -> None:
    verdicts = incident_verdicts(changes)

    def run() -> tuple[list[int], list[dict[str, Any] | None]]:
        groups = AlertGroups[int](wait_s=30, interval_s=300)
        released: list[int] = []
        messages = []
        now = 0.0
        for position, document in enumerate(verdicts):
            now += gaps[position] if position < len(gaps) else 1.0
            for due in groups.due(now):
                released += due.held
                messages.append(due.message)
            groups.offer(document, position, now=now)
        for due in groups.flush():
            released += due.held
            messages.append(due.message)
        return released, messages

    released, messages = run()
    assert sorted(released) == list(range(len(verdicts)))
    assert run() == (released, messages)


def test_a_forgotten_incident_takes_only_its_own_findings_with_it() -> None:
    """Beyond `capacity` the oldest idle incident is forgotten with the findings it
    lists; a finding that moved on to another incident stays with that one."""
    first, second, third = (
        IncidentStream(commit) for commit in ("0a17fb48", "1b2c3d4e", "2c3d4e5f")
    )
    groups = AlertGroups[int](wait_s=0, interval_s=0, capacity=2)
    groups.offer(first.change(joined=["a", "moved"]), 1, now=0)
    groups.offer(second.change(joined=["moved"]), 2, now=0)
    assert sorted(due.held for due in groups.due(0)) == [[1], [2]]
    groups.offer(third.change(joined=["c"]), 3, now=1)
    assert not groups.offer(member_update("a", 9.0, commit="0a17fb48"), 4, now=2)
    assert groups.offer(member_update("moved", 9.0, commit="0a17fb48"), 5, now=2)
    assert groups.offer(member_update("c", 9.0, commit="2c3d4e5f"), 6, now=2)
    assert sorted(held for due in groups.due(2) for held in due.held) == [3, 5, 6]
