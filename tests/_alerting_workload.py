"""A CI-like workload through the real stack: Pulsar standalone, `perfwatch serve` and
`perfwatch forward` to a local webhook. Shared by the alerting test and its benchmark.

The workload is many tests' metrics published run by run, every run at its own
commit: noise-only series of several noise families, and true changes whose
commits are the incidents a team should hear of once each.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from _processor_support import (
    ServeProcess,
    publish,
    record_bytes,
    stored_points,
    wait_until,
)
from perfwatch.brokers.handle import BrokerHandle, make_client
from perfwatch.state import open_store

NOISE_FAMILIES = ("gaussian", "student_t3", "slow_host")
TIMEOUT = 300.0


@dataclass(frozen=True)
class Change:
    """A true change: these series step by these factors at this run's commit."""

    run: int
    steps: dict[tuple[str, str], float]
    what: str


@dataclass
class Workload:
    tests: int
    metrics: int
    runs: int
    values: dict[tuple[str, str], np.ndarray]
    noise_only: set[tuple[str, str]]
    changes: list[Change]

    def commit(self, run: int) -> str:
        return orjson.loads(record_bytes("t", run, {}))["commit"]

    def run_of(self, commit: str) -> int:
        return int(commit.lstrip("c"))

    def messages_of_run(self, run: int) -> list[tuple[str, bytes]]:
        by_test: dict[str, dict[str, float]] = defaultdict(dict)
        for (test, metric), values in self.values.items():
            by_test[test][metric] = float(values[run])
        return [(test, record_bytes(test, run, metrics)) for test, metrics in by_test.items()]


