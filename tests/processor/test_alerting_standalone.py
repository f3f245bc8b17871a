"""Alerting end to end: a CI-like workload through the real Pulsar standalone, two
`perfwatch serve` and `perfwatch forward` to a local webhook. A team hears of each
true change once, and never of the noise-only series.

Time is compressed (a run every few seconds, group wait and interval scaled with
it); the waits are on conditions, and nothing is asserted about durations.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from _alerting_workload import Forwarder, generate, outcome, run_through_stack
from _processor_support import fresh_postgres_schema
from perfwatch.brokers.handle import BrokerHandle

pytestmark = [pytest.mark.slow, pytest.mark.pulsar, pytest.mark.postgres]


@pytest.fixture
def postgres_url() -> Iterator[str]:
    yield from fresh_postgres_schema()


def test_the_webhook_hears_of_each_change_once_and_never_of_noise(
    pulsar_broker: BrokerHandle, postgres_url: str, tmp_path: Path
) -> None:
    workload = generate(
        7,
        tests=8,
        metrics=2,
        runs=30,
        singles=2,
        slowed=4,
        improved=2,
        fixed=1,
        effect=(0.15, 0.25),
    )
    grouped = Forwarder("/grouped", ["--group-wait", "2", "--group-interval", "3"])
    ungrouped = Forwarder("/ungrouped", ["--group-wait", "0"])

    posts = run_through_stack(
        workload,
        [grouped, ungrouped],
        broker=pulsar_broker,
        postgres_url=postgres_url,
        folder=tmp_path,
        run_period_s=3.5,
        settle_s=10,
    )

    result = outcome(workload, posts.get(grouped.path, []))
    assert [count for _, count in result.per_change] == [1] * len(workload.changes)
    assert (result.noise, result.elsewhere) == (0, 0)
    # without groups, the commit that slowed 4 series posts as it grows to 1, 2 and 4
    plain = outcome(workload, posts.get(ungrouped.path, []))
    slowed = [count for change, count in plain.per_change if change.what == "slowed"]
    assert slowed[0] >= 3
    assert plain.noise == 0
