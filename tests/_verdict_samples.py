"""Schema-valid verdict documents of every kind, for the watch and forward tests."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from perfwatch.contract.models import ChangePointEvidence, SeriesRef, Verdict
from perfwatch.contract.validation import validate_verdict
from perfwatch.contract.verdicts import Incident, incident_id, incident_verdict

EMITTED_AT = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
COMMIT = "abc1234def5678900000000000000000000000000"


def evidence(direction: str = "regression", change: float = 12.3, pvalue: float = 0.0012) -> Any:
    return ChangePointEvidence(
        index=42,
        run_id="run-42",
        commit=COMMIT,
        time=datetime(2024, 4, 30, 8, 0, tzinfo=UTC),
        forward_change_percent=change,
        magnitude=abs(change) / 100,
        mean_before=100.0,
        stddev_before=2.0,
        mean_after=100.0 * (1 + change / 100),
        stddev_after=2.5,
        pvalue=pvalue,
        direction=direction,
    )


def verdict(
    kind: str = "change_point.detected",
    *,
    test: str = "api/search",
    metric: str | None = "p99",
    direction: str = "regression",
    change: float = 12.3,
    emitted_at: datetime = EMITTED_AT,
) -> dict[str, Any]:
    """A verdict of `kind`, valid against the verdict schema."""
    blocks: dict[str, Any] = {}
    if kind in ("change_point.detected", "change_point.confirmed", "change_point.updated"):
        blocks["change_point"] = evidence(direction, change)
    if kind in ("change_point.updated", "change_point.retracted"):
        blocks["previous"] = evidence(direction, change / 2)
    if kind.startswith("counter_"):
        outcome = {
            "counter_regression.detected": "regression",
            "counter_check.insufficient_baseline": "insufficient_baseline",
        }.get(kind, "pass")
        blocks["counter_check"] = {
            "verdict": outcome,
            "pvalue": 0.00042 if outcome == "regression" else 0.61,
            "look_first": ["cpu", "requests", "net", "io"] if outcome == "regression" else [],
            "clusters": [
                {"members": ["cpu", "requests", "net"], "flagged": outcome == "regression"},
                {"members": ["io", "disk"], "flagged": False},
            ],
        }
        metric = None
    if kind == "recommendation":
        blocks["recommendation"] = {"decision": "run", "run_share": 0.67, "votes": []}
        metric = None
    series = SeriesRef(test, metric, {"branch": "main"})
    seed = orjson.dumps([kind, test, metric, direction, change, emitted_at.isoformat()])
    document = Verdict(
        verdict_id=hashlib.sha256(seed).hexdigest()[:32],
        kind=kind,  # type: ignore[arg-type]
        emitted_at=emitted_at,
        series=series,
        record_run_id="run-50",
        parameters={"max_pvalue": 0.001},
        **blocks,
    ).to_json()
    assert validate_verdict(document) == [], document
    return document


INCIDENT_COMMIT = "0a17fb48"


class IncidentStream:
    """One commit's incident as the processor publishes it: a verdict per change of members."""

    def __init__(self, commit: str = INCIDENT_COMMIT) -> None:
        self.incident = Incident(commit, {})

    def change(
        self,
        joined: Sequence[str] = (),
        left: Sequence[str] = (),
        change: float = 5.0,
        direction: str = "regression",
    ) -> dict[str, Any]:
        opened = not self.incident.members
        for finding in left:
            self.incident.members.pop(finding)
        for finding in joined:
            series = SeriesRef(f"svc/{finding}", "p99_ms", {"branch": "main"})
            self.incident.members[finding] = Incident.member(
                series, finding, evidence(direction, change)
            )
        cause = SeriesRef(f"svc/{(list(joined) + list(left))[0]}", "p99_ms", {})
        return incident_verdict(
            self.incident,
            opened=opened,
            joined=list(joined),
            left=list(left),
            series=cause,
            record_run_id="nightly-074",
            emitted_at=EMITTED_AT,
        ).to_json()


def member_update(finding: str, change: float, commit: str = INCIDENT_COMMIT) -> dict[str, Any]:
    """A member's confirmed finding whose size changed: an alert of its own without groups."""
    document = verdict("change_point.updated", test=f"svc/{finding}", change=change)
    document["finding"] = {
        "id": finding,
        "state": "confirmed",
        "confirmed": True,
        "stable_runs": 9,
        "changed": ["size"],
        "incident": incident_id(commit),
    }
    return document
