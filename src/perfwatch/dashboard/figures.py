"""Plotly figure specifications (plain `{"data": [...], "layout": {...}}` dictionaries).

Built on the server from the query results so that what a chart shows is
decided — and tested — in Python; the page hands them to Plotly.js as they are.
Values are plain lists (not typed arrays) so the numbers stay readable in the
page and in tests.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from perfwatch.adapters.verdict_feed import COMMIT_CHARS, pvalue_text

STATUS_COLOURS = {
    "regression": "#d62728",
    "improvement": "#2ca02c",
    "changed": "#ff7f0e",
    "unknown": "#ff7f0e",
    "stable": "#7f7f7f",
}
_SERIES_COLOUR = "#1f77b4"
_PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#7f7f7f",
    "#d62728",
)
_NOISE_COLOUR = "#b0b0b0"


def direction_colour(direction: str) -> str:
    return STATUS_COLOURS.get(direction, STATUS_COLOURS["changed"])


def _layout(title: str, x_title: str, y_title: str, **extra: Any) -> dict[str, Any]:
    # Title top left, legend in a row under it: neither covers the axis labels.
    return {
        "title": {"text": title, "x": 0, "xanchor": "left", "y": 0.98, "yanchor": "top"},
        "xaxis": {"title": {"text": x_title}, "automargin": True, "zeroline": False},
        "yaxis": {"title": {"text": y_title}, "automargin": True},
        "hovermode": "closest",
        "margin": {"l": 60, "r": 20, "t": 90, "b": 50},
        "legend": {"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom"},
        **extra,
    }


def short_commit(commit: str | None) -> str:
    """A commit as the verdicts' messages show it."""
    return commit[:COMMIT_CHARS] if commit else ""


# The series chart's x axis: the run (labelled by run id), its date, or its commit.
X_AXES = ("run", "date", "commit")
_X_TITLES = {
    "run": "run id (runs in series order)",
    "date": "run date (UTC)",
    "commit": "commit (runs in series order)",
}
_RUN_TICKS = 12  # run id or commit labels shown at most, evenly spread
# Annotations of change points closer than this share of the runs are drawn on two rows.
_CLOSE_SHARE = 1 / 6


def value_title(metric: str, unit: str | None) -> str:
    """An axis title for a metric's values: its name and unit when known."""
    return f"{metric} ({unit})" if unit else metric


def no_data(figure: dict[str, Any], message: str) -> dict[str, Any]:
    """`figure` with `message` in the middle of its plotting area when it has no data."""
    if not figure["data"]:
        note = {"text": message, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5,
                "showarrow": False, "font": {"size": 14, "color": _NOISE_COLOUR}}  # fmt: skip
        figure["layout"]["annotations"] = [*figure["layout"].get("annotations", []), note]
        figure["layout"]["meta"] = {"empty": message}
    return figure


