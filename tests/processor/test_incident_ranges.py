"""Incidents by commit range, through the real processor on the in-memory ports.

Every series below runs once an hour at commit `c<run>`; a step of 8 % starts at
a chosen run. A series that runs only every other commit sees a step at an odd
commit one run late: its range spans two commits.
"""

from __future__ import annotations

import random
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from _processor_support import fresh_postgres_schema, processor_config
from _verdict_samples import EMITTED_AT, evidence
from perfwatch.adapters.verdict_feed import is_alert, summary_fields
from perfwatch.config import Config
from perfwatch.contract.codec import dumps
from perfwatch.contract.models import RECORD_SCHEMA, ChangePointEvidence, SeriesRef
from perfwatch.contract.timestamps import format_rfc3339
from perfwatch.contract.validation import validate_verdict
from perfwatch.contract.verdicts import (
    CONFIRMED,
    RETRACTED,
    UPDATED,
    BeliefChange,
    CommitRange,
    Finding,
    Incident,
    incident_commit,
    incident_id,
    overlapping_groups,
)
from perfwatch.processor.changepoints import (
    INCIDENT_NAMESPACE,
    INCIDENT_RANGES_NAMESPACE,
    RANGES_KEY,
    ChangePointHandler,
    IncidentMove,
)
from perfwatch.processor.memory import MemoryRecordTopic, MemoryVerdictSink, drain
from perfwatch.state import Point, SeriesKey, StoreTransaction, open_store

TOPICS = {"records": "records", "verdicts": "verdicts", "dead_letter": "dead-letter"}
RUNS = 100
T0 = datetime(2024, 1, 1, 2, 0, tzinfo=UTC)
Message = tuple[str, bytes]


def commit(run: int, repository: str = "") -> str:
    return f"{repository}c{run:05d}"


def series(
    test: str,
    *,
    step_at: int | None,
    every: int = 1,
    minutes: int = 0,
    seed: int = 0,
    repository: str | None = None,
) -> list[Message]:
    """A series' records in run order: runs 0, every, 2 * every, ...; a step up at
    run `step_at`; each run `minutes` off the hour (jobs of one commit run at
    different times); with `repository`, that repository's commits."""
    rng = np.random.default_rng(seed)
    messages = []
    for run in range(0, RUNS, every):
        level = 108.0 if step_at is not None and run >= step_at else 100.0
        document = {
            "schema": RECORD_SCHEMA,
            "test": test,
            "run_id": f"{test}#{run}",
            "commit": commit(run, repository or ""),
            "branch": "main",
            **({"attributes": {"repository": repository}} if repository else {}),
            "timestamp": format_rfc3339(T0 + timedelta(hours=run, minutes=minutes)),
            "metrics": {
                "latency_ms": {
                    "value": round(level * (1 + rng.normal(0, 0.01)), 4),
                    "direction": "lower_is_better",
                }
            },
        }
        messages.append((test, orjson.dumps(document)))
    return messages


def by_run(*streams: Sequence[Message]) -> list[Message]:
    """The series' records interleaved in the order of their runs (stable by series)."""
    ordered = [
        (orjson.loads(payload)["timestamp"], i, j, (key, payload))
        for i, stream in enumerate(streams)
        for j, (key, payload) in enumerate(stream)
    ]
    return [message for *_, message in sorted(ordered)]


def shuffled(streams: Sequence[Sequence[Message]], seed: int) -> list[Message]:
    """The series' records in a random interleaving; each series keeps its own order."""
    rng = random.Random(seed)
    queues = [list(stream) for stream in streams]
    out = []
    while any(queues):
        queue = rng.choice([q for q in queues if q])
        out.append(queue.pop(0))
    return out


