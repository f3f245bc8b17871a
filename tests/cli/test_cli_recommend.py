"""The run-or-skip evaluation's verdicts, and `perfwatch recommend`/`profile` on its files.

The evaluation is the one in benchmarks/eval_run_or_skip.py with the same
300 inputs and seeds, without profiling every input on the new code: the
uploader in examples/config_service, profiled for real, with its two real
code updates judged from a sample.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import orjson
import pytest
from click.testing import CliRunner

from perfwatch.cli.main import main
from perfwatch.contract.models import InputProfile
from perfwatch.detectors.inputs import InputClustering, input_table
from perfwatch.readers.input_profile import (
    InputProfileFile,
    read_input_profile,
    write_input_profile,
)

REPO = Path(__file__).resolve().parents[2]
# The evaluation's suite: a smaller one draws another sample, whose votes can sit at the
# limit (docs/run-or-skip.md §5).
INPUTS = 300


@pytest.fixture(scope="module")
def evaluation() -> Iterator[ModuleType]:
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(REPO / "examples"))
        from config_service import evaluation

        yield evaluation


@pytest.fixture(scope="module")
def quick_run(evaluation: ModuleType) -> dict:
    from config_service import payloads, versions

    inputs = payloads.generate(INPUTS, seed=1)
    baseline = evaluation.profile_suite(versions.BASELINE, inputs, repeats=7)
    clustering = InputClustering().fit(*input_table(baseline.profiles))
    judged = {
        update: evaluation.judge_update(update, clustering, baseline.profiles, inputs, repeats=15)
        for update in versions.UPDATES
    }
    return {"baseline": baseline, "clustering": clustering, "judged": judged}


def test_bottleneck_runs_and_refactor_skips(quick_run: dict) -> None:
    # Real timings on a shared machine: the baseline profiled in interleaved
    # rounds and the sample with many alternating passes (docs/run-or-skip.md §3).
    bottleneck = quick_run["judged"]["bottleneck"].recommendation
    refactor = quick_run["judged"]["refactor"].recommendation
    assert bottleneck.decision == "run", bottleneck.seed_table()
    assert refactor.decision == "skip", refactor.seed_table()
    for recommendation in (bottleneck, refactor):
        sampled = sum(len(ids) for ids in quick_run["judged"]["refactor"].sample.values())
        assert len(recommendation.votes) == sampled
        assert recommendation.drift is not None
        # JSON-ready for verdict events
        document = orjson.loads(orjson.dumps(recommendation.to_dict()))
        assert document["decision"] == recommendation.decision


def test_the_refactor_keeps_every_count(quick_run: dict) -> None:
    for vote in quick_run["judged"]["refactor"].recommendation.votes:
        assert vote.numbers["statement_change"] == 0


def write(path: Path, kind: str, profiles: list[InputProfile]) -> Path:
    write_input_profile(path, InputProfileFile.create(kind=kind, profiles=profiles))
    return path


def judged_files(quick_run: dict, update: str, directory: Path) -> dict[str, Path]:
    """The baseline, and the update's sample profiled on the new and the old code."""
    judged = quick_run["judged"][update]
    recommendation = judged.recommendation
    sampled = {vote.input_id for vote in recommendation.votes}
    return {
        "baseline": write(
            directory / "baseline.json", "full_suite", quick_run["baseline"].profiles
        ),
        "update": write(directory / "update.json", "update_sample", judged.updated),
        "reference": write(
            directory / "reference.json",
            "update_sample",
            [p for p in judged.reference if p.input_id in sampled],
        ),
    }


