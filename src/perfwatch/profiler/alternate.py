"""Profile sampled inputs on two versions of the code, in rounds, pass by pass.

Old and new code cannot share one Python process (the same modules, two
versions), and profiled one after the other they see different machine load:
a busier minute then passes for a slowdown. Here each round starts pytest with
the profiling plugin once per version and runs the two in lockstep: each
plugin waits for its turn before every pass, and the versions take turns one
pass at a time, the first version to go swapped every round. A change of load
reaches both alike and every timing pass of one version has a partner of the
other taken moments apart. Both processes of a round are also held to the
same CPU (where the system lets a process choose, :func:`round_cpus`), a
different one each round: on a virtual machine the CPUs differ in speed, by
half at times, and a process keeps to the CPU it started on, so two processes
left to the scheduler compared CPUs, not versions. The first round also counts
and measures memory; the later ones only time.
With a precision, rounds go on one at a time for the inputs whose interval is
still too wide (:func:`time_in_rounds`, which takes the round's measurement as
a function, so the decision can be checked on constructed rounds).
The passes are merged in round order, which is what pairs them in
:func:`perfwatch.detectors.inputs.paired_change`.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

from perfwatch.profiler.core import needs_more_timing
from perfwatch.readers.errors import SourceError
from perfwatch.readers.input_profile import InputProfileFile, read_input_profile

# What pytest's exit statuses above 1 (some test failed) mean; Ctrl-C reaches perfwatch
# too, which then stops as interrupted, so a 2 seen here is mostly a collection error.
PYTEST_USAGE_ERROR = 4
PYTEST_STATUSES = {
    2: "errors while collecting the tests, or interrupted",
    3: "an internal error",
    PYTEST_USAGE_ERROR: "a usage error in the pytest arguments",
    5: "no test was collected",
}


# How perfwatch starts pytest: as ``python -m pytest`` does, through pytest's ``__main__``
# (its public entry point; the functions behind it are pytest's own business), but Ctrl-C
# while pytest is still importing itself or its plugins (before it handles Ctrl-C itself)
# ends the process with status 130 instead of a traceback among perfwatch's messages.
_PYTEST_MAIN = """\
import runpy
import sys
try:
    runpy.run_module("pytest", run_name="__main__", alter_sys=True)
except KeyboardInterrupt:
    sys.exit(130)
"""


def pytest_command(python: str, arguments: Sequence[str]) -> list[str]:
    """The command running pytest with `arguments` under the interpreter `python`."""
    return [python, "-c", _PYTEST_MAIN, *arguments]


def pytest_exit(status: int) -> str:
    """``pytest exited with status 2 (errors while collecting the tests, ...)``."""
    meaning = PYTEST_STATUSES.get(status)
    return f"pytest exited with status {status}" + (f" ({meaning})" if meaning else "")


@dataclass(frozen=True)
class Version:
    """One version of the code: where pytest runs, with which interpreter and environment."""

    name: str
    directory: Path
    python: str = sys.executable
    environment: Mapping[str, str] = field(default_factory=dict)

    def command_environment(self) -> dict[str, str]:
        """The caller's environment, this version's settings, and its tree first on the path
        (its ``src/`` too, for a src layout)."""
        roots = [self.directory / "src", self.directory]
        paths = [str(root) for root in roots if root.is_dir()]
        inherited = os.environ.get("PYTHONPATH")
        environment = {**os.environ, **self.environment}
        environment["PYTHONPATH"] = os.pathsep.join([*paths, *([inherited] if inherited else [])])
        return environment


@dataclass(frozen=True)
class AlternateRun:
    """Both versions' merged profiles and what they cost."""

    profiles: dict[str, InputProfileFile]
    rounds: int
    elapsed_s: float
    test_time_s: dict[str, float]
    failed_rounds: dict[str, int]
    dropped: list[str]


class AlternationError(Exception):
    """A round profiled nothing: pytest could not run the suite on a version."""


