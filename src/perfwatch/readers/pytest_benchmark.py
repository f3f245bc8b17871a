"""pytest-benchmark JSON reports (`pytest --benchmark-json=FILE`) as records.

One record per benchmark: the test id is the benchmark's `fullname`
(`path::test[param]`), the metrics are its timing statistics in seconds plus
operations per second (left out for the releases before 3.1, which did
not compute it), the commit and branch come from the report's `commit_info`
when pytest-benchmark could read them (its placeholders, such as the branch
"(detached head)" of a CI checkout, are left out for the CI variables or git
to fill), and the time is the report's `datetime`. Parameters become
`param.<name>` attributes and a group the `group` attribute.
"""

from __future__ import annotations

from typing import Any

from perfwatch.readers.tool_json import (
    HIGHER_IS_BETTER,
    LOWER_IS_BETTER,
    LocatedRecord,
    attribute_text,
    expect_array,
    expect_number,
    expect_object,
    expect_string,
    metric,
    utc_timestamp,
)

# statistic -> (unit, direction); the other statistics (quartiles, outlier counts)
# describe the distribution and are not tracked as series.
STATISTICS: dict[str, tuple[str, str]] = {
    "mean": ("s", LOWER_IS_BETTER),
    "median": ("s", LOWER_IS_BETTER),
    "min": ("s", LOWER_IS_BETTER),
    "max": ("s", LOWER_IS_BETTER),
    "stddev": ("s", LOWER_IS_BETTER),
    "ops": ("ops/s", HIGHER_IS_BETTER),
}

# Releases before 3.1 have no `ops`; a report without it is complete.
_ADDED_LATER = {"ops"}

# What pytest-benchmark writes in place of what it could not learn: outside a repository
# ("unversioned", "(unknown)"), when git failed ("unknown"), and on a commit checked out
# alone, as CI checkouts are ("(detached head)"). None is a commit or branch name.
_UNKNOWN_COMMIT = {"unversioned", "unknown", ""}
_UNKNOWN_BRANCH = {"(unknown)", "(detached head)", ""}


def looks_like_pytest_benchmark(document: Any) -> bool:
    return (
        isinstance(document, dict)
        and isinstance(document.get("benchmarks"), list)
        and "machine_info" in document
    )


def records_from_pytest_benchmark(report: Any, source: str) -> list[LocatedRecord]:
    report = expect_object(report, source, "$")
    shared: dict[str, Any] = {}
    if report.get("datetime") is not None:
        shared["timestamp"] = utc_timestamp(report["datetime"], source, "$.datetime")
    commit_info = report.get("commit_info")
    if isinstance(commit_info, dict):
        commit = commit_info.get("id")
        if isinstance(commit, str) and commit not in _UNKNOWN_COMMIT:
            shared["commit"] = commit
        branch = commit_info.get("branch")
        if isinstance(branch, str) and branch not in _UNKNOWN_BRANCH:
            shared["branch"] = branch

    records = []
    benchmarks = expect_array(report.get("benchmarks"), source, "$.benchmarks")
    for index, benchmark in enumerate(benchmarks):
        path = f"$.benchmarks[{index}]"
        benchmark = expect_object(benchmark, source, path)
        name = benchmark.get("fullname") or benchmark.get("name")
        test = expect_string(name, source, f"{path}.fullname")
        stats = expect_object(benchmark.get("stats"), source, f"{path}.stats")
        metrics = {
            statistic: metric(
                expect_number(stats.get(statistic), source, f"{path}.stats.{statistic}"),
                unit,
                direction,
            )
            for statistic, (unit, direction) in STATISTICS.items()
            if statistic in stats or statistic not in _ADDED_LATER
        }
        attributes = {}
        if benchmark.get("group") is not None:
            attributes["group"] = attribute_text(benchmark["group"])
        for param, value in (benchmark.get("params") or {}).items():
            attributes[f"param.{param}"] = attribute_text(value)
        record: dict[str, Any] = {"test": test, **shared, "metrics": metrics}
        if attributes:
            record["attributes"] = attributes
        records.append(LocatedRecord(path, record))
    return records
