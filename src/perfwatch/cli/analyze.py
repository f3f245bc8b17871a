"""`perfwatch analyze`: change points in series read from CSV or record files."""

from __future__ import annotations

import atexit
import gc
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from itertools import repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click
import orjson

from perfwatch.cli.errors import InputError
from perfwatch.cli.flags import FiniteFloatRange, config_option, output_format_option
from perfwatch.config_file import config_file_in_use
from perfwatch.readers.errors import SourceError, read_source

# The readers (numpy), the record module, the detector and the configuration (pydantic)
# are imported where they are used, so `perfwatch analyze --help` starts at once, a CSV
# run skips the records and a run without a configuration file skips the configuration.
if TYPE_CHECKING:
    from perfwatch.config import Config
    from perfwatch.contract.models import ChangeDirection, Direction
    from perfwatch.detectors.edivisive import ChangePoint, EDivisiveParams
    from perfwatch.readers.series import MetricSeries

RECORD_SUFFIXES = {".json", ".jsonl", ".ndjson"}
CSV_SUFFIXES = {".csv", ".tsv", ".txt"}
DIRECTION_WORDS: dict[str, Direction] = {
    "higher": "higher_is_better",
    "higher_is_better": "higher_is_better",
    "lower": "lower_is_better",
    "lower_is_better": "lower_is_better",
}
# A progress bar is worth drawing only when analysis takes a noticeable while.
PROGRESS_MIN_SERIES = 20
SHOWN_COMMIT_CHARS = 10
TIME_FORMAT = "%Y-%m-%d %H:%M:%S +0000"
VALUE_FORMAT = "{:.10g}"
CHANGE_COLOURS = {"regression": "red", "improvement": "green", "unknown": "yellow"}
# The parameters Otava has, which --compat otava takes from the configuration.
OTAVA_PARAMETERS = ("window_len", "max_pvalue", "min_magnitude", "compat")


@dataclass(frozen=True)
class FoundChange:
    change: ChangePoint
    direction: ChangeDirection


