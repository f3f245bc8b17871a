"""End-to-end stream processing through a real Apache Pulsar standalone.

    python benchmarks/bench_stream.py                  # 1 000 tests x 20 metrics x 500 runs
    python benchmarks/bench_stream.py --tests 100      # a quicker run
    PERFWATCH_TEST_POSTGRES_URL=postgresql://... (or --postgres-url): the shared store

Set-up: a PostgreSQL state store (both processors share it) is seeded with
every series' 500-run history, its analyzer state and no change point yet;
`perfwatch serve` processes (real child processes, Key_Shared subscription)
then receive one new record per test per phase. Each test's history ends with an
8 % step on one metric that the phase's record completes (noise sequences are
chosen by replaying them through the analyzer first), so every record causes a
verdict: the time from publishing a record to the broker's receipt of its first
verdict is the end-to-end latency.

Phases: throughput with 1 consumer, throughput with 2 consumers (records sent
as fast as possible), then latency at half the bar's load (1 consumer, 1 000
metric points/s). Printed: records/s and metric points/s (per consumer too),
p50/p99 publish -> verdict, each processor's own CPU time per record
(user + system, from /proc) and how busy the whole machine was (broker,
database, processors and this script share its cores). Bar: >= 2 000 points/s
per consumer process, p99 < 250 ms at half that load.

Reference measured in the same run: a processor that re-analysed each series
from scratch (`detect_change_points` over the 500-run history) for every new
point; the ratio shows what the incremental analyzer saves.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import orjson
import psycopg
import pulsar

from perfwatch.brokers import open_broker
from perfwatch.brokers.handle import BrokerHandle, make_client
from perfwatch.contract.timestamps import format_rfc3339
from perfwatch.contract.validation import RECORD_SCHEMA
from perfwatch.detectors.analyzer import SeriesAnalyzer
from perfwatch.detectors.edivisive import EDivisiveParams, detect_change_points
from perfwatch.state import SeriesKey, open_store

STEP = 1.08  # the level after a history's final step
NOISE = 0.01
PHASES = 5  # see PLAN
VARIANTS = 8  # distinct noise sequences per metric (analyzer states are shared)
POINTS_BAR = 2000.0  # metric points/s per consumer process
LATENCY_BAR_S = 0.250  # p99 publish -> verdict at half the bar's load
FIRST_RUN = 1_700_000_000.0  # epoch seconds of run 0; runs are an hour apart
PHASE_TIMEOUT_S = 600.0
HALF_LOAD = POINTS_BAR / 2  # metric points/s
ROLES = ("processors", "database", "broker", "bench", "other")
# (consumers, [(phase name, phase, records/s or None = at once)]); each group of
# processors starts with a cold analyzer cache and keeps it between its phases.
PLAN = [
    (1, [("1 cold", 0, None), ("1 warm", 1, None), ("half-load", 2, "half")]),
    (2, [("2 cold", 3, None), ("2 warm", 4, None)]),
]


@dataclass(frozen=True)
class Shape:
    tests: int
    metrics: int
    history: int

    def step_start(self, metric: int) -> int | None:
        """Metric k < PHASES steps up 2 - k runs before the history ends, so the
        record of phase k brings its third point at the new level."""
        return self.history - 2 + metric if metric < PHASES else None

    def trigger_phase(self, metric: int) -> int | None:
        return metric if metric < PHASES else None


def values_with_continuation(shape: Shape, metric: int, seed: int) -> np.ndarray:
    """History plus one value per phase: noise around a level that may step once."""
    start = shape.step_start(metric)
    runs = np.arange(shape.history + PHASES)
    levels = (100.0 + 10.0 * metric) * np.where(
        (start is not None) & (runs >= (start or 0)), STEP, 1.0
    )
    rng = np.random.default_rng(1000 * metric + seed)
    return np.round(levels * (1 + rng.normal(0.0, NOISE, runs.shape[0])), 4)


def behaves(shape: Shape, metric: int, values: np.ndarray, params: EDivisiveParams) -> bool:
    """No change point in the history; the first one comes exactly in the metric's phase."""
    analyzer = SeriesAnalyzer(params)
    if analyzer.append(values[: shape.history]):
        return False
    first = None
    for phase in range(PHASES):
        if analyzer.append(values[shape.history + phase : shape.history + phase + 1]):
            first = phase if first is None else first
    return first == shape.trigger_phase(metric)


