"""The counter-cluster record handler: counter samples in, baselines kept, regression verdicts out.

A record with a `counters` block is checked against its
baseline: the counter samples of the latest `counters.baseline_runs` runs of
the same test and identifying attributes that raised no regression verdict.

- With fewer than `counters.min_baseline_runs` runs stored (unset: 1 under the
  p-value rule, 3 under the threshold rule), the record joins the baseline
  without a verdict.
- Otherwise the check is fitted on the baseline and applied to the record's
  samples with the decision rule `perfwatch compare` uses (`counters.decision`,
  the p-value rule at `counters.alpha` by default), or the fixed
  `counters.threshold`, or when `counters.calibrate` is set a threshold
  calibrated on the baseline runs (each checked against the others). A
  regression yields a `counter_regression.detected` verdict and the run stays
  out of the baseline. A pass adds the run to the baseline (the oldest run
  beyond `baseline_runs` leaves it) and yields a `counter_check.passed` verdict
  only when `counters.publish_passed` is set. Under the p-value rule a baseline
  of one run shows no run-to-run variation: the record gets a
  `counter_check.insufficient_baseline` verdict (no flag) and joins it.
- A run for which a handler before this one produced a change-point regression
  verdict in the same record is checked like any other, but stays out of the
  baseline too.

One blob per baseline key holds the baseline runs, ordered by timestamp then
run id (a late record is placed where it belongs, so it may leave the baseline
at once), and the (timestamp, run id) of the newest `JUDGED_MEMORY` runs this
handler saw. A run found there is a redelivery and changes nothing. Once that
memory is full, a record older than every run in it is too late to matter and
is ignored; a redelivery of a forgotten run is such a record too.

A verdict id hashes the kind, the baseline key, the run id, the baseline's run
ids and the check's parameters: the same record against the same baseline
always gets the same id.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import numpy as np
import orjson

from perfwatch.config import Config
from perfwatch.contract.models import Record, SeriesRef, Verdict, VerdictKind
from perfwatch.contract.timestamps import format_rfc3339
from perfwatch.contract.verdicts import DETECTED, UPDATED
from perfwatch.detectors.counters import CounterRegressionCheck, CounterSamples, PreparedRuns
from perfwatch.processor.handlers import record_baseline
from perfwatch.state import StoreTransaction

log = logging.getLogger("perfwatch.counterchecks")

COUNTER_BASELINE_NAMESPACE = "counter-baseline"
# Written first by every record with counters: the row lock it takes (PostgreSQL) makes
# two processors judge the records of one baseline key one after the other.
COUNTER_BASELINE_LOCK_NAMESPACE = "counter-baseline-lock"
REGRESSION_KIND: Final = "counter_regression.detected"
PASSED_KIND: Final = "counter_check.passed"
# The p-value rule against a baseline of one run: no run-to-run variation to judge by.
INSUFFICIENT_KIND: Final = "counter_check.insufficient_baseline"
_KINDS: Final[dict[str, VerdictKind]] = {
    "regression": REGRESSION_KIND,
    "pass": PASSED_KIND,
    "insufficient_baseline": INSUFFICIENT_KIND,
}
# Runs whose (timestamp, run id) the baseline blob remembers, to recognise redeliveries.
JUDGED_MEMORY = 1000

RunOrder = tuple[float, str]  # (epoch seconds, run id): the order of runs


@dataclass(frozen=True)
class BaselineRun:
    """One run's counter samples as the baseline keeps them."""

    run_id: str
    timestamp: float
    names: list[str]
    values: np.ndarray  # observations x counters, float64, NaN where missing

    @property
    def order(self) -> RunOrder:
        return (self.timestamp, self.run_id)

    def samples(self) -> CounterSamples:
        return CounterSamples(self.names, self.values, label=self.run_id)

    def to_json(self) -> dict[str, Any]:
        values = np.ascontiguousarray(self.values, dtype="<f8")
        return {
            "run_id": self.run_id,
            "timestamp": self.timestamp,
            "names": self.names,
            "rows": values.shape[0],
            "values": base64.b64encode(values.tobytes()).decode("ascii"),
        }

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> BaselineRun:
        flat = np.frombuffer(base64.b64decode(document["values"]), dtype="<f8")
        names = list(document["names"])
        return cls(
            document["run_id"],
            document["timestamp"],
            names,
            flat.reshape(document["rows"], len(names)).astype(np.float64),
        )


@dataclass
class CounterBaseline:
    """A baseline key's stored state (see the module docstring)."""

    runs: list[BaselineRun] = field(default_factory=list)  # ordered by (timestamp, run id)
    judged: list[RunOrder] = field(default_factory=list)  # sorted, at most JUDGED_MEMORY

    def to_bytes(self) -> bytes:
        return orjson.dumps({"runs": [run.to_json() for run in self.runs], "judged": self.judged})

    @classmethod
    def from_bytes(cls, data: bytes) -> CounterBaseline:
        document = orjson.loads(data)
        return cls(
            [BaselineRun.from_json(run) for run in document["runs"]],
            [(stamp, run_id) for stamp, run_id in document["judged"]],
        )

    def seen(self, order: RunOrder) -> bool:
        """Whether the run was judged before, or is older than every remembered run while
        the memory is full (see the module docstring)."""
        if len(self.judged) >= JUDGED_MEMORY and order < self.judged[0]:
            return True
        position = bisect.bisect_left(self.judged, order)
        return position < len(self.judged) and self.judged[position] == order

    def remember(self, order: RunOrder) -> None:
        bisect.insort(self.judged, order)
        del self.judged[:-JUDGED_MEMORY]

    def add(self, run: BaselineRun, keep: int) -> None:
        """Place the run by (timestamp, run id), keeping the newest `keep` runs."""
        orders = [r.order for r in self.runs]
        self.runs.insert(bisect.bisect_left(orders, run.order), run)
        del self.runs[:-keep]