def generate(
    seed: int,
    *,
    tests: int,
    metrics: int,
    runs: int,
    singles: int,
    slowed: int,
    improved: int,
    fixed: int,
    effect: tuple[float, float],
) -> Workload:
    """Series around 100 with 0.5-1.5 % noise of a family drawn per series; true changes:
    `singles` single-series steps (either sign), one commit slowing `slowed` series, one
    improving `improved`, and `fixed` regressions brought back 6 runs later; each at its
    own run between a quarter and three quarters of the history, steps of `effect` (a
    fraction range)."""
    rng = np.random.default_rng(seed)
    keys = [(f"svc{t:02d}/bench", f"m{m}") for t in range(tests) for m in range(metrics)]
    order = [keys[i] for i in rng.permutation(len(keys))]
    event_runs = iter(
        int(r)
        for r in rng.choice(
            np.arange(runs // 4, 3 * runs // 4 - 6), size=singles + 2 + 2 * fixed, replace=False
        )
    )

    def size(sign: float) -> float:
        return 1 + sign * rng.uniform(*effect)

    changes: list[Change] = []
    taken = 0

    def take(count: int) -> list[tuple[str, str]]:
        nonlocal taken
        chosen = order[taken : taken + count]
        taken += count
        return chosen

    for key in take(singles):
        changes.append(Change(next(event_runs), {key: size(rng.choice((1.0, -1.0)))}, "single"))
    changes.append(Change(next(event_runs), {k: size(1.0) for k in take(slowed)}, "slowed"))
    changes.append(Change(next(event_runs), {k: size(-1.0) for k in take(improved)}, "improved"))
    for key in take(fixed):
        start = next(event_runs)
        factor = size(1.0)
        changes.append(Change(start, {key: factor}, "regression"))
        changes.append(Change(start + 6, {key: 1 / factor}, "fix"))
    changed = {key for change in changes for key in change.steps}
    values = {}
    for index, key in enumerate(keys):
        level = np.full(runs, 100.0)
        for change in changes:
            if key in change.steps:
                level[change.run :] *= change.steps[key]
        values[key] = np.round(level * (1 + _noise(rng, NOISE_FAMILIES[index % 3], runs)), 4)
    return Workload(tests, metrics, runs, values, set(keys) - changed, changes)


def _noise(rng: np.random.Generator, family: str, runs: int) -> np.ndarray:
    scale = rng.uniform(0.005, 0.015)
    if family == "gaussian":
        return rng.normal(0, scale, runs)
    if family == "student_t3":
        return scale * rng.standard_t(3, runs) / np.sqrt(3)
    # a slow host now and then: one run in ten lands 3 noise scales high
    return rng.normal(0, scale, runs) + 3 * scale * (rng.random(runs) < 0.1)


class Receiver:
    """A webhook that accepts every post and keeps it, by path."""

    def __init__(self) -> None:
        self.posts: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.last_post = time.monotonic()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.posts[self.path].append(orjson.loads(body))
                receiver.last_post = time.monotonic()
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass(frozen=True)
class Forwarder:
    """A `perfwatch forward` to the receiver's `path`, with these extra options."""

    path: str
    options: Sequence[str]


@dataclass
class Outcome:
    """Messages per true change, and the messages about noise-only series or off the truth."""

    per_change: list[tuple[Change, int]] = field(default_factory=list)
    posts_of: list[list[dict[str, Any]]] = field(default_factory=list)  # by change
    noise: int = 0
    elsewhere: int = 0  # about changed series, at a commit no true change of theirs is near
    total: int = 0

    @property
    def missed(self) -> list[Change]:
        return [change for change, count in self.per_change if count == 0]


def outcome(workload: Workload, posts: Sequence[dict[str, Any]], near: int = 3) -> Outcome:
    """Attribute each posted verdict: to the true changes of its series within `near`
    runs of its commit (one message counts once per change), or to noise."""
    result = Outcome(total=len(posts), posts_of=[[] for _ in workload.changes])
    for post in posts:
        about = list(_series_and_commits(post))
        if any(key in workload.noise_only for key, _ in about):
            result.noise += 1
            continue
        hit = {
            index
            for key, commit in about
            for index, change in enumerate(workload.changes)
            if key in change.steps
            and commit
            and abs(workload.run_of(commit) - change.run) <= near
            and _nearest(workload, key, workload.run_of(commit)) is change
        }
        for index in hit:
            result.posts_of[index].append(post)
        result.elsewhere += not hit
    result.per_change = [
        (change, len(posts))
        for change, posts in zip(workload.changes, result.posts_of, strict=True)
    ]
    return result


def _nearest(workload: Workload, key: tuple[str, str], run: int) -> Change:
    return min(
        (change for change in workload.changes if key in change.steps),
        key=lambda change: abs(change.run - run),
    )


def _series_and_commits(post: dict[str, Any]) -> Iterator[tuple[tuple[str, str], str]]:
    incident = post.get("incident")
    if isinstance(incident, dict):
        # an emptied incident names only the series whose change emptied it
        for member in incident.get("members") or [post.get("series", {})]:
            yield (member["test"], member.get("metric", "")), str(incident.get("commit", ""))
        return
    series = post.get("series", {})
    evidence = post.get("change_point") or post.get("previous") or {}
    yield (series.get("test", ""), series.get("metric", "")), str(evidence.get("commit", ""))


def run_through_stack(
    workload: Workload,
    forwarders: Sequence[Forwarder],
    *,
    broker: BrokerHandle,
    postgres_url: str,
    folder: Path,
    run_period_s: float,
    settle_s: float,
    log: Any = None,
) -> dict[str, list[dict[str, Any]]]:
    """Publish the workload run by run (a run's records at once, the next run once the
    processors stored it and `run_period_s` passed) through two `perfwatch serve`s
    sharing the PostgreSQL schema; the forwarders post to a local receiver, which is
    read once no post came for `settle_s` after the last run. The posts, by path."""
    tag = uuid.uuid4().hex[:8]
    topics = {
        name: f"persistent://public/default/alerting-{tag}-{name}"
        for name in ("records", "verdicts", "dlq")
    }
    config = folder / "perfwatch.toml"
    config.write_text("")
    broker_args = ["--pulsar-url", broker.service_url]
    if broker.admin_url:
        broker_args += ["--admin-url", broker.admin_url]
    serve_args = [
        *("--config", str(config), *broker_args, "--store", postgres_url),
        *("--records-topic", topics["records"], "--verdicts-topic", topics["verdicts"]),
        *("--dead-letter-topic", topics["dlq"], "--subscription", f"serve-{tag}"),
    ]
    receiver = Receiver()
    client = make_client(broker)
    with ExitStack() as stack:
        stack.callback(receiver.close)
        stack.callback(client.close)
        servers = [
            ServeProcess(
                [*serve_args, "--name", f"serve-{tag}-{name}"],
                folder / f"serve-{name}.log",
            ).start()
            for name in ("a", "b")
        ]
        for server in servers:
            stack.callback(_stop, server.process)
            wait_until(lambda s=server: "processor started" in s.log(), TIMEOUT, "serve")
        for forwarder in forwarders:
            errors = stack.enter_context(
                (folder / f"forward{forwarder.path.replace('/', '-')}.log").open("wb")
            )
            process = subprocess.Popen(
                [
                    *(sys.executable, "-c", "from perfwatch.cli.main import main; main()"),
                    *("forward", "--config", str(config), *broker_args),
                    *("--verdicts-topic", topics["verdicts"], "--from-earliest"),
                    *("--subscription", f"forward-{tag}{forwarder.path.replace('/', '-')}"),
                    *("--webhook", receiver.url + forwarder.path, "--payload", "raw"),
                    *forwarder.options,
                ],
                stdout=subprocess.DEVNULL,
                stderr=errors,
            )
            stack.callback(_stop, process)
        store = stack.enter_context(open_store(postgres_url))
        points = 0
        for run in range(workload.runs):
            started = time.monotonic()
            messages = workload.messages_of_run(run)
            publish(client, topics["records"], messages)
            points += len(workload.values)
            wait_until(lambda p=points: stored_points(store) >= p, TIMEOUT, f"run {run} stored")
            if log is not None and run % 10 == 9:
                log(f"  run {run + 1}/{workload.runs} stored")
            time.sleep(max(0.0, run_period_s - (time.monotonic() - started)))
        wait_until(lambda: not store.unpublished(), TIMEOUT, "an empty outbox")
        wait_until(
            lambda: time.monotonic() - receiver.last_post > settle_s, TIMEOUT, "quiet webhook"
        )
        return {path: list(posts) for path, posts in receiver.posts.items()}


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is not None and process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)