@dataclass(frozen=True)
class SeriesResult:
    series: MetricSeries
    changes: list[FoundChange]
    # the runs with a value the series' mode needs to place any change point, when it has
    # fewer: a report that says only "0 change point(s)" would read as "nothing changed"
    needs_runs: int | None = None


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--metrics",
    "metric_lists",
    multiple=True,
    metavar="NAMES",
    help="Analyse only these metrics (comma-separated; repeatable).",
)
@click.option("--branch", help="Keep only runs of this branch (required if runs mix branches).")
@click.option("--since", help="First run to keep: a commit (or unique prefix) or ISO 8601 date.")
@click.option("--until", help="Last run to keep: a commit (or unique prefix) or ISO 8601 date.")
@click.option("--last", type=click.IntRange(min=1), help="Keep only the last N runs.")
@click.option(
    "-P",
    "--max-pvalue",
    type=FiniteFloatRange(0, 1),
    help="Report change points with a p-value up to this (default 0.001).",
)
@click.option(
    "-M",
    "--min-magnitude",
    type=FiniteFloatRange(min=0),
    help="Report change points whose relative change of mean is at least this (default 0).",
)
@click.option(
    "--window",
    type=click.IntRange(min=2, max=sys.maxsize),
    help="E-Divisive window length (default 50).",
)
@click.option(
    "--compat",
    type=click.Choice(["otava"]),
    help="Reproduce Apache Otava's results exactly, shortcomings included.",
)
@click.option(
    "--direction",
    "direction_flags",
    multiple=True,
    metavar="METRIC=higher|lower",
    help="Which way is better for a metric (repeatable); otherwise the records' direction.",
)
@click.option("--time-column", help="CSV time column (default: time/timestamp/date, else first).")
@click.option("--sep", help="CSV separator (default: detected from the header; 'tab' for TAB).")
@config_option
@output_format_option()
def analyze(
    files: tuple[Path, ...],
    metric_lists: tuple[str, ...],
    branch: str | None,
    since: str | None,
    until: str | None,
    last: int | None,
    max_pvalue: float | None,
    min_magnitude: float | None,
    window: int | None,
    compat: str | None,
    direction_flags: tuple[str, ...],
    time_column: str | None,
    sep: str | None,
    config_path: Path | None,
    output_format: str,
) -> None:
    """Find change points in the runs of each metric in FILES.

    FILES are Otava-style CSV files (a time column, optional commit, version and
    branch columns, metric columns, attribute columns; one test per file, named
    after the file) or perfwatch record files (JSON Lines, or .json holding a
    record or an array of records; grouped by test across files).

    A configuration file's [analyzer] rules and [directions] apply as in
    `perfwatch serve`; these flags and the records' directions take precedence.
    """
    directions = _parse_directions(direction_flags)
    metrics = {name.strip() for text in metric_lists for name in text.split(",") if name.strip()}
    # each value is already of its parameter's type: click converted and checked it
    settings: dict[str, Any] = {
        "window_len": window,
        "max_pvalue": max_pvalue,
        "min_magnitude": min_magnitude,
        "compat": compat,
    }
    flag_params = {k: v for k, v in settings.items() if v is not None}
    config = _command_config(config_path)
    parameters = _Parameters(flag_params, config)
    try:
        # Runs without a value are read in; each series then keeps or drops them by its
        # own mode, which the flag or the configuration's rule for the series sets.
        loaded = _load_series(
            files,
            metrics or None,
            time_column=time_column,
            separator=_separator(sep),
            keep_missing=True,
        )
        _check_found(loaded, metrics, files)
        # with --metrics, a direction for a metric it leaves out is not a typo: a fixed
        # list of directions serves every choice of metrics
        judged = set(directions) if not metrics else set(directions) & set(metrics)
        unknown = sorted(judged - {series.metric for series in loaded})
        if unknown:
            raise click.BadParameter(
                f"no metric named {', '.join(map(repr, unknown))} among the series analysed",
                param_hint="'--direction'",
            )
        selected = [
            _prepared(
                _missing_runs_as_the_mode_treats_them(series, parameters),
                directions,
                config,
                branch=branch,
                since=since,
                until=until,
                last=last,
            )
            for series in loaded
        ]
    except SourceError as error:
        raise InputError(str(error)) from None
    results = _detect_all(selected, parameters)
    if output_format == "json":
        output = orjson.dumps(
            {"series": [_result_json(result) for result in results]}, option=orjson.OPT_INDENT_2
        ).decode()
    else:
        output = _render_text(results, colour=sys.stdout.isatty())
    click.echo(output)
    # The detector's imports leave a large graph of objects, which the interpreter's last
    # garbage collection would walk at exit (about 0.1 s); frozen objects are not walked.
    # Frozen at exit only, so a caller running this command in-process keeps collecting.
    atexit.register(gc.freeze)


def _command_config(config_path: Path | None) -> Config | None:
    """The configuration file's settings when a file is in use (`--config`,
    `$PERFWATCH_CONFIG`, ./perfwatch.toml), else None. The PERFWATCH_* setting variables
    are left out: they set no table analyze reads, and a bad one is not its concern."""
    in_use = config_file_in_use(config_path)
    if in_use is None:
        return None
    from perfwatch.config import ConfigError, load_config

    try:
        return load_config(in_use, env={})
    except ConfigError as error:
        raise InputError(str(error)) from None


class _Parameters:
    """Each series' E-Divisive parameters: the flags' over the configuration's rules for the
    series over the defaults, key by key, as `perfwatch serve` builds them from the rules."""

    def __init__(self, flags: dict[str, Any], config: Config | None) -> None:
        self._flags = flags
        self._config = config
        self._built: dict[tuple[tuple[str, Any], ...], EDivisiveParams] = {}

    def for_series(self, series: MetricSeries) -> EDivisiveParams:
        from perfwatch.detectors.edivisive import EDivisiveParams

        configured: dict[str, Any] = {}
        if self._config is not None:
            configured = self._config.analyzer_params_for(series.test, series.metric)
        if self._flags.get("compat") == "otava":
            # Otava has its three parameters only: the configuration's default-mode options
            # would contradict the exact reproduction the flag asks for.
            configured = {k: v for k, v in configured.items() if k in OTAVA_PARAMETERS}
        merged = {**configured, **self._flags}
        key = tuple(sorted(merged.items()))
        params = self._built.get(key)
        if params is None:
            try:
                params = self._built[key] = EDivisiveParams.from_dict(merged)
            except ValueError as error:
                raise InputError(
                    f"{series.test} / {series.metric}: analyzer parameters {merged}: {error}"
                ) from None
        return params