def choose_variants(shape: Shape, params: EDivisiveParams) -> dict[tuple[int, int], np.ndarray]:
    """VARIANTS noise sequences per metric that behave as designed (checked by replaying
    them through the analyzer), so every benchmark record causes exactly the verdict
    it is meant to."""
    chosen = {}
    for metric in range(shape.metrics):
        seed = 0
        for variant in range(VARIANTS):
            while not behaves(shape, metric, values := values_with_continuation(
                shape, metric, seed
            ), params):  # fmt: skip
                seed += 1
            chosen[(metric, variant)] = values
            seed += 1
    return chosen


def run_id(test: int, run: int) -> str:
    return f"bench{test:04d}#{run}"


def run_time(run: int) -> str:
    return format_rfc3339(datetime.fromtimestamp(FIRST_RUN + 3600 * run, tz=UTC))


def seed_store(
    url: str, shape: Shape, params: EDivisiveParams, variants: dict[tuple[int, int], np.ndarray]
) -> None:
    """Write every series' history and analyzer state straight into the store."""
    params_json = orjson.dumps(params.to_dict()).decode()
    states: dict[tuple[int, int], tuple[np.ndarray, bytes]] = {}
    for (metric, variant), values in variants.items():
        analyzer = SeriesAnalyzer(params)
        analyzer.append(values[: shape.history])
        states[(metric, variant)] = (values, analyzer.to_bytes(with_values=False))
    with psycopg.connect(url) as connection, connection.cursor() as cursor:
        series_id = 0
        with cursor.copy(
            "COPY series (series_id, series_key, test, metric, length, max_timestamp, "
            "next_arrival, version, analyzer_params, analyzer_state, published) FROM STDIN"
        ) as copy:
            for test in range(shape.tests):
                for metric in range(shape.metrics):
                    series_id += 1
                    key = SeriesKey.of(f"bench{test:04d}", f"m{metric:02d}", {"branch": "main"})
                    _, state = states[(metric, (test + metric) % VARIANTS)]
                    copy.write_row(
                        (series_id, key.canonical, key.test, key.metric, shape.history,
                         FIRST_RUN + 3600 * (shape.history - 1), shape.history, 1,
                         params_json, state, "[]")
                    )  # fmt: skip
        cursor.execute("SELECT setval(pg_get_serial_sequence('series', 'series_id'), %s)",
                       (series_id,))  # fmt: skip
        times = [run_time(run) for run in range(shape.history)]
        series_id = 0
        with cursor.copy(
            "COPY points (series_id, run_id, ts, arrival, value, commit_id, time) FROM STDIN"
        ) as copy:
            for test in range(shape.tests):
                buffer = io.StringIO()
                for metric in range(shape.metrics):
                    series_id += 1
                    values, _ = states[(metric, (test + metric) % VARIANTS)]
                    for run in range(shape.history):
                        buffer.write(
                            f"{series_id}\t{run_id(test, run)}\t{FIRST_RUN + 3600 * run}\t{run}"
                            f"\t{float(values[run])!r}\tc{run}\t{times[run]}\n"
                        )
                copy.write(buffer.getvalue())
        connection.commit()


def record(
    shape: Shape, test: int, phase: int, variants: dict[tuple[int, int], np.ndarray]
) -> bytes:
    run = shape.history + phase
    return orjson.dumps(
        {
            "schema": RECORD_SCHEMA,
            "test": f"bench{test:04d}",
            "run_id": run_id(test, run),
            "commit": f"c{run}",
            "branch": "main",
            "timestamp": run_time(run),
            "metrics": {
                f"m{metric:02d}": {
                    "value": float(variants[(metric, (test + metric) % VARIANTS)][run]),
                    "direction": "lower_is_better",
                }
                for metric in range(shape.metrics)
            },
        }
    )


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_by_role(processors: list[int]) -> dict[str, float]:
    """CPU seconds used so far by the processors, the database server, the broker
    (the JVM), this script and everything else, summed over live processes."""
    roles = dict.fromkeys(ROLES, 0.0)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            command = (entry / "comm").read_text().strip()
            used = cpu_seconds(pid)
        except OSError:  # exited meanwhile
            continue
        if pid in processors:
            roles["processors"] += used
        elif command.startswith("postgres"):
            roles["database"] += used
        elif command == "java":
            roles["broker"] += used
        elif pid == os.getpid():
            roles["bench"] += used
        else:
            roles["other"] += used
    return roles


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far (Linux /proc/stat)."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(ticks) - idle) / hz, sum(ticks) / hz


