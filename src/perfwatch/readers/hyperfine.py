"""hyperfine JSON reports (`hyperfine --export-json FILE ...`) as records.

One record per benchmarked command: the test id is the command (or the name
given with `--command-name`, which hyperfine writes in its place), the
metrics are the wall-clock statistics and the user and system CPU times, all
in seconds and lower is better. A statistic hyperfine could not compute (the
standard deviation of a single run is `null`) is left out. Parameter values
(`--parameter-scan`, `--parameter-list`) become `param.<name>` attributes.
hyperfine writes no time of its own; the record's time comes from elsewhere.
"""

from __future__ import annotations

from typing import Any

from perfwatch.readers.tool_json import (
    LOWER_IS_BETTER,
    LocatedRecord,
    attribute_text,
    expect_array,
    expect_number,
    expect_object,
    expect_string,
    metric,
)

STATISTICS = ("mean", "stddev", "median", "min", "max", "user", "system")


def looks_like_hyperfine(document: Any) -> bool:
    return (
        isinstance(document, dict)
        and isinstance(document.get("results"), list)
        and all(isinstance(result, dict) and "command" in result for result in document["results"])
    )


def records_from_hyperfine(report: Any, source: str) -> list[LocatedRecord]:
    report = expect_object(report, source, "$")
    records = []
    for index, result in enumerate(expect_array(report.get("results"), source, "$.results")):
        path = f"$.results[{index}]"
        result = expect_object(result, source, path)
        test = expect_string(result.get("command"), source, f"{path}.command")
        metrics = {
            statistic: metric(
                expect_number(result[statistic], source, f"{path}.{statistic}"),
                "s",
                LOWER_IS_BETTER,
            )
            for statistic in STATISTICS
            if result.get(statistic) is not None
        }
        record: dict[str, Any] = {"test": test, "metrics": metrics}
        parameters = result.get("parameters") or {}
        if parameters:
            record["attributes"] = {
                f"param.{name}": attribute_text(value)
                for name, value in expect_object(parameters, source, f"{path}.parameters").items()
            }
        records.append(LocatedRecord(path, record))
    return records