def _missing_runs_as_the_mode_treats_them(
    series: MetricSeries, parameters: _Parameters
) -> MetricSeries:
    """Otava keeps a run whose value is missing (its analysis fills the value in and counts
    the run), so compat mode does too; the default mode leaves the run out."""
    import numpy as np

    if parameters.for_series(series).is_compat:
        return series
    present = np.flatnonzero(~np.isnan(series.values))
    return series if len(present) == len(series) else series.take(present.tolist())


def _parse_directions(flags: Sequence[str]) -> dict[str, Direction]:
    directions: dict[str, Direction] = {}
    for flag in flags:
        metric, _, word = flag.rpartition("=")
        if not metric or word.lower() not in DIRECTION_WORDS:
            raise click.BadParameter(
                f"{flag!r} is not METRIC=higher or METRIC=lower", param_hint="'--direction'"
            )
        directions[metric] = DIRECTION_WORDS[word.lower()]
    return directions


def _separator(sep: str | None) -> str | None:
    if sep is None:
        return None
    resolved = {"tab": "\t", "\\t": "\t"}.get(sep.lower(), sep)
    if len(resolved) != 1:
        raise click.BadParameter(f"{sep!r} is not a single character", param_hint="'--sep'")
    return resolved


def _is_record_file(path: Path) -> bool:
    """Record files by suffix; for other suffixes, JSON if the text starts with { or [."""
    suffix = path.suffix.lower()
    if suffix in RECORD_SUFFIXES or suffix in CSV_SUFFIXES:
        return suffix in RECORD_SUFFIXES
    return read_source(path).lstrip()[:1] in (b"{", b"[")


def _check_not_tool_report(path: Path) -> None:
    """SourceError for a benchmark tool's report: one run, which is no history to analyse."""
    from perfwatch.readers.detect import INPUT_PROFILE, TOOL_NAMES, detect_format

    if path.suffix.lower() in RECORD_SUFFIXES - {".json"}:
        return  # JSON Lines: records only
    try:
        found = detect_format(path)
    except SourceError:
        return  # none of the known formats: the record reader says what is wrong
    if found == INPUT_PROFILE:
        raise SourceError(
            str(path),
            "this is an input-profile file (per-input profiles of one test suite run), not a "
            "history of runs: `perfwatch recommend` reads it, `perfwatch publish` sends it",
        )
    if found in TOOL_NAMES:
        raise SourceError(
            str(path),
            f"this is a {TOOL_NAMES[found]} report: it holds one run, and change-point "
            "analysis needs a history of runs. Publish each run's report with "
            f"`perfwatch publish {path}` to build the history on the stream, or convert "
            f"the reports with `perfwatch publish --dry-run REPORT >> history.jsonl` and "
            "analyse history.jsonl",
        )


def _load_series(
    files: Sequence[Path],
    metrics: set[str] | None,
    *,
    time_column: str | None,
    separator: str | None,
    keep_missing: bool,
) -> list[MetricSeries]:
    """Series of every file in argument order; record files, merged by test, take the place
    of the first of them. ``keep_missing``: a run without a value stays in, as NaN."""
    from perfwatch.readers.otava_csv import read_otava_csv

    series: list[MetricSeries] = []
    record_files = [path for path in files if _is_record_file(path)]
    for path in record_files:
        _check_not_tool_report(path)
    for path in files:
        if path in record_files:
            if path == record_files[0]:
                from perfwatch.readers.jsonl import read_records, records_to_series

                records = (sourced for each in record_files for sourced in read_records(each))
                series.extend(
                    records_to_series(records, metrics=metrics, keep_missing=keep_missing)
                )
        else:
            series.extend(
                read_otava_csv(
                    path,
                    time_column=time_column,
                    separator=separator,
                    metrics=metrics,
                    keep_missing=keep_missing,
                )
            )
    return series