def _utc_text(timestamp: float) -> str:
    """Epoch seconds as Plotly reads a date (it ignores time zones): UTC, no offset."""
    return datetime.fromtimestamp(timestamp, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


class _RunAxis:
    """Where runs and the boundaries between them go on the chosen x axis."""

    def __init__(self, points: Sequence[Mapping[str, Any]], mode: str) -> None:
        self.points = points
        self.mode = mode

    def at(self, index: int) -> Any:
        return _utc_text(self.points[index]["timestamp"]) if self.mode == "date" else index

    def before(self, index: int) -> Any:
        """Between run `index - 1` and run `index`: where a change point's line goes."""
        if self.mode != "date":
            return index - 0.5
        return _utc_text(
            (self.points[index - 1]["timestamp"] + self.points[index]["timestamp"]) / 2
        )

    def layout(self) -> dict[str, Any]:
        axis: dict[str, Any] = {"title": {"text": _X_TITLES[self.mode]}, "automargin": True,
                                "zeroline": False}  # fmt: skip
        if self.mode == "date":
            axis["type"] = "date"
            return axis
        step = max(1, math.ceil(len(self.points) / _RUN_TICKS))
        ticks = list(range(0, len(self.points), step))
        if self.mode == "commit":
            labels = [short_commit(self.points[i]["commit"]) or "—" for i in ticks]
        else:
            labels = [self.points[i]["run_id"] for i in ticks]
        return axis | {"tickmode": "array", "tickvals": ticks, "ticktext": labels,
                       "tickangle": -30}  # fmt: skip


def change_label(change: Mapping[str, Any]) -> str:
    """A change point's label on the chart: its change and the run id the verdicts name."""
    return f"{change['forward_change_percent']:+.1f}% at run {change['run_id']}"


def _label_rows(change_points: Sequence[Mapping[str, Any]], runs: int) -> list[int]:
    """0 or 1 for each change point's label: a label close after one on the first row
    goes on the second, so that neighbouring labels do not cover each other."""
    rows: list[int] = []
    for i, cp in enumerate(change_points):
        close = i > 0 and cp["index"] - change_points[i - 1]["index"] < runs * _CLOSE_SHARE
        rows.append(1 if close and rows[-1] == 0 else 0)
    return rows


def series_figure(detail: Mapping[str, Any], x_axis: str = "run") -> dict[str, Any]:
    """The metric over runs: points, mean ± stddev band per segment, change points marked.

    Runs are named by run id (and commit), as the verdicts name them: hover on a
    run shows its run id, commit and time, a change point's label its change and
    run id. `x_axis` is one of X_AXES: the runs in series order labelled by run id,
    their dates, or the runs in series order labelled by commit.
    """
    points = detail["points"]
    axis = _RunAxis(points, x_axis)
    values = [p["value"] for p in points]
    data: list[dict[str, Any]] = []
    for i, segment in enumerate(detail["segments"]):
        first, last = segment["start"], segment["stop"] - 1
        low, high = segment["mean"] - segment["stddev"], segment["mean"] + segment["stddev"]
        runs = f"runs {segment['first_run_id']}–{segment['last_run_id']}"
        label = f"{runs}: mean {segment['mean']:.6g} ± {segment['stddev']:.3g}"
        xs = [axis.at(first), axis.at(last)]
        data.append(
            {
                "type": "scatter",
                "x": [xs[0], xs[1], xs[1], xs[0], xs[0]],
                "y": [low, low, high, high, low],
                "fill": "toself",
                "fillcolor": "rgba(31,119,180,0.12)",
                "line": {"width": 0},
                "mode": "lines",
                "hoverinfo": "skip",
                "name": "mean ± stddev",
                "legendgroup": "band",
                "showlegend": i == 0,
            }
        )
        data.append(
            {
                "type": "scatter",
                "x": xs,
                "y": [segment["mean"], segment["mean"]],
                "mode": "lines",
                "line": {"color": "#444", "dash": "dash", "width": 1.5},
                "name": "segment mean",
                "legendgroup": "mean",
                "showlegend": i == 0,
                "hovertemplate": label + "<extra></extra>",
                "meta": {"role": "segment_mean", "start": first, "stop": last + 1},
            }
        )
    data.append(
        {
            "type": "scatter",
            "x": [axis.at(i) for i in range(len(points))],
            "y": values,
            "mode": "lines+markers",
            "name": detail["metric"],
            "line": {"color": _SERIES_COLOUR, "width": 1},
            "marker": {"size": 5, "color": _SERIES_COLOUR},
            "customdata": [
                [p["run_id"], short_commit(p["commit"]), p["time"] or ""] for p in points
            ],
            "hovertemplate": (
                "run %{customdata[0]}: %{y}<br>commit %{customdata[1]}<br>%{customdata[2]}"
                "<extra></extra>"
            ),
            "meta": {"role": "runs"},
        }
    )
    change_points = detail["change_point_list"]
    if change_points:
        data.append(
            {
                "type": "scatter",
                "x": [axis.at(cp["index"]) for cp in change_points],
                "y": [values[cp["index"]] for cp in change_points],
                "mode": "markers",
                "name": "change point",
                "marker": {
                    "symbol": "diamond",
                    "size": 13,
                    "color": [direction_colour(cp["direction"]) for cp in change_points],
                    "line": {"color": "#000", "width": 1},
                },
                "customdata": [
                    [
                        cp["run_id"],
                        short_commit(cp.get("commit")),
                        cp["time"],
                        cp["forward_change_percent"],
                        cp["pvalue"],
                        cp["mean_before"],
                        cp["mean_after"],
                        cp["direction"],
                    ]
                    for cp in change_points
                ],
                "hovertemplate": (
                    "<b>%{customdata[7]}</b> %{customdata[3]:+.1f}% at run %{customdata[0]}<br>"
                    "mean %{customdata[5]:.6g} → %{customdata[6]:.6g}, p=%{customdata[4]:.2g}"
                    "<br>commit %{customdata[1]}<br>%{customdata[2]}<extra></extra>"
                ),
                "meta": {"role": "change_points"},
            }
        )
    shapes = [
        {
            "type": "line",
            "xref": "x",
            "yref": "paper",
            "x0": axis.before(cp["index"]),
            "x1": axis.before(cp["index"]),
            "y0": 0,
            "y1": 1,
            "line": {"color": direction_colour(cp["direction"]), "width": 2},
        }
        for cp in change_points
    ]
    annotations = [
        {
            "x": axis.before(cp["index"]),
            "y": 1,
            "xref": "x",
            "yref": "paper",
            "yanchor": "bottom",
            "yshift": 16 * row,
            "showarrow": False,
            "text": change_label(cp),
            "font": {"color": direction_colour(cp["direction"])},
        }
        for cp, row in zip(change_points, _label_rows(change_points, len(points)), strict=True)
    ]
    attributes = " ".join(f"{k}={v}" for k, v in detail["attributes"].items())
    title = f"{detail['test']} · {detail['metric']}" + (f" [{attributes}]" if attributes else "")
    layout = _layout(
        title,
        _X_TITLES[x_axis],
        value_title(detail["metric"], detail.get("unit")),
        shapes=shapes,
        annotations=annotations,
    )
    layout["xaxis"] = axis.layout()
    return {"data": data, "layout": layout}


def _cluster_label(cluster: Mapping[str, Any]) -> str:
    number = "workload" if cluster.get("workload") else f"#{cluster.get('cluster')}"
    return f"{number}: {cluster.get('dependent')}"


# A p-value of 0 is drawn at the height of the smallest positive float's.
_SMALLEST_PVALUE = sys.float_info.min


@dataclass(frozen=True)
class _CounterRule:
    """What the counter chart draws per cluster: the block's field the verdict judged,
    the bar's height for a value of it, the limit line (None: no verdict) and titles."""

    field: str
    height: Callable[[float], float]
    limit: float | None
    title: str
    y_title: str


def _counter_rule(check: Mapping[str, Any]) -> _CounterRule:
    if check.get("status") == "insufficient_baseline":
        return _CounterRule(
            "error",
            lambda error: 100 * error,
            None,
            "Error of each cluster's model (no verdict: one baseline run)",
            "mean absolute percentage error (%)",
        )
    alpha = check.get("alpha")
    if check.get("decision") == "pvalue" and isinstance(alpha, int | float):
        return _CounterRule(
            "familywise_pvalue",
            lambda pvalue: -math.log10(max(pvalue, _SMALLEST_PVALUE)),
            -math.log10(alpha),
            f"Cluster p-value, all models (dotted: false-alarm rate {100 * alpha:g}%)",
            "-log10 p (above the line: flagged)",
        )
    threshold = check.get("threshold")
    return _CounterRule(
        "excess_error",
        lambda excess: 100 * excess,
        100 * threshold if isinstance(threshold, int | float) else None,
        "Error beyond the model's usual error (dotted: threshold)",
        "excess error, % (above the line: flagged)",
    )


def _cluster_hover(cluster: Mapping[str, Any]) -> str:
    """A cluster's figures as the chart's hover shows them."""
    parts = [
        f"error {_percent_text(cluster.get('error'))}, usual on good runs "
        f"{_percent_text(cluster.get('good_run_error'))}",
        f"p (all models) {pvalue_text(cluster.get('familywise_pvalue')) or 'n/a'}",
        "flagged" if cluster.get("flagged") else "not flagged",
        f"counters: {', '.join(cluster.get('members', []))}",
    ]
    return "<br>".join(parts)


def _percent_text(value: Any) -> str:
    return f"{100 * value:.1f}%" if isinstance(value, int | float) else "n/a"


def counter_figures(check: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each cluster judged by the verdict's own rule, and baseline vs target means.

    `check` is a verdict's `counter_check` block. The first chart shows what the
    verdict compared with its limit, with the limit dotted, so a bar beyond the
    line is a cluster the verdict flagged: under the p-value rule the cluster's
    p-value corrected for every model judged (as -log10 p, against the
    false-alarm rate), under the threshold rule its excess error (against the
    threshold); against one baseline run, which gives no verdict, the errors
    without a line. Errors are fractions in the block and shown in percent. The
    second chart gives each dependent counter's target mean as a percentage of
    its baseline mean (absolute means on hover).
    """
    rule = _counter_rule(check)
    judged = [c for c in check.get("clusters", []) if c.get(rule.field) is not None]
    labels = [_cluster_label(c) for c in judged]
    errors = {
        "type": "bar",
        "x": labels,
        "y": [rule.height(c[rule.field]) for c in judged],
        "marker": {
            "color": [
                STATUS_COLOURS["regression"] if c.get("flagged") else _SERIES_COLOUR for c in judged
            ]
        },
        "customdata": [_cluster_hover(c) for c in judged],
        "hovertemplate": "%{x}<br>%{customdata}<extra></extra>",
        "name": rule.y_title,
    }
    error_shapes = []
    if rule.limit is not None:
        error_shapes.append(
            {
                "type": "line",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "y0": rule.limit,
                "y1": rule.limit,
                "line": {"color": "#000", "dash": "dot"},
            }
        )
    clusters = [c for c in check.get("clusters", []) if c.get("error") is not None]
    labels = [_cluster_label(c) for c in clusters]
    baseline_means = [c.get("baseline_mean") for c in clusters]
    target_means = [c.get("target_mean") for c in clusters]
    ratios = [
        100 * t / b if isinstance(b, int | float) and isinstance(t, int | float) and b else None
        for b, t in zip(baseline_means, target_means, strict=True)
    ]
    means = [
        {
            "type": "bar",
            "name": "baseline",
            "x": labels,
            "y": [100.0 if r is not None else None for r in ratios],
            "customdata": baseline_means,
            "hovertemplate": "%{x}<br>baseline mean %{customdata:.6g}<extra></extra>",
            "marker": {"color": "#9ecae1"},
        },
        {
            "type": "bar",
            "name": "target",
            "x": labels,
            "y": ratios,
            "customdata": target_means,
            "hovertemplate": "%{x}<br>target mean %{customdata:.6g} (%{y:.1f}% of baseline)"
            "<extra></extra>",
            "marker": {"color": "#fd8d3c"},
        },
    ]
    return {
        "errors": {
            "data": [errors],
            "layout": _layout(
                rule.title, "cluster: dependent counter", rule.y_title, shapes=error_shapes
            ),
        },
        "means": {
            "data": means,
            "layout": _layout(
                "Dependent counter: target mean as % of baseline mean",
                "cluster: dependent counter",
                "% of baseline mean",
                barmode="group",
            ),
        },
    }


def cluster_colours(labels: Iterable[int]) -> dict[int, str]:
    """Each cluster label's colour, the same in every run-or-skip chart (noise grey)."""
    return {
        label: _NOISE_COLOUR if label < 0 else _PALETTE[position % len(_PALETTE)]
        for position, label in enumerate(sorted(set(labels)))
    }


def inputs_figure(
    profiles: Sequence[Mapping[str, Any]],
    labels: Sequence[int],
    votes: Sequence[Mapping[str, Any]],
    x_attribute: str,
    y_attribute: str,
) -> dict[str, Any]:
    """Inputs in two attributes coloured by cluster; sampled inputs marked with their vote.

    `profiles` are the baseline input profiles, `labels` their cluster labels
    (-1: noise), `votes` the recommendation's votes (by `input_id`).
    """
    data: list[dict[str, Any]] = []
    for label, colour in cluster_colours(labels).items():
        members = [p for p, lab in zip(profiles, labels, strict=True) if lab == label]
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "noise" if label < 0 else f"cluster {label}",
                "x": [p[x_attribute] for p in members],
                "y": [p[y_attribute] for p in members],
                "text": [p["input_id"] for p in members],
                "marker": {"color": colour, "size": 8, "opacity": 0.75},
                "hovertemplate": f"%{{text}}<br>{x_attribute} %{{x:.4g}}<br>{y_attribute} "
                "%{y:.4g}<extra>%{fullData.name}</extra>",
                "meta": {"role": "cluster", "label": label},
            }
        )
    by_id = {p["input_id"]: p for p in profiles}
    for decision, symbol, colour in (("run", "x", "#d62728"), ("skip", "circle-open", "#2ca02c")):
        sampled = [v for v in votes if v.get("decision") == decision and v.get("input_id") in by_id]
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": f"sampled: {decision}",
                "x": [by_id[v["input_id"]][x_attribute] for v in sampled],
                "y": [by_id[v["input_id"]][y_attribute] for v in sampled],
                "text": [f"{v['input_id']}: {v.get('reason', '')}" for v in sampled],
                "marker": {"symbol": symbol, "size": 16, "color": colour, "line": {"width": 3}},
                "hovertemplate": "%{text}<extra>vote " + decision + "</extra>",
                "meta": {"role": "votes", "decision": decision},
            }
        )
    return {
        "data": data,
        "layout": _layout(f"Inputs by {x_attribute} and {y_attribute}", x_attribute, y_attribute),
    }


