"""`perfwatch publish`: send result files to the records topic as perfwatch records."""

from __future__ import annotations

import os
import sys
import tempfile
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import orjson

from perfwatch.adapters.identity import (
    Identity,
    complete_record,
    environment_identity,
    record_label,
)
from perfwatch.cli.errors import InputError, ServiceUnavailable, report
from perfwatch.cli.flags import (
    RecordTime,
    attributes_option,
    branch_option,
    commit_option,
    identity_option,
)
from perfwatch.cli.options import broker_options, load_command_config, records_topic_option
from perfwatch.config import Config
from perfwatch.contract.codec import dumps
from perfwatch.contract.timestamps import format_rfc3339
from perfwatch.contract.validation import validate_record
from perfwatch.readers.detect import (
    COUNTERS_CSV,
    FORMATS,
    OTAVA_CSV,
    PERFMON,
    InputFile,
    read_input_file,
)
from perfwatch.readers.errors import SourceError, as_utf8

if TYPE_CHECKING:
    from perfwatch.config import Config


def parse_attributes(
    pairs: tuple[str, ...], option: str = "--attr", *, blank_values: bool = False
) -> dict[str, str]:
    """NAME=VALUE pairs given to ``option`` as a dict; a malformed pair is a usage error, and
    so is a blank VALUE unless `blank_values` (an environment variable may be empty; a
    record's attribute left blank, by a CI variable that was not set, would replace the
    record's own value, and of an identifying attribute start a history of its own)."""
    attributes = {}
    for pair in pairs:
        name, separator, value = pair.partition("=")
        if not separator or not name:
            raise click.BadParameter(f"{pair!r} is not NAME=VALUE", param_hint=f"'{option}'")
        if not blank_values and not value.strip():
            raise click.BadParameter(
                f"{pair!r}: the value of {name} is empty", param_hint=f"'{option}'"
            )
        attributes[name] = value
    return attributes


def prepare_file(
    input_file: InputFile,
    *,
    explicit: Identity,
    defaults: Identity,
    fallback_timestamp: str,
) -> tuple[list[tuple[dict[str, Any], str]], list[str]]:
    """Complete and validate every record of a file: (records with labels, problems)."""
    if input_file.names_benchmarks and explicit.test is not None:
        test_prefix, explicit = explicit.test, replace(explicit, test=None)
    else:
        test_prefix = None
    prepared: list[tuple[dict[str, Any], str]] = []
    problems: list[str] = []
    for located in input_file.records:
        record = complete_record(
            located.record,
            explicit=explicit,
            defaults=defaults,
            test_prefix=test_prefix,
            fallback_timestamp=fallback_timestamp,
        )
        where = f"{input_file.path}: {located.position}"
        # Schema validation is the costly part; a record the reader validated and the
        # identity step left as it was needs no second check.
        if not (input_file.validated and record == located.record):
            problems.extend(f"{where}: {problem}" for problem in validate_record(record))
        prepared.append((record, record_label(record, where)))
    return prepared, problems


def _modification_time(path: str | Path) -> str:
    return format_rfc3339(datetime.fromtimestamp(Path(path).stat().st_mtime, UTC))


# The FILE that names standard input, as for most command-line tools.
STANDARD_INPUT = "-"
_COUNTER_AND_CSV_FORMATS = (OTAVA_CSV, PERFMON, COUNTERS_CSV)


def _read_standard_input(file_format: str | None) -> tuple[InputFile, str]:
    """The records piped in, named ``-``, and the time they were read (for records with
    none). The readers read files: the data goes through one named ``stdin`` with the
    suffix its format is known by (a CSV test is then named ``stdin`` unless --test says)."""
    # as a file is read: a byte-order mark (PowerShell writes one) hides neither format
    data = as_utf8(sys.stdin.buffer.read(), STANDARD_INPUT)
    if file_format in _COUNTER_AND_CSV_FORMATS:
        suffix = ".csv"
    else:  # one JSON document (any report or records), else JSON Lines of records
        try:
            orjson.loads(data)
            suffix = ".json"
        except orjson.JSONDecodeError:
            suffix = ".jsonl"
    with tempfile.TemporaryDirectory() as directory:
        copy = Path(directory) / f"stdin{suffix}"
        copy.write_bytes(data)
        try:
            input_file = read_input_file(copy, file_format)
        except SourceError as error:
            message = error.message
            if file_format is None and data.lstrip()[:1] not in (b"{", b"["):
                message += (
                    "; standard input is read as JSON or JSON Lines unless --format "
                    "names another format"
                )
            raise SourceError(
                STANDARD_INPUT, message, line=error.line, column=error.column
            ) from None
        read_at = _modification_time(copy)
    return replace(input_file, path=STANDARD_INPUT), read_at


