"""JMH (Java Microbenchmark Harness) JSON reports (`-rf json -rff FILE`) as records.

A JMH report is a JSON array with one result per benchmark method, parameter
combination and mode. One record per benchmark and parameter combination, in
the order of their first result:

- The test id is the fully qualified method (`benchmark`), followed by the
  parameters as JMH lists them (by name), `[kind=sorted,size=1000]`, as Google
  Benchmark's names carry its arguments; the parameters are also
  `param.<name>` attributes.
- The primary metric is named after the mode (`thrpt`, `avgt`, `sample`,
  `ss`) in the report's unit: a rate (`ops/s`) is higher is better, a time per
  operation (`us/op`) lower is better, and a unit that is neither takes the
  mode's direction (throughput higher, the others lower). Its `scoreError`
  (half the 99.9 % confidence interval) is `<mode>_error`, in the same unit
  with no direction, as Google Benchmark's non-mean aggregates are.
- Secondary metrics (profilers' `gc.alloc.rate.norm`, `@AuxCounters`, a
  `@Group`'s methods ...) keep their name without the `·` older releases put
  before a profiler's metrics, so a series continues across JMH releases, and
  their unit. The garbage collector's (`gc.*`) are lower is better; any other
  is left without a direction, for the `[directions]` configuration to give
  (else a change is reported, not judged). A benchmark run in several modes
  reports them once per mode: then each is suffixed with its mode,
  `gc.alloc.rate.norm_avgt`.
- JMH writes a score it could not compute as the string `"NaN"` (and an
  infinite one as `"+INF"` or `"-INF"`): that score is no measurement and is
  left out; a benchmark with no score left gives no record.

The iteration scores (`rawData`, `rawDataHistogram`) and percentiles are not
kept: a record carries one value per metric. The JVM and JMH versions and the
thread count become attributes. JMH writes no time of its own; the record's
time comes from elsewhere.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from perfwatch.readers.errors import SourceError
from perfwatch.readers.tool_json import (
    HIGHER_IS_BETTER,
    LOWER_IS_BETTER,
    LocatedRecord,
    attribute_text,
    expect_array,
    expect_object,
    expect_string,
    is_finite_number,
    is_number,
    metric,
)

# What JMH writes in place of a score that is not a finite number.
_NOT_A_SCORE = {"NaN", "+INF", "-INF"}
# Older releases put a middle dot before the names of profilers' metrics.
_PROFILER_MARK = "\u00b7"
_GC_PROFILER = "gc."
_THROUGHPUT_MODE = "thrpt"
# Rates (`ops/s`, `ops/us`) and times per operation (`ns/op`, `ms/op`).
_RATE_UNIT = re.compile(r"ops/[a-z]+")
_TIME_PER_OPERATION_UNIT = re.compile(r"[a-z]+/op")
# Report fields that become attributes, under the names given here.
_ATTRIBUTES = {
    "threads": "threads",
    "jmhVersion": "jmh_version",
    "jdkVersion": "jdk_version",
    "vmName": "vm_name",
    "vmVersion": "vm_version",
}


def looks_like_jmh(document: Any) -> bool:
    return (
        isinstance(document, list)
        and bool(document)
        and all(
            isinstance(result, dict) and {"benchmark", "mode", "primaryMetric"} <= result.keys()
            for result in document
        )
    )


def _unit_direction(unit: str) -> str | None:
    if _RATE_UNIT.fullmatch(unit):
        return HIGHER_IS_BETTER
    if _TIME_PER_OPERATION_UNIT.fullmatch(unit):
        return LOWER_IS_BETTER
    return None


def _score(value: Any, source: str, path: str) -> float | int | None:
    """A score, or None for JMH's spelling of a score that is not a finite number (or a
    bare NaN or Infinity, which a report edited by a JSON writer that allows them has)."""
    if is_finite_number(value):
        return value
    if is_number(value) or value in _NOT_A_SCORE:
        return None
    raise SourceError(
        source,
        f'{path}: expected a number (or "NaN", "+INF", "-INF"), got {orjson.dumps(value).decode()}',
    )


def _result_metrics(
    result: dict[str, Any], mode: str, source: str, path: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(primary metrics, secondary metrics by name) of one result of the report."""
    primary_path = f"{path}.primaryMetric"
    primary = expect_object(result.get("primaryMetric"), source, primary_path)
    unit = expect_string(primary.get("scoreUnit"), source, f"{primary_path}.scoreUnit")
    mode_direction = HIGHER_IS_BETTER if mode == _THROUGHPUT_MODE else LOWER_IS_BETTER
    primary_metrics: dict[str, Any] = {}
    score = _score(primary.get("score"), source, f"{primary_path}.score")
    if score is not None:
        primary_metrics[mode] = metric(score, unit, _unit_direction(unit) or mode_direction)
    if "scoreError" in primary:
        error = _score(primary["scoreError"], source, f"{primary_path}.scoreError")
        if error is not None:
            primary_metrics[f"{mode}_error"] = metric(error, unit)

    secondary_metrics: dict[str, Any] = {}
    secondaries_path = f"{path}.secondaryMetrics"
    secondaries = expect_object(result.get("secondaryMetrics", {}), source, secondaries_path)
    for name, secondary in secondaries.items():
        secondary_path = f"{secondaries_path}[{name!r}]"
        secondary = expect_object(secondary, source, secondary_path)
        value = _score(secondary.get("score"), source, f"{secondary_path}.score")
        if value is None:
            continue
        unit = expect_string(secondary.get("scoreUnit"), source, f"{secondary_path}.scoreUnit")
        metric_name = name.removeprefix(_PROFILER_MARK)
        # Only the garbage collector's are known to be costs; a rate can be good (a
        # @Group method's) or bad (an @AuxCounters count of misses).
        direction = LOWER_IS_BETTER if metric_name.startswith(_GC_PROFILER) else None
        secondary_metrics[metric_name] = metric(value, unit, direction)
    return primary_metrics, secondary_metrics


