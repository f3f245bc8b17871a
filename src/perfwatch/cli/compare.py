"""``perfwatch compare``: one run's performance counters against a baseline of good runs
(the clustered-counter regression check, docs/counters.md).

Exit status: 0 no regression, 1 regression, 2 bad input or usage.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import orjson

from perfwatch.cli.errors import EXIT_FOUND, EXIT_OK, InputError
from perfwatch.cli.flags import FiniteFloatRange, NonBlankText, output_format_option
from perfwatch.readers.errors import SourceError

# The check (statsmodels, scipy, scikit-learn) is imported when it runs, not for --help.
if TYPE_CHECKING:
    from perfwatch.detectors.counters import (
        CounterCheckResult,
        CounterRegressionCheck,
        CounterSamples,
    )

# options that take every following argument up to the next option
_GREEDY = ("--baseline", "--calibrate")


class _GreedyCommand(click.Command):
    """Lets ``--baseline a.csv b.csv`` mean ``--baseline a.csv --baseline b.csv``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        expanded: list[str] = []
        greedy: str | None = None
        for arg in args:
            if arg.startswith("-"):
                greedy = arg if arg in _GREEDY else None
                expanded.append(arg)
            elif greedy is not None and expanded[-1] != greedy:
                expanded += [greedy, arg]
            else:
                expanded.append(arg)
        return super().parse_args(ctx, expanded)