@click.command("publish")
# not click.Path: a directory among the files is reported as a bad file, and the others sent
@click.argument("files", nargs=-1, required=True)
@broker_options
@records_topic_option
@click.option(
    "--format",
    "file_format",
    type=click.Choice(FORMATS),
    show_default="detected per file",
    help="Format of every FILE.",
)
@identity_option(
    "--test", help="Test id; for benchmark-tool reports, a prefix: TEST/benchmark-name."
)
@identity_option(
    "--run-id", help="Run id of every record [default: the record's own, else a content hash]."
)
@commit_option
@branch_option
@click.option(
    "--timestamp",
    type=RecordTime(),
    help="Time: RFC 3339 with its offset, or a date (midnight UTC) [default: the record's, "
    "else the file's modification time].",
)
@attributes_option
@click.option(
    "--auto-identity/--no-auto-identity",
    default=True,
    show_default=True,
    help="Take a missing commit and branch from CI variables and git.",
)
@click.option("--dry-run", is_flag=True, help="Print the records as JSON Lines; send nothing.")
def publish(
    files: tuple[str, ...],
    config_path: str | None,
    file_format: str | None,
    test: str | None,
    run_id: str | None,
    commit: str | None,
    branch: str | None,
    timestamp: str | None,
    attrs: tuple[str, ...],
    auto_identity: bool,
    dry_run: bool,
) -> None:
    """Publish FILE... (perfwatch JSON/JSON Lines, Otava CSV, pytest-benchmark,
    Google Benchmark, hyperfine or JMH JSON, counter samples: perfmon/typeperf CSV, or
    plain counter CSV with --format counters-csv, and the input-profile files of
    perfwatch profile and its pytest plugin) to the records topic, keyed by test id.
    FILE - reads standard input: a JSON document or JSON Lines of records, a CSV with
    --format.

    Every record is validated first; a file with an invalid record is reported
    (file, position, JSON path) and nothing from it is sent. Exits 0 only when
    every sent record was acknowledged by the broker (2: invalid input, 3: broker
    unreachable or a record not acknowledged).
    """
    config = load_command_config(config_path)
    explicit = Identity(
        test=test,
        run_id=run_id,
        commit=commit,
        branch=branch,
        timestamp=timestamp,
        attributes=parse_attributes(attrs),
    )
    defaults = environment_identity(os.environ, Path.cwd()) if auto_identity else Identity()

    if files.count(STANDARD_INPUT) > 1:
        raise click.BadParameter(
            f"{STANDARD_INPUT!r} (standard input) can be read once only", param_hint="'FILES'"
        )
    ready: list[tuple[dict[str, Any], str]] = []
    rejected_files = 0
    for path in files:
        try:
            if path == STANDARD_INPUT:
                input_file, fallback_timestamp = _read_standard_input(file_format)
            else:
                input_file = read_input_file(path, file_format)
                fallback_timestamp = _modification_time(path)
            prepared, problems = prepare_file(
                input_file,
                explicit=explicit,
                defaults=defaults,
                fallback_timestamp=fallback_timestamp,
            )
        except SourceError as error:
            prepared, problems = [], [str(error)]
        if problems:
            # One line a problem; the closing count says that nothing of these files is sent.
            for problem in problems:
                report(problem)
            rejected_files += 1
            continue
        if not prepared:
            # not an error (a suite may have run no benchmark), but said as the others are
            report(f"{path}: holds no records", level="warning")
        ready.extend(prepared)

    if run_id is not None:
        repeated = [
            name for name, count in Counter(r["test"] for r, _ in ready).items() if count > 1
        ]
        if repeated:
            raise click.UsageError(
                f"--run-id {run_id!r} would be given to several runs of test {repeated[0]!r}; "
                "a run id must name one run of a test"
            )

    if dry_run:
        stdout = sys.stdout.buffer
        for record, _ in ready:
            stdout.write(dumps(record) + b"\n")
        stdout.flush()
    elif ready:
        send_records(ready, config)
    if rejected_files:
        raise InputError(
            f"{rejected_files} of {len(files)} file(s) unreadable or invalid; "
            "nothing from them was sent"
        )


def send_records(ready: list[tuple[dict[str, Any], str]], config: Config) -> None:
    """Publish validated records and wait for every acknowledgement; a broker that is not
    reached or does not acknowledge is ServiceUnavailable (`publish`, `profile --publish`)."""
    from perfwatch.adapters.publisher import Publisher, PublishError
    from perfwatch.cli.broker import connected_client, embedded_folder

    topic = config.topics.records
    with connected_client(config, topic=topic) as client:
        publisher = Publisher(topic=topic, client=client)
        try:
            with publisher:
                for record, label in ready:
                    publisher.send(dumps(record), key=record["test"], label=label)
        except PublishError as error:
            raise ServiceUnavailable(f"publishing to {topic}: {error}") from None
    click.echo(
        f"published {publisher.acknowledged} record(s) to {publisher.topic}; all acknowledged",
        err=True,
    )
    if config.broker.url in (None, "embedded") and _in_ci(os.environ):
        # On a CI runner the embedded broker ends with the job: most likely a broker URL
        # (a secret, say) that is missing, not records meant for this machine.
        report(
            "no broker URL is set (--pulsar-url, PERFWATCH_BROKER_URL, [broker] url): the "
            "records went to the embedded broker in "
            f"{embedded_folder(config)} on this CI "
            "machine, which only a perfwatch serve on this machine reads",
            level="warning",
        )


# Set in every job by CI systems that do not set CI: Jenkins, Azure Pipelines, TeamCity,
# AWS CodeBuild.
_CI_MARKERS = ("JENKINS_URL", "TF_BUILD", "TEAMCITY_VERSION", "CODEBUILD_BUILD_ID")


def _in_ci(env: Mapping[str, str]) -> bool:
    """Whether this runs in a CI job: the CI variable most CI systems set, or the marker of
    one that sets none."""
    if env.get("CI", "").strip().lower() in ("true", "1", "yes"):
        return True
    return any(env.get(name, "").strip() for name in _CI_MARKERS)
