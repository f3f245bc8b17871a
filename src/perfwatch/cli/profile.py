"""`perfwatch profile -- PYTEST_ARGS`: per-input profiles of a pytest suite."""

from __future__ import annotations

import difflib
import importlib
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from perfwatch.adapters.identity import Identity
from perfwatch.cli.errors import EXIT_FOUND, InputError, check_writable
from perfwatch.cli.flags import (
    FiniteFloatRange,
    attributes_option,
    branch_option,
    commit_option,
    identity_option,
)
from perfwatch.cli.options import broker_options, load_command_config, records_topic_option
from perfwatch.cli.publish import parse_attributes
from perfwatch.profiler.alternate import (
    PYTEST_USAGE_ERROR,
    Alternation,
    AlternationError,
    Version,
    profile_alternately,
    pytest_command,
    pytest_exit,
)
from perfwatch.readers.errors import SourceError
from perfwatch.readers.input_profile import (
    INPUT_PROFILES_TEST,
    InputProfileFile,
    profile_record,
    read_input_profile,
    write_input_profile,
)

if TYPE_CHECKING:
    from perfwatch.config import Config


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
    "--min-pass-ms",
    type=FiniteFloatRange(min=0, max=60_000),
    default=0.0,
    show_default=True,
    help="Call a short test several times per timing pass (1, 2, 5, 10, ...), so that a "
    "pass lasts at least this long in CPU time; the times are those of one call. A test of a "
    "tenth of a millisecond timed alone carries every interruption of the process in full.",
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
@click.option(
    "--old-dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="Checkout of the old code (e.g. a git worktree of the base commit): profile the "
    "--only inputs on it and on the current directory alternately, round by round, so both "
    "see the same machine load. Writes the old code's profiles to --reference-out.",
)
@click.option(
    "--old-python",
    type=click.Path(dir_okay=False, exists=True),
    help="With --old-dir: the interpreter of the old code's environment [default: this one].",
)
@click.option(
    "--old-env",
    multiple=True,
    metavar="NAME=VALUE",
    help="With --old-dir: an environment variable for the old code's runs (repeatable).",
)
@click.option(
    "--new-env",
    multiple=True,
    metavar="NAME=VALUE",
    help="With --old-dir: an environment variable for the new code's runs (repeatable).",
)
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="With --old-dir: alternating rounds; each runs --repeats timing passes per version.",
)
@click.option(
    "--max-rounds",
    type=click.IntRange(min=1),
    help="With --old-dir: after --rounds, one more round at a time, up to this many in all, "
    "for the inputs whose paired interval is still wider than --precision [default: --rounds].",
)
@click.option(
    "--precision",
    type=FiniteFloatRange(min=0, min_open=True),
    default=5.0,
    show_default=True,
    metavar="PERCENT",
    help="With --max-rounds: the widest paired interval of an input (high - low of "
    "new / old - 1, by rounds, as recommend judges it) that needs no further round.",
)
@click.option(
    "--reference-out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --old-dir: where the old code's profiles go [default: OUTPUT with .old "
    "before its suffix].",
)
@click.option("--publish", is_flag=True, help="Also publish the profiles as one record.")
@click.option(
    "--reference",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="With --publish, for an update sample: profiles of the same inputs on the old code, "
    "measured next to this run; sent along so the processor cancels the machine's drift.",
)
@commit_option
@branch_option
@attributes_option
@identity_option(
    "--test",
    "test_id",
    default=INPUT_PROFILES_TEST,
    show_default=True,
    help="Test id of the published record.",
)
@broker_options
@records_topic_option
def profile(
    pytest_args: tuple[str, ...],
    output: Path,
    repeats: int,
    warmup: int,
    min_pass_ms: float,
    only: Path | None,
    kind: str | None,
    old_dir: Path | None,
    old_python: str | None,
    old_env: tuple[str, ...],
    new_env: tuple[str, ...],
    rounds: int,
    max_rounds: int | None,
    precision: float,
    reference_out: Path | None,
    publish: bool,
    reference: Path | None,
    commit: str | None,
    branch: str | None,
    attrs: tuple[str, ...],
    test_id: str,
    config_path: str | None,
) -> None:
    """Run pytest with PYTEST_ARGS and profile every test and parametrized input.

    Each input runs in separate passes (warm-up, timing, memory, counting), so
    the counting does not distort the times. The input-profile file feeds
    `perfwatch recommend`; with --publish the profiles also go to the records
    topic as one record with an `inputs` block (the broker options, --commit, --branch
    and --attr apply to it);
    an update sample is judged against the full suite of the same test and branch.
    With --old-dir the sampled inputs (--only) run on the old code and on the
    current directory's code alternately, --rounds times, and both files are
    written: feed them to `perfwatch recommend --update OUTPUT --reference
    REFERENCE_OUT`. Exit status 1 when a test failed (the profiles of the
    passing tests are still written and published).
    """
    sent_with_the_record = {
        "--reference": reference is not None,
        "--commit": commit is not None,
        "--branch": branch is not None,
        "--attr": bool(attrs),
    }
    given = [name for name, present in sent_with_the_record.items() if present]
    if given and not publish:
        subject = "it needs" if len(given) == 1 else "they need"
        verb = "is" if len(given) == 1 else "are"
        raise click.UsageError(
            f"{' and '.join(given)} {verb} sent with the record: {subject} --publish"
        )
    explicit = Identity(commit=commit, branch=branch, attributes=parse_attributes(attrs))
    check_writable(output, "--output")
    if reference_out is not None:
        check_writable(reference_out, "--reference-out")
    _check_pytest()
    config = None
    if publish:  # bad settings are found before the suite runs, not after
        config = load_command_config(config_path)
    if old_dir is not None:
        if only is None:
            raise click.UsageError("--old-dir profiles a sample: give it with --only")
        if reference is not None:
            raise click.UsageError("--old-dir measures the reference itself: drop --reference")
        if max_rounds is not None and max_rounds < rounds:
            raise click.UsageError(f"--max-rounds ({max_rounds}) is below --rounds ({rounds})")
        versions = [
            Version(
                "old",
                old_dir.resolve(),
                old_python or sys.executable,
                parse_attributes(old_env, "--old-env", blank_values=True),
            ),
            Version(
                "new",
                Path.cwd(),
                sys.executable,
                parse_attributes(new_env, "--new-env", blank_values=True),
            ),
        ]
        reference_path = reference_out or output.with_name(f"{output.stem}.old{output.suffix}")
        alternation = Alternation(
            rounds=rounds,
            repeats=repeats,
            warmup=warmup,
            min_pass_s=min_pass_ms / 1000,
            max_rounds=max_rounds,
            precision=None if max_rounds is None else precision / 100,
        )
        status = _alternate(versions, pytest_args, only, alternation, output, reference_path)
        if config is not None:
            record = profile_record(_read_profiles(output), test_id, _read_profiles(reference_path))
            _publish(record, explicit, config)
        if status != 0:
            raise SystemExit(EXIT_FOUND)
        return
    reference_file = None if reference is None else _read_profiles(reference)
    arguments = [
        *pytest_args,
        f"--perfwatch-profile={output}",
        f"--perfwatch-repeats={repeats}",
        f"--perfwatch-warmup={warmup}",
        f"--perfwatch-min-pass-ms={min_pass_ms}",
    ]
    if only is not None:
        arguments.append(f"--perfwatch-only={only}")
    if kind is not None:
        arguments.append(f"--perfwatch-kind={kind}")
    started = datetime.now(UTC)
    status = subprocess.run(pytest_command(sys.executable, arguments), check=False).returncode
    written = output.exists() and datetime.fromtimestamp(output.stat().st_mtime, UTC) >= started
    if not written:
        raise InputError(
            f"{pytest_exit(status)} and profiled no test; {output} was not written"
            + _mistyped_option_hint(status, pytest_args)
        )
    profile_file = _read_profiles(output)
    if reference_file is not None and profile_file.kind != "update_sample":
        raise click.UsageError(f"--reference needs an update sample; {output} is a full suite")
    if config is not None:
        record = profile_record(profile_file, test_id, reference_file)
        _publish(record, explicit, config)
    if status != 0:
        raise SystemExit(EXIT_FOUND)


