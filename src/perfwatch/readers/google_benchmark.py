"""Google Benchmark JSON reports (`--benchmark_out=FILE --benchmark_out_format=json`) as records.

One record per benchmark instance (`run_name`, e.g. `BM_Sort/64`), in the
order the report lists them:

- `real_time` and `cpu_time` in the report's `time_unit`, lower is better;
  `items_per_second` / `bytes_per_second` higher is better; user counters
  as plain numbers.
- With repetitions the report carries aggregates: the `mean` aggregate gives
  the plain metric names; every other aggregate (median, stddev, cv, ...) adds
  `real_time_<aggregate>` and `cpu_time_<aggregate>` (lower is better for the
  median, the minimum and the maximum; no direction for a spread such as
  stddev or cv). Without aggregates, several repetitions are averaged.
- Benchmarks that reported an error or were skipped (`SkipWithMessage`) have no
  measurement and give no record; complexity rows (BigO, RMS) are fits over
  several instances, not runs, and are left out too. A time or rate that is not
  a number is an error naming it.
- A counter Google Benchmark could not compute is written as a bare `NaN` or
  `Infinity` (not JSON, read anyway): that metric is left out of its record.
- Reports of releases before 1.5 have no `run_name` and `run_type`: an entry
  with an `aggregate_name` (1.4), or named `<instance>_mean`, `_median` or
  `_stddev` next to its instance's other entries (before 1.4), is an aggregate
  of that instance, never a benchmark of its own.

The time is the report's `context.date`; its executable's file name becomes
the `executable` attribute and a benchmark label the `label` attribute.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from perfwatch.readers.errors import SourceError
from perfwatch.readers.tool_json import (
    HIGHER_IS_BETTER,
    LOWER_IS_BETTER,
    LocatedRecord,
    expect_array,
    expect_number,
    expect_object,
    expect_string,
    is_finite_number,
    metric,
    utc_timestamp,
)

# Keys of a benchmark entry that describe it rather than measure it.
_DESCRIPTIVE_KEYS = {
    "name",
    "family_index",
    "per_family_instance_index",
    "run_name",
    "run_type",
    "repetitions",
    "repetition_index",
    "threads",
    "iterations",
    "time_unit",
    "aggregate_name",
    "aggregate_unit",
    "error_occurred",
    "error_message",
    "skipped",
    "skip_message",
    "label",
}
_RATES = {"items_per_second": "items/s", "bytes_per_second": "B/s"}
# The only aggregates releases before 1.4 wrote, known by their name's suffix alone.
_LEGACY_AGGREGATES = ("mean", "median", "stddev")
# Aggregates other than the mean that are a time of the benchmark, not a spread of it.
_LOCATION_AGGREGATES = frozenset({"median", "min", "max"})


def looks_like_google_benchmark(document: Any) -> bool:
    return (
        isinstance(document, dict)
        and isinstance(document.get("benchmarks"), list)
        and isinstance(document.get("context"), dict)
    )


def _entry_metrics(entry: dict[str, Any], with_direction: bool) -> dict[str, Any]:
    time_unit = entry.get("time_unit", "ns")
    metrics: dict[str, Any] = {}
    for key, value in entry.items():
        if key in _DESCRIPTIVE_KEYS or not is_finite_number(value):
            continue
        if key in ("real_time", "cpu_time"):
            metrics[key] = metric(value, time_unit, LOWER_IS_BETTER if with_direction else None)
        elif key in _RATES:
            metrics[key] = metric(value, _RATES[key], HIGHER_IS_BETTER if with_direction else None)
        else:
            metrics[key] = value
    return metrics


def _averaged(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean over repetitions of every metric all of them carry."""
    per_entry = [_entry_metrics(entry, with_direction=True) for entry in entries]
    if len(per_entry) == 1:
        return per_entry[0]
    averaged: dict[str, Any] = {}
    for name, first in per_entry[0].items():
        if not all(name in metrics for metrics in per_entry):
            continue
        values = [m[name]["value"] if isinstance(m[name], dict) else m[name] for m in per_entry]
        mean = sum(values) / len(values)
        averaged[name] = {**first, "value": mean} if isinstance(first, dict) else mean
    return averaged


