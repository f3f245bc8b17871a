"""`perfwatch demo`: the whole pipeline on a generated history, in one command.

Starts the embedded broker and a processor, replays the bundled nightly
history (perfwatch.data.demo_history), prints each verdict as it arrives on the
verdicts topic, then summarises what was found and what was dead-lettered.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
import orjson

from perfwatch.config import Config
from perfwatch.data.demo_history import DemoHistory, ScriptedChange, demo_history

WATCH_SUBSCRIPTION = "perfwatch-demo-watch"
# A believed change point within this many runs of a scripted one is that one.
MATCH_DISTANCE = 3
SETTLE_TIMEOUT_S = 120.0

_KIND_LABELS = {
    "change_point.detected": "DETECTED ",
    "change_point.updated": "UPDATED  ",
    "change_point.retracted": "RETRACTED",
}


def describe_verdict(document: dict[str, Any]) -> str:
    """One line for a change-point verdict."""
    series = document["series"]
    name = f"{series['test']} {series['metric']}"
    label = _KIND_LABELS.get(document["kind"], document["kind"])
    current = document.get("change_point")
    previous = document.get("previous")
    if current is None:
        return f"{label} {name}: the change at {previous['run_id']} no longer stands"
    text = (
        f"{label} {name}: {current['forward_change_percent']:+.1f}% {current['direction']} "
        f"at {current['run_id']} ({current['time'][:10]}, commit {current['commit']}, "
        f"p={current['pvalue']:.1e})"
    )
    if previous is not None and previous["run_id"] != current["run_id"]:
        text += f", moved from {previous['run_id']}"
    elif previous is not None:
        text += f", was {previous['forward_change_percent']:+.1f}%"
    return text


def scripted_match(
    test: str, metric: str, index: int, changes: list[ScriptedChange]
) -> ScriptedChange | None:
    for change in changes:
        if change.test != test or change.metric != metric:
            continue
        edges = [change.start] + ([change.end] if change.end is not None else [])
        if any(abs(index - edge) <= MATCH_DISTANCE for edge in edges):
            return change
    return None


@click.command()
@click.option("--runs", default=200, show_default=True, help="Nightly runs per test.")
@click.option("--seed", default=7, show_default=True, help="Seed of the generated noise.")
@click.option(
    "--keep",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep the broker data and state store in this folder (default: a temporary one).",
)
def demo(runs: int, seed: int, keep: Path | None) -> None:
    """Replay a realistic CI history through the embedded broker and a processor.

    Four tests x three metrics x RUNS nightly runs with noise, step
    regressions, a short-lived regression that was fixed, an improvement, a
    late and a duplicated record, and six malformed messages.
    """
    try:
        history = demo_history(runs, seed)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--runs") from None
    with ExitStack() as stack:
        folder = keep or Path(stack.enter_context(tempfile.TemporaryDirectory("-perfwatch-demo")))
        folder.mkdir(parents=True, exist_ok=True)
        _run_demo(history, folder)


def _run_demo(history: DemoHistory, folder: Path) -> None:
    import pulsar

    from perfwatch.adapters.pulsar import pulsar_processor as Processor
    from perfwatch.processor.observability import configure_logging
    from perfwatch.store import open_store
    from perfwatch.stream.brokers import make_client, open_broker

    configure_logging("text", "error")  # the summary lists the dead letters
    base = Config()
    config = replace(
        base,
        store=replace(base.store, url=f"sqlite:///{folder / 'state.db'}"),
        consumer=replace(base.consumer, name="perfwatch-demo"),
    )
    click.echo(
        f"perfwatch demo: {len(history.messages)} messages "
        f"({history.records} records of 4 tests x 3 metrics x {history.runs} nights, "
        f"{len(history.messages) - history.records} malformed)"
    )
    click.echo(f"{history.late} arrives ten nights late; {history.duplicate} is sent twice")
    click.echo(f"state and broker data in {folder}\n")
    started = time.monotonic()
    with (
        open_broker(None, data_dir=folder / "broker") as handle,
        open_store(config.store.url) as store,
    ):
        client = make_client(handle)
        try:
            watch = client.subscribe(
                config.topics.verdicts,
                WATCH_SUBSCRIPTION,
                consumer_type=pulsar.ConsumerType.Shared,
                initial_position=pulsar.InitialPosition.Earliest,
            )
            processor = Processor(
                config, store, client, subscription_type=handle.subscription_type()
            )
            stop = threading.Event()
            failure: list[BaseException] = []

            def run() -> None:
                try:
                    processor.run(stop)
                except BaseException as err:
                    failure.append(err)
                    stop.set()

            worker = threading.Thread(target=run, name="perfwatch-processor")
            worker.start()
            producer = client.create_producer(
                config.topics.records, block_if_queue_full=True, batching_enabled=True
            )
            for message in history.messages:
                producer.send_async(message.payload, None, partition_key=message.key)
            producer.flush()
            producer.close()

            kinds: Counter[str] = Counter()
            seen: set[str] = set()
            deadline = time.monotonic() + SETTLE_TIMEOUT_S
            while time.monotonic() < deadline and not failure:
                settled = processor.metrics.settled() >= len(history.messages)
                quiet = _drain(watch, seen, kinds, started, timeout_ms=200) == 0
                if quiet and settled and not store.unpublished():
                    break
            stop.set()
            worker.join()
            _drain(watch, seen, kinds, started, timeout_ms=200)
            if failure:
                raise click.ClickException(f"the processor stopped: {failure[0]}")
            dead_letters = _dead_letters(
                client, config, expected=len(history.messages) - history.records
            )
            elapsed = time.monotonic() - started
            _summary(history, store, processor, kinds, dead_letters, elapsed)
        finally:
            client.close()


def _drain(watch: Any, seen: set[str], kinds: Counter[str], started: float, timeout_ms: int) -> int:
    """Print the verdicts waiting on the watch subscription; how many were new."""
    import pulsar

    new = 0
    while True:
        try:
            message = watch.receive(timeout_millis=timeout_ms)
        except pulsar.Timeout:
            return new
        watch.acknowledge(message)
        document = orjson.loads(message.data())
        if document["verdict_id"] in seen:
            continue
        seen.add(document["verdict_id"])
        kinds[document["kind"]] += 1
        new += 1
        click.echo(f"{time.monotonic() - started:6.1f}s  {describe_verdict(document)}")
        timeout_ms = 50


def _dead_letters(client: Any, config: Config, expected: int) -> list[dict[str, str]]:
    import pulsar

    consumer = client.subscribe(
        config.topics.dead_letter,
        WATCH_SUBSCRIPTION,
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    found: list[dict[str, str]] = []
    try:
        while len(found) < expected:
            try:
                message = consumer.receive(timeout_millis=2000)
            except pulsar.Timeout:
                break
            consumer.acknowledge(message)
            found.append(message.properties())
    finally:
        consumer.close()
    return found


def _summary(
    history: DemoHistory,
    store: Any,
    processor: Any,
    kinds: Counter[str],
    dead_letters: list[dict[str, str]],
    elapsed: float,
) -> None:
    points = sum(len(store.series_points(key)) for key in store.series_keys())
    processed = int(processor.metrics.records_processed_total())
    click.echo(
        f"\nProcessed {processed} records ({points} metric points kept; a duplicate changes "
        f"nothing) and dead-lettered {len(dead_letters)} messages in {elapsed:.1f} s."
    )
    click.echo(
        f"Verdicts: {sum(kinds.values())} ("
        + ", ".join(f"{n} {kind.split('.')[-1]}" for kind, n in sorted(kinds.items()))
        + ")"
    )
    click.echo("\nChange points perfwatch believes in now:")
    matched: set[ScriptedChange] = set()
    for key in store.series_keys():
        for cp in store.published_change_points(key):
            change = scripted_match(key.test, key.metric, cp["index"], history.changes)
            if change is not None:
                matched.add(change)
            note = change.description if change is not None else "not scripted"
            click.echo(
                f"  {key.test:<13} {key.metric:<15} {cp['run_id'].split('#')[-1]:<10} "
                f"{cp['forward_change_percent']:+6.1f}%  {cp['direction']:<11}  {note}"
            )
    missed = [change for change in history.changes if change not in matched]
    click.echo(
        "Scripted changes not found: "
        + ("none" if not missed else "; ".join(f"{c.test} {c.metric}" for c in missed))
    )
    click.echo(f"\nDead-letter topic ({len(dead_letters)} messages):")
    for properties in dead_letters:
        click.echo(
            f"  {properties.get('perfwatch.error.kind', '?'):<16} "
            f"{properties.get('perfwatch.error.path', ''):<18} "
            f"{properties.get('perfwatch.error.message', '')[:70]}"
        )
