"""Records per second published and acknowledged, through the embedded and the standalone broker.

    python benchmarks/bench_publish.py                      # 20 000 records, both brokers
    python benchmarks/bench_publish.py --records 5000 --brokers embedded
    python benchmarks/bench_publish.py --json out.json

For each broker, in one run on the same generated records (seeded):
  publish     Publisher.publish: schema validation, serialisation, keyed batched send,
              wait for every acknowledgement
  send        Publisher.send of records already validated and serialised (what
              `perfwatch publish` does after checking a whole file)
  reference   a bare pulsar-client producer with the same batching, send_async and
              flush: the floor the Publisher's own work adds to
Each case publishes to a fresh topic and is timed until the last acknowledgement;
ratios are against the reference measured in the same run (median of --repeats).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import numpy as np
import pulsar

from perfwatch.adapters.publisher import Publisher
from perfwatch.brokers import open_broker
from perfwatch.brokers.handle import BrokerHandle, make_client
from perfwatch.contract.codec import dumps
from perfwatch.contract.timestamps import format_rfc3339


def make_records(count: int, tests: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    start = datetime(2024, 1, 1, tzinfo=UTC)
    latencies = rng.normal(100.0, 5.0, count)
    return [
        {
            "schema": "perfwatch.record/v1",
            "test": f"suite/test_{index % tests}",
            "run_id": f"run-{index}",
            "commit": f"{index:040x}",
            "branch": "main",
            "timestamp": format_rfc3339(start + timedelta(minutes=index)),
            "attributes": {"os": "linux", "python": "3.11"},
            "metrics": {
                "latency": {"value": float(latencies[index]), "unit": "ms"},
                "throughput": {"value": 1000.0 / float(latencies[index]), "unit": "ops/s"},
            },
        }
        for index in range(count)
    ]


def _topic() -> str:
    return f"persistent://public/default/bench-publish-{uuid.uuid4().hex[:12]}"


def case_publish(client: pulsar.Client, records: list[dict]) -> float:
    started = time.perf_counter()
    with Publisher(client=client, topic=_topic()) as publisher:
        for record in records:
            publisher.publish(record)
    elapsed = time.perf_counter() - started
    assert publisher.acknowledged == len(records)
    return elapsed


def case_send(client: pulsar.Client, records: list[dict]) -> float:
    prepared = [(dumps(record), record["test"]) for record in records]  # not timed
    started = time.perf_counter()
    with Publisher(client=client, topic=_topic()) as publisher:
        for payload, key in prepared:
            publisher.send(payload, key=key, label=key)
    elapsed = time.perf_counter() - started
    assert publisher.acknowledged == len(records)
    return elapsed


def case_reference(client: pulsar.Client, records: list[dict]) -> float:
    prepared = [(dumps(record), record["test"]) for record in records]  # not timed
    started = time.perf_counter()
    producer = client.create_producer(
        _topic(),
        batching_enabled=True,
        batching_type=pulsar.BatchingType.KeyBased,
        block_if_queue_full=True,
    )
    done = threading.Semaphore(0)
    failures: list[pulsar.Result] = []

    def acknowledged(result: pulsar.Result, _message_id: object) -> None:
        if result != pulsar.Result.Ok:
            failures.append(result)
        done.release()

    for payload, key in prepared:
        producer.send_async(payload, acknowledged, partition_key=key)
    producer.flush()
    for _ in prepared:
        done.acquire()
    producer.close()
    elapsed = time.perf_counter() - started
    assert not failures, failures
    return elapsed


CASES: dict[str, Callable[[pulsar.Client, list[dict]], float]] = {
    "publish": case_publish,
    "send": case_send,
    "reference": case_reference,
}


def measure(handle: BrokerHandle, records: list[dict], repeats: int) -> dict[str, float]:
    """Median records/s of each case on one broker."""
    client = make_client(handle)
    try:
        case_reference(client, records[: min(len(records), 1000)])  # warm up the connection
        rates: dict[str, list[float]] = {name: [] for name in CASES}
        for _ in range(repeats):
            for name, case in CASES.items():
                rates[name].append(len(records) / case(client, records))
        return {name: statistics.median(values) for name, values in rates.items()}
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--tests", type=int, default=200, help="distinct test ids (keys)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--brokers", default="embedded,standalone")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()

    records = make_records(args.records, args.tests, args.seed)
    results: dict[str, dict[str, float]] = {}
    for kind in args.brokers.split(","):
        with tempfile.TemporaryDirectory(prefix="bench-publish-") as data_dir:
            url = None if kind == "embedded" else kind
            print(f"{kind}: starting the broker ...", flush=True)
            with open_broker(url, data_dir=data_dir) as handle:
                results[kind] = measure(handle, records, args.repeats)
        reference = results[kind]["reference"]
        print(f"{kind} broker, {args.records} records, {args.tests} keys:")
        for name, rate in results[kind].items():
            print(f"  {name:<10} {rate:>10,.0f} records/s   {rate / reference:5.2f} x reference")
    if args.json_path:
        with open(args.json_path, "w", encoding="utf-8") as out:
            json.dump({"records": args.records, "records_per_s": results}, out, indent=2)


if __name__ == "__main__":
    main()