@click.command(cls=_GreedyCommand)
@click.option(
    "--baseline",
    "baseline_files",
    multiple=True,
    required=True,
    metavar="FILE...",
    help="Counter samples of good runs: CSV (time column + one column per counter), "
    "perfmon CSV (typeperf/relog), or perfwatch JSON records with counters.",
)
@click.option("--target", "target_file", required=True, metavar="FILE", help="The run to check.")
@click.option(
    "--alpha",
    type=FiniteFloatRange(0, 1, min_open=True, max_open=True),
    default=None,
    help="False-alarm rate of the default rule, which judges each model's error against "
    "its errors on the baseline runs, each left out in turn [0.01].",
)
@click.option(
    "--no-baseline-calibration",
    is_flag=True,
    help="Do not judge against the baseline runs' own variation: use the fixed threshold "
    "(--threshold, 0.3) on the excess error instead.",
)
@click.option(
    "--threshold",
    type=FiniteFloatRange(min=0, min_open=True),
    default=None,
    help="Flag a cluster whose excess prediction error exceeds this fraction [0.3] "
    "(the paper's rule, instead of the p-value).",
)
@click.option(
    "--calibrate",
    "calibrate_files",
    multiple=True,
    metavar="FILE...",
    help="Good runs to learn a threshold from (leave-one-out; at least two runs), "
    "instead of the p-value.",
)
@output_format_option()
@click.option(
    "--redundancy-r2",
    type=FiniteFloatRange(0, 1, min_open=True, max_open=True),
    help="Redundancy analysis threshold [0.9].",
)
@click.option(
    "--distance", type=click.Choice(["1-|rho|", "1-rho"]), help="Pearson distance [1-|rho|]."
)
@click.option(
    "--block",
    type=click.IntRange(min=1),
    help="Samples averaged per observation [10; 1 with --literal: sample by sample].",
)
@click.option(
    "--steady-state",
    type=click.Choice(["auto", "off"]),
    help="Cut warm-up and cool-down [auto; off with --literal].",
)
@click.option(
    "--workload",
    multiple=True,
    type=NonBlankText(),
    metavar="PATTERN",
    help="Counters that describe the offered work (request rates; a name or an fnmatch "
    "pattern, repeatable): every other counter is also modelled on these alone.",
)
@click.option(
    "--literal",
    is_flag=True,
    help="Shang et al.'s steps read literally, every deviation turned off (for comparison).",
)
def compare(
    baseline_files: tuple[str, ...],
    target_file: str,
    alpha: float | None,
    no_baseline_calibration: bool,
    threshold: float | None,
    calibrate_files: tuple[str, ...],
    output_format: str,
    redundancy_r2: float | None,
    distance: str | None,
    block: int | None,
    steady_state: str | None,
    workload: tuple[str, ...],
    literal: bool,
) -> None:
    """Check one run's counters against a baseline of good runs: clusters of
    counters, one regression model per cluster, regression where a model's prediction
    error is larger than usual.

    Exit status: 0 no regression, 1 regression, 2 bad input or usage."""
    if threshold is not None and calibrate_files:
        raise click.UsageError("give --threshold or --calibrate, not both")
    threshold_rule = threshold is not None or bool(calibrate_files) or no_baseline_calibration
    if alpha is not None and threshold_rule:
        raise click.UsageError(
            "--alpha is the p-value rule's; --threshold, --calibrate and "
            "--no-baseline-calibration use a threshold instead"
        )
    try:
        baseline = _runs(baseline_files)
        targets = _runs([target_file])
        _check_each_run_once(baseline_files, calibrate_files, target_file)  # all are runs
        if len(targets) != 1:
            raise SourceError(target_file, f"holds {len(targets)} runs; the target must be one")
        calibration = _runs(calibrate_files) if calibrate_files else []
        if calibrate_files and len(calibration) < 2:
            raise click.UsageError("--calibrate needs at least two good runs")
        # each value is already of its parameter's type: click converted and checked it
        given: dict[str, Any] = {
            "alpha": alpha,
            "decision": "threshold" if threshold_rule else None,
            "threshold": threshold,
            "redundancy_r2": redundancy_r2,
            "distance": distance,
            "block": block,
            "steady_state": steady_state,
            "workload": workload or None,
        }
        # only what was given, so --literal keeps its own settings for the rest
        params = {name: value for name, value in given.items() if value is not None}
        from perfwatch.detectors.counters import CounterRegressionCheck

        check = (
            CounterRegressionCheck.seed_literal(**params)
            if literal
            else CounterRegressionCheck(**params)
        )
        if calibration:
            check.calibrate(calibration)
        result = check.fit(baseline).check(targets[0])
    except (SourceError, ValueError) as error:
        raise InputError(str(error)) from None
    if output_format == "json":
        document = result.to_dict()
        if hasattr(check, "calibration_"):
            document["calibration"] = check.calibration_
        click.echo(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(render_text(result, check))
    raise SystemExit(EXIT_FOUND if result.regression else EXIT_OK)


def _check_each_run_once(
    baseline_files: Sequence[str], calibrate_files: Sequence[str], target_file: str
) -> None:
    """A file named twice would count its run twice (its variation judged as none), and
    a target among the good runs is judged against itself: a calibration that holds it
    raises the threshold to its own error."""
    seen: dict[Path, str] = {}
    for file in baseline_files:
        earlier = seen.setdefault(Path(file).resolve(), file)
        if earlier is not file:
            also = "" if earlier == file else f" (also as {earlier})"
            raise click.BadParameter(
                f"{file} is given twice{also}: each run counts once", param_hint="'--baseline'"
            )
    good = {**seen, **{Path(file).resolve(): file for file in calibrate_files}}
    if Path(target_file).resolve() in good:
        raise click.BadParameter(
            f"{target_file} is also a good run (--baseline or --calibrate): a run is not "
            "judged against itself",
            param_hint="'--target'",
        )


def _runs(files: Sequence[str]) -> list[CounterSamples]:
    from perfwatch.readers.counter_csv import read_counter_runs

    runs = []
    for file in files:
        try:
            runs.extend(read_counter_runs(Path(file)))
        except SourceError as error:
            from perfwatch.readers.detect import tool_report_error

            instead = tool_report_error(
                file,
                "`perfwatch compare` judges performance-counter samples: perfmon or typeperf "
                "CSV, a plain counter CSV, or perfwatch records with counters",
            )
            raise instead or error from None
    return runs


def render_text(result: CounterCheckResult, check: CounterRegressionCheck) -> str:
    """Verdict first, then clusters ranked by error, then what was left out."""
    source = "fixed"
    if hasattr(check, "calibration_"):
        source = f"calibrated on {len(check.calibration_['runs'])} good runs"
    judged = [c for c in result.clusters if c.excess_error is not None]
    if result.decision == "pvalue":
        headline = _pvalue_headline(result, len(judged))
    elif result.regression:
        headline = (
            f"REGRESSION: {len(result.flagged_clusters)} of {len(judged)} clusters exceed "
            f"the {_pct(result.threshold)} threshold ({source})"
        )
    else:
        largest = result.max_excess_error
        headline = (
            f"no regression: largest excess error {_pct(largest)} is within the "
            f"{_pct(result.threshold)} threshold ({source})"
        )
    lines = [headline]
    if result.look_first:
        lines.append("look first: " + ", ".join(result.look_first))
    if result.blame:
        lines.append(
            "most unusual counters (z of their own model's error): "
            + ", ".join(f"{name} {z:.1f}" for name, z in result.blame)
        )
    unjudged = result.status == "insufficient_baseline"
    order = "largest excess error"
    if result.decision == "pvalue" and not unjudged:
        order = "most unusual"
    # with one baseline run the models were fitted on it: no run was left out
    usual = "fit error on the baseline run" if result.baseline_runs == 1 else "usual on good runs"
    lines += ["", f"clusters, {order} first:"]
    for rank, cluster in enumerate(result.clusters, 1):
        mark = "REGRESSION" if cluster.flagged else "ok"
        if cluster.excess_error is None or unjudged:
            mark = "not judged"
        evidence = ""
        if result.decision == "pvalue" and cluster.z is not None:
            evidence = f", error z {cluster.z:.1f}, p {_p(cluster.run_pvalue)} (all models)"
        name = "workload models" if cluster.workload else f"cluster {cluster.cluster}"
        lines.append(
            f"  [{rank}] {name}: {mark}, error {_pct(cluster.error)}, "
            f"{usual} {_pct(cluster.good_run_error)}, "
            f"excess {_pct(cluster.excess_error)}{evidence}"
        )
        lines.append(
            f"      dependent {cluster.dependent}: mean {cluster.baseline_mean:.4g} -> "
            f"{cluster.target_mean:.4g} (KS D {cluster.ks_statistic:.2f}, "
            f"p {cluster.ks_pvalue:.2g})"
        )
        if cluster.model != "none":
            terms = [f"{cluster.intercept:.4g}"] + [
                f"{coefficient:+.4g} x {name}" for name, coefficient in cluster.coefficients.items()
            ]
            r2 = "" if cluster.r_squared is None else f"R^2 {cluster.r_squared:.2f}: "
            lines.append(f"      model {r2}{cluster.dependent} = {' '.join(terms)}")
        if cluster.left_out:
            lines.append(f"      left out (its strongest predictor): {cluster.left_out}")
        others = [m for m in cluster.members if m != cluster.dependent]
        if cluster.workload:
            lines.append(
                f"      each of {len(cluster.redundant_members)} counters modelled on the "
                f"workload counters: {', '.join(cluster.members)}"
            )
        elif others:
            lines.append(f"      other members: {', '.join(others)}")
    if result.removed:
        lines += ["", f"left out of the models ({len(result.removed)}):"]
        lines += [f"  {r.reason:<24} {r.counter}: {r.detail}" for r in result.removed]
    start, end = result.target_window
    lines += [
        "",
        f"baseline: {result.baseline_runs} run(s), {result.baseline_observations} "
        f"steady-state samples; target: samples {start + 1}-{end} (steady state)",
    ]
    return "\n".join(lines)


def _pvalue_headline(result: CounterCheckResult, judged: int) -> str:
    if result.status == "insufficient_baseline":
        return (
            "no verdict: a baseline of one run shows no run-to-run variation to judge "
            "against; give two or more good runs (the errors below are the paper's figures)"
        )
    evidence = (
        f"p {_p(result.pvalue)} (corrected for the "
        f"{sum(c.tests for c in result.clusters)} models judged; false-alarm rate "
        f"{_pct(result.alpha)}, from {result.baseline_runs} baseline runs left out in turn)"
    )
    if result.regression:
        return f"REGRESSION: {len(result.flagged_clusters)} of {judged} clusters, {evidence}"
    return f"no regression: {evidence}"


def _p(value: float | None) -> str:
    return "--" if value is None else f"{value:.2g}"


def _pct(value: float | None) -> str:
    """`12.5%`; a value that rounds to zero reads `0.0%`, never `-0.0%`."""
    return "--" if value is None else f"{round(100 * value, 1) + 0.0:.1f}%"