def _test_id(benchmark: str, parameters: dict[str, Any]) -> str:
    if not parameters:
        return benchmark
    listed = ",".join(f"{name}={attribute_text(value)}" for name, value in parameters.items())
    return f"{benchmark}[{listed}]"


class _Benchmark:
    """The results of one benchmark and parameter combination, one per mode."""

    def __init__(self, position: str, attributes: dict[str, str]) -> None:
        self.position = position
        self.attributes = attributes
        self.modes: dict[str, str] = {}  # mode -> its result's position
        self.primary: dict[str, Any] = {}
        self.secondary: dict[str, dict[str, Any]] = {}  # mode -> its secondary metrics

    def metrics(self) -> dict[str, Any]:
        several_modes = len(self.secondary) > 1
        metrics = dict(self.primary)
        for mode, secondaries in self.secondary.items():
            for name, value in secondaries.items():
                metrics[f"{name}_{mode}" if several_modes else name] = value
        return metrics


def records_from_jmh(report: Any, source: str) -> list[LocatedRecord]:
    benchmarks: dict[str, _Benchmark] = {}
    for index, result in enumerate(expect_array(report, source, "$")):
        path = f"$[{index}]"
        result = expect_object(result, source, path)
        benchmark = expect_string(result.get("benchmark"), source, f"{path}.benchmark")
        mode = expect_string(result.get("mode"), source, f"{path}.mode")
        parameters = expect_object(result.get("params", {}), source, f"{path}.params")
        test = _test_id(benchmark, parameters)
        attributes = {
            attribute: attribute_text(result[field])
            for field, attribute in _ATTRIBUTES.items()
            if result.get(field) not in (None, "")
        }
        for name, value in parameters.items():
            attributes[f"param.{name}"] = attribute_text(value)
        entry = benchmarks.setdefault(test, _Benchmark(path, attributes))
        if mode in entry.modes:
            raise SourceError(
                source,
                f"{path}: a second {mode} result of {test} (the first is {entry.modes[mode]}); "
                "publish each run's report on its own",
            )
        entry.modes[mode] = path
        primary, secondary = _result_metrics(result, mode, source, path)
        entry.primary.update(primary)
        entry.secondary[mode] = secondary

    records = []
    for test, entry in benchmarks.items():
        metrics = entry.metrics()
        if not metrics:
            continue
        record: dict[str, Any] = {"test": test, "metrics": metrics}
        if entry.attributes:
            record["attributes"] = entry.attributes
        records.append(LocatedRecord(entry.position, record))
    return records