def raised_regression(earlier: Sequence[Verdict]) -> bool:
    """Whether the verdicts produced so far for a record report a change-point regression."""
    return any(
        verdict.kind in (DETECTED, UPDATED)
        and verdict.change_point is not None
        and verdict.change_point.direction == "regression"
        for verdict in earlier
    )


def counter_verdict_id(
    kind: str,
    key: str,
    run_id: str,
    baseline_run_ids: Sequence[str],
    parameters: Mapping[str, Any],
) -> str:
    """Hash of kind, baseline key, target run id, baseline run ids and parameters; 32 hex
    digits, like every verdict id."""
    payload = orjson.dumps(
        [kind, key, run_id, list(baseline_run_ids), parameters], option=orjson.OPT_SORT_KEYS
    )
    return hashlib.sha256(payload).hexdigest()[:32]


class CounterCheckHandler:
    def __init__(self, config: Config) -> None:
        settings = config.counters
        self._identifying = config.series.identifying_attributes
        self._keep = settings.baseline_runs
        self._min_runs = settings.effective_min_baseline_runs
        self._publish_passed = settings.publish_passed
        self._calibrate = settings.calibrate
        # the rule perfwatch compare judges by, unless the settings name the threshold rule
        self._check_params: dict[str, Any] = {
            "decision": settings.decision,
            "alpha": settings.alpha,
            "threshold": settings.threshold,
            "block": settings.block,
            "workload": list(settings.workload),  # as a JSON document holds it
        }
        self._parameters = {
            **CounterRegressionCheck(**self._check_params).get_params(),
            "calibrate": self._calibrate,
        }

    def prepare(self, records: Sequence[Record], tx: StoreTransaction) -> None:
        keys = {record_baseline(r, self._identifying)[0] for r in records if r.counters is not None}
        for key in sorted(keys):
            tx.put_blob(COUNTER_BASELINE_LOCK_NAMESPACE, key, b"")

    def handle(
        self,
        record: Record,
        tx: StoreTransaction,
        emitted_at: datetime,
        earlier: Sequence[Verdict] = (),
    ) -> list[Verdict]:
        if record.counters is None:
            return []
        key, attributes = record_baseline(record, self._identifying)
        tx.put_blob(COUNTER_BASELINE_LOCK_NAMESPACE, key, b"")
        stored = tx.get_blob(COUNTER_BASELINE_NAMESPACE, key)
        baseline = CounterBaseline() if stored is None else CounterBaseline.from_bytes(stored)
        run = BaselineRun(
            record.run_id,
            record.timestamp.timestamp(),
            list(record.counters.names),
            record.counters.matrix(),
        )
        if baseline.seen(run.order):
            return []  # a redelivery, or a record too late to matter
        baseline.remember(run.order)
        verdicts: list[Verdict] = []
        regression = False
        if len(baseline.runs) >= self._min_runs:
            verdict = self._check(record, key, attributes, baseline, run, emitted_at)
            if verdict is not None:
                regression = verdict.kind == REGRESSION_KIND
                if verdict.kind != PASSED_KIND or self._publish_passed:
                    verdicts.append(verdict)
        joins = not regression and not raised_regression(earlier)
        if joins:
            baseline.add(run, self._keep)
        tx.put_blob(COUNTER_BASELINE_NAMESPACE, key, baseline.to_bytes())
        log.info(
            "counter samples judged",
            extra={
                "baseline": key,
                "run_id": record.run_id,
                "baseline_runs": len(baseline.runs),
                "regression": regression,
                "joined_baseline": joins,
            },
        )
        return verdicts

    def _check(
        self,
        record: Record,
        key: str,
        attributes: dict[str, str],
        baseline: CounterBaseline,
        run: BaselineRun,
        emitted_at: datetime,
    ) -> Verdict | None:
        """The check's verdict, or None when the samples cannot be checked (logged)."""
        check = CounterRegressionCheck(**self._check_params)
        runs = [r.samples() for r in baseline.runs]
        prepared = PreparedRuns()
        try:
            if self._calibrate:
                check.calibrate(runs, prepared_runs=prepared)
            result = check.fit(runs, prepared_runs=prepared).check(run.samples())
        except ValueError as err:
            # Counters that share nothing with the baseline are no reason to lose the
            # record's other checks by failing its transaction.
            log.warning(
                "counter samples cannot be checked",
                extra={"baseline": key, "run_id": record.run_id, "reason": str(err)},
            )
            return None
        kind = _KINDS[result.status]
        baseline_run_ids = [r.run_id for r in baseline.runs]
        evidence = {
            "verdict": result.status,
            **result.to_dict(),
            "baseline_run_ids": baseline_run_ids,
        }
        # the record's own time and commit: a run with counters only has no metric point
        # that could tell a reader when it ran
        evidence["target"] |= {"time": format_rfc3339(record.timestamp)}
        if record.commit:
            evidence["target"] |= {"commit": record.commit}
        if hasattr(check, "calibration_"):
            evidence["calibration"] = check.calibration_
        return Verdict(
            verdict_id=counter_verdict_id(
                kind, key, record.run_id, baseline_run_ids, self._parameters
            ),
            kind=kind,
            emitted_at=emitted_at,
            series=SeriesRef(record.test, None, attributes),
            record_run_id=record.run_id,
            parameters=dict(self._parameters),
            counter_check=evidence,
        )