def _check_pytest() -> None:
    """InputError unless pytest, which runs the tests with the profiler as its plugin, can be
    imported by this interpreter (the new code's; the old code's may be another)."""
    try:
        importlib.import_module("pytest")
    except ImportError:
        raise InputError(
            f"the tests run under pytest, which this environment ({sys.executable}) does not "
            "have: pip install pytest"
        ) from None


def _alternate(
    versions: list[Version],
    pytest_args: tuple[str, ...],
    only: Path,
    alternation: Alternation,
    output: Path,
    reference_path: Path,
) -> int:
    """Profile both versions alternately, write both files, report the cost; the exit
    status of the worst pytest run (0 or 1)."""
    try:
        run = profile_alternately(versions, pytest_args, only=only, alternation=alternation)
    except AlternationError as error:
        raise InputError(str(error)) from None
    if not run.profiles["new"].profiles:
        raise InputError("no input was profiled in every round of both versions")
    write_input_profile(output, run.profiles["new"])
    write_input_profile(reference_path, run.profiles["old"])
    profiled = run.profiles["new"].profiles
    taken = sorted({p.timing_rounds or alternation.rounds for p in profiled})
    spread = f"{taken[0]}" if len(taken) == 1 else f"{taken[0]}-{taken[-1]}"
    click.echo(
        f"{len(profiled)} inputs profiled on the old ({versions[0].directory}) and new code in "
        f"{spread} alternating rounds of {alternation.repeats} timing passes each: new code to "
        f"{output}, old code to {reference_path}",
        err=True,
    )
    click.echo(
        f"cost: {run.elapsed_s:.1f} s in all (pytest start-up included); timing passes "
        f"{run.test_time_s['old']:.2f} s old, {run.test_time_s['new']:.2f} s new",
        err=True,
    )
    if run.dropped:
        click.echo(
            f"{len(run.dropped)} inputs were not profiled in every round and were left out, "
            f"first: {run.dropped[0]}",
            err=True,
        )
    return 1 if any(run.failed_rounds.values()) else 0


