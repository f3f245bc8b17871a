"""A second, independent generator of counter data: a three-tier web shop (web server,
application server, database server) under a closed-loop load, 35 perfmon counters
sampled every 5 s. It shares no code with ``eval_counters.py``'s generator and was
written from a description of the workload, not from the detector: the requests, their
resource demands and the regressions are defined first, the counters follow from them.

Workload: four request types (browse, search, cart, checkout) with per-type demands of
web CPU, application CPU, allocation, log lines, network bytes, database batches, page
lookups, index searches, full scans and transaction-log flushes. The mix drifts within a
run and differs between runs; throughput follows users / (think time + response time)
and the response time grows with the application server's and the database's load.

Run-to-run variation: throughput (+-3%), the mix, the machine's speed (+-2% CPU per
request), the handle count's and available memory's levels, the heap's live set.

Disturbances of good runs (drawn per run, so they differ per seed): a background job on
the application server (a stretch with extra CPU, disk reads and context switches), a
load swing (a fifth more or fewer users for a stretch), and a warm-up remnant (a cold
cache and JIT compilation early in the steady state). The noisy-but-good run has 60%
more noise, 5% lower throughput and a background job.

Regressions (``REGRESSIONS``), each with the counters it changes (its truth for blame)
and a mechanism whose effect on those counters is 2-20%:
    memory: 8% more allocation per request and a 3.4% larger live heap;
    cpu: 15% more application user CPU per request;
    small_cpu: 3% more application user CPU per request (smaller than the run-to-run
        variation of the CPU counters' level);
    column_index: a dropped column index: part of the browse queries scan;
    text_index: a dropped full-text index: search reads more pages from disk;
    logging: unbuffered logging of audit lines: one write each instead of one per 8 KB;
    relationship: lock waits move from the checkout path to the cart path; every
        counter's mean is unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.signal import lfilter

from perfwatch.detectors.counters import CounterSamples

INTERVAL_S = 5.0
SAMPLES = 360
THINK_TIME_S = 2.0
USERS = 120
WEB, APP, DB = "\\\\web01", "\\\\app01", "\\\\db01"
W3WP = APP + "\\Process(w3wp)\\"
CLR = APP + "\\.NET CLR Memory(w3wp)\\"
SQL = DB + "\\SQLServer:"

COUNTERS = [
    WEB + "\\Web Service(_Total)\\Get Requests/sec",
    WEB + "\\Web Service(_Total)\\Post Requests/sec",
    WEB + "\\Web Service(_Total)\\Bytes Sent/sec",
    WEB + "\\Web Service(_Total)\\Current Connections",
    WEB + "\\Processor(_Total)\\% Processor Time",
    APP + "\\ASP.NET Applications(__Total__)\\Requests/Sec",
    APP + "\\ASP.NET\\Request Execution Time",
    APP + "\\ASP.NET\\Requests Queued",
    W3WP + "% Processor Time",
    W3WP + "% User Time",
    W3WP + "% Privileged Time",
    W3WP + "Private Bytes",
    W3WP + "Working Set",
    W3WP + "Handle Count",
    W3WP + "Thread Count",
    W3WP + "IO Write Operations/sec",
    W3WP + "IO Write Bytes/sec",
    W3WP + "Page Faults/sec",
    CLR + "Allocated Bytes/sec",
    CLR + "% Time in GC",
    CLR + "Gen 0 Promoted Bytes/Sec",
    CLR + "# Bytes in all Heaps",
    APP + "\\System\\Context Switches/sec",
    APP + "\\Memory\\Available MBytes",
    APP + "\\TCPv4\\Connections Established",
    APP + "\\TCPv4\\Segments/sec",
    APP + "\\Network Interface(eth0)\\Bytes Total/sec",
    SQL + "SQL Statistics\\Batch Requests/sec",
    SQL + "Buffer Manager\\Page lookups/sec",
    SQL + "Access Methods\\Full Scans/sec",
    SQL + "Access Methods\\Index Searches/sec",
    SQL + "Locks(_Total)\\Lock Waits/sec",
    SQL + "Databases(_Total)\\Log Flushes/sec",
    DB + "\\Process(sqlservr)\\% Processor Time",
    DB + "\\PhysicalDisk(data)\\Disk Reads/sec",
]

TYPES = ("browse", "search", "cart", "checkout")
# per request of each type (browse, search, cart, checkout)
_DEMAND = {
    "web_cpu_ms": np.array([1.6, 1.2, 1.0, 1.4]),
    "app_cpu_ms": np.array([7.0, 11.0, 9.0, 24.0]),
    "alloc_kb": np.array([310.0, 520.0, 190.0, 780.0]),
    "log_lines": np.array([2.0, 2.0, 3.0, 7.0]),
    "sent_kb": np.array([42.0, 26.0, 8.0, 14.0]),
    "batches": np.array([2.0, 1.0, 1.0, 5.0]),
    "lookups": np.array([40.0, 130.0, 12.0, 60.0]),
    "index_searches": np.array([3.0, 1.0, 1.0, 4.0]),
    "full_scans": np.array([0.05, 0.02, 0.0, 0.01]),
    "log_flushes": np.array([0.0, 0.0, 1.0, 3.0]),
    "db_cpu_ms": np.array([2.5, 8.0, 1.5, 6.0]),
    "db_ms": np.array([6.0, 18.0, 4.0, 22.0]),
    "posts": np.array([0.0, 0.0, 1.0, 1.0]),
}
_BASE_MIX = np.array([0.5, 0.2, 0.18, 0.12])


@dataclass(frozen=True)
class Regression:
    description: str
    changed: tuple[str, ...]  # the counters the mechanism changes (blame truth)
    main: tuple[str, ...]  # where its size is measured
    relationship_only: bool = False
    demand: dict[str, np.ndarray] = field(default_factory=dict)  # multipliers per type
    live_heap: float = 1.0
    browse_scan_share: float = 0.0  # share of browse queries that scan a table
    search_disk_scale: float = 1.0
    unbuffered_log: bool = False
    locks_on_cart: bool = False


def _per_type(values: list[float]) -> np.ndarray:
    return np.array(values)


REGRESSIONS: dict[str, Regression] = {
    "memory": Regression(
        "memory: 8% more allocation per request, 3.4% larger live heap",
        changed=(
            W3WP + "Private Bytes",
            W3WP + "Working Set",
            CLR + "Allocated Bytes/sec",
            CLR + "# Bytes in all Heaps",
            CLR + "% Time in GC",
            CLR + "Gen 0 Promoted Bytes/Sec",
            APP + "\\Memory\\Available MBytes",
        ),
        main=(W3WP + "Private Bytes", CLR + "Allocated Bytes/sec"),
        demand={"alloc_kb": _per_type([1.08] * 4)},
        live_heap=1.034,
    ),
    "cpu": Regression(
        "CPU: 15% more application user CPU per request",
        changed=(
            W3WP + "% User Time",
            W3WP + "% Processor Time",
            APP + "\\ASP.NET\\Request Execution Time",
            APP + "\\ASP.NET\\Requests Queued",
        ),
        main=(W3WP + "% User Time", W3WP + "% Processor Time"),
        demand={"app_cpu_ms": _per_type([1.15] * 4)},
    ),
    "small_cpu": Regression(
        "CPU: 3% more application user CPU per request",
        changed=(W3WP + "% User Time", W3WP + "% Processor Time"),
        main=(W3WP + "% User Time", W3WP + "% Processor Time"),
        demand={"app_cpu_ms": _per_type([1.03] * 4)},
    ),
    "column_index": Regression(
        "database: a dropped column index (1% of browse queries scan)",
        changed=(
            SQL + "Access Methods\\Full Scans/sec",
            SQL + "Buffer Manager\\Page lookups/sec",
            SQL + "Access Methods\\Index Searches/sec",
            DB + "\\Process(sqlservr)\\% Processor Time",
            APP + "\\ASP.NET\\Request Execution Time",
        ),
        main=(SQL + "Access Methods\\Full Scans/sec", SQL + "Buffer Manager\\Page lookups/sec"),
        browse_scan_share=0.01,
    ),
    "text_index": Regression(
        "database: a dropped full-text index (search reads more pages from disk)",
        changed=(
            DB + "\\PhysicalDisk(data)\\Disk Reads/sec",
            SQL + "Buffer Manager\\Page lookups/sec",
            DB + "\\Process(sqlservr)\\% Processor Time",
            APP + "\\ASP.NET\\Request Execution Time",
        ),
        main=(DB + "\\PhysicalDisk(data)\\Disk Reads/sec",),
        demand={
            "lookups": _per_type([1.0, 1.12, 1.0, 1.0]),
            "db_cpu_ms": _per_type([1.0, 1.12, 1.0, 1.0]),
            "db_ms": _per_type([1.0, 1.15, 1.0, 1.0]),
        },
        search_disk_scale=1.2,
    ),
    "logging": Regression(
        "I/O: audit log lines (0.6% of the lines) written unbuffered",
        changed=(
            W3WP + "IO Write Operations/sec",
            W3WP + "% Privileged Time",
            APP + "\\System\\Context Switches/sec",
        ),
        main=(W3WP + "IO Write Operations/sec",),
        unbuffered_log=True,
    ),
    "relationship": Regression(
        "relationship only: lock waits move from checkout to cart requests",
        changed=(SQL + "Locks(_Total)\\Lock Waits/sec",),
        main=(SQL + "Locks(_Total)\\Lock Waits/sec",),
        relationship_only=True,
        locks_on_cart=True,
    ),
}
_NO_REGRESSION = Regression("none", changed=(), main=())


def _ar1(rng: np.random.Generator, n: int, phi: float, sigma: float) -> np.ndarray:
    """Stationary AR(1) noise with marginal standard deviation sigma."""
    shocks = rng.normal(0.0, sigma * math.sqrt(1 - phi**2), n)
    shocks[0] = rng.normal(0.0, sigma)  # the first value from the stationary distribution
    return lfilter([1.0], [1.0, -phi], shocks)


@dataclass(frozen=True)
class Disturbances:
    background_job: bool = False
    load_swing: bool = False
    warm_up: bool = False
    noise: float = 1.0
    throughput: float = 1.0


def simulate_run(
    seed: int,
    regression: str | None = None,
    disturbances: Disturbances = Disturbances(),
    label: str = "",
) -> CounterSamples:
    """One load-test run; the same seed with and without a regression draws the same
    random numbers, so the difference is the regression's effect."""
    rng = np.random.default_rng(seed)
    change = REGRESSIONS[regression] if regression else _NO_REGRESSION
    d = disturbances
    n = SAMPLES
    demand = {k: v * change.demand.get(k, 1.0) for k, v in _DEMAND.items()}

    # run-to-run traits
    speed = rng.normal(1.0, 0.02)
    run_rate = rng.normal(1.0, 0.03) * d.throughput
    base_mix = rng.dirichlet(_BASE_MIX * 150)
    handle_level = rng.normal(1400, 40)
    memory_level = rng.normal(5200, 120)
    live_heap = rng.normal(210e6, 6e6) * change.live_heap

    # users: idle, ramp-up, steady (maybe a swing), ramp-down
    users = np.full(n, float(USERS))
    ramp = int(rng.integers(25, 40))
    users[:4] = 0.0
    users[4 : 4 + ramp] = np.linspace(0, USERS, ramp, endpoint=False)
    users[n - 12 : n - 3] = np.linspace(USERS, 0, 9)
    users[n - 3 :] = 0.0
    swing_at = int(rng.integers(int(0.3 * n), int(0.6 * n)))
    swing_factor = rng.choice([0.8, 1.2])
    if d.load_swing:
        users[swing_at : swing_at + n // 7] *= swing_factor

    # mix drifts around the run's own base mix
    logits = np.log(base_mix)[None, :] + np.column_stack(
        [_ar1(rng, n, 0.97, 0.18 * d.noise) for _ in TYPES]
    )
    mix = np.exp(logits)
    mix /= mix.sum(axis=1, keepdims=True)

    def per_request(name: str) -> np.ndarray:
        return mix @ demand[name]

    # a cold start: caches and JIT (only a remnant shows in the steady state)
    warm = np.exp(-np.arange(n) / (ramp * (1.6 if d.warm_up else 0.5)))
    background = np.zeros(n)
    job_at = int(rng.integers(int(0.25 * n), int(0.7 * n)))
    if d.background_job:
        background[job_at : job_at + int(rng.integers(n // 16, n // 9))] = 1.0

    scans = per_request("full_scans") + change.browse_scan_share * mix[:, 0]
    lookups = per_request("lookups") + 800.0 * change.browse_scan_share * mix[:, 0]
    db_cpu = per_request("db_cpu_ms") + 60.0 * change.browse_scan_share * mix[:, 0]
    db_ms = per_request("db_ms") + 80.0 * change.browse_scan_share * mix[:, 0]
    app_cpu = per_request("app_cpu_ms") * speed * (1 + 0.25 * warm)

    # closed loop: response time grows with the application server's utilization
    noise_load = 1 + _ar1(rng, n, 0.9, 0.05 * d.noise)
    rate = np.zeros(n)
    response = np.full(n, 0.05)
    for _ in range(3):  # fixed point of rate and response time
        rate = users / (THINK_TIME_S + response) * run_rate * noise_load.clip(0.5)
        utilization = np.clip(rate * app_cpu / 1000 / 4 + 0.3 * background, 0, 0.95)
        response = (app_cpu + db_ms * (1 + 0.3 * warm)) / 1000 / (1 - utilization)
    shares = rate[:, None] * mix

    def noisy(values: np.ndarray, cv: float) -> np.ndarray:
        return values * (1 + rng.normal(0.0, cv * d.noise, n))

    alloc = rate * per_request("alloc_kb") * 1024
    gc_time = np.clip(20.0 * alloc / 150e6 * (live_heap / 210e6) ** 2, 0, 60)
    heap = live_heap + 0.5 * alloc * INTERVAL_S * rng.uniform(0.2, 1.0, n)
    private = 95e6 + heap + 1.5e3 * np.arange(n)
    log_lines = rate * per_request("log_lines")
    log_bytes = log_lines * 180
    write_ops = log_bytes / 8192 + 1.5 + (0.006 * log_lines if change.unbuffered_log else 0.0)
    write_ops = write_ops + 6 * background
    posts = shares @ demand["posts"]
    user_cpu = noisy(rate * app_cpu / 10, 0.03) + 20 * background
    privileged = noisy(0.12 * rate + 0.35 * write_ops, 0.05) + 6 * background
    lock_source = shares[:, 2] * (mix[:, 3].mean() / mix[:, 2].mean())
    locks = 2.0 * (lock_source if change.locks_on_cart else shares[:, 3])
    disk = rate * per_request("lookups") * 0.012 * (1 + 2.0 * warm) * speed
    disk = disk + rate * mix[:, 1] * demand["lookups"][1] * 0.012 * (change.search_disk_scale - 1)
    in_flight = rate * response
    threads = 38 + np.ceil(np.maximum.accumulate(np.convolve(in_flight, np.ones(5) / 5, "same")))

    values = {
        COUNTERS[0]: noisy(rate * (1 - mix[:, 2] - mix[:, 3]) * 6, 0.03),
        COUNTERS[1]: noisy(posts * 2, 0.04),
        COUNTERS[2]: noisy(rate * per_request("sent_kb") * 1024, 0.04),
        COUNTERS[3]: np.round(noisy(users * 1.1 + in_flight, 0.02)),
        COUNTERS[4]: noisy(rate * per_request("web_cpu_ms") / 1000 * 100 / 2 + 2, 0.05),
        COUNTERS[5]: noisy(rate, 0.02),
        COUNTERS[6]: noisy(response * 1000, 0.06),
        COUNTERS[7]: rng.poisson(0.4 * in_flight).astype(float),
        COUNTERS[8]: user_cpu + privileged,
        COUNTERS[9]: user_cpu,
        COUNTERS[10]: privileged,
        COUNTERS[11]: private,
        COUNTERS[12]: 0.85 * private + rng.normal(0, 2e6 * d.noise, n),
        COUNTERS[13]: np.round(handle_level + 4 * threads + np.cumsum(rng.random(n) < 0.03)),
        COUNTERS[14]: threads,
        COUNTERS[15]: noisy(write_ops, 0.05),
        COUNTERS[16]: noisy(log_bytes, 0.05),
        COUNTERS[17]: noisy(300 + 0.004 * alloc / 1024, 0.1) + 400 * background,
        COUNTERS[18]: noisy(alloc, 0.06),
        COUNTERS[19]: noisy(gc_time, 0.1),
        COUNTERS[20]: noisy(0.04 * alloc * live_heap / 210e6, 0.1),
        COUNTERS[21]: heap * (1 + rng.normal(0, 0.01, n)),
        COUNTERS[22]: noisy(900 + 14 * rate + 90 * in_flight + 3 * write_ops, 0.04)
        + 2500 * background,
        COUNTERS[23]: memory_level
        - private / 2**20 * 0.9
        - 300 * background
        + rng.normal(0, 8 * d.noise, n),
        COUNTERS[24]: np.round(noisy(24 + 0.6 * in_flight + 0.05 * users, 0.03)),
        COUNTERS[25]: noisy(rate * (per_request("sent_kb") / 1.4 + 3), 0.04),
        COUNTERS[26]: noisy(rate * (per_request("sent_kb") + 6) * 1024 * 1.05, 0.04),
        COUNTERS[27]: noisy(rate * per_request("batches"), 0.03),
        COUNTERS[28]: noisy(rate * lookups, 0.05),
        COUNTERS[29]: noisy(rate * scans + 0.3, 0.15),
        COUNTERS[30]: noisy(rate * per_request("index_searches"), 0.04)
        * (1 - 0.5 * change.browse_scan_share),
        COUNTERS[31]: noisy(locks + 0.2, 0.12),
        COUNTERS[32]: noisy(shares @ demand["log_flushes"] + 0.5, 0.06),
        COUNTERS[33]: noisy(rate * db_cpu / 1000 * 100 / 8 + 3, 0.05),
        COUNTERS[34]: noisy(disk + 1.0, 0.1) + 15 * background,
    }
    matrix = np.column_stack([np.abs(values[name]) for name in COUNTERS])
    matrix[0, [i for i, name in enumerate(COUNTERS) if name.lower().endswith("/sec")]] = np.nan
    matrix[rng.random(n) < 0.004] = np.nan  # lost samples
    return CounterSamples(list(COUNTERS), matrix, label=label)


@dataclass(frozen=True)
class ShopStudy:
    good: list[CounterSamples]
    noisy_good: CounterSamples
    regressions: dict[str, CounterSamples]
    regression_seeds: dict[str, int]


def generate_study(seed: int, good_runs: int = 6) -> ShopStudy:
    """Good runs (each with its own draw of disturbances: about a third have a background
    job, a third a load swing, a fifth a warm-up remnant), a noisy-but-good run and one
    run per regression, each from its own seed."""
    seeds = np.random.SeedSequence([seed, 35]).generate_state(good_runs + 2 + len(REGRESSIONS))
    draws = np.random.default_rng(int(seeds[-1])).random((good_runs, 3))
    good = [
        simulate_run(
            int(seeds[i]),
            disturbances=Disturbances(
                background_job=bool(draws[i, 0] < 0.35),
                load_swing=bool(draws[i, 1] < 0.35),
                warm_up=bool(draws[i, 2] < 0.2),
            ),
            label=f"good run {i + 1}",
        )
        for i in range(good_runs)
    ]
    noisy = simulate_run(
        int(seeds[good_runs]),
        disturbances=Disturbances(background_job=True, noise=1.6, throughput=0.95),
        label="noisy good run",
    )
    regression_seeds = {key: int(seeds[good_runs + 1 + i]) for i, key in enumerate(REGRESSIONS)}
    regressions = {
        key: simulate_run(s, regression=key, label=key) for key, s in regression_seeds.items()
    }
    return ShopStudy(good, noisy, regressions, regression_seeds)


def injected_effect(key: str, seed: int) -> dict[str, float]:
    """Change of each main counter's mean over the run's middle (the same seed without the
    regression as the reference), as a fraction."""
    with_change = simulate_run(seed, regression=key).values
    without = simulate_run(seed).values
    middle = slice(SAMPLES // 5, SAMPLES - SAMPLES // 10)
    effects = {}
    for name in REGRESSIONS[key].main:
        column = COUNTERS.index(name)
        before = np.nanmean(without[middle, column])
        effects[name] = float(np.nanmean(with_change[middle, column]) / before - 1)
    return effects
