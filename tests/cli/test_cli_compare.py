"""``perfwatch compare`` end to end on files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from click.testing import CliRunner

from perfwatch.cli.main import main


def write_run(
    path: Path, seed: int, *, cpu_per_request: float = 1.0, host: str | None = None
) -> Path:
    """A CSV run: request load drives cpu and network, a second load drives disk. With
    ``host``: the same run as typeperf writes it, counter paths on that host."""
    rng = np.random.default_rng(seed)
    n = 240
    load = 1 + 0.2 * np.sin(np.arange(n) / 9 + seed) + 0.05 * rng.normal(size=n)
    other = 1 + 0.3 * np.cos(np.arange(n) / 13 + seed) + 0.05 * rng.normal(size=n)
    columns = {
        "cpu": 30 * load * cpu_per_request + rng.normal(size=n),
        "requests": 120 * load + 2 * rng.normal(size=n),
        "net_bytes": 9000 * load + 300 * rng.normal(size=n),
        "disk_bytes": 500 * other + 10 * rng.normal(size=n),
        "heap": 4e8 * other + 1e6 * rng.normal(size=n),
    }
    if host is not None:
        header = ["(PDH-CSV 4.0) (Coordinated Universal Time)(0)"]
        header += [f"\\\\{host}\\App(web)\\{name}" for name in columns]
        lines = [",".join(f'"{cell}"' for cell in header)]
        for i in range(n):
            cells = [f"12/01/2026 10:{i // 12:02d}:{5 * (i % 12):02d}.000"]
            cells += [f"{v[i]:.6f}" for v in columns.values()]
            lines.append(",".join(f'"{cell}"' for cell in cells))
        path.write_text("\n" + "\n".join(lines) + "\nExiting, please wait...\n")
        return path
    lines = ["time," + ",".join(columns)]
    for i in range(n):
        lines.append(f"{5 * i}," + ",".join(f"{v[i]:.6f}" for v in columns.values()))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return {
        "good": [write_run(tmp_path / f"good{i}.csv", i) for i in range(5)],
        "target": write_run(tmp_path / "target.csv", 10),
        "regression": write_run(tmp_path / "slow.csv", 11, cpu_per_request=1.6),
        "calibration": [write_run(tmp_path / f"cal{i}.csv", 20 + i) for i in range(3)],
    }


def invoke(*args: object) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["compare", *map(str, args)])
    return result.exit_code, result.stdout, result.stderr


def test_good_run_exits_0_with_the_verdict_first(files: dict) -> None:
    code, out, _ = invoke("--baseline", *files["good"], "--target", files["target"])
    assert code == 0, out
    assert out.startswith("no regression: p ")
    assert "false-alarm rate 1.0%, from 5 baseline runs left out in turn" in out
    assert "clusters, most unusual first:" in out


def test_a_pass_at_p_1_gives_no_empty_value(files: dict, tmp_path: Path) -> None:
    # a copy of a baseline run: nothing about it is unusual
    copy = tmp_path / "copy.csv"
    copy.write_bytes(files["good"][0].read_bytes())
    code, out, _ = invoke("--baseline", *files["good"], "--target", copy)
    assert code == 0, out
    assert out.startswith("no regression: p 1 (corrected for the "), out
    assert "--" not in out.splitlines()[0]


def test_the_text_has_one_kind_of_z(files: dict) -> None:
    """The headline gives the run's p-value; a z is always the z of a model's own error
    (the clusters' and the blamed counters'), never the p-value's normal score beside it."""
    code, out, _ = invoke("--baseline", *files["good"], "--target", files["regression"])
    assert code == 1, out
    headline, *rest = out.splitlines()
    assert headline.startswith("REGRESSION: ") and " z " not in headline
    clusters = [line for line in rest if line.startswith("  [")]
    assert clusters and all(", error z " in line for line in clusters), clusters
    assert [line for line in rest if " z " in line and ", error z " not in line] == []
    assert any(line.startswith("most unusual counters (z of their own model") for line in rest)