def stream(
    store_url: str,
    records: Sequence[Message],
    incident_open_days: float = 90.0,
    identifying: tuple[str, ...] = ("branch",),
) -> list[dict[str, Any]]:
    """The verdicts one processor publishes for `records`, in order."""
    topic = MemoryRecordTopic(batch_size=10)
    for key, payload in records:
        topic.publish(payload, key=key)
    sink = MemoryVerdictSink()
    config = processor_config(store_url, TOPICS)
    verdicts = config.verdicts.model_copy(update={"incident_open_days": incident_open_days})
    keys = config.series.model_copy(update={"identifying_attributes": identifying})
    config = config.model_copy(update={"verdicts": verdicts, "series": keys})
    with open_store(config.store.url) as store:
        assert not drain(config, store, topic, sink).messages
    verdicts = [orjson.loads(verdict.payload) for verdict in sink.verdicts]
    assert all(validate_verdict(v) == [] for v in verdicts)
    return verdicts


def incidents(verdicts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [v["incident"] for v in verdicts if v["kind"].startswith("incident.")]


def final(verdicts: Sequence[dict[str, Any]]) -> dict[str, frozenset[tuple[str, str]]]:
    """Incident id -> its members (test, finding id), as the last event of each says."""
    last = {incident["id"]: incident for incident in incidents(verdicts)}
    return {
        key: frozenset((m["test"], m["finding_id"]) for m in incident["members"])
        for key, incident in last.items()
        if incident["members"]
    }


def grouped_tests(grouping: dict[str, frozenset[tuple[str, str]]]) -> dict[str, set[str]]:
    return {key: {test for test, _ in members} for key, members in grouping.items()}


EVERY = series("every", step_at=61, seed=1)  # range c00060..c00061
SAME = series("same", step_at=61, minutes=20, seed=2)  # the same commit, run later
NIGHTLY = series("nightly", step_at=61, every=2, seed=3)  # skips odd commits: c00060..c00062
# runs 5 minutes before the hour: its run of c00061 comes before every's
NEIGHBOUR = series("neighbour", step_at=62, minutes=-5, seed=4)  # c00061..c00062
LATER = series("later", step_at=80, seed=5)  # c00079..c00080
QUIET = series("quiet", step_at=None, seed=6)


def test_findings_at_one_commit_share_its_incident(tmp_path: Path) -> None:
    verdicts = stream(f"sqlite:///{tmp_path / 'state.db'}", by_run(EVERY, SAME, QUIET))
    events = incidents(verdicts)
    assert {e["id"] for e in events} == {incident_id(commit(61))}
    assert [len(e["members"]) for e in events] == [1, 2]
    assert events[-1]["commit"] == commit(61)
    assert events[-1]["commit_range"] == {"after": commit(60), "last": commit(61)}
    assert [m["commit_range"] for m in events[-1]["members"]] == [
        {"after": commit(60), "last": commit(61)}
    ] * 2
    confirmed = [v for v in verdicts if v["kind"] == "change_point.confirmed"]
    assert {v["finding"]["incident"] for v in confirmed} == {incident_id(commit(61))}
    assert {v["finding"]["commit_range"]["last"] for v in confirmed} == {commit(61)}


def test_a_series_that_skipped_commits_joins_the_incident_of_a_commit_it_skipped(
    tmp_path: Path,
) -> None:
    verdicts = stream(f"sqlite:///{tmp_path / 'state.db'}", by_run(EVERY, NIGHTLY, QUIET))
    assert grouped_tests(final(verdicts)) == {incident_id(commit(61)): {"every", "nightly"}}
    last = incidents(verdicts)[-1]
    assert last["commit"] == commit(61)
    assert last["commit_range"] == {"after": commit(60), "last": commit(62)}
    nightly = next(m for m in last["members"] if m["test"] == "nightly")
    assert nightly["commit_range"] == {"after": commit(60), "last": commit(62)}
    assert nightly["run_id"] == "nightly#62"
    alert = [v for v in verdicts if v["kind"].startswith("incident.") and is_alert(v)][-1]
    assert summary_fields(alert)["summary"].startswith(
        "INCIDENT (commits c00060..c00062: 2 series (1 new): REGRESSION every latency_ms +"
    )
    confirmed = next(
        v
        for v in verdicts
        if v["kind"] == "change_point.confirmed" and v["series"]["test"] == "nightly"
    )
    assert "commits c00060..c00062" in summary_fields(confirmed)["summary"]


def test_neighbouring_and_distant_commits_stay_apart(tmp_path: Path) -> None:
    # neighbour's range starts at every's last commit, and its runs come 5 minutes
    # before every's: by time alone the two ranges would overlap
    verdicts = stream(f"sqlite:///{tmp_path / 'state.db'}", by_run(EVERY, NEIGHBOUR, LATER))
    assert grouped_tests(final(verdicts)) == {
        incident_id(commit(61)): {"every"},
        incident_id(commit(62)): {"neighbour"},
        incident_id(commit(80)): {"later"},
    }
    assert all(e["kind"] == "incident.opened" for e in verdicts if e["kind"].startswith("inc"))


def test_repositories_sharing_a_topic_and_a_branch_name_keep_their_incidents_apart(
    tmp_path: Path,
) -> None:
    # another repository's nightly job: its range of its own commits spans the hour
    # in which every's culprit ran, on a branch called "main" too
    billing = series("billing", step_at=61, every=2, seed=3, repository="billing-")
    shop = series("every", step_at=61, seed=1, repository="shop-")
    keyed = ("branch", "repository")
    verdicts = stream(
        f"sqlite:///{tmp_path / 'apart.db'}", by_run(shop, billing), identifying=keyed
    )
    assert grouped_tests(final(verdicts)) == {
        incident_id(commit(61, "shop-")): {"every"},
        incident_id(commit(62, "billing-")): {"billing"},
    }
    # the same records without the repository in the series key: one "main", by time
    merged = stream(f"sqlite:///{tmp_path / 'one.db'}", by_run(shop, billing))
    assert grouped_tests(final(merged)) == {incident_id(commit(61, "shop-")): {"every", "billing"}}


def test_a_finding_that_bridges_two_incidents_merges_them_into_the_earlier(
    tmp_path: Path,
) -> None:
    # nightly's records come 20 runs late: every and neighbour have their own
    # incidents when its range (c00060..c00062) overlaps both
    late = [(key, payload) for key, payload in NIGHTLY]
    records = by_run(EVERY, NEIGHBOUR)
    records = records[: 2 * 80] + late + records[2 * 80 :]
    verdicts = stream(f"sqlite:///{tmp_path / 'state.db'}", records)
    events = [v for v in verdicts if v["kind"].startswith("incident.")]
    assert grouped_tests(final(verdicts)) == {
        incident_id(commit(61)): {"every", "neighbour", "nightly"}
    }
    merged = [e for e in events if "merged_into" in e["incident"]]
    assert len(merged) == 1
    (event,) = merged
    assert event["incident"]["id"] == incident_id(commit(62))
    assert event["incident"]["members"] == []
    assert event["incident"]["merged_into"] == {
        "id": incident_id(commit(61)),
        "commit": commit(61),
    }
    assert summary_fields(event)["summary"] == (
        "INCIDENT (commit c00062: merged into the incident of commit c00061)"
    )
    # the absorbing incident's event of that record names both newcomers
    (absorbing,) = (
        e["incident"]
        for e in events
        if e["record_run_id"] == event["record_run_id"] and e is not event
    )
    assert absorbing["id"] == incident_id(commit(61))
    assert {m["test"] for m in absorbing["members"]} == {"every", "neighbour", "nightly"}
    newcomers = {m["finding_id"] for m in absorbing["members"] if m["test"] != "every"}
    assert set(absorbing["joined"]) == newcomers
    neighbour = next(m for m in absorbing["members"] if m["test"] == "neighbour")
    assert event["incident"]["left"] == [neighbour["finding_id"]]


def test_a_closed_incident_takes_no_later_finding_of_another_commit(tmp_path: Path) -> None:
    # closed 12 hours of runs after its newest member: every's incident once later's
    # finding (19 hours on) is confirmed; nightly's records come after both
    late, records = list(NIGHTLY), by_run(EVERY, LATER)
    kept_open = stream(f"sqlite:///{tmp_path / 'open.db'}", records + late)
    closing = stream(f"sqlite:///{tmp_path / 'closed.db'}", records + late, 0.5)
    assert grouped_tests(final(kept_open)) == {
        incident_id(commit(61)): {"every", "nightly"},
        incident_id(commit(80)): {"later"},
    }
    assert grouped_tests(final(closing)) == {
        incident_id(commit(61)): {"every"},
        incident_id(commit(62)): {"nightly"},
        incident_id(commit(80)): {"later"},
    }
    # a finding at the closed incident's own commit still joins it
    same = stream(f"sqlite:///{tmp_path / 'same.db'}", records + list(SAME), 0.5)
    assert grouped_tests(final(same)) == {
        incident_id(commit(61)): {"every", "same"},
        incident_id(commit(80)): {"later"},
    }
    with open_store(f"sqlite:///{tmp_path / 'closed.db'}") as store:
        document = orjson.loads(store.get_blob(INCIDENT_RANGES_NAMESPACE, RANGES_KEY) or b"{}")
    # nightly's incident closed as it opened: its run is as old as every's
    assert {name for name, *_ in document.values()} == {commit(80)}


ALL = (EVERY, SAME, NIGHTLY, NEIGHBOUR, LATER, QUIET)
EXPECTED = {
    incident_id(commit(61)): {"every", "same", "nightly", "neighbour"},
    incident_id(commit(80)): {"later"},
}


def test_the_final_grouping_does_not_depend_on_the_arrival_order(tmp_path: Path) -> None:
    groupings = []
    for seed in range(3):
        verdicts = stream(f"sqlite:///{tmp_path / f'{seed}.db'}", shuffled(ALL, seed))
        groupings.append(final(verdicts))
    assert grouped_tests(groupings[0]) == EXPECTED
    assert groupings[1] == groupings[0]
    assert groupings[2] == groupings[0]


@pytest.fixture
def postgres_url() -> Iterator[str]:
    yield from fresh_postgres_schema()


def test_postgresql_store_groups_as_sqlite(tmp_path: Path, postgres_url: str) -> None:
    records = shuffled(ALL, 7)
    on_postgres = stream(postgres_url, records)
    on_sqlite = stream(f"sqlite:///{tmp_path / 'state.db'}", records)
    assert grouped_tests(final(on_postgres)) == EXPECTED
    assert [v["verdict_id"] for v in on_postgres] == [v["verdict_id"] for v in on_sqlite]
    assert incidents(on_postgres) == incidents(on_sqlite)


def test_two_processors_on_postgresql_take_turns_on_incidents(
    tmp_path: Path, postgres_url: str
) -> None:
    # each processor has its own records (a topic of its own) and both change the
    # same incidents at about the same time, in their own transactions
    shares = [by_run(EVERY, NIGHTLY, LATER), by_run(SAME, NEIGHBOUR, QUIET)]
    results: list[list[dict[str, Any]]] = [[], []]
    failures: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = stream(postgres_url, shares[i])
        except BaseException as error:  # reported by the test thread
            failures.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    with open_store(postgres_url) as store:
        stored = [store.get_blob(INCIDENT_NAMESPACE, commit(run)) for run in (61, 62, 80)]
    grouping = {
        incident_id(incident.commit): frozenset(
            (m["test"], finding) for finding, m in incident.members.items()
        )
        for incident in (Incident.from_json(orjson.loads(doc)) for doc in stored if doc)
        if incident.members
    }
    alone = stream(f"sqlite:///{tmp_path / 'state.db'}", by_run(*ALL))
    assert grouped_tests(grouping) == EXPECTED
    assert grouping == final(alone)


Schedule = tuple[int, int, float, int]  # every, first commit, minutes off the hour, changed commit


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[Schedule], list[tuple[str, int]]]:
    """Series and the order their findings are confirmed, and some retracted, in."""
    count = draw(st.integers(2, 6))
    series = []
    for _ in range(count):
        every = draw(st.integers(1, 3))
        first = draw(st.integers(0, every - 1))
        series.append((every, first, draw(st.floats(-20, 20)), draw(st.integers(5, 12))))
    retracted = draw(st.lists(st.integers(0, count - 1), unique=True, max_size=count - 1))
    order = draw(st.permutations([*range(count), *retracted]))
    # a finding's first step confirms it, its second retracts it
    steps = [("retract" if i in order[:n] else "confirm", i) for n, i in enumerate(order)]
    return series, steps


