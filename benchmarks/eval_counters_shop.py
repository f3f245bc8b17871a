"""The clustered-counter check's decision rule and blame on data it was not tuned on.

    python benchmarks/eval_counters_shop.py [--seeds 1-20] [--jobs N] [--set NAME=VALUE]
        [--rules p-value,...] [--json]

Data: ``counter_shop.py`` (a generator written independently of the detector; its
docstring lists every trait). Per generator seed: six good runs, a noisy-but-good run and
seven regressions. Design: good run i is checked against the other five (leave-one-out),
the noisy run and every regression against all six.

The rules compared, on the same runs:
  * p-value: the detector's default (``decision="pvalue"``, ``alpha=0.01``): each model's
    error against its errors on the good runs held out in turn, within- and between-run
    variation, Bonferroni over every model judged;
  * exceedance: the same with ``tested_score="exceedance"`` (each model's share of blocks
    beyond the good runs' 90% block-error quantile is tested instead of its mean error);
  * moderated: the same with ``moderate_variance=True`` (each model's between-run
    variance shrunk toward a prior fitted across the check's models);
  * fixed 30%: the paper's threshold on the excess error (``decision="threshold"``);
  * calibrated: the threshold calibrated on the baseline's own runs (each checked against
    the others; largest excess + 5 points), the previous rule;
  * literal: the paper's steps read literally (``seed_literal()``) at 30%;
  * workload models, measured only when named in ``--rules``: the default with the
    workload counters named (``workload=WORKLOAD``: each other counter also modelled on
    them alone);
  * prototypes, measured only when named in ``--rules`` (not in the detector): every
    counter but the workload's (``WORKLOAD``: request rates and what the application's
    logic asks per request) modelled on the workload counters only, each good run left
    out in turn. ``workload``: the median block residual (the counter's level for its
    workload) against the good runs', t with k - 1 df, two-sided; ``workload-error``: the
    trimmed percentage error judged as the detector judges its models' errors;
    ``workload-error-offset``: the same, a counter whose level is run-specific judged
    around its own level. ``p-value+NAME``: the default's models and the prototype's
    counters under one Bonferroni correction.

Reported: regressions caught per seed, false alarms on good and noisy-but-good runs, the
injected effect of each regression on its main counters (the same seed without the
regression as reference) next to the good runs' run-to-run variation of those counters,
the smallest effect caught in at least 90% of the seeds, what the p-value rules would
catch at a threshold chosen with hindsight (at most one false alarm in all the seeds: how
well their p-values rank the runs), and blame: whether the three counters named first
include one the regression changed (the generator's truth), per p-value rule.
Seeds 101-120 were used to develop the rules; seeds 201-220 were kept for the report,
seeds 301-320 for the report of the exceedance score and seeds 401-420 for that of the
workload models.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scipy import stats

from counter_shop import COUNTERS, REGRESSIONS, generate_study, injected_effect
from perfwatch.detectors.counter_decision import error_statistics, excess_error_tests
from perfwatch.detectors.counter_steps import (
    block_means,
    fill_missing,
    percentage_error_blocks,
    steady_state_window,
)
from perfwatch.detectors.counters import (
    CounterCheckResult,
    CounterRegressionCheck,
    CounterSamples,
)

RULES = ("p-value", "exceedance", "moderated", "fixed 30%", "calibrated", "literal")
# prototypes, measured only when named in --rules: the workload-normalized per-counter
# test alone, and combined with the default's models under one Bonferroni correction
PROTOTYPES = (
    "workload",
    "workload-error",
    "workload-error-offset",
    "p-value+workload",
    "p-value+workload-error",
    "p-value+workload-error-offset",
)
# the detector with the web shop's workload counters named (``workload=WORKLOAD``),
# measured only when named in --rules
WORKLOAD_RULE = "workload models"
TESTED = ("p-value", "exceedance", "moderated", WORKLOAD_RULE, *PROTOTYPES)  # a p-value per run
# the counters that describe the offered work, not how efficiently it is served: the
# request rates per kind (web GETs and POSTs, application requests) and what the
# application's logic asks of the database and the network per request
WORKLOAD = [
    name
    for name in COUNTERS
    if name.endswith(
        (
            "Get Requests/sec",
            "Post Requests/sec",
            "\\Requests/Sec",
            "Batch Requests/sec",
            "Log Flushes/sec",
            "Bytes Sent/sec",
        )
    )
]
TOP = 3  # blame: the counters named first


@dataclass
class _Fits:
    """Fitted checks per rule and baseline (a tuple of good-run indices), made once."""

    good: list[CounterSamples]
    params: dict[str, object]

    def __post_init__(self) -> None:
        self._cache: dict[tuple[str, tuple[int, ...]], CounterRegressionCheck] = {}

    def check(self, rule: str, baseline: tuple[int, ...]) -> CounterRegressionCheck:
        key = (rule, baseline)
        if key not in self._cache:
            runs = [self.good[i] for i in baseline]
            if rule == "p-value":
                check = CounterRegressionCheck(**self.params)
            elif rule == "exceedance":
                check = CounterRegressionCheck(**({"tested_score": "exceedance"} | self.params))
            elif rule == "moderated":
                check = CounterRegressionCheck(**({"moderate_variance": True} | self.params))
            elif rule == WORKLOAD_RULE:
                check = CounterRegressionCheck(**({"workload": WORKLOAD} | self.params))
            elif rule == "literal":
                check = CounterRegressionCheck.seed_literal()
            else:
                check = CounterRegressionCheck(decision="threshold")
            if rule == "calibrated":
                largest = [
                    self.check("fixed 30%", tuple(i for i in baseline if i != j))
                    .check(self.good[j])
                    .max_excess_error
                    or 0.0
                    for j in baseline
                ]
                check.threshold = max(max(largest), 0.0) + check.calibration_margin
            self._cache[key] = check.fit(runs)
        return self._cache[key]


def steady_blocks(run: CounterSamples, block: int = 10) -> np.ndarray:
    """A run's steady state in block means, as the check prepares it."""
    filled = fill_missing(run.values)
    start, end = steady_state_window(filled)
    end = start + (end - start) // block * block
    return block_means(filled[start:end], block)


