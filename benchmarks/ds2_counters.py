"""Seeded generator of load-test counter samples shaped like the Dell DVD Store (DS2)
study of Shang et al. (ICPE 2015): the application server of a three-tier web shop under
a closed-loop load driver, sampled every 5 s, 29 Windows performance counters.

Latent processes drive the counters, so counters come in correlated groups:
  * load: request rate of a closed loop (users / (think time + response time));
  * mix: share of browse requests (browse reads static content and searches; purchase
    does more CPU work and more "other" I/O);
  * database latency (in-flight requests by Little's law: threads, context switches);
  * garbage collection: a heap sawtooth driven by allocation, with page-fault bursts;
  * logging burstiness (write I/O).

Traits of real counter data (docs/counters.md; /work/shared/docs/COUNTERS.md), all present:
  * ramp-up and drift: idle samples, a linear ramp over 8-12% of the run, a cool-down;
    a slow leak in Private Bytes; Elapsed Time grows monotonically;
  * exact identities: % Processor = % User + % Privileged, IO Data = IO Read + IO Write
    (bytes and operations), Page File Bytes = Private Bytes; near-exact: % Idle ~ 100 -
    % Processor / cores, IO ops ~ IO bytes / block size, Working Set ~ 0.92 Private Bytes;
  * identity counters: ID Process differs per run, Priority Base is constant;
  * run-to-run variation: throughput +-2.5% per run, Virtual Bytes and Handle Count start
    at run-specific levels;
  * sparse bursty counters (Pages/sec, Page Faults/sec at GC) and small integers
    (Processor Queue Length) that end up alone in a cluster;
  * near-zero samples: idle samples at the start, zeros between bursts;
  * perfmon gaps: rate counters have no first sample, 0.3% of the samples are lost,
    the process object is unavailable in another 0.3%, 0.02% of single cells are blank;
    runs differ in length (560-640 samples).

Injected regressions (the seed's A-E, plus one that changes only a relationship):
  A memory: each request allocates 2.2x as much and the live set is 6% larger;
  B CPU: 60% more user CPU per request;
  C database, column index removed: browse queries 1 + 3 x mix times slower;
  D database, text index removed: search results 3x larger and 1.5x slower;
  E I/O: 4x the log bytes per request;
  F relationship only: the "other" I/O (control calls) moves from the purchase path to
    the browse path; every counter's mean stays within 3% of the good runs'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from perfwatch.detectors.counters import CounterSamples

INTERVAL_S = 5.0
CORES = 2
USERS = 130
THINK_TIME_S = 1.0
PROCESS = "\\Process(java)\\"

COUNTER_NAMES = [
    PROCESS + "% Processor Time",
    PROCESS + "% User Time",
    PROCESS + "% Privileged Time",
    PROCESS + "Elapsed Time",
    PROCESS + "ID Process",
    PROCESS + "Priority Base",
    PROCESS + "Thread Count",
    PROCESS + "Handle Count",
    PROCESS + "Private Bytes",
    PROCESS + "Page File Bytes",
    PROCESS + "Working Set",
    PROCESS + "Virtual Bytes",
    PROCESS + "Pool Paged Bytes",
    PROCESS + "Pool Nonpaged Bytes",
    PROCESS + "Page Faults/sec",
    PROCESS + "IO Read Bytes/sec",
    PROCESS + "IO Read Operations/sec",
    PROCESS + "IO Write Bytes/sec",
    PROCESS + "IO Write Operations/sec",
    PROCESS + "IO Data Bytes/sec",
    PROCESS + "IO Data Operations/sec",
    PROCESS + "IO Other Bytes/sec",
    PROCESS + "IO Other Operations/sec",
    "\\Memory\\Pages/sec",
    "\\Processor(_Total)\\% Idle Time",
    "\\Network Interface(eth0)\\Bytes Total/sec",
    "\\TCPv4\\Segments/sec",
    "\\System\\Context Switches/sec",
    "\\System\\Processor Queue Length",
]
# rate counters have no value in a perfmon log's first sample
_RATE_COUNTERS = [i for i, name in enumerate(COUNTER_NAMES) if name.endswith("/sec")]
_PROCESS_COUNTERS = [i for i, name in enumerate(COUNTER_NAMES) if name.startswith(PROCESS)]

CPU_COUNTER = PROCESS + "% Processor Time"
MEMORY_COUNTER = PROCESS + "Private Bytes"

INJECTIONS = {
    "A": "memory usage increase",
    "B": "CPU usage increase",
    "C": "heavier DB requests (column index)",
    "D": "heavier DB requests (text index)",
    "E": "I/O increase (logging)",
    "F": "relationship change only",
}


@dataclass(frozen=True)
class _Effects:
    alloc_scale: float = 1.0
    live_scale: float = 1.0
    user_cpu_scale: float = 1.0
    browse_latency_slope: float = 0.0
    db_latency_scale: float = 1.0
    search_bytes_scale: float = 1.0
    log_scale: float = 1.0
    other_io_on_browse: bool = False


_EFFECTS = {
    None: _Effects(),
    "A": _Effects(alloc_scale=2.2, live_scale=1.06),
    "B": _Effects(user_cpu_scale=1.6),
    "C": _Effects(browse_latency_slope=3.0),
    "D": _Effects(search_bytes_scale=3.0, db_latency_scale=1.5),
    "E": _Effects(log_scale=4.0),
    "F": _Effects(other_io_on_browse=True),
}


def _ar1(rng: np.random.Generator, n: int, phi: float, sigma: float) -> np.ndarray:
    """Stationary AR(1) noise with marginal standard deviation sigma."""
    shocks = rng.normal(0.0, sigma * math.sqrt(1 - phi**2), n)
    series = np.empty(n)
    series[0] = rng.normal(0.0, sigma)
    for t in range(1, n):
        series[t] = phi * series[t - 1] + shocks[t]
    return series


def _users_profile(rng: np.random.Generator, n: int) -> np.ndarray:
    """Active users: idle samples, a linear ramp-up, steady load, a ramp-down, idle."""
    idle_start = int(rng.integers(3, 7))
    ramp = int(n * rng.uniform(0.08, 0.12))
    ramp_down = int(n * rng.uniform(0.02, 0.04))
    idle_end = int(rng.integers(2, 5))
    users = np.full(n, float(USERS))
    users[:idle_start] = 0.0
    users[idle_start : idle_start + ramp] = np.linspace(0, USERS, ramp, endpoint=False)
    down_start = n - idle_end - ramp_down
    users[down_start : n - idle_end] = np.linspace(USERS, 0, ramp_down)
    users[n - idle_end :] = 0.0
    return users


def simulate_run(
    seed: int, *, injection: str | None = None, noisy: bool = False, label: str = ""
) -> CounterSamples:
    """One load-test run. ``noisy``: a good run with 50% more load and latency noise, 5%
    lower throughput and a short background job (an antivirus scan over 5% of the run)."""
    rng = np.random.default_rng(seed)
    effects = _EFFECTS[injection]
    n = int(rng.integers(560, 641))
    noise_scale = 1.5 if noisy else 1.0
    users = _users_profile(rng, n)
    active = users / USERS
    run_throughput = rng.normal(1.0, 0.025) * (0.95 if noisy else 1.0)

    # workload mix: share of browse requests
    mix = np.clip(0.5 + _ar1(rng, n, 0.97, 0.15), 0.1, 0.9)
    db_latency = 0.02 * (1 + _ar1(rng, n, 0.9, 0.2 * noise_scale)).clip(0.3)
    db_latency = db_latency * effects.db_latency_scale * (1 + effects.browse_latency_slope * mix)
    response_time = 0.015 + 3 * db_latency
    load = users / (THINK_TIME_S + response_time) * run_throughput
    load = load * (1 + _ar1(rng, n, 0.9, 0.06 * noise_scale)).clip(0.5)
    in_flight = load * response_time

    # heap sawtooth: allocation grows the heap, a collection drops it to the live set
    live = 120e6 * effects.live_scale
    heap_limit = live + 150e6
    heap = np.empty(n)
    gc = np.zeros(n)
    level = live
    allocation = load * (0.5 + 0.5 * mix) * 60e3 * effects.alloc_scale * INTERVAL_S
    for t in range(n):
        level += allocation[t] * rng.uniform(0.8, 1.2)
        if level > heap_limit:
            gc[t] = 1.0
            level = live + rng.uniform(0, 10e6)
        heap[t] = level
    leak = 2e3 * np.arange(n)
    private = 180e6 + heap + leak

    log_burst = np.exp(_ar1(rng, n, 0.8, 0.3))
    user_cpu = load * (0.30 + 0.35 * (1 - mix)) * 0.55 * effects.user_cpu_scale
    user_cpu = user_cpu + 12 * gc + rng.normal(0, 1.0, n)
    read_bytes = load * mix * 9000 * (1 + rng.normal(0, 0.1, n))
    write_bytes = load * log_burst * 1500 * effects.log_scale
    write_bytes = write_bytes + 20000 * (rng.random(n) < 0.1)
    other_share = mix if effects.other_io_on_browse else 1 - mix
    other_bytes = load * other_share * 600 * (1 + rng.normal(0, 0.05, n))
    search_bytes = 6000 + mix * 6000 * (effects.search_bytes_scale - 1)
    network = load * (mix * 25000 + (1 - mix) * 9000 + search_bytes)
    network = network * (1 + rng.normal(0, 0.03, n))
    privileged = 0.04 * load + 0.002 * network / 1e3 + 0.01 * write_bytes / 1e3
    privileged = np.abs(privileged + rng.normal(0, 0.8, n))
    user_cpu = np.abs(user_cpu)
    processor = user_cpu + privileged

    threads = 40 + np.ceil(
        1.2 * np.maximum.accumulate(np.convolve(in_flight, np.ones(6) / 6, mode="same"))
    )
    handles = rng.normal(900, 15) + 3 * threads + np.cumsum(rng.random(n) < 0.02)
    reserve = 64 * 2**20
    virtual = (1.05e9 + reserve * rng.integers(0, 3)) + reserve * np.floor(
        np.maximum.accumulate(private - 180e6) / 100e6
    )
    background = np.zeros(n)
    if noisy:
        start = int(n * 0.35)
        background[start : start + n // 20] = 1.0
    os_busy = 2 + 15 * background + np.abs(rng.normal(0, 0.7, n))
    idle = np.clip(100 - processor / CORES - os_busy, 0, 100)
    pages = np.where(rng.random(n) < 0.03 + 0.1 * gc + 0.1 * background, 1.0, 0.0)
    pages = pages * rng.exponential(200, n)
    faults = 400 * active + 2 * load + gc * rng.uniform(3000, 6000, n) + rng.poisson(30, n)

    columns = {
        "% Processor Time": processor,
        "% User Time": user_cpu,
        "% Privileged Time": privileged,
        "Elapsed Time": rng.uniform(30, 300) + INTERVAL_S * np.arange(n),
        "ID Process": np.full(n, float(rng.integers(1000, 30000))),
        "Priority Base": np.full(n, 8.0),
        "Thread Count": threads,
        "Handle Count": np.round(handles),
        "Private Bytes": private,
        "Page File Bytes": private,
        "Working Set": 0.92 * private + rng.normal(0, 1.5e6, n),
        "Virtual Bytes": virtual,
        "Pool Paged Bytes": np.round(210e3 + 40 * handles + rng.normal(0, 300, n)),
        "Pool Nonpaged Bytes": 30e3 + 8 * threads,
        "Page Faults/sec": faults,
        "IO Read Bytes/sec": read_bytes,
        "IO Read Operations/sec": read_bytes / 4096 * (1 + rng.normal(0, 0.03, n)),
        "IO Write Bytes/sec": write_bytes,
        "IO Write Operations/sec": write_bytes / 2048 * (1 + rng.normal(0, 0.03, n)),
        "IO Other Bytes/sec": other_bytes,
        "IO Other Operations/sec": other_bytes / 120 * (1 + rng.normal(0, 0.05, n)),
    }
    columns["IO Data Bytes/sec"] = columns["IO Read Bytes/sec"] + columns["IO Write Bytes/sec"]
    columns["IO Data Operations/sec"] = (
        columns["IO Read Operations/sec"] + columns["IO Write Operations/sec"]
    )
    system = {
        "\\Memory\\Pages/sec": pages,
        "\\Processor(_Total)\\% Idle Time": idle,
        "\\Network Interface(eth0)\\Bytes Total/sec": network,
        "\\TCPv4\\Segments/sec": network / 1200 + 2 * load + rng.normal(0, 3, n),
        "\\System\\Context Switches/sec": 800
        + 12 * load
        + 150 * in_flight
        + 3000 * background
        + rng.normal(0, 40, n),
        "\\System\\Processor Queue Length": rng.poisson(
            np.clip((processor / (100 * CORES)) ** 3 * 4 + 3 * background, 0, None)
        ).astype(float),
    }
    by_name = {PROCESS + name: values for name, values in columns.items()} | system
    values = np.column_stack([by_name[name] for name in COUNTER_NAMES])
    values[0, _RATE_COUNTERS] = np.nan
    # perfmon gaps: whole samples lost, the process object briefly unavailable, and a
    # few single blank cells
    values[rng.random(n) < 0.003] = np.nan
    values[np.ix_(rng.random(n) < 0.003, _PROCESS_COUNTERS)] = np.nan
    values[rng.random(values.shape) < 0.0002] = np.nan
    return CounterSamples(COUNTER_NAMES, values, label=label)


@dataclass(frozen=True)
class Study:
    good: list[CounterSamples]
    noisy_good: CounterSamples
    regressions: dict[str, CounterSamples]


def generate_study(seed: int = 2015, good_runs: int = 5) -> Study:
    """The good runs, a noisy-but-good run and one run per injected regression, each
    from its own seed derived from ``seed``."""
    seeds = np.random.SeedSequence(seed).generate_state(good_runs + 1 + len(INJECTIONS))
    good = [simulate_run(int(seeds[i]), label=f"good run {i + 1}") for i in range(good_runs)]
    noisy = simulate_run(int(seeds[good_runs]), noisy=True, label="noisy good run")
    regressions = {
        key: simulate_run(int(seeds[good_runs + 1 + i]), injection=key, label=f"regression {key}")
        for i, key in enumerate(INJECTIONS)
    }
    return Study(good, noisy, regressions)