@dataclass(frozen=True)
class Alternation:
    """How the versions alternate: ``rounds`` rounds of ``repeats`` timing passes each after
    ``warmup`` warm-up passes, each pass lasting at least ``min_pass_s`` (over several calls
    of a short test). With a ``precision`` (high - low of the paired interval of new / old - 1,
    as a fraction, at ``confidence``), one more round at a time, up to ``max_rounds`` in all,
    for the inputs whose interval is still wider (:func:`time_in_rounds`)."""

    rounds: int
    repeats: int
    warmup: int
    min_pass_s: float = 0.0
    max_rounds: int | None = None
    precision: float | None = None
    confidence: float = 0.95

    def __post_init__(self) -> None:
        if self.rounds < 1 or self.repeats < 1 or self.warmup < 0:
            raise ValueError("rounds and repeats must be at least 1, warmup 0 or more")
        if self.most_rounds < self.rounds:
            raise ValueError(
                f"max_rounds ({self.most_rounds}) must not be below rounds ({self.rounds})"
            )

    @property
    def most_rounds(self) -> int:
        """The most rounds any input gets."""
        return self.rounds if self.max_rounds is None else self.max_rounds


def profile_alternately(
    versions: Sequence[Version],
    pytest_args: Sequence[str],
    *,
    only: Path,
    alternation: Alternation,
) -> AlternateRun:
    """Profile the inputs listed in ``only`` on every version, round by round as
    ``alternation`` says; an input is kept when every round it was asked for profiled it."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="perfwatch-alternate-") as scratch:
        measure = _PytestRounds(versions, pytest_args, only, Path(scratch), alternation)
        rounds_of, asked = time_in_rounds(measure, alternation)
    merged, dropped = merge_rounds(rounds_of, asked)
    # from the rounds themselves: each round's process chose its own calls per pass
    test_time = {
        name: sum(p.timing_cost_s() for file in files for p in file.profiles if p.input_id in kept)
        for name, files in rounds_of.items()
        for kept in [{p.input_id for p in merged[name].profiles}]
    }
    elapsed = time.perf_counter() - started
    return AlternateRun(merged, len(asked), elapsed, test_time, measure.failed, dropped)


# One round's measurement, given its number and the inputs it is to profile (None: every
# input): per version, the profiles it took.
MeasureRound = Callable[[int, frozenset[str] | None], Mapping[str, InputProfileFile]]


def time_in_rounds(
    measure: MeasureRound, alternation: Alternation
) -> tuple[dict[str, list[InputProfileFile]], list[frozenset[str] | None]]:
    """Sequential timing with the round as the step: ``alternation.rounds`` rounds of every
    input, then, with a precision, one round at a time, up to ``alternation.max_rounds`` in
    all, of the inputs still too wide (:func:`still_too_wide`); it stops early once none is.

    That is :func:`perfwatch.profiler.core.profile_versions`'s sequential timing with the
    round in place of the pass, since here the process is the unit that repeats. Per
    version, its rounds' profiles in round order; per round, the inputs it was asked for
    (None: every input)."""
    rounds_of: dict[str, list[InputProfileFile]] = {}
    asked: list[frozenset[str] | None] = []
    for number in range(alternation.most_rounds):
        wanted = None
        if number >= alternation.rounds:
            wanted = still_too_wide(rounds_of, asked, alternation.precision, alternation.confidence)
            if not wanted:
                break
        for name, profiled in measure(number, wanted).items():
            rounds_of.setdefault(name, []).append(profiled)
        asked.append(wanted)
    return rounds_of, asked


def still_too_wide(
    rounds_of: Mapping[str, Sequence[InputProfileFile]],
    asked: Sequence[frozenset[str] | None],
    precision: float | None,
    confidence: float,
) -> frozenset[str]:
    """The inputs profiled in every round asked of them so far whose paired interval of some
    version against the first, by rounds (at ``confidence``, as the decision judges them),
    is wider than ``precision`` (high - low of new / old - 1); none without a precision."""
    if precision is None:
        return frozenset()
    merged, _ = merge_rounds(rounds_of, asked)
    timings: dict[str, list[list[float]]] = {}
    rounds: dict[str, int | None] = {}
    for file in merged.values():
        for profile in file.profiles:
            timings.setdefault(profile.input_id, []).append(list(profile.cpu_times_s or []))
            rounds[profile.input_id] = profile.timing_rounds
    return frozenset(
        input_id
        for input_id, versions in timings.items()
        if needs_more_timing(versions, precision, confidence, rounds[input_id])
    )


def merge_rounds(
    rounds_of: Mapping[str, Sequence[InputProfileFile]],
    asked: Sequence[frozenset[str] | None],
) -> tuple[dict[str, InputProfileFile], list[str]]:
    """Per version: the first round's profiles with the timing passes of every round appended
    in round order; inputs missing from any round of any version that was asked to profile
    them (``asked[round]``, None: every input) are dropped."""
    per_round = [
        (asked[number], {p.input_id for p in file.profiles})
        for files in rounds_of.values()
        for number, file in enumerate(files)
    ]
    profiled = set().union(*(ids for _, ids in per_round))
    kept = {
        input_id
        for input_id in profiled
        if all(input_id in ids for wanted, ids in per_round if wanted is None or input_id in wanted)
    }
    dropped = sorted(profiled - kept)
    merged = {}
    for name, files in rounds_of.items():
        first = files[0]
        by_round = [{p.input_id: p for p in file.profiles} for file in files]
        profiles = []
        for profile in first.profiles:
            if profile.input_id not in kept:
                continue
            passes = [
                profiles_of_round[profile.input_id]
                for profiles_of_round in by_round
                if profile.input_id in profiles_of_round
            ]
            cpu = [t for p in passes for t in (p.cpu_times_s or [p.cpu_time_s])]
            wall = [t for p in passes for t in (p.wall_times_s or [p.wall_time_s])]
            profiles.append(
                replace(
                    profile,
                    cpu_time_s=min(cpu),
                    wall_time_s=min(wall),
                    cpu_times_s=cpu,
                    wall_times_s=wall,
                    timing_rounds=len(passes),
                )
            )
        measurement = {
            **first.measurement,
            "alternated_rounds": len(files),
            # with sequential rounds, the most any input got
            "timing_repeats": max((len(p.cpu_times_s or ()) for p in profiles), default=0),
        }
        merged[name] = replace(first, profiles=profiles, measurement=measurement)
    return merged, dropped


class _PytestRounds:
    """A round as pytest processes, one per version in lockstep (:func:`_round_in_turns`),
    the version to go first swapped every round; counts the rounds each version's pytest
    failed."""

    def __init__(
        self,
        versions: Sequence[Version],
        pytest_args: Sequence[str],
        only: Path,
        scratch: Path,
        alternation: Alternation,
    ) -> None:
        self.versions = versions
        self.pytest_args = pytest_args
        self.only = only.resolve()
        self.scratch = scratch
        self.options = [
            f"--perfwatch-repeats={alternation.repeats}",
            f"--perfwatch-warmup={alternation.warmup}",
            f"--perfwatch-min-pass-ms={alternation.min_pass_s * 1000}",
            "--perfwatch-kind=update_sample",
        ]
        self.failed = {v.name: 0 for v in versions}
        self.cpus = round_cpus()
        # commands run side by side start on different CPUs, not all on the first
        self.first_cpu = os.getpid()

    def __call__(self, number: int, wanted: frozenset[str] | None) -> dict[str, InputProfileFile]:
        listed = self.only
        if wanted is not None:
            listed = self.scratch / f"only-{number}.txt"
            listed.write_text("".join(f"{i}\n" for i in sorted(wanted)), encoding="utf-8")
        order = self.versions if number % 2 == 0 else list(reversed(self.versions))
        outputs = {v.name: self.scratch / f"{v.name}-{number}.json" for v in order}
        options = [
            *self.options,
            f"--perfwatch-only={listed}",
            *(["--perfwatch-timing-only"] if number > 0 else []),
        ]
        cpu = None if not self.cpus else self.cpus[(self.first_cpu + number) % len(self.cpus)]
        statuses = _round_in_turns(order, self.pytest_args, options, outputs, cpu)
        profiled = {}
        for version in self.versions:
            status = statuses[version.name]
            self.failed[version.name] += status != 0
            try:
                profiled[version.name] = read_input_profile(outputs[version.name])
            except SourceError as error:
                # its output went nowhere (the rounds are quiet): say how to see it
                rerun = shlex.join([version.python, "-m", "pytest", *self.pytest_args])
                raise AlternationError(
                    f"round {number + 1} on the {version.name} code "
                    f"({version.directory}): {pytest_exit(status)} and profiled nothing "
                    f"({error}); `{rerun}` there shows why"
                ) from None
        return profiled


def round_cpus() -> list[int]:
    """The CPUs this process may run on, in order, for the rounds to take in turn; none
    where the system does not let a process choose its CPU."""
    if not hasattr(os, "sched_getaffinity"):
        return []
    return sorted(os.sched_getaffinity(0))


@dataclass
class _Turn:
    """One version's pytest process and the two pipes its plugin takes turns through."""

    process: subprocess.Popen[bytes]
    ready: IO[str]  # the plugin writes a line when it waits for its next pass (EOF: done)
    go: IO[str]  # a line here lets it run that pass

    def wait_ready(self) -> bool:
        return bool(self.ready.readline())

    def let_run(self) -> None:
        self.go.write("go\n")
        self.go.flush()