@pytest.fixture(scope="module")
def files(quick_run: dict, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return judged_files(quick_run, "bottleneck", tmp_path_factory.mktemp("profiles"))


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_recommend_json_matches_the_library(
    quick_run: dict, files: dict[str, Path], tmp_path: Path
) -> None:
    status, output = invoke(
        "recommend",
        "--baseline", str(files["baseline"]),
        "--update", str(files["update"]),
        "--reference", str(files["reference"]),
        "--format", "json",
        "--plot", str(tmp_path / "clusters.png"),
    )  # fmt: skip
    assert status == 0, output
    document = orjson.loads(output)
    expected = quick_run["judged"]["bottleneck"].recommendation.to_dict()
    assert document["recommendation"]["decision"] == expected["decision"]
    assert document["recommendation"]["votes"] == expected["votes"]
    clusters = document["clustering"]["clusters"]
    assert sum(cluster["size"] for cluster in clusters) == INPUTS
    assert all(set(cluster) >= {"members", "centre", "size"} for cluster in clusters)
    assert (tmp_path / "clusters.png").read_bytes()[:4] == b"\x89PNG"


def test_recommend_text_leads_with_the_decision_and_its_clusters(
    quick_run: dict, files: dict[str, Path]
) -> None:
    recommendation = quick_run["judged"]["bottleneck"].recommendation
    status, output = invoke(
        "recommend",
        "--baseline", str(files["baseline"]),
        "--update", str(files["update"]),
        "--reference", str(files["reference"]),
    )  # fmt: skip
    assert status == 0, output
    first = output.splitlines()[0]
    assert first == f"Recommendation: {recommendation.summary()}"
    assert first.startswith("Recommendation: RUN: slower with confidence in")
    assert "rule: paired; time: cpu_time_s; acceptable slowdown 5%; confidence 95%" in output
    assert "Clusters (change of the sampled inputs" in output and "Driven by:" in output
    assert "Cost: timing the" in output


@pytest.mark.parametrize("output_format", ["text", "json"])
def test_exit_code_tells_run_from_skip(
    quick_run: dict, files: dict[str, Path], output_format: str, tmp_path: Path
) -> None:
    skipped = judged_files(quick_run, "refactor", tmp_path)
    statuses = {}
    for update, judged in (("bottleneck", files), ("refactor", skipped)):
        for flag in ((), ("--exit-code",)):
            status, output = invoke(
                "recommend",
                "--baseline", str(judged["baseline"]),
                "--update", str(judged["update"]),
                "--reference", str(judged["reference"]),
                "--format", output_format,
                *flag,
            )  # fmt: skip
            assert output.startswith("Recommendation: " if output_format == "text" else "{")
            statuses[update, bool(flag)] = status
    # only asked, a run is status 1 (as compare's regression); by default 0 either way
    assert statuses == {
        ("bottleneck", False): 0,
        ("bottleneck", True): 1,
        ("refactor", False): 0,
        ("refactor", True): 0,
    }


def test_exit_code_without_update_is_a_usage_error(files: dict[str, Path]) -> None:
    status, output = invoke("recommend", "--baseline", str(files["baseline"]), "--exit-code")
    assert status == 2
    assert "--exit-code tells the recommendation for --update: give --update" in output


def test_recommend_text_prints_the_papers_seed_table(files: dict[str, Path]) -> None:
    status, output = invoke(
        "recommend",
        "--baseline", str(files["baseline"]),
        "--update", str(files["update"]),
        "--reference", str(files["reference"]),
        "--rule", "paper", "--acceptable-slowdown", "38%",
    )  # fmt: skip
    assert status == 0, output
    assert "Timethreshold" in output and "Gradient" in output
    assert "rule: paper; time: cpu_time_s; acceptable slowdown 38%" in output


def test_recommend_without_update_shows_clusters_and_writes_the_sample(
    quick_run: dict, files: dict[str, Path], tmp_path: Path
) -> None:
    sample = tmp_path / "sample.txt"
    status, output = invoke(
        "recommend", "--baseline", str(files["baseline"]), "--per-cluster", "2",
        "--seed", "4", "--sample-out", str(sample),
    )  # fmt: skip
    assert status == 0, output
    assert "Sample to profile (2 per cluster, seed 4)" in output
    listed = sample.read_text().split()
    assert len(listed) == 2 * len(quick_run["clustering"].clusters_)
    assert set(listed) <= {p.input_id for p in quick_run["baseline"].profiles}


def test_a_close_vote_prints_the_command_to_sample_more(tmp_path: Path) -> None:
    def make(input_id: str, statements: int, time: float) -> InputProfile:
        return InputProfile(input_id, statements, time, time, 100, statements, 5, 5, 5)

    baseline = [make(f"in-{i}", 100 * i, 0.01 * i) for i in range(1, 9)]
    update = [make("in-1", 100, 0.05), make("in-2", 200, 0.02)]
    write(tmp_path / "b.json", "full_suite", baseline)
    update_file = InputProfileFile.create(
        kind="update_sample", profiles=update, command=["pytest", "tests/perf", "-q"]
    )
    write_input_profile(tmp_path / "u.json", update_file)
    status, output = invoke(
        "recommend", "--baseline", str(tmp_path / "b.json"), "--update", str(tmp_path / "u.json"),
        "--method", "kmeans", "--n-clusters", "1", "--rule", "paper",
        "--acceptable-slowdown", "38%",
    )  # fmt: skip
    assert status == 0, output
    assert "Advice: the vote is close (50% run)" in output
    assert (
        f"perfwatch recommend --baseline {tmp_path / 'b.json'} --method kmeans --n-clusters 1 "
        "--per-cluster 6 --seed 0 --sample-out sample.txt && perfwatch profile --only "
        "sample.txt -o update.json -- tests/perf -q" in output
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--baseline", "missing.json"], "missing.json: no such file"),
        (["--baseline", "{baseline}", "--acceptable-slowdown", "lots"], "not a share"),
        (["--baseline", "{baseline}", "--attributes", "size,colour"], "unknown attribute"),
        # another method's option would be ignored without a word
        (
            ["--baseline", "{baseline}", "--method", "kmeans", "--eps", "0.5"],
            "'--eps': is DBSCAN's",
        ),
        (["--baseline", "{baseline}", "--method", "gmm", "--min-samples", "3"], "'--min-samples'"),
        (["--baseline", "{baseline}", "--n-clusters", "3"], "'--n-clusters': is for kmeans"),
    ],
)
def test_bad_input_is_named(files: dict[str, Path], args: list[str], message: str) -> None:
    status, output = invoke("recommend", *[a.format(baseline=files["baseline"]) for a in args])
    assert status == 2 and message in output