@dataclass
class PhaseResult:
    name: str
    consumers: int
    records: int
    points: int
    elapsed_s: float
    latencies_s: list[float]
    cpu_s_per_record: float
    machine_busy: float  # share of all cores busy during the phase (any process)
    cpu_ms_per_record_by_role: dict[str, float]  # whole machine, see ROLES

    @property
    def points_per_s(self) -> float:
        return self.points / self.elapsed_s


class Processors:
    """`perfwatch serve` child processes sharing one subscription, kept across phases
    (their analyzer caches warm up as a long-running processor's would). Every group
    joins the same subscription, as restarted processors do: a new one would start
    from the topic's first record and replay the earlier phases."""

    def __init__(
        self,
        count: int,
        broker: BrokerHandle,
        store_url: str,
        topics: dict,
        workdir: Path,
        subscription: str,
    ) -> None:
        self.count = count
        self.broker = broker
        self.topics = topics
        self.subscription = subscription
        config = workdir / "empty.toml"
        config.write_text("")
        self.processes = []
        logs = [workdir / f"{subscription}-{count}x{index}.log" for index in range(count)]
        for index, log_path in enumerate(logs):
            name = f"{subscription}-{count}x{index}"
            with log_path.open("wb") as log:
                self.processes.append(
                    subprocess.Popen(
                        [sys.executable, "-c", "from perfwatch.cli.main import main; main()",
                         "serve", "--config", str(config), "--pulsar-url", broker.service_url,
                         *(["--admin-url", broker.admin_url] if broker.admin_url else []),
                         "--store", store_url, "--subscription", self.subscription,
                         "--name", name,
                         "--records-topic", topics["records"],
                         "--verdicts-topic", topics["verdicts"],
                         "--dead-letter-topic", topics["dead_letter"], "--log-level", "warning"],
                        stdout=log, stderr=log,
                    )
                )  # fmt: skip
        _wait_for_subscribers(broker, topics["records"], self.subscription, self.processes, logs)

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            process.wait(60)

    def run_phase(
        self,
        name: str,
        shape: Shape,
        phase: int,
        variants: dict[tuple[int, int], np.ndarray],
        rate: float | None,
    ) -> PhaseResult:
        """Publish one record per test (at `rate` records/s, or at once) and wait for
        every record's verdict."""
        client = make_client(self.broker)
        try:
            watch = client.subscribe(
                self.topics["verdicts"],
                f"watch-{uuid.uuid4().hex[:8]}",
                consumer_type=pulsar.ConsumerType.Shared,
            )
            producer = client.create_producer(
                self.topics["records"],
                block_if_queue_full=True,
                batching_enabled=True,
                batching_max_publish_delay_ms=1,
                batching_type=pulsar.BatchingType.KeyBased,
            )
            run = shape.history + phase
            payloads = [record(shape, test, phase, variants) for test in range(shape.tests)]
            cpu_before = [cpu_seconds(p.pid) for p in self.processes]
            machine_before = machine_cpu()
            roles_before = cpu_by_role([p.pid for p in self.processes])
            sent_at: dict[str, float] = {}
            latencies: dict[str, float] = {}
            collector = threading.Thread(
                target=_collect, args=(watch, sent_at, latencies, shape.tests)
            )
            collector.start()
            first_send = time.time()
            for test, payload in enumerate(payloads):
                if rate is not None:
                    time.sleep(max(0.0, first_send + test / rate - time.time()))
                sent_at[run_id(test, run)] = time.time()
                producer.send_async(payload, None, partition_key=f"bench{test:04d}")
            producer.flush()
            collector.join()
            machine_after = machine_cpu()
            roles_after = cpu_by_role([p.pid for p in self.processes])
            cpu = sum(
                cpu_seconds(p.pid) - before
                for p, before in zip(self.processes, cpu_before, strict=True)
            )
            producer.close()
        finally:
            client.close()
        if len(latencies) < shape.tests:
            raise SystemExit(
                f"{name}: only {len(latencies)} of {shape.tests} records got a verdict"
            )
        last_verdict = max(sent_at[r] + latency for r, latency in latencies.items())
        return PhaseResult(
            name=name,
            consumers=self.count,
            records=shape.tests,
            points=shape.tests * shape.metrics,
            elapsed_s=last_verdict - first_send,
            latencies_s=sorted(latencies.values()),
            cpu_s_per_record=cpu / shape.tests,
            machine_busy=(machine_after[0] - machine_before[0])
            / max(machine_after[1] - machine_before[1], 1e-9),
            cpu_ms_per_record_by_role={
                role: 1000 * max(roles_after[role] - roles_before[role], 0.0) / shape.tests
                for role in ROLES
            },
        )


