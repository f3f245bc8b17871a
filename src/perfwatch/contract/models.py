"""Record and verdict documents as Python objects (the models the schemas describe)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from perfwatch.contract.timestamps import format_rfc3339, parse_rfc3339
from perfwatch.contract.validation import RECORD_SCHEMA, VERDICT_SCHEMA, checked

# numpy is imported where used: most commands that read records never need it.
if TYPE_CHECKING:
    import numpy as np

Direction = Literal["higher_is_better", "lower_is_better"]
ChangeDirection = Literal["regression", "improvement", "unknown"]
VerdictKind = Literal[
    "change_point.detected",
    "change_point.confirmed",
    "change_point.updated",
    "change_point.retracted",
    "change_point.suspected",
    "change_point.withdrawn",
    "counter_regression.detected",
    "counter_check.passed",
    "counter_check.insufficient_baseline",
    "recommendation",
    "incident.opened",
    "incident.updated",
]


def _present(**members: Any) -> dict[str, Any]:
    """The members that are not None: optional JSON members are left out, never null."""
    return {name: value for name, value in members.items() if value is not None}


@dataclass(frozen=True, slots=True)
class MetricValue:
    value: float
    unit: str | None = None
    direction: Direction | None = None

    def to_json(self) -> float | dict[str, Any]:
        details = _present(unit=self.unit, direction=self.direction)
        return {"value": self.value, **details} if details else self.value


@dataclass(frozen=True, slots=True)
class Counters:
    """Counter samples of one run: ``values[observation][counter]``, None where missing."""

    names: list[str]
    values: list[list[float | None]]
    timestamps: list[float | str] | None = None
    role: Literal["baseline", "target"] | None = None

    def matrix(self) -> np.ndarray:
        """Observations x counters as float64, NaN where a sample is missing."""
        import numpy as np

        return np.array(
            [[math.nan if v is None else v for v in row] for row in self.values], dtype=np.float64
        ).reshape(len(self.values), len(self.names))

    def to_json(self) -> dict[str, Any]:
        return {
            "names": self.names,
            "values": self.values,
            **_present(timestamps=self.timestamps, role=self.role),
        }


@dataclass(frozen=True, slots=True)
class InputProfile:
    input_id: str
    size: float
    wall_time_s: float
    cpu_time_s: float
    peak_memory_bytes: float
    statements: int
    function_calls: int
    loop_iterations: int
    conditionals: int
    # Every timing pass, in the order measured: what a paired old/new comparison and its
    # confidence interval need (the minima above alone cannot tell noise from a change).
    cpu_times_s: list[float] | None = None
    wall_times_s: list[float] | None = None
    # The passes above form this many equal consecutive rounds, each in a process of its
    # own: a process's own speed (memory layout, the core it ran on) is shared by its passes.
    timing_rounds: int | None = None
    # Each timing pass called the code this many times and holds the time of one call
    # (a very short input is timed over several calls).
    calls_per_pass: int | None = None

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        for name in ("cpu_times_s", "wall_times_s", "timing_rounds", "calls_per_pass"):
            if doc[name] is None:
                del doc[name]
        return doc

    def timing_cost_s(self) -> float:
        """Wall-clock seconds its timing passes took, every call of every pass."""
        return sum(self.wall_times_s or [self.wall_time_s]) * (self.calls_per_pass or 1)


@dataclass(frozen=True, slots=True)
class Inputs:
    kind: Literal["full_suite", "update_sample"]
    profiles: list[InputProfile]
    # An update sample's inputs profiled on the old code next to the update (drift reference).
    reference_profiles: list[InputProfile] | None = None

    def to_json(self) -> dict[str, Any]:
        references = self.reference_profiles
        return {
            "kind": self.kind,
            "profiles": [profile.to_json() for profile in self.profiles],
            **_present(
                reference_profiles=None
                if references is None
                else [profile.to_json() for profile in references]
            ),
        }


@dataclass(frozen=True, slots=True)
class Record:
    """One run of one test (``perfwatch.record/v1``)."""

    test: str
    run_id: str
    timestamp: datetime
    metrics: dict[str, MetricValue]
    commit: str | None = None
    branch: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)
    counters: Counters | None = None
    inputs: Inputs | None = None

    @classmethod
    def from_json(cls, doc: Any) -> Record:
        """Validate a decoded document and build the record; RecordError on any problem."""
        return cls._build(checked(doc, "record", check_finite=True))

    @classmethod
    def _build(cls, doc: Mapping[str, Any]) -> Record:
        metrics = {
            name: MetricValue(float(v))
            if not isinstance(v, dict)
            else MetricValue(float(v["value"]), v.get("unit"), v.get("direction"))
            for name, v in doc["metrics"].items()
        }
        counters = doc.get("counters")
        inputs = doc.get("inputs")
        return cls(
            test=doc["test"],
            run_id=doc["run_id"],
            timestamp=parse_rfc3339(doc["timestamp"]),
            metrics=metrics,
            commit=doc.get("commit"),
            branch=doc.get("branch"),
            attributes=dict(doc.get("attributes", {})),
            counters=None
            if counters is None
            else Counters(
                counters["names"],
                counters["values"],
                counters.get("timestamps"),
                counters.get("role"),
            ),
            inputs=None
            if inputs is None
            else Inputs(
                inputs["kind"],
                [InputProfile(**p) for p in inputs["profiles"]],
                None
                if "reference_profiles" not in inputs
                else [InputProfile(**p) for p in inputs["reference_profiles"]],
            ),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": RECORD_SCHEMA,
            "test": self.test,
            "run_id": self.run_id,
            **_present(commit=self.commit, branch=self.branch),
            "timestamp": format_rfc3339(self.timestamp),
            **_present(attributes=self.attributes or None),
            "metrics": {name: metric.to_json() for name, metric in self.metrics.items()},
            **_present(
                counters=None if self.counters is None else self.counters.to_json(),
                inputs=None if self.inputs is None else self.inputs.to_json(),
            ),
        }


@dataclass(frozen=True, slots=True)
class SeriesRef:
    """The series a verdict is about: test, metric (absent for whole-run checks), key attributes."""

    test: str
    metric: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"test": self.test, **_present(metric=self.metric), "attributes": self.attributes}


@dataclass(frozen=True, slots=True)
class ChangePointEvidence:
    """A change point located in a series' history; ``index`` is the first run after it."""

    index: int
    run_id: str
    commit: str | None
    time: datetime
    forward_change_percent: float
    magnitude: float
    mean_before: float
    stddev_before: float
    mean_after: float
    stddev_after: float
    pvalue: float
    direction: ChangeDirection

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ChangePointEvidence:
        values: dict[str, Any] = {name: doc.get(name) for name in _EVIDENCE_FIELDS}
        values["time"] = parse_rfc3339(doc["time"])
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        # Every field is a scalar: no deep copy (asdict's) needed on this hot path.
        doc = {name: getattr(self, name) for name in _EVIDENCE_FIELDS}
        doc["time"] = format_rfc3339(self.time)
        return doc