@pytest.mark.parametrize(
    ("command", "option"),
    [
        (["recommend", "--baseline", "{baseline}", "--sample-out"], "--sample-out"),
        (["recommend", "--baseline", "{baseline}", "--plot"], "--plot"),
        (["profile", "-o"], "--output"),
        (["profile", "--only", "{baseline}", "--reference-out"], "--reference-out"),
    ],
)
def test_an_output_in_a_missing_folder_is_named_before_any_work(
    files: dict[str, Path], tmp_path: Path, command: list[str], option: str
) -> None:
    target = tmp_path / "no-such-folder" / "out.txt"
    args = [a.format(baseline=files["baseline"]) for a in command]
    tests = ["--", "no-such-tests"] if args[0] == "profile" else []
    result = CliRunner().invoke(main, [*args, str(target), *tests])
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"perfwatch {args[0]}: error: {option}: cannot write {target}: the folder "
        f"{target.parent} does not exist\n"
    )


NOT_PROFILE = "not a perfwatch input-profile JSON document"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"test,mean\nparse,1.5\n", f":1:1: {NOT_PROFILE}: not valid JSON"),
        (
            b'{"schema": "caf\xe9"}',
            f":1:16: {NOT_PROFILE}: not UTF-8 text (byte 0xe9); save it as UTF-8",
        ),
        # UTF-16 with its byte-order mark is read as text: "{}" is JSON, no profile
        (b"\xff\xfe{\x00}\x00", ": $: 'schema' is a required property (and 3 more problems)"),
    ],
    ids=["csv", "latin-1", "utf-16"],
)
def test_a_file_that_is_no_profile_document_is_named(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / "baseline.csv"
    path.write_bytes(content)
    result = CliRunner().invoke(main, ["recommend", "--baseline", str(path)])
    assert result.exit_code == 2
    assert result.stderr == f"perfwatch recommend: error: {path}{problem}\n"


def test_profile_runs_the_suite_through_the_plugin(tmp_path: Path) -> None:
    output = tmp_path / "suite.json"
    environment = os.environ | {"CONFIG_SERVICE_INPUTS": "8"}
    completed = subprocess.run(
        [
            sys.executable, "-c", "from perfwatch.cli.main import main; main()",
            "profile", "-o", str(output),
            "--repeats", "1", "--",
            str(REPO / "examples" / "config_service" / "perf_suite"),
            "-q", "-p", "no:cacheprovider",
        ],
        env=environment, capture_output=True, text=True, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr
    # Said once, by the plugin in pytest's summary, not again by the command.
    assert (completed.stdout + completed.stderr).count("input profiles (full_suite) written") == 1
    assert "8 input profiles (full_suite) written to" in completed.stdout
    profiles = read_input_profile(output).profiles
    assert len(profiles) == 8
    assert all(p.statements > 0 and p.size > 1000 for p in profiles)


def test_published_profiles_form_a_valid_record() -> None:
    from perfwatch.adapters.identity import Identity, complete_record
    from perfwatch.contract.models import Record
    from perfwatch.contract.validation import validate_record
    from perfwatch.readers.input_profile import profile_record

    profiles = [
        InputProfile("a", 10.0, 0.002, 0.001, 100, 50, 3, 4, 5),
        InputProfile("b", 20.0, 0.004, 0.003, 200, 90, 5, 8, 9),
    ]
    profile_file = InputProfileFile.create(kind="full_suite", profiles=profiles)
    record = complete_record(
        profile_record(profile_file, "perf-suite"), explicit=Identity(), defaults=Identity()
    )
    assert validate_record(record) == []
    parsed = Record.from_json(record)
    assert parsed.inputs is not None and parsed.inputs.profiles == profiles
    assert parsed.metrics["inputs_cpu_time_s"].value == pytest.approx(0.004)


@pytest.mark.parametrize("kind", ["full_suite", "update_sample"])
def test_an_input_profile_file_is_published_as_one_record_and_not_analysed(
    kind: str, tmp_path: Path
) -> None:
    """What `pytest --perfwatch-profile=FILE` wrote reaches the stream as `profile
    --publish` would have sent it; `analyze` says it is no history."""
    from perfwatch.contract.models import Record

    profiles = [
        InputProfile("t.py::a", 10.0, 0.002, 0.001, 100, 50, 3, 4, 5),
        InputProfile("t.py::b", 20.0, 0.004, 0.003, 200, 90, 5, 8, 9),
    ]
    path = write(tmp_path / "profiles.json", kind, profiles)
    options = ["--dry-run", "--no-auto-identity", "--commit", "abc123"]
    for test_options, test in (([], "input-profiles"), (["--test", "perf-suite"], "perf-suite")):
        result = CliRunner().invoke(main, ["publish", *options, *test_options, str(path)])
        assert result.exit_code == 0, result.output
        (line,) = result.stdout.splitlines()
        record = Record.from_json(orjson.loads(line))
        assert record.test == test and record.commit == "abc123"
        assert record.inputs is not None and record.inputs.kind == kind
        assert record.inputs.profiles == profiles
        totals = {"inputs_cpu_time_s": 0.004, "inputs_wall_time_s": 0.006}
        assert {name: metric.value for name, metric in record.metrics.items()} == pytest.approx(
            totals if kind == "full_suite" else {}
        )
    status, output = invoke("analyze", str(path))
    assert status == 2
    assert "this is an input-profile file" in output and "perfwatch recommend" in output


def test_the_cost_counts_every_call_of_a_pass(files: dict[str, Path], tmp_path: Path) -> None:
    # the same timings, as if each pass had called the code 10 times (times per call)
    update = read_input_profile(files["update"]).profiles
    reference = read_input_profile(files["reference"]).profiles
    repeated = [replace(p, calls_per_pass=10) for p in update]
    status, output = invoke(
        "recommend",
        "--baseline", str(files["baseline"]),
        "--update", str(write(tmp_path / "update.json", "update_sample", repeated)),
        "--reference", str(files["reference"]),
    )  # fmt: skip
    assert status == 0, output
    spent = sum(10 * sum(p.wall_times_s or ()) for p in update) + sum(
        sum(p.wall_times_s or ()) for p in reference
    )
    assert (
        f"Cost: timing the {len(update)} sampled inputs (old and new code; {len(update)} short "
        f"inputs over up to 10 calls per pass) took {spent:.2f} s;"
    ) in output