def _round_in_turns(
    order: Sequence[Version],
    pytest_args: Sequence[str],
    options: Sequence[str],
    outputs: Mapping[str, Path],
    cpu: int | None,
) -> dict[str, int]:
    """One round: a pytest process per version, started together, held to ``cpu`` (None:
    wherever the system runs them) and run in lockstep.

    Each plugin waits before every pass of every input until told to go
    (``--perfwatch-lockstep``); the versions are let run one pass each in
    turn, in ``order`` and then reversed (as :func:`perfwatch.profiler.core.profile_versions`
    does in one process), so only one of them runs at any moment and the pass i
    of one version is timed next to the pass i of the other. The exit status
    of every version's pytest.
    """
    turns: dict[str, _Turn] = {}
    try:
        for version in order:
            ready_read, ready_write = os.pipe()
            go_read, go_write = os.pipe()
            command = pytest_command(
                version.python,
                [
                    *pytest_args,
                    f"--perfwatch-profile={outputs[version.name]}",
                    *options,
                    f"--perfwatch-lockstep={ready_write},{go_read}",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                ],
            )
            process = subprocess.Popen(
                command,
                cwd=version.directory,
                env=version.command_environment(),
                stdout=subprocess.DEVNULL,
                pass_fds=(ready_write, go_read),
            )
            os.close(ready_write)
            os.close(go_read)
            if cpu is not None:
                # before its first pass: the plugin waits for its turn before every one
                with contextlib.suppress(ProcessLookupError):  # gone: its status tells why
                    os.sched_setaffinity(process.pid, {cpu})
            turns[version.name] = _Turn(
                process,
                os.fdopen(ready_read, "r", encoding="utf-8"),
                os.fdopen(go_write, "w", encoding="utf-8"),
            )
        waiting = [turn for turn in turns.values() if turn.wait_ready()]
        while waiting:
            for turn in list(waiting):
                turn.let_run()
                if not turn.wait_ready():
                    waiting.remove(turn)
            waiting.reverse()  # old-new, new-old, ...: no version always runs second
    finally:
        # closing the pipes releases a plugin still waiting (it then stops profiling); the
        # processes are waited for also on Ctrl-C, so that none writes its profile into the
        # scratch directory after it is gone
        for turn in turns.values():
            turn.go.close()
            turn.ready.close()
        statuses = {name: turn.process.wait() for name, turn in turns.items()}
    return statuses