def linear_model(
    fit_on: list[np.ndarray], judged: np.ndarray, dependents: list[int], predictors: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """Per dependent, an OLS model on the ``predictors`` (column indices; none: the mean)
    fitted on the blocks of ``fit_on``: the judged run's blocks (blocks x dependents) and
    their predictions."""
    pooled = np.vstack(fit_on)
    design = np.column_stack([np.ones(len(pooled)), pooled[:, predictors]])
    coef, *_ = np.linalg.lstsq(design, pooled[:, dependents], rcond=None)
    predicted = np.column_stack([np.ones(len(judged)), judged[:, predictors]]) @ coef
    return judged[:, dependents], predicted


def workload_tests(
    baseline: list[np.ndarray], target: np.ndarray, score: str
) -> tuple[list[str], np.ndarray]:
    """Every counter but the workload's (and usually-zero ones) modelled on the workload
    counters only, each good run left out of the fit in turn. "level": the median of the
    blocks' residuals relative to the counter's mean, against the good runs' held-out
    medians (t with k - 1 df, two-sided). "error": the trimmed percentage error, judged
    as the check judges its models' errors (``excess_error_tests``: between- and
    within-run variation). Returns the counters and their p-values."""
    workload = [COUNTERS.index(name) for name in WORKLOAD]
    pooled = np.abs(np.vstack(baseline))
    mean = pooled.mean(axis=0)
    dependents = [
        j
        for j in range(len(COUNTERS))
        if j not in workload
        and np.ptp(pooled[:, j]) > 0
        and np.median(pooled[:, j]) > 0.1 * mean[j]
    ]
    k = len(baseline)
    fits = [
        linear_model(baseline[:i] + baseline[i + 1 :], run, dependents, workload)
        for i, run in enumerate(baseline)
    ]
    fits.append(linear_model(baseline, target, dependents, workload))  # the target last
    names = [COUNTERS[j] for j in dependents]
    if score == "level":
        levels = np.array([np.median((y - p) / mean[dependents], axis=0) for y, p in fits])
        return names, 2 * stats.t.sf(np.abs(held_out_t(levels)), k - 1)
    floor = 0.1 * mean[dependents]
    if score == "error-offset":
        # a counter whose level is run-specific (between-run variance of the run means
        # above the within-run variance of its blocks) is judged around its own level
        means = np.array([run[:, dependents].mean(axis=0) for run in baseline])
        within = np.mean([run[:, dependents].var(axis=0, ddof=1) for run in baseline], axis=0)
        level = means.var(axis=0, ddof=1) > within
        fits = [(y, p + np.where(level, np.median(y - p, axis=0), 0.0)) for y, p in fits]
    return names, model_error_pvalues(fits, floor)


def held_out_t(levels: np.ndarray) -> np.ndarray:
    """Per column, Student's t of the last row against the k rows before it (the good runs
    held out), for a new observation: k - 1 degrees of freedom."""
    held, value = levels[:-1], levels[-1]
    k = len(held)
    return (value - held.mean(axis=0)) / (held.std(axis=0, ddof=1) * np.sqrt(1 + 1 / k))


def model_error_pvalues(fits: list[tuple[np.ndarray, np.ndarray]], floor: np.ndarray) -> np.ndarray:
    """Per dependent, the last fit's trimmed percentage error against the others' (the good
    runs held out), judged as the check judges its models' errors (``excess_error_tests``:
    between- and within-run variation); 1 where it cannot be judged."""
    summaries = [error_statistics(percentage_error_blocks(y, p, floor), 0.2) for y, p in fits]
    errors, variances, blocks = (np.array(part) for part in zip(*summaries, strict=True))
    _, pvalues, _ = excess_error_tests(
        errors[-1], variances[-1], errors[:-1].T, variances[:-1].T, blocks[-1]
    )
    return np.where(np.isnan(pvalues), 1.0, pvalues)


def _prototype_entry(
    rule: str, result: CounterCheckResult, blocks: list[np.ndarray], target: np.ndarray
) -> tuple[float, list[str]]:
    """A prototype rule's run p-value and its blame (counters named first)."""
    score = rule.removeprefix("p-value+").removeprefix("workload").removeprefix("-") or "level"
    names, pvalues = workload_tests(blocks, target, score)
    order = np.argsort(pvalues, kind="stable")
    counter_blame = [names[i] for i in order]
    smallest = float(pvalues[order[0]])
    if not rule.startswith("p-value+"):
        return min(1.0, smallest * len(names)), counter_blame
    model_p = [c.pvalue for c in result.clusters if c.pvalue is not None]
    tests = sum(c.tests for c in result.clusters if c.pvalue is not None) + len(names)
    best_model = min(model_p, default=1.0)
    pvalue = min(1.0, min(best_model, smallest) * tests)
    first, second = (
        (counter_blame, result.look_first)
        if smallest < best_model
        else (result.look_first, counter_blame)
    )
    return pvalue, list(dict.fromkeys([*first[:TOP], *second]))


def _blame_hit(result: CounterCheckResult, changed: Sequence[str]) -> bool:
    return bool(set(result.look_first[:TOP]) & set(changed))


def _previous_blame(result: CounterCheckResult) -> list[str]:
    """The earlier blame: dependents of the clusters by excess error, then members."""
    ranked = sorted(
        (c for c in result.clusters if c.excess_error is not None),
        key=lambda c: -(c.excess_error or 0.0),
    )
    names = [c.dependent for c in ranked] + [m for c in ranked for m in c.members]
    return list(dict.fromkeys(names))


def evaluate_seed(
    seed: int, params: dict[str, object], rules: Sequence[str] = RULES
) -> dict[str, object]:
    study = generate_study(seed)
    fits = _Fits(study.good, params)
    everyone = tuple(range(len(study.good)))
    targets: list[tuple[str, str, CounterSamples, tuple[int, ...]]] = [
        (run.label, "good", run, tuple(j for j in everyone if j != i))
        for i, run in enumerate(study.good)
    ]
    targets.append(("noisy good run", "noisy", study.noisy_good, everyone))
    targets += [(key, "regression", run, everyone) for key, run in study.regressions.items()]
    blocks = [steady_blocks(run) for run in study.good] if set(rules) & set(PROTOTYPES) else []
    rows = []
    for label, kind, run, baseline in targets:
        row: dict[str, object] = {"run": label, "kind": kind}
        changed = REGRESSIONS[label].changed if kind == "regression" else ()
        for rule in rules:
            if rule in PROTOTYPES:
                default = fits.check("p-value", baseline).check(run)
                pvalue, named = _prototype_entry(
                    rule, default, [blocks[i] for i in baseline], steady_blocks(run)
                )
                row[rule] = {
                    "flagged": pvalue < 0.01,
                    "max_excess_error": None,
                    "pvalue": pvalue,
                    "z": None,
                    "look_first": named[:TOP],
                    "blame_hit": bool(set(named[:TOP]) & set(changed)) if changed else None,
                    "previous_blame_hit": None,
                }
                continue
            result = fits.check(rule, baseline).check(run)
            entry: dict[str, object] = {
                "flagged": result.regression,
                "max_excess_error": result.max_excess_error,
            }
            if rule in TESTED:
                entry |= {
                    "pvalue": result.pvalue,
                    "z": result.z,
                    "look_first": result.look_first[:TOP],
                    "blame_hit": _blame_hit(result, changed) if changed else None,
                    "previous_blame_hit": (
                        bool(set(_previous_blame(result)[:TOP]) & set(changed)) if changed else None
                    ),
                }
            row[rule] = entry
        rows.append(row)
    return {"seed": seed, "rows": rows, "variation": _run_to_run(study.good)}


def _run_to_run(good: list[CounterSamples]) -> dict[str, float]:
    """Per counter: the good runs' run-to-run variation (SD of the steady-state means over
    their mean)."""
    middle = slice(len(good[0].values) // 5, len(good[0].values) * 9 // 10)
    means = np.array([np.nanmean(run.values[middle], axis=0) for run in good])
    spread = means.std(axis=0, ddof=1) / np.abs(means.mean(axis=0))
    return {name: float(value) for name, value in zip(COUNTERS, spread, strict=True)}


def summarize(
    seeds: list[dict], effects: dict[str, float], variation: dict[str, float], rules: Sequence[str]
) -> dict:
    total = len(seeds)
    summary: dict[str, object] = {"rules": list(rules)}
    for rule in rules:
        caught = {
            key: sum(row[rule]["flagged"] for s in seeds for row in s["rows"] if row["run"] == key)
            for key in REGRESSIONS
        }
        false_good = [
            (s["seed"], row["run"])
            for s in seeds
            for row in s["rows"]
            if row["kind"] != "regression" and row[rule]["flagged"]
        ]
        reliable = [key for key, count in caught.items() if count >= 0.9 * total]
        summary[rule] = {
            "caught": caught,
            "false_alarms": false_good,
            "false_alarms_good": sum(run != "noisy good run" for _, run in false_good),
            "false_alarms_noisy": sum(run == "noisy good run" for _, run in false_good),
            "smallest_effect_caught_90": min((effects[k] for k in reliable), default=None),
        }
        if rule in TESTED:
            summary[rule]["hindsight"] = _hindsight(seeds, rule)
            summary[rule]["blame"] = _blame_summary(seeds, rule)
    summary["exceeds_variation"] = {
        key: effects[key] > max(variation[name] for name in REGRESSIONS[key].main)
        for key in REGRESSIONS
    }
    return summary


def _blame_summary(seeds: list[dict], rule: str) -> dict[str, object]:
    """How often the counters a rule names first include one the regression changed, over
    the regressions it caught."""
    caught = [
        (row["run"], row[rule])
        for s in seeds
        for row in s["rows"]
        if row["kind"] == "regression" and row[rule]["flagged"]
    ]
    return {
        "caught": len(caught),
        "top3_hits": sum(bool(entry["blame_hit"]) for _, entry in caught),
        "previous_top3_hits": sum(bool(entry["previous_blame_hit"]) for _, entry in caught),
        "by_regression": {
            key: [
                sum(bool(entry["blame_hit"]) for run, entry in caught if run == key),
                sum(run == key for run, _ in caught),
            ]
            for key in REGRESSIONS
        },
    }


def _hindsight(seeds: list[dict], rule: str) -> dict[str, int]:
    """Regressions caught per kind at the largest run p-value threshold that leaves at
    most one good or noisy-but-good run flagged, chosen with hindsight: how well the
    rule's p-values rank the runs, whatever its alpha."""

    def pvalue(row: dict) -> float:
        value = row[rule]["pvalue"]
        return 1.0 if value is None else float(value)

    null = sorted(pvalue(row) for s in seeds for row in s["rows"] if row["kind"] != "regression")
    cut = null[1] if len(null) > 1 else 1.0
    return {
        key: sum(pvalue(row) < cut for s in seeds for row in s["rows"] if row["run"] == key)
        for key in REGRESSIONS
    }


def _pct(value: float | None) -> str:
    return "--" if value is None else f"{100 * value:.1f}%"


def render(seeds: list[dict], summary: dict, effects: dict, variation: dict) -> str:
    total = len(seeds)
    rules = summary["rules"]
    lines = [
        f"generator seeds {seeds[0]['seed']}-{seeds[-1]['seed']} ({total}); caught in how many"
        " seeds, per rule",
        "",
        "| regression | effect | run-to-run | " + " | ".join(rules) + " |",
        "| --- | ---: | ---: | " + " | ".join("---:" for _ in rules) + " |",
    ]
    for key in REGRESSIONS:
        spread = max(variation[name] for name in REGRESSIONS[key].main)
        cells = [str(summary[rule]["caught"][key]) for rule in rules]
        lines.append(
            f"| {key} | {_pct(effects[key])} | {_pct(spread)} | " + " | ".join(cells) + " |"
        )
    good_runs = sum(row["kind"] == "good" for s in seeds for row in s["rows"])
    for what, field, runs in (
        ("false alarms, good runs", "false_alarms_good", good_runs),
        ("false alarms, noisy run", "false_alarms_noisy", total),
    ):
        cells = [f"{summary[rule][field]} / {runs}" for rule in rules]
        lines.append(f"| {what} | | | " + " | ".join(cells) + " |")
    cells = [_pct(summary[rule]["smallest_effect_caught_90"]) for rule in rules]
    lines.append("| smallest effect caught in 90% | | | " + " | ".join(cells) + " |")
    for rule in (r for r in rules if r in TESTED):
        caught = summary[rule]["hindsight"]
        lines.append(
            f"{rule}, threshold chosen with hindsight for at most one false alarm: "
            + ", ".join(f"{k} {n}" for k, n in caught.items())
        )
    for rule in (r for r in rules if r in TESTED):
        blame = summary[rule]["blame"]
        earlier = (
            ""
            if rule in PROTOTYPES
            else f" (the earlier ranking by excess error: {blame['previous_top3_hits']})"
        )
        lines += [
            "",
            f"blame ({rule}): top {TOP} names a changed counter in {blame['top3_hits']} of "
            f"{blame['caught']} caught regressions{earlier}",
            "  " + ", ".join(f"{k} {h}/{c}" for k, (h, c) in blame["by_regression"].items()),
        ]
    lines += [
        "",
        "false alarms (seed, run): "
        + "; ".join(f"{rule}: {summary[rule]['false_alarms'][:6]}" for rule in rules[:3]),
    ]
    return "\n".join(lines)


def _seed_range(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def _value(text: str) -> object:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1-20", help="generator seeds, e.g. 1-20")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--jobs", type=int, default=1, help="seeds evaluated in parallel")
    parser.add_argument(
        "--rules",
        default=",".join(RULES),
        help="comma-separated, of "
        + ", ".join((*RULES, WORKLOAD_RULE, *PROTOTYPES)).replace("%", "%%"),
    )
    args = parser.parse_args(argv)
    params = {k: _value(v) for k, _, v in (item.partition("=") for item in args.set)}
    rules = tuple(args.rules.split(","))
    work = [(seed, params, rules) for seed in _seed_range(args.seeds)]
    with multiprocessing.Pool(args.jobs) as pool:
        seeds = pool.starmap(evaluate_seed, work)
    # effects and run-to-run variation: averaged over the seeds
    effects = {
        key: float(
            np.mean([max(abs(v) for v in injected_effect(key, s["seed"]).values()) for s in seeds])
        )
        for key in REGRESSIONS
    }
    variation = {name: float(np.mean([s["variation"][name] for s in seeds])) for name in COUNTERS}
    summary = summarize(seeds, effects, variation, rules)
    if args.json:
        document = {"seeds": seeds, "summary": summary, "effects": effects}
        sys.stdout.write(orjson.dumps(document).decode() + "\n")
    else:
        print(render(seeds, summary, effects, variation))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