def test_an_excess_that_rounds_to_zero_has_no_sign(files: dict, tmp_path: Path) -> None:
    # this run's model misses by a few hundredths of a point less than usual
    target = write_run(tmp_path / "near_usual.csv", 14)
    code, out, _ = invoke("--baseline", *files["good"], "--target", target)
    assert code == 0, out
    assert "excess 0.0%" in out and "-0.0%" not in out


def test_one_baseline_run_gives_no_verdict(files: dict) -> None:
    code, out, _ = invoke("--baseline", files["good"][0], "--target", files["regression"])
    assert code == 0, out
    assert out.startswith("no verdict: a baseline of one run shows no run-to-run variation")
    # no z, no blame and no cluster marked ok: nothing was judged
    assert "most unusual" not in out and ", z " not in out and ": ok," not in out
    assert "clusters, largest excess error first:" in out
    assert ": not judged, error " in out and "fit error on the baseline run " in out
    code, out, _ = invoke(
        "--baseline", files["good"][0], "--target", files["target"], "--format", "json"
    )
    assert orjson.loads(out)["status"] == "insufficient_baseline"


def test_the_fixed_threshold_instead_of_the_baseline_calibration(files: dict) -> None:
    args = ["--baseline", *files["good"], "--target", files["target"]]
    code, out, _ = invoke(*args, "--no-baseline-calibration")
    assert code == 0, out
    assert out.startswith("no regression: largest excess error ")
    assert "within the 30.0% threshold (fixed)" in out
    code, _, err = invoke(*args, "--threshold", "0.2", "--alpha", "0.05")
    assert code == 2
    assert "--alpha is the p-value rule's" in err


def test_regression_exits_1_and_names_the_counters(files: dict) -> None:
    code, out, _ = invoke("--baseline", *files["good"], "--target", files["regression"])
    assert code == 1, out
    first = out.splitlines()[0]
    assert first.startswith("REGRESSION")
    look_first = next(line for line in out.splitlines() if line.startswith("look first: "))
    assert look_first.removeprefix("look first: ").split(", ")[0] in {
        "cpu",
        "requests",
        "net_bytes",
    }


def test_json_output_and_repeated_baseline_options(files: dict) -> None:
    args = [arg for path in files["good"] for arg in ("--baseline", path)]
    code, out, _ = invoke(*args, "--target", files["regression"], "--format", "json")
    assert code == 1
    document = orjson.loads(out)
    assert document["regression"] is True
    assert document["baseline"]["runs"] == 5
    assert document["status"] == "regression" and document["pvalue"] < 0.01
    flagged = [c for c in document["clusters"] if c["flagged"]]
    assert flagged and {"dependent", "coefficients", "ks_pvalue", "excess_error"} <= set(flagged[0])


def test_calibrated_threshold(files: dict) -> None:
    code, out, _ = invoke(
        "--baseline",
        *files["good"],
        "--target",
        files["target"],
        "--calibrate",
        *files["calibration"],
        "--format",
        "json",
    )
    document = orjson.loads(out)
    assert document["threshold_source"] == "calibrated"
    assert document["calibration"]["runs"] == [str(p) for p in files["calibration"]]
    assert document["threshold"] == pytest.approx(document["calibration"]["threshold"])
    assert code == (1 if document["regression"] else 0)


def test_usage_and_input_errors_exit_2(files: dict, tmp_path: Path) -> None:
    code, _, err = invoke(
        "--baseline", *files["good"], "--target", files["target"], "--threshold", "0.2",
        "--calibrate", *files["calibration"],
    )  # fmt: skip
    assert code == 2 and "not both" in err
    bad = tmp_path / "bad.csv"
    bad.write_text("time,cpu\n0,1\n5,oops\n")
    code, _, err = invoke("--baseline", *files["good"], "--target", bad)
    assert code == 2
    assert f"{bad}:3:2: not a number: 'oops'" in err
    code, _, err = invoke("--baseline", tmp_path / "missing.csv", "--target", files["target"])
    assert code == 2 and "no such file" in err
    short = tmp_path / "short.csv"
    short.write_text("time,cpu,mem\n" + "".join(f"{i},{i % 3},{i % 5}\n" for i in range(12)))
    short_target = tmp_path / "short_target.csv"
    short_target.write_bytes(short.read_bytes())
    code, _, err = invoke("--baseline", short, "--target", short_target)
    assert code == 2 and "steady-state sample" in err


