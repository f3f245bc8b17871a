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
from collections.abc import Collection, Iterator
from contextlib import ExitStack, contextmanager
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
STORE_FILE = "state.db"  # in the demo's folder
BROKER_FOLDER = "broker"  # the embedded broker's data, in the demo's folder

_KIND_LABELS = {
    "change_point.detected": "DETECTED ",
    "change_point.confirmed": "CONFIRMED",
    "change_point.updated": "UPDATED  ",
    "change_point.retracted": "RETRACTED",
}


def describe_verdict(document: dict[str, Any]) -> str:
    """One line for a change-point, suspicion or incident verdict."""
    from perfwatch.adapters.verdict_feed import SUSPICION_KINDS, summary_fields

    if document["kind"].startswith("incident.") or document["kind"] in SUSPICION_KINDS:
        return summary_fields(document)["summary"]
    series = document["series"]
    name = f"{series['test']} {series['metric']}"
    label = _KIND_LABELS.get(document["kind"], document["kind"])
    current = document.get("change_point")
    previous = document.get("previous")
    if current is None:  # a retraction, which carries only the previous change point
        return f"{label} {name}: the change at {document['previous']['run_id']} no longer stands"
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
    metavar="DIR",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep the SQLite state store (DIR/state.db) and the broker's topics, verdicts "
    "included (DIR/broker), in DIR; by default they are in a temporary folder removed on "
    "exit.",
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
        raise click.BadParameter(str(err), param_hint="'--runs'") from None
    if keep is not None and (keep / STORE_FILE).exists():
        raise click.BadParameter(
            f"{keep} already holds a demo's state ({keep / STORE_FILE}): the demo replays its "
            "history into a new store, so its records would all be old news there; remove "
            "the folder or give another",
            param_hint="'--keep'",
        )
    with ExitStack() as stack:
        folder = keep or Path(stack.enter_context(tempfile.TemporaryDirectory("-perfwatch-demo")))
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise click.BadParameter(
                f"cannot make the folder {folder}: {err.strerror}", param_hint="'--keep'"
            ) from None
        _run_demo(history, folder.resolve(), kept=keep is not None)