# A sampled input's marker by its verdict under the paired rule (the paper's rule has none).
_VERDICT_SYMBOLS = {"slower": "triangle-up", "faster": "triangle-down"}


def _percent(value: float | None) -> float | None:
    return None if value is None else 100 * value


def _colour(colours: Mapping[int, str], label: int) -> str:
    return colours.get(label, _NOISE_COLOUR if label < 0 else _SERIES_COLOUR)


def _cluster_name(label: int) -> str:
    return "noise" if label < 0 else f"cluster {label}"


def _empty_sample_message(shifts: Mapping[str, Any] | None) -> str:
    if shifts is None:
        return "No run-or-skip recommendation to show"
    if shifts.get("reason"):
        return f"Nothing judged: {shifts['reason']}"
    if shifts["unplotted"]:
        return f"None of the {len(shifts['unplotted'])} sampled inputs has an old and a new time"
    return "The recommendation holds no sampled inputs"


def shift_figure(shifts: Mapping[str, Any] | None, colours: Mapping[int, str]) -> dict[str, Any]:
    """Every sampled input at its old time (x) and its new time (y), log axes, coloured by
    cluster: above the diagonal it got slower. The band is the acceptable slow-down either
    way; the decision's drivers are ringed. `shifts` is `queries.sample_shifts`."""
    inputs = shifts["inputs"] if shifts else []
    attribute = shifts["time_attribute"] if shifts else "cpu_time_s"
    data: list[dict[str, Any]] = []
    if inputs:
        times = [row[name] for row in inputs for name in ("old_s", "new_s")]
        low, high = min(times) / 1.5, max(times) * 1.5
        acceptable = shifts["acceptable_slowdown"] if shifts else None
        if acceptable is not None:
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "x": [low, high, high, low, low],
                    "y": [
                        low * (1 - acceptable),
                        high * (1 - acceptable),
                        high * (1 + acceptable),
                        low * (1 + acceptable),
                        low * (1 - acceptable),
                    ],
                    "fill": "toself",
                    "fillcolor": "rgba(127,127,127,0.15)",
                    "line": {"width": 0},
                    "hoverinfo": "skip",
                    "name": f"within ±{acceptable:.0%} (the acceptable slow-down)",
                    "meta": {"role": "acceptable_band", "acceptable_slowdown": acceptable},
                }
            )
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": [low, high],
                "y": [low, high],
                "line": {"color": "#444", "dash": "dash", "width": 1},
                "hoverinfo": "skip",
                "name": "no change (new = old)",
                "meta": {"role": "no_change"},
            }
        )
    for label in sorted({row["cluster"] for row in inputs}):
        rows = [row for row in inputs if row["cluster"] == label]
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": _cluster_name(label),
                "x": [row["old_s"] for row in rows],
                "y": [row["new_s"] for row in rows],
                "marker": {
                    "color": _colour(colours, label),
                    "size": 11,
                    "symbol": [_VERDICT_SYMBOLS.get(row["verdict"], "circle") for row in rows],
                    "line": {"color": "#fff", "width": 1},
                },
                "customdata": [
                    [
                        row["input_id"],
                        row["label"],
                        row["old_source"] or "",
                        row["reason"],
                        "" if row["baseline_s"] is None else f"{row['baseline_s']:.4g} s",
                    ]
                    for row in rows
                ],
                "hovertemplate": "<b>%{customdata[0]}</b> (%{customdata[1]})<br>old %{x:.4g} s "
                "(%{customdata[2]}) → new %{y:.4g} s; in the baseline %{customdata[4]}"
                "<br>%{customdata[3]}<extra>%{fullData.name}</extra>",
                "meta": {
                    "role": "sampled",
                    "label": label,
                    "inputs": [row["input_id"] for row in rows],
                    "change": [_percent(row["change"]) for row in rows],
                    "change_low": [_percent(row["change_low"]) for row in rows],
                    "change_high": [_percent(row["change_high"]) for row in rows],
                },
            }
        )
    by_id = {row["input_id"]: row for row in inputs}
    # In the recommendation's order: the largest change first.
    drivers = [by_id[i] for i in (shifts["drivers"] if shifts else []) if i in by_id]
    if drivers:
        data.append(
            {
                "type": "scatter",
                "mode": "markers+text",
                "name": "drivers of the decision",
                "x": [row["old_s"] for row in drivers],
                "y": [row["new_s"] for row in drivers],
                "text": [row["label"] for row in drivers],
                "textposition": "top center",
                "marker": {
                    "symbol": "circle-open",
                    "size": 22,
                    "color": "#000",
                    "line": {"width": 2},
                },
                "hoverinfo": "skip",
                "meta": {"role": "drivers", "inputs": [row["input_id"] for row in drivers]},
            }
        )
    layout = _layout(
        f"Sampled inputs, old and new code: {attribute} (above the diagonal: slower)",
        f"old code: {attribute}, fastest pass (s)",
        f"new code: {attribute}, fastest pass (s)",
    )
    layout["xaxis"]["type"] = "log"
    layout["yaxis"]["type"] = "log"
    return no_data({"data": data, "layout": layout}, _empty_sample_message(shifts))


