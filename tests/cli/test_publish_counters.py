"""`perfwatch publish` of counter files: perfmon/typeperf CSV (detected) and plain counter
CSV (named) become one record each with a `counters` block the stream's check reads."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner, Result

from perfwatch.cli.main import main
from perfwatch.contract.codec import parse_record

PERFMON = (
    '"(PDH-CSV 4.0) (Coordinated Universal Time)(0)","\\\\PERF01\\Memory\\Pages/sec",'
    '"\\\\PERF01\\TCPv4\\Segments/sec"\r\n'
    '"12/01/2026 10:00:00.000"," ","310"\r\n'
    '"12/01/2026 10:00:05.000","4","298.5"\r\n'
)
PLAIN = "time,\\\\PERF02\\Memory\\Pages/sec,\\\\PERF02\\TCPv4\\Segments/sec\n0,,310\n5,4,298.5\n"


def publish(*args: object) -> Result:
    return CliRunner().invoke(main, ["publish", "--dry-run", "--no-auto-identity", *map(str, args)])


def records(result: Result) -> list[dict]:
    assert result.exit_code == 0, result.stderr
    return [orjson.loads(line) for line in result.stdout.splitlines()]


def test_perfmon_and_plain_counter_files_give_the_same_counters(tmp_path: Path) -> None:
    perfmon = tmp_path / "checkout.csv"
    perfmon.write_text(PERFMON)
    typeperf_tsv = tmp_path / "checkout-tsv.tsv"
    typeperf_tsv.write_text(PERFMON.replace("PDH-CSV", "PDH-TSV").replace('","', '"\t"'))
    plain = tmp_path / "export.csv"
    plain.write_text(PLAIN)
    detected = records(publish(perfmon, typeperf_tsv, "--commit", "abc123"))
    # the perfmon file's first sample was taken then; the plain export says it with a flag
    start = ("--timestamp", "2026-12-01T10:00:00Z")
    named = records(publish("--format", "counters-csv", plain, "--test", "checkout", *start))
    expected = {
        "names": ["\\Memory\\Pages/sec", "\\TCPv4\\Segments/sec"],
        "values": [[None, 310.0], [4.0, 298.5]],
    }
    for record in [*detected, *named]:
        assert record["counters"] == expected
        assert record["metrics"] == {}
        assert record["run_id"].startswith("sha256-")
        parsed = parse_record(orjson.dumps(record))  # what the processor will read
        assert parsed.counters is not None and parsed.counters.names == expected["names"]
    assert [r["test"] for r in detected] == ["checkout", "checkout-tsv"]
    assert detected[0]["commit"] == "abc123" and named[0]["test"] == "checkout"
    assert {r["timestamp"] for r in [*detected, *named]} == {"2026-12-01T10:00:00Z"}
    # the same samples, the same content: the same run id wherever they were recorded
    assert named[0]["run_id"] == records(publish(perfmon, "--test", "checkout"))[0]["run_id"]


def test_a_plain_counter_csv_is_otava_csv_unless_named(tmp_path: Path) -> None:
    plain = tmp_path / "export.csv"
    plain.write_text("time,cpu\n0,1\n5,2\n")
    (as_runs,) = [records(publish(plain, "--timestamp", "2026-12-01T00:00:00Z"))]
    assert "counters" not in as_runs[0]  # a row per run, as for any Otava CSV
    (as_samples,) = records(publish("--format", "counters-csv", plain))
    assert as_samples["counters"]["values"] == [[1.0], [2.0]]


@pytest.mark.parametrize(
    ("text", "file_format", "message"),
    [
        ("time,cpu\n0,1\n5,abc\n", "counters-csv", ":3:2: not a number: 'abc' (counter 'cpu')"),
        ('"(PDH-CSV 4.0)","\\\\H\\A\\b"\n"t","1","2"\n', None, ":2: 3 cells"),
        (
            "time," + ",".join(f"c{i}" for i in range(1025)) + "\n0" + ",1" * 1025 + "\n",
            "counters-csv",
            "$.counters.names",
        ),
    ],
)
def test_bad_counter_files_are_reported_and_not_sent(
    tmp_path: Path, text: str, file_format: str | None, message: str
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(text)
    good = tmp_path / "good.csv"
    good.write_text(PERFMON)
    options = ["--format", file_format] if file_format else []
    result = publish(*options, bad, good) if not file_format else publish(*options, bad)
    assert result.exit_code == 2
    assert message in result.stderr
    assert "file(s) unreadable or invalid; nothing from them was sent" in result.stderr
    if not file_format:
        assert len(result.stdout.splitlines()) == 1  # the good file's record still goes
