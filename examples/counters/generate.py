"""Write the example counter study: Windows performance counters of a web service's load
test, as typeperf writes them, in examples/counters/.

  - good-1.csv ... good-5.csv: five good runs, recorded on host PERF01;
  - tonight-good.csv: a good run recorded on another host, PERF02;
  - tonight-regression.csv: a run on PERF02 of a build whose requests cost 60% more user
    CPU (a serializer that stopped caching its schema): load, network and I/O as usual.

Each run: 240 samples 5 s apart (20 minutes), a warm-up ramp, a cool-down, run-to-run
differences (load level, handle counts, the process id) and perfmon's gaps (a rate
counter's first sample, a few blank cells). Deterministic: the same seed always writes
the same files.

    python examples/counters/generate.py
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

SEED = 20151231
SAMPLES = 240
INTERVAL_S = 5
HERE = Path(__file__).parent
APP = "Process(checkout)"
COUNTERS = [
    f"{APP}\\% Processor Time",
    f"{APP}\\% User Time",
    f"{APP}\\% Privileged Time",
    f"{APP}\\ID Process",
    f"{APP}\\Thread Count",
    f"{APP}\\Handle Count",
    f"{APP}\\Private Bytes",
    f"{APP}\\Working Set",
    f"{APP}\\Page Faults/sec",
    f"{APP}\\IO Read Bytes/sec",
    f"{APP}\\IO Write Bytes/sec",
    "Network Interface(eth0)\\Bytes Total/sec",
    "TCPv4\\Segments/sec",
    "System\\Context Switches/sec",
    "Memory\\Available MBytes",
]
RATES = [i for i, name in enumerate(COUNTERS) if name.endswith("/sec")]


def _ar1(rng: np.random.Generator, n: int, phi: float, sigma: float) -> np.ndarray:
    values = np.empty(n)
    values[0] = rng.normal(0, sigma)
    for t in range(1, n):
        values[t] = phi * values[t - 1] + rng.normal(0, sigma * np.sqrt(1 - phi**2))
    return values


def simulate(seed: int, *, user_cpu_per_request: float = 1.0) -> np.ndarray:
    """One run: samples x COUNTERS."""
    rng = np.random.default_rng(seed)
    n = SAMPLES
    ramp = np.clip(np.arange(n) / 24, 0, 1) * np.clip((n - np.arange(n)) / 12, 0, 1)
    load = 220 * rng.uniform(0.95, 1.05) * ramp * (1 + _ar1(rng, n, 0.9, 0.08)).clip(0.4)
    requests = load * (1 + rng.normal(0, 0.02, n))  # requests/s
    user = requests * 0.30 * user_cpu_per_request * (1 + rng.normal(0, 0.03, n))
    writes = requests * 1800 * (1 + rng.normal(0, 0.06, n))
    reads = requests * 700 * (1 + rng.normal(0, 0.08, n))
    privileged = (writes + reads) / 1e4 * 0.9 * (1 + rng.normal(0, 0.05, n))
    heap = 310e6 + 0.12e6 * requests + _ar1(rng, n, 0.97, 6e6)
    faults = requests * 9 * rng.gamma(25.0, 0.04, n)
    segments = requests * 14 * (1 + rng.normal(0, 0.02, n))
    network = requests * 5200 * (1 + rng.normal(0, 0.03, n))
    threads = 64 + np.round(requests / 40) + rng.integers(0, 2, n)
    switches = 900 + requests * 38 + threads * 6 + rng.normal(0, 60, n)
    values = np.column_stack(
        [
            user + privileged,
            user,
            privileged,
            np.full(n, float(rng.integers(1000, 9000))),
            threads,
            rng.integers(850, 950) + np.round(requests / 10),
            heap,
            heap * 1.18 + rng.normal(0, 2e6, n),
            faults,
            reads,
            writes,
            network,
            segments,
            switches,
            16384 - heap / 2**20 - rng.normal(0, 8, n),
        ]
    )
    values[0, RATES] = np.nan
    values[rng.random(values.shape) < 0.001] = np.nan
    return values


def write_typeperf(path: Path, host: str, start: datetime, values: np.ndarray) -> None:
    header = ["(PDH-CSV 4.0) (Coordinated Universal Time)(0)"]
    header += [f"\\\\{host}\\{name}" for name in COUNTERS]
    lines = [",".join(f'"{cell}"' for cell in header)]
    for i, row in enumerate(values):
        moment = start + timedelta(seconds=INTERVAL_S * i)
        cells = [moment.strftime("%m/%d/%Y %H:%M:%S.000")]
        cells += [" " if np.isnan(v) else f"{v:.5g}" for v in row]
        lines.append(",".join(f'"{cell}"' for cell in cells))
    path.write_text("\r\n".join(lines) + "\r\n", encoding="utf-8")


def main(directory: Path = HERE) -> None:
    seeds = np.random.SeedSequence(SEED).generate_state(7)
    night = datetime(2026, 11, 20, 1, 0, tzinfo=UTC)
    for i in range(5):
        write_typeperf(
            directory / f"good-{i + 1}.csv", "PERF01", night + timedelta(days=i), simulate(seeds[i])
        )
    tonight = night + timedelta(days=5)
    write_typeperf(directory / "tonight-good.csv", "PERF02", tonight, simulate(seeds[5]))
    regression = simulate(seeds[6], user_cpu_per_request=1.6)
    write_typeperf(directory / "tonight-regression.csv", "PERF02", tonight, regression)


if __name__ == "__main__":
    main()