def _error_bars(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Asymmetric error bars from each row's interval (none where it has no interval)."""
    above, below = [], []
    for row in rows:
        has = row["change_low"] is not None and row["change_high"] is not None
        above.append(100 * (row["change_high"] - row["change"]) if has else None)
        below.append(100 * (row["change"] - row["change_low"]) if has else None)
    return {"type": "data", "symmetric": False, "array": above, "arrayminus": below,
            "thickness": 1.5, "width": 4}  # fmt: skip


def cluster_change_figure(
    shifts: Mapping[str, Any] | None, colours: Mapping[int, str]
) -> dict[str, Any]:
    """Each judged cluster's paired change with its interval (diamond), its sampled inputs'
    below it (dots), against the acceptable slow-down; drivers ringed."""
    clusters = [c for c in (shifts["clusters"] if shifts else []) if c["change"] is not None]
    by_id = {row["input_id"]: row for row in (shifts["inputs"] if shifts else [])}
    data: list[dict[str, Any]] = []
    order: list[str] = []
    driver_rows: list[tuple[str, Mapping[str, Any]]] = []
    for cluster in clusters:
        colour = _colour(colours, cluster["label"])
        row_name = f"{cluster['name']}: {cluster['decision'].upper()}"
        rows = [
            by_id[i] for i in cluster["inputs"] if i in by_id and by_id[i]["change"] is not None
        ]
        names = [f"{row['label']} {row['input_id']}" for row in rows]
        order += [row_name, *names]
        driver_rows += [(name, row) for name, row in zip(names, rows, strict=True) if row["driver"]]
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": f"{cluster['name']} (pooled)",
                "legendgroup": str(cluster["label"]),
                "x": [_percent(cluster["change"])],
                "y": [row_name],
                "error_x": _error_bars([cluster]) | {"color": colour},
                "marker": {"symbol": "diamond", "size": 14, "color": colour},
                "customdata": [
                    [
                        _percent(cluster["change_low"]),
                        _percent(cluster["change_high"]),
                        cluster["run_votes"],
                        cluster["judged"],
                        cluster["verdict"],
                    ]
                ],
                "hovertemplate": "%{y}: %{x:+.1f}% [%{customdata[0]:+.1f}%, "
                "%{customdata[1]:+.1f}%]<br>%{customdata[2]} of %{customdata[3]} inputs "
                "slower; %{customdata[4]}<extra></extra>",
                "meta": {"role": "cluster_change", "label": cluster["label"]},
            }
        )
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": f"{cluster['name']} inputs",
                "legendgroup": str(cluster["label"]),
                "showlegend": False,
                "x": [_percent(row["change"]) for row in rows],
                "y": names,
                "error_x": _error_bars(rows) | {"color": colour},
                "marker": {"size": 8, "color": colour},
                "customdata": [[row["reason"]] for row in rows],
                "hovertemplate": "%{y}<br>%{customdata[0]}<extra></extra>",
                "meta": {
                    "role": "input_change",
                    "label": cluster["label"],
                    "inputs": [row["input_id"] for row in rows],
                },
            }
        )
    if driver_rows:
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "drivers of the decision",
                "x": [_percent(row["change"]) for _, row in driver_rows],
                "y": [name for name, _ in driver_rows],
                "marker": {
                    "symbol": "circle-open",
                    "size": 18,
                    "color": "#000",
                    "line": {"width": 2},
                },
                "hoverinfo": "skip",
                "meta": {"role": "drivers", "inputs": [row["input_id"] for _, row in driver_rows]},
            }
        )
    acceptable = shifts["acceptable_slowdown"] if shifts else None
    shapes = []
    if data and acceptable is not None:
        for x, colour, dash in (
            (0.0, "#444", "solid"),
            (100 * acceptable, STATUS_COLOURS["regression"], "dash"),
            (-100 * acceptable, STATUS_COLOURS["improvement"], "dash"),
            (50 * acceptable, STATUS_COLOURS["regression"], "dot"),
        ):
            shapes.append(
                {
                    "type": "line",
                    "xref": "x",
                    "yref": "paper",
                    "x0": x,
                    "x1": x,
                    "y0": 0,
                    "y1": 1,
                    "line": {"color": colour, "dash": dash, "width": 1},
                }
            )
    attribute = shifts["time_attribute"] if shifts else "cpu_time_s"
    confidence = shifts["confidence"] if shifts else None
    interval = f", {confidence:.0%} interval" if confidence is not None else ""
    layout = _layout(
        "Paired change per cluster and sampled input",
        f"change of {attribute}, new / old − 1 (%){interval}<br>dashed: the acceptable "
        "slow-down, dotted: what a slower interval must clear",
        "cluster and its sampled inputs",
        shapes=shapes,
    )
    layout["yaxis"] |= {"type": "category", "categoryorder": "array", "categoryarray": order,
                        "autorange": "reversed"}  # fmt: skip
    if shifts is not None and shifts["rule"] == "paper":
        message = (
            "The paper's rule computes no paired change: its votes compare times with thresholds"
        )
    elif shifts is not None and shifts["inputs"]:
        message = "No judged input has a paired change (no earlier timings to compare with)"
    else:
        message = _empty_sample_message(shifts)
    return no_data({"data": data, "layout": layout}, message)


