"""`perfwatch profile -- PYTEST_ARGS`: per-input profiles of a pytest suite."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from perfwatch.formats.errors import SourceError
from perfwatch.formats.input_profile import InputProfileFile, read_input_profile
from perfwatch.records import RECORD_SCHEMA


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("perfwatch-inputs.json"),
    show_default=True,
    help="Input-profile file to write.",
)
@click.option(
    "--repeats", type=click.IntRange(min=1), default=5, show_default=True, help="Timing passes."
)
@click.option(
    "--warmup", type=click.IntRange(min=0), default=1, show_default=True, help="Warm-up passes."
)
@click.option(
    "--only",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Profile only the inputs (test node ids) listed in this file, e.g. a sample "
    "written by `perfwatch recommend --sample-out`.",
)
@click.option(
    "--kind",
    type=click.Choice(["full_suite", "update_sample"]),
    help="Kind of profile [default: update_sample with --only, else full_suite].",
)
@click.option("--publish", is_flag=True, help="Also publish the profiles as one record.")
@click.option(
    "--test",
    "test_id",
    default="input-profiles",
    show_default=True,
    help="Test id of the published record.",
)
@click.option("--pulsar-url", help="Pulsar service URL for --publish; default: configured.")
@click.option("--topic", help="Records topic for --publish; default: configured.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="perfwatch.toml to read for --publish.",
)
def profile(
    pytest_args: tuple[str, ...],
    output: Path,
    repeats: int,
    warmup: int,
    only: Path | None,
    kind: str | None,
    publish: bool,
    test_id: str,
    pulsar_url: str | None,
    topic: str | None,
    config_path: str | None,
) -> None:
    """Run pytest with PYTEST_ARGS and profile every test and parametrized input.

    Each input runs in separate passes (warm-up, timing, memory, counting), so
    the counting does not distort the times. The input-profile file feeds
    `perfwatch recommend`; with --publish the profiles also go to the records
    topic as one record with an `inputs` block. Exits with pytest's status
    when a test failed (the profiles of the passing tests are still written).
    """
    command = [
        sys.executable,
        "-m",
        "pytest",
        *pytest_args,
        f"--perfwatch-profile={output}",
        f"--perfwatch-repeats={repeats}",
        f"--perfwatch-warmup={warmup}",
    ]
    if only is not None:
        command.append(f"--perfwatch-only={only}")
    if kind is not None:
        command.append(f"--perfwatch-kind={kind}")
    started = datetime.now(UTC)
    status = subprocess.run(command, check=False).returncode
    written = output.exists() and datetime.fromtimestamp(output.stat().st_mtime, UTC) >= started
    if not written:
        raise click.ClickException(
            f"pytest (exit status {status}) profiled no test; {output} was not written"
        )
    try:
        profile_file = read_input_profile(output)
    except SourceError as error:
        raise click.ClickException(str(error)) from None
    click.echo(
        f"{len(profile_file.profiles)} input profiles ({profile_file.kind}) written to {output}",
        err=True,
    )
    if publish:
        _publish(profile_file, test_id, pulsar_url, topic, config_path)
    if status != 0:
        raise SystemExit(status)


def profile_record(profile_file: InputProfileFile, test_id: str) -> dict[str, Any]:
    """A partial record (identity to be completed) carrying the profiles and suite totals."""
    profiles = profile_file.to_json()["profiles"]
    return {
        "schema": RECORD_SCHEMA,
        "test": test_id,
        "timestamp": profile_file.created,
        "metrics": {
            "inputs_cpu_time_s": {
                "value": sum(p["cpu_time_s"] for p in profiles),
                "unit": "s",
                "direction": "lower_is_better",
            },
            "inputs_wall_time_s": {
                "value": sum(p["wall_time_s"] for p in profiles),
                "unit": "s",
                "direction": "lower_is_better",
            },
        },
        "inputs": {"kind": profile_file.kind, "profiles": profiles},
    }


def _publish(
    profile_file: InputProfileFile,
    test_id: str,
    pulsar_url: str | None,
    topic: str | None,
    config_path: str | None,
) -> None:
    from perfwatch.cli.publish import _send
    from perfwatch.config import ConfigError, load_config
    from perfwatch.publishers.identity import Identity, complete_record, environment_identity
    from perfwatch.publishers.publisher import record_label
    from perfwatch.records import validate_record

    try:
        config = load_config(
            config_path, overrides={"broker.url": pulsar_url, "topics.records": topic}
        )
    except ConfigError as error:
        raise click.UsageError(str(error)) from None
    record = complete_record(
        profile_record(profile_file, test_id),
        explicit=Identity(),
        defaults=environment_identity(os.environ, Path.cwd()),
    )
    problems = validate_record(record)
    if problems:
        raise click.ClickException(f"the record to publish is invalid: {problems[0]}")
    _send([(record, record_label(record, "input profiles"))], config)