_EVIDENCE_FIELDS = tuple(spec.name for spec in fields(ChangePointEvidence))


@dataclass(frozen=True, slots=True)
class Verdict:
    """A change of belief (``perfwatch.verdict/v1``)."""

    verdict_id: str
    kind: VerdictKind
    emitted_at: datetime
    series: SeriesRef
    record_run_id: str
    parameters: dict[str, Any]
    change_point: ChangePointEvidence | None = None
    previous: ChangePointEvidence | None = None
    counter_check: dict[str, Any] | None = None
    recommendation: dict[str, Any] | None = None
    finding: dict[str, Any] | None = None
    episode: dict[str, Any] | None = None
    series_status: dict[str, Any] | None = None
    incident: dict[str, Any] | None = None
    suspicion: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, doc: Any) -> Verdict:
        """Validate a decoded document and build the verdict; RecordError on any problem."""
        return cls._build(checked(doc, "verdict", check_finite=True))

    @classmethod
    def _build(cls, doc: Mapping[str, Any]) -> Verdict:
        series = doc["series"]
        return cls(
            verdict_id=doc["verdict_id"],
            kind=doc["kind"],
            emitted_at=parse_rfc3339(doc["emitted_at"]),
            series=SeriesRef(series["test"], series.get("metric"), dict(series["attributes"])),
            record_run_id=doc["record_run_id"],
            parameters=doc["parameters"],
            change_point=_optional_evidence(doc.get("change_point")),
            previous=_optional_evidence(doc.get("previous")),
            counter_check=doc.get("counter_check"),
            recommendation=doc.get("recommendation"),
            finding=doc.get("finding"),
            episode=doc.get("episode"),
            series_status=doc.get("series_status"),
            incident=doc.get("incident"),
            suspicion=doc.get("suspicion"),
        )

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "schema": VERDICT_SCHEMA,
            "verdict_id": self.verdict_id,
            "kind": self.kind,
            "emitted_at": format_rfc3339(self.emitted_at),
            "series": self.series.to_json(),
            "record_run_id": self.record_run_id,
            "parameters": self.parameters,
        }
        doc.update(
            _present(
                change_point=None if self.change_point is None else self.change_point.to_json(),
                previous=None if self.previous is None else self.previous.to_json(),
                counter_check=self.counter_check,
                recommendation=self.recommendation,
                finding=self.finding,
                episode=self.episode,
                series_status=self.series_status,
                incident=self.incident,
                suspicion=self.suspicion,
            )
        )
        return doc


def _optional_evidence(doc: Mapping[str, Any] | None) -> ChangePointEvidence | None:
    return None if doc is None else ChangePointEvidence.from_json(doc)
