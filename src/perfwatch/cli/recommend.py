"""`perfwatch recommend`: cluster the inputs, sample them, and say whether to run the suite."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import orjson

from perfwatch._optional import require
from perfwatch.cli.errors import EXIT_FOUND, InputError, check_writable
from perfwatch.cli.flags import FiniteFloatRange, output_format_option
from perfwatch.contract.models import InputProfile
from perfwatch.detectors.input_attributes import (
    ATTRIBUTES,
    CLUSTER_ATTRIBUTES,
    METHODS,
    NOISE,
    RULES,
)
from perfwatch.readers.errors import SourceError
from perfwatch.readers.input_profile import InputProfileFile, read_input_profile

if TYPE_CHECKING:
    from perfwatch.detectors.input_attributes import TimeAttribute
    from perfwatch.detectors.inputs import InputClustering, Recommendation

TIME_ATTRIBUTES: dict[str, TimeAttribute] = {"cpu": "cpu_time_s", "wall": "wall_time_s"}


class Share(click.ParamType):
    """A share given as ``0.38`` or ``38%``."""

    name = "share"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float):
            return value
        text = str(value).strip()
        try:
            share = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            self.fail(f"{value!r} is not a share such as 0.38 or 38%", param, ctx)
        if share < 0:
            self.fail(f"{value!r} is negative", param, ctx)
        return share


@click.command()
@click.option(
    "--baseline",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Input profiles of the whole suite on the old code (or a record with inputs).",
)
@click.option(
    "--update",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Input profiles of the sampled inputs on the new code. Without it: show the "
    "clustering and the sample to profile.",
)
@click.option(
    "--reference",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Profiles of the same sampled inputs on the old code, measured next to the update "
    "(removes machine drift from the time thresholds).",
)
@click.option(
    "--method",
    type=click.Choice(METHODS),
    default="dbscan",
    show_default=True,
    help="How the baseline's inputs are clustered.",
)
@click.option(
    "--eps",
    type=FiniteFloatRange(min=0, min_open=True),
    help="DBSCAN radius [default: the best-scoring of the knee of the sorted k-distances "
    "and some of their quantiles; the output names the rule].",
)
@click.option(
    "--min-samples",
    type=click.IntRange(min=1),
    help="DBSCAN core size [default: 2 x attributes, at most a tenth of the inputs].",
)
@click.option(
    "--n-clusters",
    type=click.IntRange(min=1),
    help="k for kmeans, gmm and agglomerative [default: elbow, lowest BIC, highest silhouette].",
)
@click.option(
    "--attributes",
    default=",".join(CLUSTER_ATTRIBUTES),
    show_default=True,
    help=f"Comma-separated attributes to cluster on, from: {', '.join(ATTRIBUTES)}.",
)
@click.option(
    "--per-cluster",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Inputs sampled from each cluster.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Sampling seed.")
@click.option(
    "--sample-out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the sampled input ids here, one per line (for `perfwatch profile --only`).",
)
@click.option(
    "--rule",
    type=click.Choice(RULES),
    default="paired",
    show_default=True,
    help="paired: each sampled input against itself on the old code, decided per cluster; "
    "paper: the paper's time thresholds and slope check with one pooled vote.",
)
@click.option(
    "--acceptable-slowdown",
    type=Share(),
    default="5%",
    show_default=True,
    help="Largest acceptable slow-down of a sampled input (with --rule paper: the drop of "
    "its slope statements/time; the paper used 38%).",
)
@click.option(
    "--confidence",
    type=FiniteFloatRange(min=0, max=1, min_open=True, max_open=True),
    default=0.95,
    show_default=True,
    help="Confidence of each input's interval of its paired change.",
)
@click.option(
    "--time-tolerance",
    type=Share(),
    default="10%",
    show_default=True,
    help="Noise allowance of an input without repeated timings (with --rule paper: the "
    "share by which a time may exceed its threshold).",
)
@click.option(
    "--scaling",
    type=click.Choice(["auto", "linear"]),
    default="auto",
    show_default=True,
    help="auto: attributes spanning orders of magnitude are clustered on a log scale.",
)
@click.option(
    "--time",
    "time_kind",
    type=click.Choice(sorted(TIME_ATTRIBUTES)),
    default="cpu",
    show_default=True,
    help="Time attribute the checks use.",
)
@output_format_option()
@click.option(
    "--exit-code",
    is_flag=True,
    help="With --update: exit status 1 when the suite should run, 0 when it may be skipped "
    "(as git diff --exit-code does for differences), so a pipeline can branch on it; 2 "
    "stays bad input.",
)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Draw the clusters (and the judged inputs) to this PNG file.",
)
@click.option(
    "--plot-x",
    type=click.Choice(ATTRIBUTES),
    default="size",
    show_default=True,
    help="Attribute on the plot's horizontal axis.",
)
@click.option(
    "--plot-y",
    type=click.Choice(ATTRIBUTES),
    default="statements",
    show_default=True,
    help="Attribute on the plot's vertical axis.",
)
def recommend(
    baseline: Path,
    update: Path | None,
    reference: Path | None,
    method: str,
    eps: float | None,
    min_samples: int | None,
    n_clusters: int | None,
    attributes: str,
    per_cluster: int,
    seed: int,
    sample_out: Path | None,
    rule: str,
    acceptable_slowdown: float,
    confidence: float,
    time_tolerance: float,
    scaling: str,
    time_kind: str,
    output_format: str,
    exit_code: bool,
    plot: Path | None,
    plot_x: str,
    plot_y: str,
) -> None:
    """Recommend whether a code update needs the full performance suite.

    The baseline's inputs are clustered by the behaviour they cause; a seeded
    sample of each cluster, profiled on the new code (--update) and, alternately,
    on the old code (--reference; `perfwatch profile --old-dir`), is judged input
    by input: its paired change of time, with a confidence interval, against the
    acceptable slow-down. Each cluster decides by its own inputs and the suite
    should run when any cluster is slower. --rule paper applies the paper's
    time thresholds and slope check with one pooled vote instead. Exits 0 either way
    unless --exit-code asks for 1 when the suite should run.
    """
    # scikit-learn loads with the recommender: not for `recommend --help`
    from perfwatch.detectors.inputs import (
        InputClustering,
        RunOrSkipRecommender,
        input_table,
        sample_inputs,
    )

    if reference is not None and update is None:
        raise click.UsageError("--reference is the old code's side of --update: give --update too")
    if exit_code and update is None:
        raise click.UsageError("--exit-code tells the recommendation for --update: give --update")
    # an option of another method would be ignored without a word
    if method != "dbscan":
        for value, option in ((eps, "--eps"), (min_samples, "--min-samples")):
            if value is not None:
                raise click.BadParameter(
                    f"is DBSCAN's; --method {method} takes --n-clusters", param_hint=f"'{option}'"
                )
    elif n_clusters is not None:
        raise click.BadParameter(
            "is for kmeans, gmm and agglomerative; DBSCAN takes --eps and --min-samples",
            param_hint="'--n-clusters'",
        )
    for path, option in ((sample_out, "--sample-out"), (plot, "--plot")):
        if path is not None:
            check_writable(path, option)
    baseline_file = _read(baseline)
    chosen = tuple(name.strip() for name in attributes.split(",") if name.strip())
    try:
        clustering = InputClustering(
            method,  # type: ignore[arg-type]
            attributes=chosen,
            eps=eps,
            min_samples=min_samples,
            n_clusters=n_clusters,
            scaling=scaling,  # type: ignore[arg-type]
        ).fit(*input_table(baseline_file.profiles, chosen))
    except ValueError as error:
        raise InputError(f"{baseline}: {error}") from None
    sample = sample_inputs(clustering, per_cluster=per_cluster, seed=seed)
    if sample_out is not None:
        ids = [input_id for members in sample.values() for input_id in members]
        sample_out.write_text("".join(f"{input_id}\n" for input_id in ids), encoding="utf-8")

    recommendation = None
    command = None
    update_file = None
    reference_file = None
    if update is not None:
        update_file = _read(update)
        reference_file = _read(reference) if reference is not None else None
        reference_profiles = reference_file.profiles if reference_file is not None else None
        recommender = RunOrSkipRecommender(
            rule=rule,  # type: ignore[arg-type]
            acceptable_slowdown=acceptable_slowdown,
            confidence=confidence,
            time_tolerance=time_tolerance,
            time_attribute=TIME_ATTRIBUTES[time_kind],
        )
        try:
            recommendation = recommender.recommend(
                clustering,
                baseline_file.profiles,
                update_file.profiles,
                reference=reference_profiles,
                per_cluster=per_cluster,
            )
        except ValueError as error:
            raise InputError(f"{update}: {error}") from None
        if not recommendation.votes:
            raise InputError(f"{update}: none of its inputs belongs to a cluster of {baseline}")
        options = _clustering_options(method, eps, min_samples, n_clusters, chosen, scaling)
        command = _resample_command(recommendation, baseline, update_file, seed, options)

    if plot is not None:
        plot_clusters(
            clustering,
            baseline_file.profiles,
            plot,
            plot_x,
            plot_y,
            recommendation,
            update_file.profiles if update_file is not None else (),
        )
    if output_format == "json":
        document: dict[str, Any] = {
            "clustering": clustering.to_dict(),
            "sample": {
                "per_cluster": per_cluster,
                "seed": seed,
                "inputs": {str(label): ids for label, ids in sample.items()},
            },
        }
        if recommendation is not None:
            document["recommendation"] = recommendation.to_dict()
            if command is not None:
                document["recommendation"]["advice"]["command"] = command
        click.echo(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode())
    elif recommendation is None:
        click.echo(_clustering_text(clustering))
        click.echo(f"\nSample to profile ({per_cluster} per cluster, seed {seed}):")
        for label, ids in sample.items():
            click.echo(f"  {clustering.cluster(label).name}: {' '.join(ids)}")
    else:
        # the decision first; the clustering it rests on after it
        click.echo(_recommendation_text(recommendation, command))
        click.echo(f"\n{_clustering_text(clustering)}")
        assert update_file is not None
        click.echo(_cost_text(recommendation, baseline_file, update_file, reference_file))
    if exit_code and recommendation is not None and recommendation.decision == "run":
        raise SystemExit(EXIT_FOUND)


def _read(path: Path) -> InputProfileFile:
    try:
        return read_input_profile(path)
    except SourceError as error:
        from perfwatch.readers.detect import tool_report_error

        instead = tool_report_error(
            path, "`perfwatch recommend` reads the per-input profiles `perfwatch profile` writes"
        )
        raise InputError(str(instead or error)) from None


def _resample_command(
    recommendation: Recommendation,
    baseline: Path,
    update_file: InputProfileFile,
    seed: int,
    clustering_options: list[str],
) -> str | None:
    """The commands that profile a larger sample and decide again, when the vote is close."""
    advice = recommendation.advice
    if advice is None:
        return None
    larger = advice["per_cluster"]
    pytest_args = shlex.join(update_file.command[1:]) if update_file.command else "<pytest args>"
    common = shlex.join(
        ["--baseline", str(baseline), *clustering_options, "--per-cluster", str(larger)]
    )
    return (
        f"perfwatch recommend {common} --seed {seed} --sample-out sample.txt && "
        f"perfwatch profile --only sample.txt -o update.json -- {pytest_args} && "
        f"perfwatch recommend {common} --seed {seed} --update update.json"
    )


def _clustering_options(
    method: str,
    eps: float | None,
    min_samples: int | None,
    n_clusters: int | None,
    attributes: tuple[str, ...],
    scaling: str,
) -> list[str]:
    """The options that reproduce this clustering (the defaults left out)."""
    options = [] if method == "dbscan" else ["--method", method]
    for name, value in (
        ("--eps", eps),
        ("--min-samples", min_samples),
        ("--n-clusters", n_clusters),
    ):
        if value is not None:
            options += [name, str(value)]
    if attributes != CLUSTER_ATTRIBUTES:
        options += ["--attributes", ",".join(attributes)]
    if scaling != "auto":
        options += ["--scaling", scaling]
    return options


def _number(value: float) -> str:
    return f"{value:.4g}"


def _clustering_text(clustering: InputClustering) -> str:
    parameters = ", ".join(f"{k} {_plain(v)}" for k, v in clustering.selection_.items())
    logged = clustering.to_dict()["log_scaled"]
    quality = (
        f"silhouette {clustering.silhouette_:.2f}"
        if clustering.silhouette_ is not None
        else "silhouette undefined (fewer than two clusters)"
    )
    lines = [
        f"Clustering: {clustering.method} of {len(clustering.labels_)} inputs on "
        f"{', '.join(clustering.attributes)} ({parameters}); {quality}",
        f"  log scale: {', '.join(logged) if logged else 'none'}",
    ]
    for cluster in clustering.clusters_:
        centre = ", ".join(f"{name} {_number(value)}" for name, value in cluster.centre.items())
        lines.append(f"  {cluster.name:<11} {cluster.size:>6} inputs   centre: {centre}")
    return "\n".join(lines)


def _plain(value: Any) -> str:
    return _number(value) if isinstance(value, float) else str(value)


def _recommendation_text(recommendation: Recommendation, command: str | None) -> str:
    parameters = recommendation.parameters
    drift = (
        f"; drift {recommendation.drift:.3f} from the reference"
        if recommendation.drift is not None
        else ""
    )
    if recommendation.rule == "paired":
        settings = (
            f"  rule: paired; time: {parameters['time_attribute']}; acceptable slowdown "
            f"{parameters['acceptable_slowdown']:.0%}; confidence "
            f"{parameters['confidence']:.0%}{drift}"
        )
    else:
        settings = (
            f"  rule: paper; time: {parameters['time_attribute']}; acceptable slowdown "
            f"{parameters['acceptable_slowdown']:.0%}; time tolerance "
            f"{parameters['time_tolerance']:.0%}{drift}"
        )
    lines = [f"Recommendation: {recommendation.summary()}", settings, ""]
    if recommendation.rule == "paired":
        lines.append("Clusters (change of the sampled inputs, new / old - 1, with its interval):")
        for cluster in recommendation.clusters:
            change = "no input judged" if cluster.change is None else cluster.change.describe()
            lines.append(
                f"  {cluster.name:<11} {cluster.decision.upper():<4} {cluster.run_votes} of "
                f"{len(cluster.votes)} slower  {change}"
            )
        drivers = recommendation.drivers
        if drivers:
            lines += ["", "Driven by:"]
            lines += [f"  {vote.input_id}: {vote.reason}" for vote in drivers]
        lines.append("")
    else:
        lines += [recommendation.seed_table(), ""]
    lines.append("Votes:")
    width = max(len(vote.input_id) for vote in recommendation.votes)
    for vote in recommendation.votes:
        lines.append(
            f"  {vote.label:<5} {vote.input_id:<{width}}  {vote.decision:<4}  {vote.reason}"
        )
    if recommendation.outside_inputs:
        lines.append(
            f"Not judged (outside every cluster): {', '.join(recommendation.outside_inputs)}"
        )
    advice = recommendation.advice
    if advice is not None:
        lines += ["", f"Advice: {advice['message']}."]
        if command is not None:
            lines.append(f"  {command}")
    return "\n".join(lines)


def _cost_text(
    recommendation: Recommendation,
    baseline: InputProfileFile,
    update: InputProfileFile,
    reference: InputProfileFile | None,
) -> str:
    """What timing the sample cost, and the same passes for every input scaled from it by
    the inputs' baseline times (so both figures share today's machine load). Every call of
    a timing pass counts: short inputs timed over several calls per pass cost that much."""
    judged = {vote.input_id for vote in recommendation.votes}
    timed = [p for p in update.profiles if p.input_id in judged]
    versions = "new code"
    if reference is not None:
        timed += [p for p in reference.profiles if p.input_id in judged]
        versions = "old and new code"
    spent = sum(p.timing_cost_s() for p in timed)
    repeated = {p.input_id for p in timed if (p.calls_per_pass or 1) > 1}
    if repeated:
        most = max(p.calls_per_pass or 1 for p in timed)
        versions += f"; {len(repeated)} short inputs over up to {most} calls per pass"
    sampled_baseline = sum(p.wall_time_s for p in baseline.profiles if p.input_id in judged)
    every_baseline = sum(p.wall_time_s for p in baseline.profiles)
    if sampled_baseline <= 0:
        return f"\nCost: timing the {len(judged)} sampled inputs ({versions}) took {spent:.2f} s"
    full = spent * every_baseline / sampled_baseline
    return (
        f"\nCost: timing the {len(judged)} sampled inputs ({versions}) took {spent:.2f} s; "
        f"the same passes for all {len(baseline.profiles)} inputs would take about "
        f"{full:.2f} s ({1 - spent / full:.0%} saved; pytest start-up and the counting "
        "pass not included)"
    )


def plot_clusters(
    clustering: InputClustering,
    baseline: Sequence[InputProfile],
    path: Path,
    x: str,
    y: str,
    recommendation: Recommendation | None = None,
    judged: Sequence[InputProfile] = (),
) -> None:
    """Scatter the baseline inputs by cluster in two attributes; mark the judged inputs."""
    matplotlib = require("matplotlib", "plot", feature="--plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 6))
    colours = plt.get_cmap("tab10")
    by_id = {p.input_id: p for p in baseline}
    for index, cluster in enumerate(clustering.clusters_):
        members = [by_id[i] for i in cluster.members]
        noise = cluster.label == NOISE
        axes.scatter(
            [getattr(p, x) for p in members],
            [getattr(p, y) for p in members],
            s=14,
            marker="x" if noise else "o",
            color="grey" if noise else colours(index % 10),
            alpha=0.7,
            label=f"{cluster.name} ({cluster.size})",
        )
    if recommendation is not None:
        by_id = {p.input_id: p for p in judged}
        for vote in recommendation.votes:
            profile = by_id[vote.input_id]
            axes.scatter(
                getattr(profile, x),
                getattr(profile, y),
                s=90,
                facecolors="none",
                edgecolors="red" if vote.run else "green",
                linewidths=2,
            )
            axes.annotate(vote.label, (getattr(profile, x), getattr(profile, y)), fontsize=8)
        axes.set_title(
            f"{clustering.method}: recommendation {recommendation.decision} "
            f"({recommendation.run_share:.0%} run; red = run vote, green = skip vote)"
        )
    else:
        axes.set_title(f"{clustering.method} clusters of {len(clustering.labels_)} inputs")
    axes.set_xlabel(x)
    axes.set_ylabel(y)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