def _check_found(
    series: Sequence[MetricSeries], requested: set[str], files: Sequence[Path]
) -> None:
    where = str(files[0]) if len(files) == 1 else f"any of the {len(files)} files"
    missing = sorted(requested - {s.metric for s in series})
    if missing:
        raise SourceError(where, f"no metric named {', '.join(map(repr, missing))}")
    if not series:
        raise SourceError(
            where,
            "no metric series: no column's first non-empty cell is a number and no record "
            "has a metric (a column starting with text is an attribute; --metrics NAME reads "
            "it as a metric and names its first non-numeric cell)",
        )


def _prepared(
    series: MetricSeries,
    directions: dict[str, Direction],
    config: Config | None,
    *,
    branch: str | None,
    since: str | None,
    until: str | None,
    last: int | None,
) -> MetricSeries:
    import numpy as np

    from perfwatch.readers.series import select_points

    chosen = select_points(series, branch=branch, since=since, until=until, last=last)
    if len(chosen) < 2:
        kept = "no runs" if len(chosen) == 0 else "a single run"
        filters = " after filtering" if len(chosen) < len(series) else ""
        raise series.error(f"{kept}{filters}; change-point analysis needs at least 2")
    if np.isnan(chosen.values).all():
        filters = " after filtering" if len(chosen) < len(series) else ""
        raise series.error(f"no run has a value{filters}")
    # the flags, else the records, else the configuration's [directions], as the stream does
    direction = directions.get(series.metric) or series.direction
    if direction is None and config is not None:
        direction = cast("Direction | None", config.direction_for(series.metric))
    return replace(chosen, direction=direction)


def _detect_all(series: Sequence[MetricSeries], params: _Parameters) -> list[SeriesResult]:
    import numpy as np

    from perfwatch.detectors.edivisive import classify_direction, detect_change_points

    results = []
    for each in _with_progress(series):
        series_params = params.for_series(each)
        changes = detect_change_points(each.values, series_params)
        # the default mode leaves min_segment_len runs on each side of a change point
        needs = None if series_params.is_compat else 2 * series_params.min_segment_len
        if needs is not None and np.count_nonzero(~np.isnan(each.values)) >= needs:
            needs = None
        results.append(
            SeriesResult(
                each,
                [
                    FoundChange(c, classify_direction(c.forward_change_percent, each.direction))
                    for c in changes
                ],
                needs,
            )
        )
    return results


def _with_progress(series: Sequence[MetricSeries]) -> Iterable[MetricSeries]:
    """The series, with a progress bar on a terminal when there are many (tqdm is imported
    only then)."""
    if len(series) < PROGRESS_MIN_SERIES or not sys.stderr.isatty():
        return series
    from tqdm import tqdm

    return tqdm(series, file=sys.stderr, unit="series")


def _result_json(result: SeriesResult) -> dict[str, Any]:
    from perfwatch.contract.timestamps import format_rfc3339

    series = result.series
    return {
        "test": series.test,
        "metric": series.metric,
        "points": len(series),
        "change_points": [
            {
                "index": found.change.index,
                "run_id": series.run_ids[found.change.index],
                "time": format_rfc3339(series.times[found.change.index]),
                "commit": series.commits[found.change.index],
                "forward_change_percent": found.change.forward_change_percent,
                "magnitude": found.change.magnitude,
                "mean_before": found.change.mean_before,
                "stddev_before": found.change.stddev_before,
                "mean_after": found.change.mean_after,
                "stddev_after": found.change.stddev_after,
                "pvalue": found.change.pvalue,
                "direction": found.direction,
            }
            for found in result.changes
        ],
        **({"needs_runs": result.needs_runs} if result.needs_runs is not None else {}),
    }


