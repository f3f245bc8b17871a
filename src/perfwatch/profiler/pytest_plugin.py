"""pytest plugin: ``pytest --perfwatch-profile=FILE`` profiles every test and every input.

Each test call (each parametrized case is its own input) runs once per pass:
warm-up, timing (``--perfwatch-repeats``), memory and counting, so the test
body executes ``warmup + repeats + 2`` times (a short test more often with
``--perfwatch-min-pass-ms``: each timing pass then calls it until the pass
lasts that long in CPU time, and the times are those of one call); a failure in any
pass fails the test and leaves it out of the file. The input id is the test's node id. The
input size is the size of the parametrized arguments (see
:func:`perfwatch.profiler.core.input_size`), or what the test reports with
``record_property("input_size", n)``. Coroutine tests are run once, unprofiled.

Without ``--perfwatch-profile`` the plugin only adds its options.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

INPUT_SIZE_PROPERTY = "input_size"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perfwatch", "per-input performance profiles (perfwatch)")
    group.addoption(
        "--perfwatch-profile",
        metavar="FILE",
        default=None,
        help="profile every test and parametrized input; write the input profiles to FILE",
    )
    group.addoption(
        "--perfwatch-repeats",
        metavar="N",
        type=int,
        default=5,
        help="timing passes per input; the minimum is kept (default 5)",
    )
    group.addoption(
        "--perfwatch-warmup",
        metavar="N",
        type=int,
        default=1,
        help="unmeasured passes before timing (default 1)",
    )
    group.addoption(
        "--perfwatch-min-pass-ms",
        metavar="MS",
        type=float,
        default=0.0,
        help="call a short test several times per timing pass, so that a pass lasts at "
        "least MS milliseconds of CPU time; its times are those of one call (default 0: one call)",
    )
    group.addoption(
        "--perfwatch-only",
        metavar="FILE",
        default=None,
        help="profile only the tests whose node ids FILE lists, one per line "
        "(a sample from `perfwatch recommend --sample-out`)",
    )
    group.addoption(
        "--perfwatch-timing-only",
        action="store_true",
        default=False,
        help="timing passes only: memory and counts are written as 0 (for the later rounds "
        "of `perfwatch profile --old-dir`, whose counts come from the first)",
    )
    group.addoption(
        "--perfwatch-lockstep",
        metavar="READY_FD,GO_FD",
        default=None,
        help="take turns with another process (used by `perfwatch profile --old-dir`): "
        "before every pass write a line to file descriptor READY_FD and wait for a line on "
        "GO_FD",
    )
    group.addoption(
        "--perfwatch-kind",
        choices=("full_suite", "update_sample"),
        default=None,
        help="kind of profile written (default: update_sample with --perfwatch-only, "
        "else full_suite)",
    )


def pytest_configure(config: pytest.Config) -> None:
    output = config.getoption("perfwatch_profile")
    if output is None:
        return
    output_path = config.invocation_params.dir / output
    config.pluginmanager.register(ProfilingSession(config, output_path), "perfwatch-profiling")


class ProfilingSession:
    """Registered only when ``--perfwatch-profile`` is given."""

    def __init__(self, config: pytest.Config, output: Path) -> None:
        # Imported here so that pytest runs without the option never load them.
        from perfwatch.profiler.core import measurement_notes, profile_versions

        self._profile_versions = profile_versions
        self.output = output
        self.repeats: int = config.getoption("perfwatch_repeats")
        self.warmup: int = config.getoption("perfwatch_warmup")
        if self.repeats < 1:
            raise pytest.UsageError(f"--perfwatch-repeats must be at least 1, got {self.repeats}")
        if self.warmup < 0:
            raise pytest.UsageError(f"--perfwatch-warmup must be 0 or more, got {self.warmup}")
        min_pass_ms: float = config.getoption("perfwatch_min_pass_ms")
        if not 0 <= min_pass_ms <= 60_000:
            raise pytest.UsageError(
                f"--perfwatch-min-pass-ms must be from 0 to 60000, got {min_pass_ms}"
            )
        self.min_pass_s = min_pass_ms / 1000
        only = config.getoption("perfwatch_only")
        self.only: list[str] | None = (
            None if only is None else _read_ids(config.invocation_params.dir / only)
        )
        self.timing_only: bool = config.getoption("perfwatch_timing_only")
        self.kind: str = config.getoption("perfwatch_kind") or (
            "full_suite" if self.only is None else "update_sample"
        )
        lockstep = config.getoption("perfwatch_lockstep")
        self.turns: Turns | None = None if lockstep is None else Turns.from_option(lockstep)
        self.measurement = measurement_notes(
            repeats=self.repeats, warmup=self.warmup, min_pass_s=self.min_pass_s
        )
        self.profiles: list[Any] = []
        self.unprofiled: list[str] = []
        self.missing: list[str] = []

    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        if self.only is None:
            return
        wanted = set(self.only)
        kept = [item for item in items if item.nodeid in wanted]
        deselected = [item for item in items if item.nodeid not in wanted]
        collected = {item.nodeid for item in items}
        self.missing = [node_id for node_id in self.only if node_id not in collected]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
        items[:] = kept

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> bool | None:
        function = pyfuncitem.obj
        if inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function):
            self.unprofiled.append(pyfuncitem.nodeid)
            return None
        parameters = inspect.signature(function).parameters
        arguments = {
            name: pyfuncitem.funcargs[name] for name in parameters if name in pyfuncitem.funcargs
        }
        if self.turns is not None and self.min_pass_s > 0:
            self.turns.wait()  # the calibration's calls take a turn of their own
        profile = self._profile_versions(
            {"test": lambda: function(**arguments)},
            input_id=pyfuncitem.nodeid,
            size=0.0,
            repeats=self.repeats,
            warmup=self.warmup,
            timing_only=self.timing_only,
            min_pass_s=self.min_pass_s,
            before_round=None if self.turns is None else self.turns.wait,
        )["test"]
        self.profiles.append(_with_size(profile, pyfuncitem))
        return True

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from perfwatch.readers.input_profile import InputProfileFile, write_input_profile

        if not self.profiles:
            return
        write_input_profile(
            self.output,
            InputProfileFile.create(
                kind=self.kind,
                profiles=self.profiles,
                measurement=self.measurement,
                command=["pytest", *_without_own_options(session.config.invocation_params.args)],
            ),
        )

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.profiles:
            terminalreporter.write_line(
                f"perfwatch: {len(self.profiles)} input profiles ({self.kind}) written to "
                f"{self.output}"
            )
        else:
            terminalreporter.write_line("perfwatch: no test was profiled; no file written")
        if self.unprofiled:
            terminalreporter.write_line(
                f"perfwatch: {len(self.unprofiled)} coroutine tests were not profiled"
            )
        if self.missing:
            terminalreporter.write_line(
                f"perfwatch: {len(self.missing)} ids listed in the sample file (`perfwatch "
                f"profile --only`, pytest --perfwatch-only) were not collected, first: "
                f"{self.missing[0]}"
            )


class Turns:
    """Runs each pass only when the driving process says so (``--perfwatch-lockstep``)."""

    def __init__(self, ready_fd: int, go_fd: int) -> None:
        self._ready = os.fdopen(ready_fd, "w", encoding="utf-8")
        self._go = os.fdopen(go_fd, "r", encoding="utf-8")

    @classmethod
    def from_option(cls, value: str) -> Turns:
        try:
            ready_fd, go_fd = (int(part) for part in value.split(","))
            return cls(ready_fd, go_fd)
        except (ValueError, OSError) as error:
            raise pytest.UsageError(
                f"--perfwatch-lockstep must be two open file descriptors READY_FD,GO_FD, "
                f"got {value!r} ({error})"
            ) from None

    def wait(self) -> None:
        try:
            self._ready.write("ready\n")
            self._ready.flush()
            told = self._go.readline()
        except BrokenPipeError:
            told = ""
        if not told:
            raise RuntimeError("--perfwatch-lockstep: the driving process is gone")


def _without_own_options(args: Sequence[str]) -> list[str]:
    """The pytest arguments minus this plugin's options, to rerun the same suite."""
    kept: list[str] = []
    skip_value = False
    for arg in args:
        if skip_value:
            skip_value = False
        elif arg == "--perfwatch-timing-only":
            continue
        elif arg.startswith("--perfwatch-"):
            skip_value = "=" not in arg
        else:
            kept.append(arg)
    return kept


def _read_ids(path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise pytest.UsageError(f"--perfwatch-only {path}: {error.strerror}") from error
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def _with_size(profile: Any, item: pytest.Function) -> Any:
    from dataclasses import replace

    from perfwatch.profiler.core import input_size

    # whatever the test recorded (a number, or text of one): float() rejects anything else
    reported: list[Any] = [
        value for name, value in item.user_properties if name == INPUT_SIZE_PROPERTY
    ]
    if reported:
        return replace(profile, size=float(reported[-1]))
    callspec = getattr(item, "callspec", None)
    params = callspec.params.values() if callspec is not None else ()
    return replace(profile, size=sum(input_size(value) for value in params))