def stored_series(tx: StoreTransaction, i: int, schedule: Schedule) -> tuple[int, list[int]]:
    """Series `t<i>` with a point at each commit of its schedule: its id and runs."""
    every, first, minutes, _ = schedule
    key = SeriesKey.of(f"t{i}", "m")
    state = tx.lock_series([key])[key]
    runs = list(range(first, 20, every))
    for run in runs:
        at = T0 + timedelta(hours=run, minutes=minutes)
        tx.add_points([(state, Point(f"t{i}#{run}", 1.0, at.timestamp(), commit(run)))])
    tx.save_series([(state, None)])
    return state.series_id, runs


def located(i: int, schedule: Schedule, runs: list[int], index: int) -> ChangePointEvidence:
    at = T0 + timedelta(hours=runs[index], minutes=schedule[2])
    run_id, at_commit = f"t{i}#{runs[index]}", commit(runs[index])
    return replace(evidence(), index=index, run_id=run_id, commit=at_commit, time=at)


def replay(
    history: tuple[list[Schedule], list[tuple[str, int]]], incident_open_days: float
) -> tuple[dict[str, set[str]], dict[str, CommitRange], set[str]]:
    """The history's findings confirmed and retracted one transaction at a time: the
    incidents stored (commit -> members), every finding's range, the findings left."""
    schedules, steps = history
    config = Config()
    config = config.model_copy(
        update={
            "verdicts": config.verdicts.model_copy(
                update={"incident_open_days": incident_open_days}
            )
        }
    )
    handler = ChangePointHandler(config)
    with tempfile.TemporaryDirectory() as folder, open_store(f"sqlite:///{folder}/s.db") as store:
        moves = {}
        ranges = {}
        with store.transaction() as tx:
            for i, schedule in enumerate(schedules):
                series_id, runs = stored_series(tx, i, schedule)
                index = next(n for n, run in enumerate(runs) if run >= schedule[3])
                cp = located(i, schedule, runs, index)
                finding = Finding(cp, f"{i:032x}", "confirmed", 0)
                ref = SeriesRef(f"t{i}", "m", {})
                moves[i] = [
                    IncidentMove(ref, series_id, BeliefChange(kind, now, cp, finding), None)
                    for kind, now in ((CONFIRMED, cp), (RETRACTED, None))
                ]
                before = runs[index - 1] if index else None
                ranges[finding.finding_id] = CommitRange(
                    commit(runs[index]),
                    cp.time.timestamp(),
                    None if before is None else commit(before),
                    None
                    if before is None
                    else (T0 + timedelta(hours=before, minutes=schedule[2])).timestamp(),
                )
        for step, i in steps:
            with store.transaction() as tx:
                move = moves[i][step == "retract"]
                verdicts, _ = handler.incidents("r", [move], tx, EMITTED_AT)
            assert all(validate_verdict(orjson.loads(dumps(v))) == [] for v in verdicts)
        stored = {}
        for run in range(20):
            doc = store.get_blob(INCIDENT_NAMESPACE, commit(run))
            if doc and (incident := Incident.from_json(orjson.loads(doc))).members:
                stored[incident.commit] = set(incident.members)
    left = {f"{i:032x}" for step, i in steps if step == "confirm"}
    left -= {f"{i:032x}" for step, i in steps if step == "retract"}
    return stored, ranges, left