def _units_title(metric: str, lines: Sequence[Mapping[str, Any]]) -> str:
    """A value axis title: the unit the lines share, else a pointer to the legend."""
    units = {line["unit"] for line in lines}
    if len(units) > 1:
        return f"{metric} (units differ: see legend)"
    return value_title(metric, next(iter(units), None))


def resources_figures(resources: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per-test time and memory over commits, and the suite's total time per commit
    (one bar series per unit: values in different units are not added together)."""

    def lines(role: str) -> list[dict[str, Any]]:
        mixed = len({line["unit"] for line in resources[role]}) > 1
        traces = []
        for line in resources[role]:
            attributes = " ".join(f"{k}={v}" for k, v in line["attributes"].items())
            name = line["test"] + (f" [{attributes}]" if attributes else "")
            if mixed:
                name += f" ({line['unit'] or 'no unit'})"
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "name": name,
                    "x": [short_commit(p["commit"]) or p["run_id"] for p in line["points"]],
                    "y": [p["value"] for p in line["points"]],
                    "customdata": [[p["run_id"], p["time"] or ""] for p in line["points"]],
                    "hovertemplate": "commit %{x}: %{y:.6g}<br>run id %{customdata[0]}"
                    "<br>%{customdata[1]}<extra>" + name + "</extra>",
                }
            )
        return traces

    def commit_axis(role: str) -> dict[str, Any]:
        """Commits in time order over every test (not in the order the lines list them)."""
        first_seen: dict[str, float] = {}
        for line in resources[role]:
            for p in line["points"]:
                label = short_commit(p["commit"]) or p["run_id"]
                first_seen[label] = min(first_seen.get(label, p["timestamp"]), p["timestamp"])
        return {
            "type": "category",
            "categoryorder": "array",
            "categoryarray": sorted(first_seen, key=lambda label: first_seen[label]),
            "title": {"text": "commit (in order of first run)"},
            "automargin": True,
        }

    def per_test(role: str, heading: str) -> dict[str, Any]:
        metric = resources.get(f"{role}_metric")
        title = metric or f"no {role} metric"
        figure = {
            "data": lines(role),
            "layout": _layout(
                f"{heading} per test ({title})", "commit", _units_title(title, resources[role])
            )
            | {"xaxis": commit_axis(role)},
        }
        return no_data(figure, f"No runs of {metric}" if metric else f"No {role}-like metric")

    totals = resources["totals"]
    units = sorted({t["unit"] for t in totals}, key=lambda unit: unit or "")
    total_bars = [
        {
            "type": "bar",
            "name": f"suite total ({unit or 'no unit'})" if len(units) > 1 else "suite total",
            "x": [short_commit(t["commit"]) for t in totals if t["unit"] == unit],
            "y": [t["total"] for t in totals if t["unit"] == unit],
            "customdata": [len(t["tests"]) for t in totals if t["unit"] == unit],
            "hovertemplate": "commit %{x}: %{y:.6g} over %{customdata} test(s)<extra></extra>",
            "meta": {"unit": unit},
        }
        for unit in units
    ]
    time_title = resources.get("time_metric") or "no time metric"
    return {
        "time": per_test("time", "Execution time"),
        "memory": per_test("memory", "Memory"),
        "total": no_data(
            {
                "data": total_bars,
                "layout": _layout(
                    f"Suite total per commit ({time_title})",
                    "commit",
                    _units_title(time_title, resources["time"]),
                    barmode="group",
                )
                | {"xaxis": commit_axis("time")},
            },
            "No time metric to total",
        ),
    }