# --- text ---------------------------------------------------------------------------------


def _render_text(results: Sequence[SeriesResult], *, colour: bool) -> str:
    # Series read from one file share their run lists, so each time is formatted once and
    # the label columns (time, commit, version) of such series are laid out once.
    moments = {moment for result in results for moment in result.series.times}
    time_texts = {moment: moment.strftime(TIME_FORMAT) for moment in moments}
    label_lines: dict[tuple[int, ...], list[str]] = {}
    blocks = []
    for result in results:
        series = result.series
        runs = (id(series.times), id(series.commits), id(series.attributes.get("version")))
        if runs not in label_lines:
            label_lines[runs] = _label_lines(series, time_texts)
        blocks.append(_series_table(result, label_lines[runs], colour=colour))
    blocks.append(_summary(results, colour=colour))
    return "\n\n".join(blocks)


def _label_lines(series: MetricSeries, time_texts: dict[datetime, str]) -> list[str]:
    """Header, rule and one line per run of the left-aligned label columns."""
    columns: list[tuple[str, list[str]]] = [("time", [time_texts[t] for t in series.times])]
    if any(series.commits):
        columns.append(("commit", [(c or "")[:SHOWN_COMMIT_CHARS] for c in series.commits]))
    if any(series.attributes.get("version", [])):
        columns.append(("version", [v or "" for v in series.attributes["version"]]))
    padded = []
    for name, cells in columns:
        width = max(len(name), *map(len, cells))
        padded.append(list(map(str.ljust, [name, "-" * width, *cells], repeat(width))))
    return list(map("  ".join, zip(*padded, strict=True)))


def _series_table(result: SeriesResult, label_lines: list[str], *, colour: bool) -> str:
    """The label columns, then the values right-aligned, a marker line before each change."""
    series = result.series
    # a missing value (NaN, kept in compat mode) shows as an empty cell, as in the file
    cells = [VALUE_FORMAT.format(v) if v == v else "" for v in series.values.tolist()]
    width = max(len(series.metric), *map(len, cells))
    values = map(str.rjust, [series.metric, "-" * width, *cells], repeat(width))
    lines = list(map("{}  {}".format, label_lines, values))
    for found in sorted(result.changes, key=lambda found: found.change.index, reverse=True):
        lines.insert(2 + found.change.index, _change_marker(found, colour=colour))
    return "\n".join([_series_title(result, colour=colour), *lines])


def _series_title(result: SeriesResult, *, colour: bool) -> str:
    series = result.series
    better = {"higher_is_better": "higher is better", "lower_is_better": "lower is better"}
    details = [f"{len(series)} runs", f"{len(result.changes)} change point(s)"]
    if result.needs_runs is not None:
        details.append(f"too few runs with a value to place one: it needs {result.needs_runs}")
    if series.direction is not None:
        details.insert(0, better[series.direction])
    if series.unit:
        details.insert(0, series.unit)
    title = f"{series.test} / {series.metric}"
    return f"{click.style(title, bold=True) if colour else title}  ({', '.join(details)})"


def _change_marker(found: FoundChange, *, colour: bool) -> str:
    change = found.change
    text = (
        f"---- change point: {change.forward_change_percent:+.1f}%  "
        f"mean {change.mean_before:.6g} -> {change.mean_after:.6g}  "
        f"p={change.pvalue:.2g}  {found.direction} ----"
    )
    return click.style(text, fg=CHANGE_COLOURS[found.direction]) if colour else text


def _summary(results: Sequence[SeriesResult], *, colour: bool) -> str:
    changes = [found for result in results for found in result.changes]
    counts = {kind: sum(found.direction == kind for found in changes) for kind in CHANGE_COLOURS}
    parts = [
        click.style(f"{count} {kind}", fg=CHANGE_COLOURS[kind])
        if colour and count
        else f"{count} {kind}"
        for kind, count in counts.items()
    ]
    return f"{len(results)} series, {len(changes)} change point(s): {', '.join(parts)}"
