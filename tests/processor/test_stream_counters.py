"""The counter-cluster check on the stream: baselines of good runs, regression verdicts.

Unit tests drive `CounterCheckHandler` (after the change-point handler, as the
processor runs them) on a SQLite store; the integration test runs the real
processor on the embedded broker and on real Apache Pulsar. The counter samples
come from the generator of `benchmarks/eval_counters.py`: 29 Windows counters of
an application server under load, in correlated groups, with warm-up, gaps and
run-to-run variation; its injection "B" costs 60% more user CPU per request.
The stream's numbers are checked against `perfwatch compare --format json` on the same
runs.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from _processor_support import (
    processor_config,
    unique_topics,
    verdicts_of_twice_published,
)
from perfwatch.brokers.handle import BrokerHandle
from perfwatch.cli.main import main
from perfwatch.config import Config, ConfigError, load_config
from perfwatch.contract.codec import dumps, parse_record
from perfwatch.contract.models import Record, Verdict
from perfwatch.contract.timestamps import format_rfc3339
from perfwatch.contract.validation import RECORD_SCHEMA, validate_verdict
from perfwatch.contract.verdicts import DETECTED
from perfwatch.dashboard import figures, queries
from perfwatch.detectors.counters import CounterRegressionCheck
from perfwatch.processor import counterchecks
from perfwatch.processor.changepoints import ChangePointHandler
from perfwatch.processor.counterchecks import (
    COUNTER_BASELINE_NAMESPACE,
    INSUFFICIENT_KIND,
    PASSED_KIND,
    REGRESSION_KIND,
    CounterCheckHandler,
)
from perfwatch.processor.handlers import RecordHandler, baseline_key, build_handlers
from perfwatch.state import StateStore, open_store

T0 = datetime(2024, 9, 2, 3, 0, tzinfo=UTC)
TEST = "shop.checkout"
MAIN = {"branch": "main"}
TIMEOUT = 120.0
EVAL_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "eval_counters.py"


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("eval_counters", EVAL_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


GENERATOR = _load_generator()


def counters_block(seed: int, injection: str | None = None) -> dict[str, Any]:
    samples = GENERATOR.simulate_run(seed, injection=injection)
    rows = [[None if math.isnan(v) else float(v) for v in row] for row in samples.values]
    return {"names": list(samples.names), "values": rows}


def record_doc(
    run: int,
    *,
    injection: str | None = None,
    hour: int | None = None,
    latency: float | None = None,
    with_counters: bool = True,
) -> dict[str, Any]:
    """Run `run` of the test (its counters seeded by the run number), at hour `hour`."""
    doc: dict[str, Any] = {
        "schema": RECORD_SCHEMA,
        "test": TEST,
        "run_id": f"run-{run}",
        "commit": f"c{run:04d}",
        "branch": "main",
        "timestamp": format_rfc3339(T0 + timedelta(hours=run if hour is None else hour)),
        "metrics": {}
        if latency is None
        else {"latency_ms": {"value": latency, "direction": "lower_is_better"}},
    }
    if with_counters:
        doc["counters"] = counters_block(1000 + run, injection)
    return doc


def record(run: int, **kwargs: Any) -> Record:
    return parse_record(orjson.dumps(record_doc(run, **kwargs)))


def config_with(**settings: Any) -> Config:
    base = Config()
    return base.model_copy(update={"counters": base.counters.model_copy(update=settings)})


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    with open_store(f"sqlite:///{tmp_path / 'state.db'}") as store:
        yield store


def process(
    store: StateStore, handlers: Sequence[RecordHandler], rec: Record
) -> tuple[list[Verdict], int]:
    """Every handler's verdicts for one record, in one transaction as the processor runs
    them, and how many entered the outbox."""
    produced: list[Verdict] = []
    queued = 0
    with store.transaction() as tx:
        for handler in handlers:
            verdicts = handler.handle(rec, tx, T0 + timedelta(days=30), tuple(produced))
            produced.extend(verdicts)
            for verdict in verdicts:
                outcome = tx.add_verdict(
                    verdict.verdict_id, verdict.kind, dumps(verdict), "unit", rec.test, ""
                )
                queued += outcome not in (None, False)
    return produced, queued


def baseline_runs(store: StateStore) -> list[str]:
    data = store.get_blob(COUNTER_BASELINE_NAMESPACE, baseline_key(TEST, MAIN))
    return [] if data is None else [run["run_id"] for run in orjson.loads(data)["runs"]]


def counter_verdicts(verdicts: Sequence[Verdict]) -> list[Verdict]:
    return [v for v in verdicts if v.kind in (REGRESSION_KIND, PASSED_KIND, INSUFFICIENT_KIND)]


# --- the handler -------------------------------------------------------------------------------


def test_the_processor_runs_the_counter_check_after_the_change_points() -> None:
    kinds = [type(handler) for handler in build_handlers(Config())]
    assert kinds.index(ChangePointHandler) < kinds.index(CounterCheckHandler)


def test_good_runs_fill_the_baseline_up_to_its_size(store: StateStore) -> None:
    handler = CounterCheckHandler(Config())  # 5 runs, p-value rule, passes unpublished
    published = [process(store, [handler], record(run))[0] for run in range(7)]
    # the first run has nothing to be judged against; the second only one good run
    assert published[0] == []
    assert [v.kind for v in published[1]] == [INSUFFICIENT_KIND]
    assert all(verdicts == [] for verdicts in published[2:])
    assert baseline_runs(store) == [f"run-{run}" for run in range(2, 7)]


def test_against_one_good_run_the_verdict_says_the_baseline_is_insufficient(
    store: StateStore,
) -> None:
    handler = CounterCheckHandler(Config())
    process(store, [handler], record(0))
    # even a regressed run: one run shows no run-to-run variation to judge it by
    (verdict,), queued = process(store, [handler], record(1, injection="B"))
    assert queued == 1 and verdict.kind == INSUFFICIENT_KIND
    assert validate_verdict(verdict.to_json()) == []
    block = verdict.counter_check
    assert block is not None
    assert block["verdict"] == block["status"] == "insufficient_baseline"
    assert block["regression"] is False and block["pvalue"] is None
    assert not any(c["flagged"] for c in block["clusters"])
    # the paper's error percentages are still reported
    assert block["max_error"] > 0 and block["baseline_run_ids"] == ["run-0"]
    assert baseline_runs(store) == ["run-0", "run-1"]


def test_the_threshold_rule_stays_selectable(store: StateStore) -> None:
    handler = CounterCheckHandler(config_with(decision="threshold"))
    assert [process(store, [handler], record(run))[0] for run in range(3)] == [[], [], []]
    (verdict,), _ = process(store, [handler], record(3, injection="B"))
    block = verdict.counter_check
    assert block is not None and verdict.kind == REGRESSION_KIND
    assert block["decision"] == "threshold" and block["alpha"] is None
    assert block["pvalue"] is None and block["threshold"] == 0.3
    assert block["max_excess_error"] > 0.3
    assert verdict.parameters["decision"] == "threshold"


def test_a_regression_is_published_with_its_evidence_and_kept_out_of_the_baseline(
    store: StateStore,
) -> None:
    handler = CounterCheckHandler(Config())
    for run in range(3):
        process(store, [handler], record(run))
    verdicts, queued = process(store, [handler], record(3, injection="B"))
    (verdict,) = verdicts
    assert queued == 1
    assert verdict.kind == REGRESSION_KIND and verdict.record_run_id == "run-3"
    assert validate_verdict(verdict.to_json()) == []
    block = verdict.counter_check
    assert block is not None
    assert block["verdict"] == "regression" and block["regression"] is True
    assert block["baseline_run_ids"] == ["run-0", "run-1", "run-2"]
    assert block["baseline"]["runs"] == 3
    # judged by the p-value rule, as perfwatch compare judges
    assert block["decision"] == "pvalue" and block["alpha"] == 0.01
    assert block["pvalue"] < 0.01 and block["z"] > 2
    assert verdict.parameters["decision"] == "pvalue"
    flagged = [c for c in block["clusters"] if c["flagged"]]
    assert all(c["familywise_pvalue"] < 0.01 for c in flagged)
    # beside the p-values, the paper's error percentages
    assert all(c["error"] > c["good_run_error"] for c in flagged)
    # The CPU counters sit in a flagged cluster and are among those to look at first.
    assert any("\\Process(java)\\% User Time" in c["members"] for c in flagged)
    assert "\\Process(java)\\% User Time" in block["look_first"]
    assert block["blame"][0]["counter"] == block["look_first"][0]
    assert verdict.series.test == TEST and verdict.series.metric is None
    assert verdict.series.attributes == MAIN
    assert baseline_runs(store) == ["run-0", "run-1", "run-2"]
    # What the dashboard shows of it (beside run-1's judgement against one run).
    items = queries.counter_checks(store, test=TEST)
    (item,) = [item for item in items if item["kind"] == REGRESSION_KIND]
    assert set(figures.counter_figures(item["verdict"]["counter_check"])) == {"errors", "means"}
    # the run has counters only, no metric point: its time and commit come from the verdict
    assert block["target"]["time"] == format_rfc3339(T0 + timedelta(hours=3))
    assert block["target"]["commit"] == "c0003"
    assert (item["run"]["time"], item["run"]["commit"]) == (block["target"]["time"], "c0003")
    # The next good run is judged against the same good runs, passes and joins them.
    verdicts, _ = process(store, [handler], record(4))
    assert verdicts == []
    assert baseline_runs(store) == ["run-0", "run-1", "run-2", "run-4"]


def compare_json(
    tmp_path: Path, baseline: Sequence[int], target: Record, *options: str
) -> dict[str, Any]:
    """`perfwatch compare --format json [options]` of the target's record against the
    records of the baseline runs, each in a file as `perfwatch publish` would send it."""
    baseline_file = tmp_path / "baseline.jsonl"
    baseline_file.write_bytes(b"\n".join(orjson.dumps(record_doc(run)) for run in baseline))
    target_file = tmp_path / "target.json"
    target_file.write_bytes(dumps(target))
    arguments = ["compare", "--baseline", str(baseline_file), "--target", str(target_file)]
    result = CliRunner().invoke(main, [*arguments, *options, "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    document: dict[str, Any] = orjson.loads(result.stdout)
    return document


def test_the_stream_judges_as_perfwatch_compare_does(store: StateStore, tmp_path: Path) -> None:
    handler = CounterCheckHandler(config_with(publish_passed=True))
    targets = [record(0), record(1), record(2), record(3, injection="B"), record(4)]
    published = {rec.run_id: process(store, [handler], rec)[0] for rec in targets}
    judged = [(1, [0]), (3, [0, 1, 2]), (4, [0, 1, 2])]  # run-3 stays out of the baseline
    statuses = []
    for run, baseline in judged:
        (verdict,) = published[f"run-{run}"]
        block = dict(verdict.counter_check or {})
        assert block.pop("verdict") == block["status"]
        assert block.pop("baseline_run_ids") == [f"run-{r}" for r in baseline]
        document = compare_json(tmp_path, baseline, targets[run])
        # the file's reader names the target by its file and line
        assert document["target"].pop("label").endswith(f"(run run-{run})")
        assert block["target"].pop("label") == f"run-{run}"
        # and the stream adds the record's own time and commit
        assert block["target"].pop("time") == format_rfc3339(targets[run].timestamp)
        assert block["target"].pop("commit") == targets[run].commit
        for field_name, value in document.items():
            assert block[field_name] == value, field_name
        assert block.keys() == document.keys()
        statuses.append(block["status"])
    assert statuses == ["insufficient_baseline", "regression", "pass"]


def test_a_calibrated_threshold_comes_from_the_baseline_runs(store: StateStore) -> None:
    handler = CounterCheckHandler(config_with(calibrate=True))
    for run in range(3):
        process(store, [handler], record(run))
    (verdict,), _ = process(store, [handler], record(3, injection="B"))
    block = verdict.counter_check
    assert block is not None and block["verdict"] == "regression"
    calibration = block["calibration"]
    # each baseline run checked against the other two, as calibrate() does on files
    runs = [GENERATOR.simulate_run(1000 + run, label=f"run-{run}") for run in range(3)]
    expected = CounterRegressionCheck().calibrate(runs).calibration_
    assert expected is not None
    assert calibration["runs"] == ["run-0", "run-1", "run-2"]
    assert calibration["largest_excess_errors"] == pytest.approx(expected["largest_excess_errors"])
    assert block["threshold_source"] == "calibrated"
    assert block["threshold"] == pytest.approx(calibration["threshold"])
    assert block["threshold"] != 0.3 and block["max_excess_error"] > block["threshold"]
    assert verdict.parameters["calibrate"] is True


def test_passes_are_published_only_when_configured(store: StateStore) -> None:
    handler = CounterCheckHandler(config_with(publish_passed=True, min_baseline_runs=2))
    assert process(store, [handler], record(0)) == ([], 0)
    assert process(store, [handler], record(1)) == ([], 0)
    (verdict,), queued = process(store, [handler], record(2))
    assert queued == 1 and verdict.kind == PASSED_KIND
    assert verdict.counter_check is not None and verdict.counter_check["verdict"] == "pass"
    assert verdict.counter_check["regression"] is False
    # a good run is not flagged: its p-value is no smaller than the false-alarm rate
    assert verdict.counter_check["pvalue"] >= 0.01
    assert not any(c["flagged"] for c in verdict.counter_check["clusters"])
    assert validate_verdict(verdict.to_json()) == []
    assert baseline_runs(store) == ["run-0", "run-1", "run-2"]


def test_a_redelivered_record_changes_nothing_and_ids_are_deterministic(
    tmp_path: Path,
) -> None:
    records = [record(0), record(1), record(2), record(3, injection="B")]
    ids = []
    for name in ("first", "second"):
        with open_store(f"sqlite:///{tmp_path / f'{name}.db'}") as store:
            handler = CounterCheckHandler(Config())
            for rec in records[:-1]:
                process(store, [handler], rec)
            (verdict,), queued = process(store, [handler], records[-1])
            assert queued == 1
            ids.append(verdict.verdict_id)
            before = store.get_blob(COUNTER_BASELINE_NAMESPACE, baseline_key(TEST, MAIN))
            for rec in records:  # every record again, the regression included
                assert process(store, [CounterCheckHandler(Config())], rec) == ([], 0)
            after = store.get_blob(COUNTER_BASELINE_NAMESPACE, baseline_key(TEST, MAIN))
            assert after == before
            # the regression, and run-1's judgement against one run
            assert len(queries.counter_checks(store)) == 2
    assert ids[0] == ids[1]


def test_a_late_record_is_placed_by_its_timestamp(store: StateStore) -> None:
    handler = CounterCheckHandler(config_with(baseline_runs=3, min_baseline_runs=2))
    for run in (10, 20, 30):
        process(store, [handler], record(run))
    assert baseline_runs(store) == ["run-10", "run-20", "run-30"]
    process(store, [handler], record(25))  # arrives late: between runs 20 and 30
    assert baseline_runs(store) == ["run-20", "run-25", "run-30"]
    process(store, [handler], record(5))  # older than the whole baseline: leaves it at once
    assert baseline_runs(store) == ["run-20", "run-25", "run-30"]


def test_with_a_full_memory_records_older_than_every_judged_run_are_ignored(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(counterchecks, "JUDGED_MEMORY", 3)
    handler = CounterCheckHandler(config_with(baseline_runs=10, min_baseline_runs=10))
    for run in (10, 20, 30, 40):
        process(store, [handler], record(run))
    process(store, [handler], record(10))  # forgotten by now: a redelivery or too late
    process(store, [handler], record(15))  # older than the three runs remembered
    process(store, [handler], record(35))  # late, but among the runs remembered
    assert baseline_runs(store) == ["run-10", "run-20", "run-30", "run-35", "run-40"]


def test_a_run_with_a_change_point_regression_stays_out_of_the_baseline(
    store: StateStore,
) -> None:
    config = config_with(baseline_runs=20, min_baseline_runs=20)  # accumulate, judge nothing
    handlers = build_handlers(config)
    raised = []
    for run in range(16):
        latency = 100.0 * (1.5 if run >= 10 else 1.0) * (1 + 0.002 * (run % 3))
        verdicts, _ = process(store, handlers, record(run, latency=latency))
        detected = [
            v
            for v in verdicts
            if v.kind == DETECTED
            and v.change_point is not None
            and v.change_point.direction == "regression"
        ]
        if detected:
            raised.append(f"run-{run}")
    assert raised, "the latency step raised no change-point regression"
    expected = [f"run-{run}" for run in range(16) if f"run-{run}" not in raised]
    assert baseline_runs(store) == expected


def test_records_without_counters_leave_the_check_alone(store: StateStore) -> None:
    handler = CounterCheckHandler(Config())
    assert process(store, [handler], record(0, latency=5.0, with_counters=False)) == ([], 0)
    assert store.get_blob(COUNTER_BASELINE_NAMESPACE, baseline_key(TEST, MAIN)) is None


def test_counter_settings_come_from_the_file_and_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "perfwatch.toml"
    path.write_text(
        "[counters]\nbaseline_runs = 8\nthreshold = 0.2\npublish_passed = true\ncalibrate = true\n"
    )
    settings = load_config(path, env={}).counters
    assert (settings.baseline_runs, settings.threshold, settings.publish_passed) == (8, 0.2, True)
    assert settings.calibrate is True and Config().counters.calibrate is False
    path.write_text("[counters]\nbaseline_runs = 4\nmin_baseline_runs = 5\n")
    with pytest.raises(ConfigError, match=r"\[counters\]: min_baseline_runs must be from 1"):
        load_config(path, env={})
    # the threshold rule needs two runs to know a model's usual error
    path.write_text('[counters]\ndecision = "threshold"\nmin_baseline_runs = 1\n')
    with pytest.raises(ConfigError, match=r"must be from 2 .* with the threshold rule, got 1"):
        load_config(path, env={})
    path.write_text('[counters]\ndecision = "threshold"\nalpha = 0.05\n')
    settings = load_config(path, env={}).counters
    assert settings.effective_min_baseline_runs == 3 and settings.alpha == 0.05
    assert Config().counters.decision == "pvalue" and Config().counters.alpha == 0.01
    assert Config().counters.effective_min_baseline_runs == 1


# --- through the processor and a broker ---------------------------------------------------------


def test_counter_verdicts_through_the_broker_once_each(
    each_broker: BrokerHandle, store: StateStore, unique_topic: Callable[[str], str]
) -> None:
    topics = unique_topics(unique_topic)
    docs = [record_doc(0), record_doc(1), record_doc(2), record_doc(3, injection="B")]
    docs.append(record_doc(4))
    messages = [(TEST, orjson.dumps(doc)) for doc in docs]
    config = processor_config(store.url, topics)
    counters = config.counters.model_copy(update={"publish_passed": True})
    config = config.model_copy(update={"counters": counters})
    first, documents = verdicts_of_twice_published(config, store, each_broker, messages, TIMEOUT)
    assert documents == first
    kinds = {d["record_run_id"]: d["kind"] for d in documents}
    assert kinds == {
        "run-1": INSUFFICIENT_KIND,
        "run-2": PASSED_KIND,
        "run-3": REGRESSION_KIND,
        "run-4": PASSED_KIND,
    }
    assert len({d["verdict_id"] for d in documents}) == 4
    assert all(validate_verdict(d) == [] for d in documents)
    regression = next(d for d in documents if d["kind"] == REGRESSION_KIND)
    assert regression["counter_check"]["baseline_run_ids"] == ["run-0", "run-1", "run-2"]
    assert baseline_runs(store) == ["run-0", "run-1", "run-2", "run-4"]


def test_the_workload_setting_judges_as_compare_workload_does(
    store: StateStore, tmp_path: Path
) -> None:
    workload = "*Network Interface(eth0)*"
    handler = CounterCheckHandler(config_with(workload=(workload,), publish_passed=True))
    targets = [record(0), record(1), record(2), record(3, injection="B")]
    published = {rec.run_id: process(store, [handler], rec)[0] for rec in targets}
    (verdict,) = published["run-3"]
    block = dict(verdict.counter_check or {})
    document = compare_json(tmp_path, [0, 1, 2], targets[3], "--workload", workload)
    assert block["parameters"] == document["parameters"]
    assert block["parameters"]["workload"] == [workload]
    assert block["clusters"] == document["clusters"]
    assert any(c["workload"] for c in block["clusters"])