def _read_profiles(path: Path) -> InputProfileFile:
    try:
        return read_input_profile(path)
    except SourceError as error:
        raise InputError(str(error)) from None


def _publish(partial: dict[str, Any], explicit: Identity, config: Config) -> None:
    from perfwatch.adapters.identity import complete_record, environment_identity
    from perfwatch.adapters.publisher import record_label
    from perfwatch.cli.publish import send_records
    from perfwatch.contract.validation import validate_record

    record = complete_record(
        partial,
        explicit=explicit,
        defaults=environment_identity(os.environ, Path.cwd()),
    )
    problems = validate_record(record)
    if problems:
        raise InputError(f"the record to publish is invalid: {problems[0]}")
    send_records([(record, record_label(record, "input profiles"))], config)


def _mistyped_option_hint(status: int, pytest_args: Sequence[str]) -> str:
    """Options profile does not know go to pytest, which refuses a mistyped one of
    profile's with its own usage error: say which option was probably meant (never for
    an option pytest's help lists, which pytest refused for another reason)."""
    if status != PYTEST_USAGE_ERROR:
        return ""
    own = [name for parameter in profile.params for name in parameter.opts if name.startswith("--")]
    pytest_help: str | None = None
    for argument in pytest_args:
        name = argument.split("=", 1)[0]
        close = difflib.get_close_matches(name, own, n=1) if name.startswith("--") else []
        if not close:
            continue
        if pytest_help is None:
            pytest_help = subprocess.run(
                pytest_command(sys.executable, ["--help"]),
                capture_output=True,
                text=True,
                check=False,
            ).stdout
        if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", pytest_help):
            return f"; perfwatch profile has no option {name}: did you mean {close[0]}?"
    return ""
