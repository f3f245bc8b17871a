"""Webhook messages per incident through the real stack, grouped and not.

Starts the real Apache Pulsar standalone (jars cached by `perfwatch dev pulsar`),
two `perfwatch serve` sharing a fresh schema of the PostgreSQL at
$PERFWATCH_TEST_POSTGRES_URL, and two `perfwatch forward` to a local webhook
reading the same verdicts: one grouping incidents (--group-wait/--group-interval),
one with --group-wait 0 (every alert as it comes). A generated workload is
published run by run as CI would: noise-only series of three noise families,
single-series steps, one commit slowing many series, one improving some, and
regressions fixed 6 runs later (each run at its own commit). Printed: messages
per true change (want 1), messages about noise-only series (want 0), missed
changes and messages elsewhere.

Time is compressed: a run every --run-period seconds stands for a nightly run,
so the group wait and interval are scaled with it (defaults 2 s and 4 s, the
run period 5 s: a wait shorter than the run's processing spread would split a
run's confirmations, an interval longer than the run period would batch runs
that a real interval never batches).

    python benchmarks/eval_alerting_standalone.py [--quick] [--seed 100]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _alerting_workload import (
    Forwarder,
    Outcome,
    Workload,
    generate,
    outcome,
    run_through_stack,
)
from _processor_support import POSTGRES_URL_ENV, postgres_schema
from perfwatch.brokers.handle import BrokerHandle
from perfwatch.brokers.standalone import PulsarStandalone, fetch_jars


def _what(post: dict[str, Any]) -> str:
    incident = post.get("incident")
    if isinstance(incident, dict):
        members = incident.get("members", [])
        return f"{post['kind']} at {incident.get('commit')} ({len(members)} series)"
    return f"{post.get('kind')} {post.get('series', {}).get('test')}"


def report(name: str, workload: Workload, result: Outcome) -> None:
    counts = [count for _, count in result.per_change]
    exact = sum(count == 1 for count in counts)
    print(f"{name}: {result.total} messages")
    print(f"  true changes posted exactly once: {exact} / {len(counts)}")
    print(f"  messages per true change: {counts}")
    for change, posts in zip(workload.changes, result.posts_of, strict=True):
        if len(posts) > 1:
            said = "; ".join(_what(post) for post in posts)
            print(f"    {change.what} at run {change.run}, {len(change.steps)} series: {said}")
    for change in result.missed:
        steps = ", ".join(f"{k[0]} {k[1]} {100 * (f - 1):+.1f}%" for k, f in change.steps.items())
        print(f"    missed: {change.what} at run {change.run} ({steps})")
    for change, posts in zip(workload.changes, result.posts_of, strict=True):
        if len(change.steps) > 1 and len(posts) == 1:
            said = _what(posts[0])
            print(f"    {change.what} at run {change.run}, {len(change.steps)} series: {said}")
    caught = [
        abs(factor - 1)
        for change, posts in zip(workload.changes, result.posts_of, strict=True)
        if posts
        for factor in change.steps.values()
    ]
    if caught:
        print(f"  smallest step caught: {100 * min(caught):.1f} %")
    print(f"  messages about noise-only series: {result.noise}")
    print(f"  messages about changed series away from their change: {result.elsewhere}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 tests x 3 metrics x 40 runs")
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--run-period", type=float, default=5.0)
    parser.add_argument("--group-wait", type=float, default=2.0)
    parser.add_argument("--group-interval", type=float, default=4.0)
    args = parser.parse_args()
    base_url = os.environ.get(POSTGRES_URL_ENV)
    if not base_url:
        sys.exit(f"set {POSTGRES_URL_ENV} to a PostgreSQL the processors may use")
    shape = (20, 40, 4, 6) if args.quick else (40, 60, 6, 10)
    tests, runs, singles, slowed = shape
    workload = generate(
        args.seed,
        tests=tests,
        metrics=3,
        runs=runs,
        singles=singles,
        slowed=slowed,
        improved=4,
        fixed=2,
        effect=(0.05, 0.12),
    )
    print(
        f"{tests} tests x 3 metrics x {runs} runs, seed {args.seed}: "
        f"{len(workload.noise_only)} noise-only series, {len(workload.changes)} true changes "
        f"({singles} single steps, {slowed} series slowed and 4 improved by one commit each, "
        f"2 regressions fixed 6 runs later); steps of 5-12 %, noise 0.5-1.5 %"
    )
    print(
        f"run period {args.run_period} s, group wait {args.group_wait} s, "
        f"group interval {args.group_interval} s"
    )
    grouped = Forwarder(
        "/grouped",
        ["--group-wait", str(args.group_wait), "--group-interval", str(args.group_interval)],
    )
    ungrouped = Forwarder("/ungrouped", ["--group-wait", "0"])
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="perfwatch-alerting-") as folder,
        PulsarStandalone(lib_dir=fetch_jars()) as standalone,
        postgres_schema(base_url, "alerting_eval") as postgres_url,
    ):
        broker = BrokerHandle(standalone.service_url, standalone.admin_url, "standalone")
        print(f"standalone up after {time.monotonic() - started:.0f} s")
        posts = run_through_stack(
            workload,
            [grouped, ungrouped],
            broker=broker,
            postgres_url=postgres_url,
            folder=Path(folder),
            run_period_s=args.run_period,
            settle_s=3 * args.group_interval,
            log=print,
        )
    print(f"done after {time.monotonic() - started:.0f} s")
    report("grouped", workload, outcome(workload, posts.get(grouped.path, [])))
    report("--group-wait 0", workload, outcome(workload, posts.get(ungrouped.path, [])))


if __name__ == "__main__":
    main()