def _legacy_aggregate_name(name: str, names: set[str]) -> str | None:
    """The aggregate an entry of a report before 1.4 is, from its name: `BM_x_mean` is the
    mean of `BM_x` when the report also has `BM_x` or another aggregate of it."""
    for aggregate in _LEGACY_AGGREGATES:
        stem = name.removesuffix(f"_{aggregate}")
        siblings = {stem, *(f"{stem}_{other}" for other in _LEGACY_AGGREGATES)} - {name}
        if stem != name and not siblings.isdisjoint(names):
            return aggregate
    return None


def _instance(
    entry: dict[str, Any], names: set[str], source: str, path: str
) -> tuple[str, str, Any]:
    """(instance name, run type, aggregate name) of an entry, in every release's layout."""
    if "run_name" in entry:
        run_name = expect_string(entry["run_name"], source, f"{path}.run_name")
        return run_name, entry.get("run_type", "iteration"), entry.get("aggregate_name")
    name = expect_string(entry.get("name"), source, f"{path}.name")
    aggregate = entry.get("aggregate_name")
    if aggregate is None and "run_type" not in entry:
        aggregate = _legacy_aggregate_name(name, names)
    if aggregate is None:
        return name, entry.get("run_type", "iteration"), None
    aggregate = expect_string(aggregate, source, f"{path}.aggregate_name")
    return name.removesuffix(f"_{aggregate}"), "aggregate", aggregate


def records_from_google_benchmark(report: Any, source: str) -> list[LocatedRecord]:
    report = expect_object(report, source, "$")
    context = expect_object(report.get("context"), source, "$.context")
    shared: dict[str, Any] = {}
    if context.get("date") is not None:
        shared["timestamp"] = utc_timestamp(context["date"], source, "$.context.date")
    attributes: dict[str, str] = {}
    if isinstance(context.get("executable"), str) and context["executable"]:
        attributes["executable"] = PurePath(context["executable"]).name

    # run_name -> (position of its first entry, iteration entries, aggregate entries)
    instances: dict[str, tuple[str, list[dict[str, Any]], list[dict[str, Any]]]] = {}
    labels: dict[str, str] = {}
    benchmarks = expect_array(report.get("benchmarks"), source, "$.benchmarks")
    names = {
        entry["name"]
        for entry in benchmarks
        if isinstance(entry, dict) and isinstance(entry.get("name"), str)
    }
    for index, entry in enumerate(benchmarks):
        path = f"$.benchmarks[{index}]"
        entry = expect_object(entry, source, path)
        if entry.get("error_occurred") or entry.get("skipped"):
            continue
        if "real_time" not in entry:
            continue  # a complexity fit (BigO, RMS), no run of its own
        for key in ("real_time", "cpu_time", *_RATES):
            if key in entry:
                expect_number(entry[key], source, f"{path}.{key}")
        run_name, run_type, aggregate_name = _instance(entry, names, source, path)
        _, iterations, aggregates = instances.setdefault(run_name, (path, [], []))
        if run_type == "aggregate":
            aggregates.append({**entry, "aggregate_name": aggregate_name})
        elif run_type == "iteration":
            iterations.append(entry)
        else:
            raise SourceError(source, f"{path}.run_type: unknown run type {run_type!r}")
        if isinstance(entry.get("label"), str) and entry["label"]:
            labels[run_name] = entry["label"]

    records = []
    for run_name, (position, iterations, aggregates) in instances.items():
        if aggregates:
            metrics: dict[str, Any] = {}
            for aggregate in aggregates:
                name = aggregate.get("aggregate_name")
                if name == "mean":
                    metrics.update(_entry_metrics(aggregate, with_direction=True))
                    continue
                # a percentage aggregate (cv) is a ratio whatever the time unit is
                unitless = aggregate.get("aggregate_unit") == "percentage"
                located = name in _LOCATION_AGGREGATES and not unitless
                timings = _entry_metrics(aggregate, with_direction=located)
                for key in ("real_time", "cpu_time"):
                    if key not in timings:
                        continue  # not finite: left out
                    value = timings[key]
                    metrics[f"{key}_{name}"] = value["value"] if unitless else value
        else:
            metrics = _averaged(iterations)
        record: dict[str, Any] = {"test": run_name, **shared, "metrics": metrics}
        record_attributes = dict(attributes)
        if run_name in labels:
            record_attributes["label"] = labels[run_name]
        if record_attributes:
            record["attributes"] = record_attributes
        records.append(LocatedRecord(position, record))
    return records