@settings(max_examples=25, deadline=None)
@given(histories())
def test_incidents_kept_step_by_step_are_the_groups_of_the_findings_left(
    history: tuple[list[Schedule], list[tuple[str, int]]],
) -> None:
    stored, ranges, left = replay(history, 90.0)
    kept = {f: ranges[f] for f in left}
    expected = {
        incident_commit(kept[f] for f in group): set(group)
        for group in overlapping_groups(kept, kept)
    }
    assert stored == expected


@settings(max_examples=50, deadline=None)
@given(histories(), st.sampled_from([0.5 / 24, 2 / 24, 4 / 24]))
# t1 (every other commit: c00004..c00006) joins t0's incident of c00005, which closes
# when t2's finding at c00012 is confirmed; t1 is retracted from the closed incident
@example(
    ([(1, 0, 0.0, 5), (2, 0, 0.0, 5), (1, 0, 0.0, 12)], [("confirm", 0), ("confirm", 1),
     ("confirm", 2), ("retract", 1)]),
    0.5 / 24,
)  # fmt: skip
def test_closing_incidents_loses_no_finding_and_keeps_none_retracted(
    history: tuple[list[Schedule], list[tuple[str, int]]], incident_open_days: float
) -> None:
    """Incidents closed an hour or a few after their newest member: every finding left
    is in one incident, no retracted one is, and each incident is named after its
    earliest member and joined by overlaps (a closed one takes no later finding, so
    there may be more incidents than overlapping groups)."""
    stored, ranges, left = replay(history, incident_open_days)
    members = [finding for group in stored.values() for finding in group]
    assert sorted(members) == sorted(left)
    for name, group in stored.items():
        spans = {f: ranges[f] for f in group}
        assert incident_commit(spans.values()) == name
        assert len(overlapping_groups(spans, spans)) == 1


