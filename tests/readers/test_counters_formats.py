"""Reading counter samples: plain CSV, perfmon CSV (typeperf/relog), perfwatch JSON."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from perfwatch.readers.counter_csv import read_counter_csv, read_counter_runs
from perfwatch.readers.detect import read_input_file
from perfwatch.readers.errors import SourceError
from perfwatch.readers.perfmon_csv import read_perfmon_csv

PERFMON = (
    '"(PDH-CSV 4.0) (GMT Standard Time)(0)","\\\\WEB01\\Process(java)\\% Processor Time",'
    '"\\\\WEB01\\Memory\\Pages/sec"\r\n'
    '"04/12/2024 10:00:00.000","12.5"," "\r\n'
    '"04/12/2024 10:00:05.000","13.25","4"\r\n'
    '"04/12/2024 10:00:10.000","","0"\r\n'
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_plain_csv(tmp_path: Path) -> None:
    path = write(tmp_path, "run.csv", "time,cpu,mem\n0,1.5,100\n5,,101\n10,NaN,102\n\n")
    samples = read_counter_csv(path)
    assert samples.names == ["cpu", "mem"]
    assert samples.values.shape == (3, 2)
    assert samples.values[0].tolist() == [1.5, 100.0]
    assert math.isnan(samples.values[1, 0]) and math.isnan(samples.values[2, 0])
    named = write(tmp_path, "named.csv", "cpu,when,mem\n1,0,2\n")
    assert read_counter_csv(named, time_column="when").names == ["cpu", "mem"]
    # A header with a comma is comma-separated, whatever else its names hold.
    semicolon_in_name = write(tmp_path, "names.csv", "time,cpu;total\n0,1\n")
    assert read_counter_csv(semicolon_in_name).names == ["cpu;total"]


@pytest.mark.parametrize(
    ("text", "location", "message"),
    [
        ("time,cpu\n0,1\n5,abc\n", ":3:2:", "not a number: 'abc' (counter 'cpu')"),
        ("time,cpu,mem\n0,1\n", ":2:", "2 cells, but the header has 3"),
        ("time,cpu,cpu\n0,1,2\n", ":1:3:", "appears twice"),
        ("time,cpu\n", ":2:", "no samples"),
        ("time\n0\n", ":1:", "no counter column"),
        (
            "time;cpu\n0;1,5\n",
            ":2:2:",
            "not a number: '1,5' (counter 'cpu'); write numbers with a decimal point",
        ),
        ("time,cpu\n0,inf\n", ":2:2:", "infinite"),
        ("", ":1:", "empty file"),
    ],
)
def test_plain_csv_errors_name_the_place(
    tmp_path: Path, text: str, location: str, message: str
) -> None:
    path = write(tmp_path, "bad.csv", text)
    with pytest.raises(SourceError) as caught:
        read_counter_csv(path)
    assert f"{path}{location}" in str(caught.value)
    assert message in str(caught.value)


def test_perfmon_csv_drops_the_common_host_and_reads_blank_cells_as_missing(
    tmp_path: Path,
) -> None:
    samples, _ = read_perfmon_csv(write(tmp_path, "perfmon.csv", PERFMON))
    assert samples.names == ["\\Process(java)\\% Processor Time", "\\Memory\\Pages/sec"]
    assert samples.values[1].tolist() == [13.25, 4.0]
    assert math.isnan(samples.values[0, 1]) and math.isnan(samples.values[2, 0])


def test_perfmon_csv_start_is_its_first_sample_in_utc(tmp_path: Path) -> None:
    _, started = read_perfmon_csv(write(tmp_path, "perfmon.csv", PERFMON))
    assert started == datetime(2024, 4, 12, 10, 0, tzinfo=UTC)
    # summer time in London: local 10:00 is 09:00 UTC (the header's bias is -60 minutes)
    summer = PERFMON.replace("(GMT Standard Time)(0)", "(GMT Standard Time)(-60)")
    _, started = read_perfmon_csv(write(tmp_path, "summer.csv", summer))
    assert started == datetime(2024, 4, 12, 9, 0, tzinfo=UTC)
    pacific = PERFMON.replace("(GMT Standard Time)(0)", "(Pacific Standard Time)(480)")
    _, started = read_perfmon_csv(write(tmp_path, "pacific.csv", pacific))
    assert started == datetime(2024, 4, 12, 18, 0, tzinfo=UTC)
    # without a bias the local time's zone is unknown
    no_zone = PERFMON.replace(" (GMT Standard Time)(0)", "")
    assert read_perfmon_csv(write(tmp_path, "no-zone.csv", no_zone))[1] is None


def test_published_perfmon_run_carries_its_start(tmp_path: Path) -> None:
    path = write(tmp_path, "checkout-load.csv", PERFMON)
    (located,) = read_input_file(path, "perfmon").records
    assert located.record["timestamp"] == "2024-04-12T10:00:00Z"


def test_perfmon_csv_in_utf16_reads_as_in_utf8(tmp_path: Path) -> None:
    # typeperf's output redirected by Windows PowerShell 5 is UTF-16 with a byte-order mark
    utf16 = Path(__file__).parent / "reports" / "typeperf_powershell.csv"
    utf8 = tmp_path / "typeperf.csv"
    utf8.write_bytes(utf16.read_bytes().decode("utf-16").encode())
    samples, started = read_perfmon_csv(utf16)
    assert started is None  # this typeperf wrote no time zone in its header
    assert samples.names == [
        "\\Processor(_Total)\\% User Time",
        "\\Memory\\Available MBytes",
        "\\Network Interface(Ethernet)\\Bytes Total/sec",
    ]
    assert samples.values.shape == (12, 3)
    assert samples.values[:, 1].tolist() == [6120.0 - 3 * i for i in range(12)]
    expected, _ = read_perfmon_csv(utf8)
    assert samples.names == expected.names
    assert samples.values.tolist() == expected.values.tolist()


def test_perfmon_csv_keeps_hosts_when_they_differ(tmp_path: Path) -> None:
    text = PERFMON.replace("\\\\WEB01\\Memory", "\\\\DB01\\Memory")
    samples, _ = read_perfmon_csv(write(tmp_path, "two-hosts.csv", text))
    assert samples.names[1] == "\\\\DB01\\Memory\\Pages/sec"


@pytest.mark.parametrize(
    ("text", "location", "message"),
    [
        ('"Time","\\\\H\\A\\b"\n"t","1"\n', ":1:1:", "not a perfmon CSV"),
        ('"(PDH-CSV 4.0)","cpu"\n"t","1"\n', ":1:2:", "not a counter path"),
        ('"(PDH-CSV 4.0)","\\\\H\\A\\b"\n"t","1","2"\n', ":2:", "3 cells"),
        ('"(PDH-CSV 4.0)","\\\\H\\A\\b"\n"t","1,5"\n', ":2:2:", "not a number"),
    ],
)
def test_perfmon_errors_name_the_place(
    tmp_path: Path, text: str, location: str, message: str
) -> None:
    path = write(tmp_path, "bad.csv", text)
    with pytest.raises(SourceError) as caught:
        read_perfmon_csv(path)
    assert f"{path}{location}" in str(caught.value)
    assert message in str(caught.value)


def record(run_id: str, counters: dict | None) -> dict:
    doc = {
        "schema": "perfwatch.record/v1",
        "test": "checkout",
        "run_id": run_id,
        "timestamp": "2024-04-12T10:00:00Z",
        "metrics": {"latency_ms": 12.0},
    }
    if counters is not None:
        doc["counters"] = counters
    return doc


def test_read_counter_runs_detects_the_format(tmp_path: Path) -> None:
    assert read_counter_runs(write(tmp_path, "p.csv", PERFMON))[0].names[1] == "\\Memory\\Pages/sec"
    assert read_counter_runs(write(tmp_path, "plain.csv", "t,a\n0,1\n"))[0].names == ["a"]
    counters = {"names": ["a", "b"], "values": [[1, None], [2, 3]]}
    path = tmp_path / "runs.json"
    path.write_bytes(orjson.dumps([record("r1", counters), record("r2", counters)]))
    runs = read_counter_runs(path)
    assert len(runs) == 2 and runs[1].names == ["a", "b"]
    assert math.isnan(runs[0].values[0, 1])
    lines = tmp_path / "runs.jsonl"
    lines.write_bytes(orjson.dumps(record("r3", counters)) + b"\n")
    assert len(read_counter_runs(lines)) == 1


def test_read_counter_runs_errors(tmp_path: Path) -> None:
    path = tmp_path / "no-counters.json"
    path.write_bytes(orjson.dumps([record("r1", None)]))
    with pytest.raises(SourceError, match="record 'r1' has no counters"):
        read_counter_runs(path)
    with pytest.raises(SourceError, match="relog"):
        read_counter_runs(tmp_path / "log.blg")
    with pytest.raises(SourceError, match="no such file"):
        read_counter_runs(tmp_path / "missing.csv")


# --- one run of the same counters in every format: the names must agree ----------------

PATHS = ["Process(java)\\% Processor Time", "Memory\\Pages/sec", "TCPv4\\Segments/sec"]
SAMPLES = [[12.5, 4.0, 310.0], [13.25, 0.0, 298.5], [11.0, 2.0, 305.25]]


def _perfmon(host: str, *, separator: str = ",", marker: str = "(PDH-CSV 4.0)") -> str:
    header = [f"{marker} (GMT Standard Time)(0)"] + [f"\\\\{host}\\{p}" for p in PATHS]
    lines = [separator.join(f'"{cell}"' for cell in header)]
    for second, row in enumerate(SAMPLES):
        cells = [f"04/12/2024 10:00:{5 * second:02d}.000"] + [repr(v) for v in row]
        lines.append(separator.join(f'"{cell}"' for cell in cells))
    return "\r\n".join(lines) + "\r\n"


def _plain(names: list[str], separator: str = ",") -> str:
    lines = [separator.join(["time", *names])]
    lines += [separator.join([str(5 * i), *map(repr, row)]) for i, row in enumerate(SAMPLES)]
    return "\n".join(lines) + "\n"


FORMATS = {
    "relog CSV": ("relog.csv", _perfmon("WEB01")),
    # typeperf's console output redirected to a file: a blank first line, status lines
    "typeperf console": (
        "typeperf.csv",
        "\r\n" + _perfmon("BUILD07") + "Exiting, please wait...\r\n"
        "The command completed successfully.\r\n",
    ),
    "typeperf TSV": ("typeperf.tsv", _perfmon("web01", separator="\t", marker="(PDH-TSV 4.0)")),
    "plain CSV, counter paths with host": (
        "plain-host.csv",
        _plain([f"\\\\WEB02\\{p}" for p in PATHS]),
    ),
    "plain CSV, counter paths": ("plain.csv", _plain([f"\\{p}" for p in PATHS])),
    # as spreadsheets save CSV where the decimal mark is a comma
    "plain CSV, semicolons": ("semicolons.csv", _plain([f"\\{p}" for p in PATHS], ";")),
    "plain CSV, tabs": ("tabs.csv", _plain([f"\\{p}" for p in PATHS], "\t")),
    "record": (
        "run.json",
        orjson.dumps(
            record("r1", {"names": [f"\\\\DB01\\{p}" for p in PATHS], "values": SAMPLES})
        ).decode(),
    ),
}


@pytest.mark.parametrize("first", sorted(FORMATS))
@pytest.mark.parametrize("second", sorted(FORMATS))
def test_every_pair_of_formats_names_the_counters_alike(
    tmp_path: Path, first: str, second: str
) -> None:
    runs = []
    for which, kind in (("a", first), ("b", second)):
        name, text = FORMATS[kind]
        (tmp_path / which).mkdir()
        (run,) = read_counter_runs(write(tmp_path / which, name, text))
        runs.append(run)
    assert runs[0].names == runs[1].names == [f"\\{p}" for p in PATHS]
    assert runs[0].values.tolist() == runs[1].values.tolist() == SAMPLES


def test_names_are_trimmed_and_paths_from_several_hosts_keep_their_hosts(
    tmp_path: Path,
) -> None:
    text = _plain([" cpu ", "\\\\A\\Memory\\Pages/sec", "\\\\B\\Memory\\Pages/sec"])
    assert read_counter_csv(write(tmp_path, "hosts.csv", text)).names == [
        "cpu",
        "\\\\A\\Memory\\Pages/sec",
        "\\\\B\\Memory\\Pages/sec",
    ]


def test_a_counter_written_with_and_without_its_host_is_a_duplicate(tmp_path: Path) -> None:
    text = _plain(["\\\\A\\Memory\\Pages/sec", "\\Memory\\Pages/sec", "cpu"])
    path = write(tmp_path, "twice.csv", text)
    with pytest.raises(SourceError, match=r"appears twice \(columns 2 and 3\)") as caught:
        read_counter_csv(path)
    assert f"{path}:1:3:" in str(caught.value)
    doc = record("r1", {"names": ["\\\\A\\M\\c", "\\M\\c"], "values": [[1, 2]]})
    records = tmp_path / "twice.json"
    records.write_bytes(orjson.dumps(doc))
    with pytest.raises(SourceError, match="are the same counter"):
        read_counter_runs(records)


def test_the_fast_row_parser_reports_what_the_careful_one_does(tmp_path: Path) -> None:
    text = "time,a,b\n0,1,2\n5,null,3\n10, 4 ,NA\n15,1e3,inf\n"
    with pytest.raises(SourceError, match=r":5:3: infinite value: 'inf' \(counter 'b'\)"):
        read_counter_csv(write(tmp_path, "inf.csv", text))
    samples = read_counter_csv(write(tmp_path, "ok.csv", text.replace("inf", "7")))
    assert samples.values[[0, 3]].tolist() == [[1.0, 2.0], [1000.0, 7.0]]
    assert math.isnan(samples.values[1, 0]) and samples.values[2, 0] == 4.0
    assert math.isnan(samples.values[2, 1])