def _run_demo(history: DemoHistory, folder: Path, *, kept: bool) -> None:
    import pulsar

    from perfwatch.adapters.pulsar import pulsar_processor
    from perfwatch.brokers import open_broker
    from perfwatch.brokers.handle import make_client
    from perfwatch.processor.observability import configure_logging
    from perfwatch.state import open_store

    configure_logging("text", "error")  # the summary lists the dead letters
    base = Config()
    config = base.model_copy(
        update={
            "store": base.store.model_copy(update={"url": f"sqlite:///{folder / STORE_FILE}"}),
            "consumer": base.consumer.model_copy(update={"name": "perfwatch-demo"}),
        }
    )
    click.echo(
        f"perfwatch demo: {len(history.messages)} messages "
        f"({history.records} records of 4 tests x 3 metrics x {history.runs} nights, "
        f"{len(history.messages) - history.records} malformed)"
    )
    click.echo(f"{history.late} arrives ten nights late; {history.duplicate} is sent twice")
    if kept:
        click.echo(f"state store and broker data in {folder} (kept)\n")
    else:
        click.echo("state store and broker data in a temporary folder, removed on exit\n")
    started = time.monotonic()
    with ExitStack() as resources:
        with _step("starting the embedded broker"):
            handle = resources.enter_context(open_broker(None, data_dir=folder / BROKER_FOLDER))
        store = resources.enter_context(open_store(config.store.url))
        client = make_client(handle)
        try:
            watch = client.subscribe(
                config.topics.verdicts,
                WATCH_SUBSCRIPTION,
                consumer_type=pulsar.ConsumerType.Shared,
                initial_position=pulsar.InitialPosition.Earliest,
            )
            processor = pulsar_processor(
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
            kinds: Counter[str] = Counter()
            seen: set[str] = set()
            try:
                with _step(f"publishing {len(history.messages)} messages"):
                    producer = client.create_producer(
                        config.topics.records, block_if_queue_full=True, batching_enabled=True
                    )
                    for message in history.messages:
                        producer.send_async(message.payload, None, partition_key=message.key)
                    producer.flush()
                    producer.close()
                click.echo("\nVerdicts as the processor publishes them (seconds since the start):")
                deadline = time.monotonic() + SETTLE_TIMEOUT_S
                while time.monotonic() < deadline and not failure:
                    settled = processor.metrics.settled() >= len(history.messages)
                    quiet = _drain(watch, seen, kinds, started, timeout_ms=200) == 0
                    if quiet and settled and not store.unpublished():
                        break
            finally:
                # on Ctrl-C too: the processor closes its producers before the client
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
    _next_steps(folder, kept=kept)


@contextmanager
def _step(doing: str) -> Iterator[None]:
    """`doing ... done (N s)` around a wait the user would otherwise sit through blind."""
    click.echo(f"{doing} ... ", nl=False)
    started = time.monotonic()
    try:
        yield
    except BaseException:
        click.echo("failed")
        raise
    click.echo(f"done ({time.monotonic() - started:.1f} s)")


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
    click.echo("\nChange points found, next to the changes scripted into the history:")
    found_rows: list[list[str]] = []
    matched: set[ScriptedChange] = set()
    for key in store.series_keys():
        for cp in store.published_change_points(key):
            change = scripted_match(key.test, key.metric, cp["index"], history.changes)
            if change is not None:
                matched.add(change)
            found_rows.append(
                [
                    key.test,
                    key.metric,
                    cp["run_id"].split("#")[-1],
                    f"{cp['forward_change_percent']:+.1f}%",
                    cp["direction"],
                    _scripted_text(change) if change is not None else "(not scripted)",
                ]
            )
    missed = [change for change in history.changes if change not in matched]
    missed_rows = [
        [change.test, change.metric, "-", "-", "(not found)", _scripted_text(change)]
        for change in missed
    ]
    _echo_table(
        ["test", "metric", "found at", "change", "found as", "scripted (the truth)"],
        found_rows + missed_rows,
        right_aligned={3},
    )
    click.echo(
        "Scripted changes not found: "
        + ("none" if not missed else "; ".join(f"{c.test} {c.metric}" for c in missed))
    )
    click.echo(f"\nDead-letter topic ({len(dead_letters)} messages):")
    _echo_table(
        ["reason", "where", "problem"],
        [
            [
                properties.get("perfwatch.error.kind", "?"),
                properties.get("perfwatch.error.path", ""),
                properties.get("perfwatch.error.message", ""),
            ]
            for properties in dead_letters
        ],
    )


def _scripted_text(change: ScriptedChange) -> str:
    nights = f"night-{change.start:03d}"
    if change.end is not None:
        nights += f" to night-{change.end:03d}"
    return f"{nights}  {change.description}"


def _echo_table(
    header: list[str], rows: list[list[str]], right_aligned: Collection[int] = ()
) -> None:
    """Columns two spaces apart under a header; the last column is not padded or cut, so
    long texts are shown whole."""
    widths = [max(map(len, column)) for column in zip(header, *rows, strict=True)]
    for cells in [header, ["-" * width for width in widths], *rows]:
        padded = [
            cell.rjust(width) if index in right_aligned else cell.ljust(width)
            for index, (cell, width) in enumerate(zip(cells[:-1], widths, strict=False))
        ]
        click.echo("  " + "  ".join([*padded, cells[-1]]))


def _next_steps(folder: Path, *, kept: bool) -> None:
    """What to do next, each with the command that does it as printed: the kept store
    with the kept broker, so the dashboard follows the demo's verdicts, not another
    broker's."""
    keep = folder if kept else Path("perfwatch-demo").resolve()
    broker = keep / BROKER_FOLDER
    state = f"--store sqlite:///{keep / STORE_FILE} --embedded-dir {broker}"
    steps = [
        (
            "Keep the state (SQLite store and broker topics) in a folder:",
            [f"perfwatch demo --keep {keep}"],
        ),
        (
            "Browse the kept series, change points and verdicts (http://127.0.0.1:8050/):",
            [f"perfwatch dashboard {state}"],
        ),
        (
            "Find the change points in your own results: start the processor, then publish "
            "from another terminal:",
            [
                f"perfwatch serve {state}",
                f"perfwatch publish --embedded-dir {broker} results.json",
            ],
        ),
        ("Or analyse result files offline, without a broker:", ["perfwatch analyze results.csv"]),
    ]
    click.echo("\nNext steps:")
    for purpose, commands in steps[1:] if kept else steps:
        click.echo(f"  {purpose}")
        for command in commands:
            click.echo(f"    {command}")