def test_literal_mode_runs(files: dict) -> None:
    code, out, _ = invoke(
        "--baseline", *files["good"], "--target", files["target"], "--literal", "--format", "json"
    )
    assert code in (0, 1)
    parameters = orjson.loads(out)["parameters"]
    assert parameters["dependent_selection"] == "ks"
    assert parameters["block"] == 1 and parameters["steady_state"] == "off"


def test_a_typeperf_target_is_checked_against_a_plain_csv_baseline(
    files: dict, tmp_path: Path
) -> None:
    """The same counters written by typeperf on one host and in a plain CSV export from
    another (counter paths with their host) compare with each other."""
    plain = []
    for good in files["good"]:
        text = good.read_text().splitlines()
        names = text[0].split(",")[1:]
        text[0] = "time," + ",".join(f"\\\\WEB02\\App(web)\\{name}" for name in names)
        plain.append(good.with_suffix(".paths.csv"))
        plain[-1].write_text("\n".join(text) + "\n")
    typeperf = write_run(tmp_path / "tonight.csv", 10, host="BUILD07")
    slow = write_run(tmp_path / "slow-typeperf.csv", 11, cpu_per_request=1.6, host="BUILD07")
    code, out, err = invoke("--baseline", *plain, "--target", typeperf)
    assert code == 0, out + err
    assert "\\App(web)\\cpu" in out
    code, out, _ = invoke("--baseline", *plain, "--target", slow)
    assert code == 1, out
    assert "\\App(web)\\cpu" in out.splitlines()[1]
    # typeperf baselines from one host, a target from another
    baseline = [write_run(tmp_path / f"db{i}.csv", i, host="DB01") for i in range(3)]
    code, out, _ = invoke("--baseline", *baseline, "--target", typeperf)
    assert code == 0, out


def test_workload_counters_add_their_models(files: dict) -> None:
    code, out, _ = invoke(
        "--baseline", *files["good"], "--target", files["regression"], "--workload", "req*"
    )
    assert code == 1, out
    assert "] workload models: " in out
    assert "counters modelled on the workload counters: requests" in out
    code, out, _ = invoke(
        "--baseline", *files["good"], "--target", files["target"], "--workload", "requests",
        "--format", "json",
    )  # fmt: skip
    document = orjson.loads(out)
    assert code == 0 and document["parameters"]["workload"] == ["requests"]
    assert [c["members"] for c in document["clusters"] if c["workload"]] == [["requests"]]
    code, _, err = invoke(
        "--baseline", *files["good"], "--target", files["target"], "--workload", "rps*"
    )
    assert code == 2 and "workload 'rps*': no counter of the baseline that varies matches it" in err
    code, _, err = invoke(
        "--baseline", *files["good"], "--target", files["target"], "--workload", " "
    )
    assert code == 2 and "--workload" in err


def test_a_run_given_twice_is_a_usage_error(files: dict) -> None:
    good = files["good"]
    again = f"{good[0].parent}/./{good[0].name}"
    code, out, err = invoke("--baseline", *good, again, "--target", files["target"])
    assert (code, out) == (2, "")
    assert "good0.csv is given twice (also as" in err
    code, out, err = invoke("--baseline", *good, "--target", good[1])
    assert (code, out) == (2, "")
    assert "good1.csv is also a good run (--baseline or --calibrate)" in err
    calibration = files["calibration"]
    code, out, err = invoke(
        "--baseline", *good, "--calibrate", calibration[0], "--target", calibration[0]
    )
    assert (code, out) == (2, "")
    assert "cal0.csv is also a good run" in err