def test_a_finding_that_moves_back_and_forth_repeats_its_incident_events(
    tmp_path: Path,
) -> None:
    # one series runs every commit, its finding moves between c00008 and c00010;
    # another's finding holds c00010
    handler = ChangePointHandler(Config())
    schedule: Schedule = (1, 0, 0.0, 8)
    events = []
    with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        with store.transaction() as tx:
            flapping, runs = stored_series(tx, 0, schedule)
            steady, _ = stored_series(tx, 1, schedule)
        at8, at10 = located(0, schedule, runs, 8), located(0, schedule, runs, 10)
        ref = SeriesRef("t0", "m", {})

        def finding(cp: ChangePointEvidence) -> Finding:
            return Finding(cp, "f" * 32, "confirmed", 0)

        moved = {
            10: BeliefChange(UPDATED, at10, at8, finding(at10), ("moved",)),
            8: BeliefChange(UPDATED, at8, at10, finding(at8), ("moved",)),
        }
        other = located(1, schedule, runs, 10)
        first = [
            IncidentMove(ref, flapping, BeliefChange(CONFIRMED, at8, at8, finding(at8)), None),
            IncidentMove(
                SeriesRef("t1", "m", {}),
                steady,
                BeliefChange(CONFIRMED, other, other, Finding(other, "e" * 32, "confirmed", 0)),
                None,
            ),
        ]
        for n, moves in enumerate([first, *([[IncidentMove(ref, flapping, moved[i], None)]
                                              for i in (10, 8, 10, 8)])]):  # fmt: skip
            with store.transaction() as tx:
                events += handler.incidents(f"r{n}", moves, tx, EMITTED_AT)[0]
    shown = [
        (v.incident["commit"], sorted(m["finding_id"][0] for m in v.incident["members"]))
        for v in events
        if v.incident is not None
    ]
    assert shown == [
        ("c00008", ["f"]),
        ("c00010", ["e"]),
        *[("c00008", []), ("c00010", ["e", "f"]), ("c00008", ["f"]), ("c00010", ["e"])] * 2,
    ]
    assert len({v.verdict_id for v in events}) == len(events)