def _collect(
    watch: pulsar.Consumer, sent_at: dict[str, float], latencies: dict[str, float], wanted: int
) -> None:
    """Latency of each record's first verdict: broker time of the verdict - send time."""
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while len(latencies) < wanted and time.monotonic() < deadline:
        try:
            message = watch.receive(timeout_millis=1000)
        except pulsar.Timeout:
            continue
        watch.acknowledge(message)
        record_run = orjson.loads(message.data())["record_run_id"]
        if record_run in sent_at and record_run not in latencies:
            latencies[record_run] = message.publish_timestamp() / 1000 - sent_at[record_run]


def _wait_for_subscribers(
    broker: BrokerHandle, topic: str, subscription: str, processes: list, logs: list[Path]
) -> None:
    from perfwatch.brokers.admin import admin_request

    path = "/admin/v2/" + topic.replace("://", "/", 1) + "/stats"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for process, log in zip(processes, logs, strict=True):
            if process.poll() is not None:
                tail = log.read_text(errors="replace")[-3000:]
                raise SystemExit(f"a processor exited during start-up; its log ends:\n{tail}")
        status, body = admin_request(broker.admin_url, "GET", path)
        if status == 200:
            subscriptions = orjson.loads(body).get("subscriptions", {})
            if len(subscriptions.get(subscription, {}).get("consumers", [])) >= len(processes):
                return
        time.sleep(0.2)
    raise SystemExit("the processors did not subscribe within 120 s")


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def reference_full_recompute(shape: Shape, params: EDivisiveParams) -> float:
    """Seconds per point of re-analysing a whole history from scratch."""
    values = values_with_continuation(shape, 3, 0)[: shape.history]
    detect_change_points(values, params)  # compile / warm
    repeats = 30
    began = time.perf_counter()
    for _ in range(repeats):
        detect_change_points(values, params)
    return (time.perf_counter() - began) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", type=int, default=1000)
    parser.add_argument("--metrics", type=int, default=20)
    parser.add_argument("--history", type=int, default=500)
    parser.add_argument("--postgres-url", default=os.environ.get("PERFWATCH_TEST_POSTGRES_URL"))
    parser.add_argument("--pulsar-url", help="an existing broker (default: start a standalone)")
    parser.add_argument("--admin-url", help="its admin URL")
    args = parser.parse_args()
    if not args.postgres_url:
        sys.exit("a PostgreSQL URL is needed (--postgres-url or PERFWATCH_TEST_POSTGRES_URL)")
    if args.metrics < 3 or args.history < 50:
        sys.exit("--metrics must be >= 3 and --history >= 50")
    shape = Shape(args.tests, args.metrics, args.history)
    params = EDivisiveParams()
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(args.postgres_url, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {schema}")
    separator = "&" if "?" in args.postgres_url else "?"
    store_url = f"{args.postgres_url}{separator}options=-csearch_path%3D{schema}"
    try:
        open_store(store_url).close()  # create the schema's tables
        began = time.perf_counter()
        variants = choose_variants(shape, params)
        seed_store(store_url, shape, params, variants)
        series = shape.tests * shape.metrics
        print(
            f"seeded {series} series x {shape.history} runs "
            f"({series * shape.history:,} points) in {time.perf_counter() - began:.0f} s"
        )
        with (
            open_broker(args.pulsar_url or "standalone", admin_url=args.admin_url) as broker,
            tempfile.TemporaryDirectory(prefix="bench-stream-") as workdir,
        ):
            topics = {
                kind: f"persistent://public/default/bench-{kind}-{uuid.uuid4().hex[:8]}"
                for kind in ("records", "verdicts", "dead-letter")
            }
            topics["dead_letter"] = topics.pop("dead-letter")
            results = []
            subscription = f"bench-{uuid.uuid4().hex[:8]}"
            for consumers, plan in PLAN:
                processors = Processors(
                    consumers, broker, store_url, topics, Path(workdir), subscription
                )
                try:
                    for name, phase, rate in plan:
                        per_s = HALF_LOAD / shape.metrics if rate == "half" else None
                        result = processors.run_phase(name, shape, phase, variants, per_s)
                        results.append(result)
                        print(f"phase {name}: {result.elapsed_s:.1f} s")
                finally:
                    processors.stop()
        reference = reference_full_recompute(shape, params)
        report(results, reference, shape)
    finally:
        with psycopg.connect(args.postgres_url, autocommit=True) as connection:
            connection.execute(f"DROP SCHEMA {schema} CASCADE")


def report(results: list[PhaseResult], reference_s: float, shape: Shape) -> None:
    by_name = {r.name: r for r in results}
    print()
    print(
        f"{'phase':<10} {'cons':>4} {'records/s':>10} {'points/s':>10} {'pts/s/cons':>11} "
        f"{'cpu ms/rec':>10} {'machine':>8} {'p50 ms':>8} {'p99 ms':>8}"
    )
    for r in results:
        print(
            f"{r.name:<10} {r.consumers:>4} {r.records / r.elapsed_s:>10.1f} "
            f"{r.points_per_s:>10.0f} {r.points_per_s / r.consumers:>11.0f} "
            f"{1000 * r.cpu_s_per_record:>10.2f} {r.machine_busy:>8.0%} "
            f"{1000 * percentile(r.latencies_s, 50):>8.1f} "
            f"{1000 * percentile(r.latencies_s, 99):>8.1f}"
        )
    print("\nCPU ms per record, whole machine, by process (machine column above):")
    print(f"{'phase':<10} " + " ".join(f"{role:>10}" for role in ROLES))
    for r in results:
        print(
            f"{r.name:<10} "
            + " ".join(f"{r.cpu_ms_per_record_by_role[role]:>10.2f}" for role in ROLES)
        )
    warm = by_name["1 warm"]
    per_point_cpu = warm.cpu_s_per_record / shape.metrics
    print(
        f"\nreference (same run): re-analysing a {shape.history}-run history from scratch "
        f"takes {1000 * reference_s:.2f} ms per point; the processor (warm) spends "
        f"{1000 * per_point_cpu:.2f} ms of CPU per point, everything included "
        f"(ratio {reference_s / per_point_cpu:.1f}x)"
    )
    steady = [by_name["1 warm"], by_name["2 warm"]]
    per_consumer = [r.points_per_s / r.consumers for r in steady]
    latency = percentile(by_name["half-load"].latencies_s, 99)
    print(
        f"bar: >= {POINTS_BAR:.0f} points/s per consumer (warm): "
        f"{'met' if min(per_consumer) >= POINTS_BAR else 'NOT met'} "
        f"({', '.join(f'{v:.0f}' for v in per_consumer)}); "
        f"p99 < {1000 * LATENCY_BAR_S:.0f} ms at {HALF_LOAD:.0f} points/s: "
        f"{'met' if latency < LATENCY_BAR_S else 'NOT met'} ({1000 * latency:.0f} ms)"
    )


if __name__ == "__main__":
    main()
