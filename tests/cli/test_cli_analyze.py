"""`perfwatch analyze` end to end: files in, change points out, clean failures."""

from __future__ import annotations

import csv
import fcntl
import importlib.util
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import numpy as np
import orjson
import pytest
from click.testing import CliRunner, Result

from otava_reference import OtavaReference
from perfwatch.cli.main import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NIGHTLY_CSV = EXAMPLES / "nightly.csv"
NIGHTLY_JSONL = EXAMPLES / "nightly.jsonl"
DIRECTIONS = [
    "--direction",
    "throughput_ops_s=higher",
    "--direction",
    "p99_latency_ms=lower",
    "--direction",
    "peak_memory_mb=lower",
]


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, ["analyze", *map(str, args)])


def run_json(*args: str | Path) -> dict:
    result = run(*args, "--format", "json")
    assert result.exit_code == 0, result.stderr
    return orjson.loads(result.stdout)


def step_csv(path: Path, *, points: int = 60, step_at: int = 30, seed: int = 7) -> Path:
    """A series that is 100 +- 1 and then 120 +- 1 from ``step_at`` on."""
    rng = np.random.default_rng(seed)
    values = 100 + rng.normal(0, 1, points) + np.where(np.arange(points) >= step_at, 20, 0)
    lines = ["time,commit,x"] + [
        f"2024-01-01T{i // 60:02d}:{i % 60:02d}:00Z,c{i:03d},{v:.3f}" for i, v in enumerate(values)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def summary(doc: dict) -> dict[str, list[tuple[int, str]]]:
    return {
        s["metric"]: [(c["index"], c["direction"]) for c in s["change_points"]]
        for s in doc["series"]
    }


# --- the shipped example ----------------------------------------------------------------------


def test_example_finds_the_generated_events() -> None:
    doc = run_json(NIGHTLY_CSV, *DIRECTIONS)
    assert [(s["test"], s["points"]) for s in doc["series"]] == [("nightly", 120)] * 3
    # examples/generate.py: +12% throughput from run 38, +18% latency from run 74,
    # +20% memory for runs 96-101.
    assert summary(doc) == {
        "throughput_ops_s": [(38, "improvement")],
        "p99_latency_ms": [(74, "regression")],
        "peak_memory_mb": [(96, "regression"), (102, "improvement")],
    }
    with NIGHTLY_CSV.open() as stream:
        rows = list(csv.DictReader(stream))
    latency = doc["series"][1]["change_points"][0]
    assert latency["time"] == rows[74]["time"]
    assert latency["commit"] == rows[74]["commit"]
    assert latency["forward_change_percent"] == pytest.approx(18, abs=2)
    assert latency["mean_after"] > latency["mean_before"]
    assert latency["run_id"] is None  # the file has no run_id column
    assert set(latency) == {
        "index",
        "run_id",
        "time",
        "commit",
        "forward_change_percent",
        "magnitude",
        "mean_before",
        "stddev_before",
        "mean_after",
        "stddev_after",
        "pvalue",
        "direction",
    }


def without_run_ids(doc: dict) -> dict:
    """The answer without the run ids, which the records have and the CSV example has not."""
    return {
        "series": [
            {**s, "change_points": [{**c, "run_id": None} for c in s["change_points"]]}
            for s in doc["series"]
        ]
    }


def test_record_file_gives_the_same_answer_with_its_own_directions() -> None:
    from_records = run_json(NIGHTLY_JSONL)
    assert without_run_ids(from_records) == run_json(NIGHTLY_CSV, *DIRECTIONS)
    run_ids = [orjson.loads(line)["run_id"] for line in NIGHTLY_JSONL.read_bytes().splitlines()]
    for series in from_records["series"]:
        for change in series["change_points"]:
            assert change["run_id"] == run_ids[change["index"]]


def test_unknown_suffixes_are_recognised_by_content(tmp_path: Path) -> None:
    records = tmp_path / "nightly.records"
    records.write_bytes(NIGHTLY_JSONL.read_bytes())
    table = tmp_path / "nightly.data"
    table.write_bytes(NIGHTLY_CSV.read_bytes())
    assert run_json(records) == run_json(NIGHTLY_JSONL)
    assert run_json(table, *DIRECTIONS) == run_json(NIGHTLY_CSV, *DIRECTIONS)


@pytest.mark.parametrize("example", [NIGHTLY_CSV, NIGHTLY_JSONL], ids=["csv", "jsonl"])
def test_a_windows_byte_order_mark_and_line_ends_change_nothing(
    example: Path, tmp_path: Path
) -> None:
    windows = tmp_path / example.name
    windows.write_bytes(b"\xef\xbb\xbf" + example.read_bytes().replace(b"\n", b"\r\n"))
    assert run_json(windows, *DIRECTIONS) == run_json(example, *DIRECTIONS)


def test_examples_are_regenerated_byte_for_byte(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("generate_examples", EXAMPLES / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.write_examples(tmp_path)
    for name in ("nightly.csv", "nightly.jsonl"):
        assert (tmp_path / name).read_bytes() == (EXAMPLES / name).read_bytes()


def test_compat_mode_matches_otava_on_the_example(otava: OtavaReference) -> None:
    doc = run_json(NIGHTLY_CSV, "--compat", "otava")
    with NIGHTLY_CSV.open() as stream:
        rows = list(csv.DictReader(stream))
    for series in doc["series"]:
        expected = otava.change_points([float(row[series["metric"]]) for row in rows])
        assert [(c["index"], c["pvalue"]) for c in series["change_points"]] == [
            (c["index"], pytest.approx(c["pvalue"], rel=1e-9)) for c in expected
        ]


def test_text_output_marks_change_points_without_colour_off_a_terminal() -> None:
    result = run(NIGHTLY_CSV, *DIRECTIONS)
    assert result.exit_code == 0
    out = result.stdout
    assert "\x1b[" not in out
    assert "nightly / p99_latency_ms  (lower is better, 120 runs, 1 change point(s))" in out
    lines = out.splitlines()
    marker = next(i for i, line in enumerate(lines) if "+18." in line and "regression" in line)
    assert lines[marker].startswith("---- change point: +18.")
    # The row right after the marker is run 74, the first one after the change.
    assert lines[marker + 1].startswith("2024-03-15 02:00:00 +0000")
    assert out.rstrip().endswith(
        "3 series, 4 change point(s): 2 regression, 2 improvement, 0 unknown"
    )


def test_terminal_gets_colours_and_a_progress_bar(tmp_path: Path) -> None:
    paths = [step_csv(tmp_path / f"b{i:02d}.csv", points=24, step_at=12, seed=i) for i in range(25)]
    controller, terminal = pty.openpty()
    # A fresh pseudo-terminal is 0 columns wide; give it a real size so tqdm draws.
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    entry = "from perfwatch.cli.main import main; main()"
    command = [sys.executable, "-c", entry, "analyze", "--window", "24"]
    process = subprocess.Popen(
        [*command, "--direction", "x=lower", *map(str, paths)],
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=terminal,
    )
    os.close(terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal closes when the process ends
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(controller)
    assert process.wait(timeout=300) == 0
    screen = b"".join(chunks).decode()
    assert "25/25" in screen  # the progress bar, drawn on stderr
    assert "\x1b[31m---- change point: +" in screen  # regressions in red
    assert "25 regression" in screen


# --- detection and options --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "direction"),
    [
        ([], "unknown"),
        (["--direction", "x=lower"], "regression"),
        (["--direction", "x=higher_is_better"], "improvement"),
    ],
)
def test_index_is_the_first_point_after_the_step(
    tmp_path: Path, flags: list[str], direction: str
) -> None:
    doc = run_json(step_csv(tmp_path / "step.csv"), *flags)
    assert doc["series"][0]["test"] == "step"
    (change,) = doc["series"][0]["change_points"]
    assert (change["index"], change["commit"], change["direction"]) == (30, "c030", direction)
    assert change["time"] == "2024-01-01T00:30:00Z"


def test_filters_select_the_runs_analysed(tmp_path: Path) -> None:
    path = step_csv(tmp_path / "step.csv")
    assert summary(run_json(path, "--last", "40"))["x"] == [(10, "unknown")]
    since = run_json(path, "--since", "c010", "--until", "2024-01-01T00:49:00Z")
    assert since["series"][0]["points"] == 40
    assert summary(since)["x"] == [(20, "unknown")]
    assert summary(run_json(path, "--until", "c029"))["x"] == []


def test_thresholds_reach_the_detector(tmp_path: Path) -> None:
    path = step_csv(tmp_path / "step.csv")
    assert summary(run_json(path, "-P", "1e-300"))["x"] == []
    assert summary(run_json(path, "-M", "0.5"))["x"] == []
    assert summary(run_json(path, "--window", "20", "-M", "0.1"))["x"] == [(30, "unknown")]


def test_metrics_option_limits_the_series() -> None:
    doc = run_json(NIGHTLY_CSV, "--metrics", "peak_memory_mb,p99_latency_ms")
    assert [s["metric"] for s in doc["series"]] == ["p99_latency_ms", "peak_memory_mb"]


def test_many_files_are_analysed_in_one_call(tmp_path: Path) -> None:
    paths = [
        step_csv(tmp_path / f"bench_{i:03d}.csv", points=24, step_at=12, seed=i) for i in range(150)
    ]
    doc = run_json(*paths, "--window", "24")
    assert [s["test"] for s in doc["series"]] == [f"bench_{i:03d}" for i in range(150)]
    assert all(s["points"] == 24 for s in doc["series"])
    found = {s["test"]: [c["index"] for c in s["change_points"]] for s in doc["series"]}
    # Every file has one 20-sigma step at run 12: nothing else may be reported.
    assert {test: at for test, at in found.items() if at != [12]} == {}


def test_branch_selects_the_runs_of_one_branch(tmp_path: Path) -> None:
    lines = NIGHTLY_JSONL.read_bytes().splitlines()
    mixed = [
        line.replace(b'"branch":"main"', b'"branch":"dev"') if i % 10 == 0 else line
        for i, line in enumerate(lines)
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"\n".join(mixed) + b"\n")
    refused = run(path)
    assert refused.exit_code == 2
    assert "several branches (dev, main)" in refused.stderr
    doc = run_json(path, "--branch", "main")
    assert [s["points"] for s in doc["series"]] == [108] * 3


# --- failures ---------------------------------------------------------------------------------

GOOD = "time,x\n2024-01-01,1\n2024-01-02,2\n2024-01-03,3\n"


@pytest.mark.parametrize(
    ("text", "location", "fragment"),
    [
        (None, "", "no such file"),
        ("", ":1", "file is empty"),
        (
            "time,x\n2024-01-01,1\n",
            ":1:2",
            "x: a single run; change-point analysis needs at least 2",
        ),
        ("time,x,x\n2024-01-01,1,1\n", ":1:3", "duplicate column name 'x'"),
        (GOOD + "2024-01-04,abc\n", ":5:2", "unparsable number 'abc'"),
        (GOOD + "2024-01-04,Infinity\n", ":5:2", "non-finite value 'Infinity'"),
        (GOOD + "2024-01-04,-inf\n", ":5:2", "non-finite value '-inf'"),
        (GOOD + "2024-01-04," + "9" * 200 + "\n", ":5:2", "value 1e+200 in metric column 'x'"),
        (GOOD + "04/01/2024,4\n", ":5:1", "unparsable time '04/01/2024'"),
    ],
)
def test_bad_input_fails_with_location_and_no_output(
    tmp_path: Path, text: str | None, location: str, fragment: str
) -> None:
    good = tmp_path / "good.csv"
    good.write_text(GOOD)
    bad = tmp_path / "bad.csv"
    if text is not None:
        bad.write_text(text)
    result = run(good, bad)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"perfwatch analyze: error: {bad}{location}: ")
    assert fragment in result.stderr


def test_a_column_starting_with_text_is_an_attribute_and_the_error_says_so(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.csv"
    path.write_text("time,x,host\n2024-01-01,abc,a\n2024-01-02,2,a\n2024-01-03,3,a\n")
    result = run(path)
    assert (result.exit_code, result.stdout) == (2, "")
    assert "a column starting with text is an attribute" in result.stderr
    assert "--metrics NAME reads it as a metric" in result.stderr
    # The way out the message names does name the cell.
    named = run(path, "--metrics", "x")
    assert named.exit_code == 2
    assert named.stderr == (
        f"perfwatch analyze: error: {path}:2:2: unparsable number 'abc' in metric column 'x'\n"
    )


def test_bad_record_line_is_located(tmp_path: Path) -> None:
    lines = NIGHTLY_JSONL.read_bytes().splitlines()
    lines[4] = lines[4].replace(b'"timestamp":"2024-01-05T02:00:00Z"', b'"timestamp":"5 Jan"')
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join(lines))
    result = run(path)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith(
        f"perfwatch analyze: error: {path}:5:1: $.timestamp: is not an RFC 3339"
    )


def test_selection_leaving_too_few_runs_is_an_error(tmp_path: Path) -> None:
    result = run(step_csv(tmp_path / "s.csv"), "--since", "2030-01-01")
    assert result.exit_code == 2
    assert "x: no runs after filtering" in result.stderr


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--metrics", "nope"], "no metric named 'nope'"),
        (["--direction", "x=sideways"], "is not METRIC=higher or METRIC=lower"),
        (["--direction", "nope=higher"], "'--direction': no metric named 'nope' among the series"),
        (
            ["--since", "not-a-commit"],
            "neither a commit of this series (or a prefix of one, at least 4",
        ),
        (["-P", "2"], "-P"),
        (["--sep", "ab"], "not a single character"),
        (["-M", "nan"], "'nan' is not a finite number"),
        (["-P", "nan"], "'nan' is not a finite number"),
        (["--window", str(2**63)], "--window"),
    ],
)
def test_bad_options_exit_2(tmp_path: Path, args: list[str], fragment: str) -> None:
    result = run(step_csv(tmp_path / "s.csv"), *args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert fragment in result.stderr


def test_a_direction_for_a_metric_that_metrics_leaves_out_is_ignored(tmp_path: Path) -> None:
    csv, _ = two_metric_csv(tmp_path / "two.csv")
    fixed = ("--direction", "latency_ms=lower", "--direction", "throughput_ops_s=higher")
    for chosen in ("latency_ms", "throughput_ops_s"):
        result = run(csv, "--metrics", chosen, *fixed)
        assert result.exit_code == 0, result.output
    typo = run(csv, "--direction", "latency_ms=lower", "--direction", "latncy_ms=lower")
    assert typo.exit_code == 2
    assert "no metric named 'latncy_ms'" in typo.stderr


def test_a_series_too_short_for_a_change_point_says_so(tmp_path: Path) -> None:
    five = tmp_path / "five.csv"
    five.write_text("time,v\n1,10\n2,10.1\n3,9.9\n4,20\n5,20.1\n")
    result = run(five)
    assert result.exit_code == 0, result.output
    title = result.stdout.splitlines()[0]
    assert (
        "(5 runs, 0 change point(s), too few runs with a value to place one: it needs 6)" in title
    )
    assert run_json(five)["series"][0]["needs_runs"] == 6
    # Otava's mode has no minimum segment: it places one, and says nothing of the kind
    otava = run(five, "--compat", "otava")
    assert "1 change point(s))" in otava.stdout.splitlines()[0]
    six = tmp_path / "six.csv"
    six.write_text("time,v\n1,10\n2,10.1\n3,9.9\n4,20\n5,20.1\n6,19.9\n")
    assert "too few" not in run(six).stdout


# --- the configuration file ---------------------------------------------------------------


def two_metric_csv(path: Path) -> tuple[Path, np.ndarray]:
    """Two columns with the same values: 1000 +- 8, down 3 % at run 40, up 1.5 % at run 60."""
    rng = np.random.default_rng(3)
    runs = np.arange(80)
    values = 1000 + rng.normal(0, 8, runs.size) - 30 * (runs >= 40) + 15 * (runs >= 60)
    lines = ["time,commit,throughput_ops_s,latency_ms"] + [
        f"2024-01-{1 + i // 24:02d}T{i % 24:02d}:00:00Z,c{i:03d},{v:.3f},{v:.3f}"
        for i, v in enumerate(values)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path, np.array([float(f"{v:.3f}") for v in values])


def write_config(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


THROUGHPUT_HIGHER = '[directions]\n"throughput*" = "higher_is_better"\n'


def test_config_directions_make_a_drop_in_throughput_a_regression(tmp_path: Path) -> None:
    csv_path, _ = two_metric_csv(tmp_path / "bench.csv")
    config = write_config(tmp_path / "perfwatch.toml", THROUGHPUT_HIGHER)
    assert summary(run_json(csv_path))["throughput_ops_s"] == [(40, "unknown"), (61, "unknown")]
    configured = summary(run_json(csv_path, "--config", config))
    assert configured["throughput_ops_s"] == [(40, "regression"), (61, "improvement")]
    assert configured["latency_ms"] == [(40, "unknown"), (61, "unknown")]  # no pattern matches
    text = run(csv_path, "--config", config)
    assert text.exit_code == 0, text.stderr
    assert "bench / throughput_ops_s  (higher is better, 80 runs" in text.stdout
    assert "---- change point: -2.9%  mean 999.671 -> 970.411  p=7.8e-17  regression ----" in (
        text.stdout
    )
    assert text.stdout.endswith(
        "2 series, 4 change point(s): 1 regression, 1 improvement, 2 unknown\n"
    )


def test_the_config_file_is_found_as_by_every_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    csv_path, _ = two_metric_csv(tmp_path / "bench.csv")
    elsewhere = write_config(tmp_path / "other.toml", THROUGHPUT_HIGHER)

    def first_direction(env: dict[str, str]) -> str:
        result = CliRunner().invoke(main, ["analyze", str(csv_path), "--format", "json"], env=env)
        assert result.exit_code == 0, result.stderr
        return summary(orjson.loads(result.stdout))["throughput_ops_s"][0][1]

    monkeypatch.chdir(tmp_path)
    assert first_direction({}) == "unknown"
    assert first_direction({"PERFWATCH_CONFIG": str(elsewhere)}) == "regression"
    write_config(tmp_path / "perfwatch.toml", THROUGHPUT_HIGHER.replace("higher", "lower"))
    assert first_direction({}) == "improvement"  # ./perfwatch.toml
    assert first_direction({"PERFWATCH_CONFIG": str(elsewhere)}) == "regression"


def test_an_analyzer_rule_gives_its_series_the_detectors_result_with_its_parameters(
    tmp_path: Path,
) -> None:
    from perfwatch.config import load_config
    from perfwatch.detectors.edivisive import EDivisiveParams, detect_change_points

    csv_path, values = two_metric_csv(tmp_path / "bench.csv")
    config_path = write_config(
        tmp_path / "perfwatch.toml",
        '[analyzer]\nwindow_len = 30\n[[analyzer.rules]]\nmetric = "latency*"\nmax_pvalue = 1e-5\n',
    )
    config = load_config(config_path, env={})
    found = {
        s["metric"]: [(c["index"], c["pvalue"], c["mean_after"]) for c in s["change_points"]]
        for s in run_json(csv_path, "--config", config_path)["series"]
    }
    for metric in ("throughput_ops_s", "latency_ms"):
        params = EDivisiveParams.from_dict(config.analyzer_params_for("bench", metric))
        expected = [(c.index, c.pvalue, c.mean_after) for c in detect_change_points(values, params)]
        assert found[metric] == expected, metric
    # same values, other parameters: the rule made the difference
    assert [i for i, *_ in found["throughput_ops_s"]] == [40, 61]
    assert [i for i, *_ in found["latency_ms"]] == [39]


def test_flags_and_declared_directions_take_precedence_over_the_config(tmp_path: Path) -> None:
    csv_path, _ = two_metric_csv(tmp_path / "bench.csv")
    config = write_config(
        tmp_path / "perfwatch.toml",
        '[directions]\n"*" = "lower_is_better"\n'
        '[[analyzer.rules]]\nmetric = "latency*"\nmax_pvalue = 1e-300\n',
    )
    flagged = summary(
        run_json(csv_path, "--config", config, "--direction", "throughput_ops_s=higher")
    )
    assert flagged["throughput_ops_s"] == [(40, "regression"), (61, "improvement")]
    assert flagged["latency_ms"] == []  # the rule's threshold
    assert summary(run_json(csv_path, "--config", config, "-P", "0.001"))["latency_ms"] == [
        (40, "improvement"),
        (61, "regression"),
    ]
    # the records declare every direction, which the config cannot turn round
    declared = run_json(NIGHTLY_JSONL)
    config_everything_higher = write_config(
        tmp_path / "higher.toml", '[directions]\n"*" = "higher_is_better"\n'
    )
    assert run_json(NIGHTLY_JSONL, "--config", config_everything_higher) == declared


def test_compat_otava_takes_only_otavas_parameters_from_the_config(tmp_path: Path) -> None:
    path = step_csv(tmp_path / "step.csv")
    config = write_config(
        tmp_path / "perfwatch.toml", "[analyzer]\nmax_pvalue = 1e-300\ntrim = 0.1\n"
    )
    assert summary(run_json(path, "--compat", "otava"))["x"] == [(30, "unknown")]
    assert summary(run_json(path, "--compat", "otava", "--config", config))["x"] == []


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('[directions]\n"x" = "up"\n', "directions.x: expected one of"),
        ("[analyzer]\nwindow_len = 1\n", "[analyzer]: window_len must be at least 2"),
        ("[analyzer\n", "invalid TOML"),
    ],
)
def test_a_bad_config_file_is_an_input_error(tmp_path: Path, text: str, fragment: str) -> None:
    config = write_config(tmp_path / "bad.toml", text)
    result = run(step_csv(tmp_path / "s.csv"), "--config", config)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith(f"perfwatch analyze: error: {config}: ")
    assert fragment in result.stderr and result.stderr.count("\n") == 1


def test_a_missing_config_file_named_is_an_input_error(tmp_path: Path) -> None:
    result = run(step_csv(tmp_path / "s.csv"), "--config", tmp_path / "none.toml")
    assert result.exit_code == 2
    assert (
        result.stderr
        == f"perfwatch analyze: error: {tmp_path / 'none.toml'}: configuration file not found\n"
    )
