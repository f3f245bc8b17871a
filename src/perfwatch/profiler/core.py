"""Profile one input at a time, in separate passes that do not disturb each other.

Tracing lines slows code tenfold and tracemalloc hooks every allocation, so a
profile is assembled from passes over the same code: warm-up passes (measured
by nothing), timing passes (wall clock and process CPU time, nothing else
active; the minimum is kept), one memory pass (tracemalloc peak) and one
counting pass (``sys.settrace``, see :mod:`perfwatch.profiler.counting`).

Three ways to use it, and the pytest plugin (``pytest --perfwatch-profile=FILE``)::

    profiler = InputProfiler(repeats=5)
    for measured_pass in profiler.run("cfg-17", size=len(payload)):   # with-blocks
        with measured_pass:
            upload(payload)
    profiler.profile(upload, payload, input_id="cfg-18")               # a call
    @profiler.profiled()                                                # a decorator
    def check(payload): ...

Each pass class (``TimingPass``, ``MemoryPass``, ``CountingPass``) is also a
context manager of its own. ``profile_versions`` alternates the passes of
several versions of the code on one input; ``profile_inputs`` runs a whole
suite in interleaved rounds, so that the times of different inputs are taken
under the same load.
"""

from __future__ import annotations

import functools
import itertools
import os
import time
import tracemalloc
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, ParamSpec, Self, TypeVar

import orjson

from perfwatch.contract.models import InputProfile
from perfwatch.profiler.counting import ExecutionCounter, ExecutionCounts

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Timing:
    wall_time_s: float
    cpu_time_s: float


class _Pass:
    """A context manager that measures its block and remembers whether it ran to the end.

    ``calls`` is how many times the block is meant to call the code (the drivers in this
    module loop that often); a timing pass reports the time of one call.
    """

    kind = "pass"

    def __init__(self, calls: int = 1) -> None:
        if calls < 1:
            raise ValueError(f"a pass calls the code at least once, got {calls}")
        self.calls = calls
        self.completed = False

    def __enter__(self) -> Self:
        self.completed = False
        self._start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop()
        self.completed = exc_type is None

    def _start(self) -> None:
        """Begin measuring, as the last step before the block."""

    def _stop(self) -> None:
        """End measuring, as the first step after the block."""


class WarmupPass(_Pass):
    """Runs the code once unmeasured: imports, caches and lazy set-up happen here."""

    kind = "warmup"


class TimingPass(_Pass):
    """Wall-clock and process CPU time of the block, with no tracer or tracemalloc on,
    divided by the block's ``calls``."""

    kind = "timing"

    def __init__(self, calls: int = 1) -> None:
        super().__init__(calls)
        self.timing: Timing | None = None
        self._wall_start = 0
        self._cpu_start = 0

    def _start(self) -> None:
        self._wall_start = time.perf_counter_ns()
        self._cpu_start = time.process_time_ns()

    def _stop(self) -> None:
        cpu = time.process_time_ns() - self._cpu_start
        wall = time.perf_counter_ns() - self._wall_start
        self.timing = Timing(wall / 1e9 / self.calls, cpu / 1e9 / self.calls)


class MemoryPass(_Pass):
    """Peak memory allocated in the block above what was allocated before it (tracemalloc)."""

    kind = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.peak_memory_bytes: int | None = None
        self._started_here = False
        self._before = 0

    def _start(self) -> None:
        self._started_here = not tracemalloc.is_tracing()
        if self._started_here:
            tracemalloc.start()
        tracemalloc.reset_peak()
        self._before = tracemalloc.get_traced_memory()[0]

    def _stop(self) -> None:
        peak = tracemalloc.get_traced_memory()[1]
        if self._started_here:
            tracemalloc.stop()
        self.peak_memory_bytes = max(0, peak - self._before)


class CountingPass(_Pass):
    """Execution counts of the code the block calls (see :mod:`perfwatch.profiler.counting`)."""

    kind = "counting"

    def __init__(self) -> None:
        super().__init__()
        self.counts: ExecutionCounts | None = None
        self._counter = ExecutionCounter()

    def _start(self) -> None:
        self._counter.start()

    def _stop(self) -> None:
        self.counts = self._counter.stop()


class ProfileRun:
    """The passes of one input. Iterate, run the code once inside each pass, read ``profile``.

    The code must run the same way in every pass; the profile exists only
    when every pass completed. A timing pass may ask for ``calls_per_pass`` calls
    (its ``calls``). ``repeats`` may be raised while the run is between timing passes
    (``timing_open``): the run then times the input again before it moves on.
    """

    def __init__(
        self,
        input_id: str,
        size: float,
        *,
        repeats: int,
        warmup: int,
        timing_only: bool = False,
        calls_per_pass: int = 1,
    ) -> None:
        self.input_id = input_id
        self.size = size
        self.repeats = repeats
        self.warmup = warmup
        self.timing_only = timing_only
        self.calls_per_pass = calls_per_pass
        self.timing_open = True
        self.profile: InputProfile | None = None
        self._timing_passes: list[TimingPass] = []

    @property
    def timings(self) -> list[Timing]:
        """The timings of the timing passes run so far."""
        return [p.timing for p in self._timing_passes if p.timing is not None]

    def __iter__(self) -> Iterator[_Pass]:
        self._timing_passes = []
        self.timing_open = True
        passes: list[_Pass] = []
        for _ in range(self.warmup):
            yield from self._checked(WarmupPass(), passes)
        while len(self._timing_passes) < self.repeats:
            timing = TimingPass(self.calls_per_pass)
            self._timing_passes.append(timing)
            yield from self._checked(timing, passes)
        self.timing_open = False
        if not self.timing_only:
            yield from self._checked(MemoryPass(), passes)
            yield from self._checked(CountingPass(), passes)
        self.profile = _assemble(self.input_id, self.size, passes, self.calls_per_pass)

    def _checked(self, measured_pass: _Pass, done: list[_Pass]) -> Iterator[_Pass]:
        yield measured_pass
        if not measured_pass.completed:
            raise RuntimeError(
                f"input {self.input_id!r}: the {measured_pass.kind} pass was not run "
                "to completion inside a `with` block"
            )
        done.append(measured_pass)


def _assemble(input_id: str, size: float, passes: list[_Pass], calls_per_pass: int) -> InputProfile:
    """The profile of the passes; a timing-only run has no memory or counting pass and
    reports zero for them (its counts come from another run of the same code)."""
    timings = [p.timing for p in passes if isinstance(p, TimingPass) and p.timing is not None]
    memory = next((p.peak_memory_bytes for p in passes if isinstance(p, MemoryPass)), 0)
    counts = next(
        (p.counts for p in passes if isinstance(p, CountingPass)), ExecutionCounts(0, 0, 0, 0)
    )
    assert memory is not None and counts is not None and timings
    return InputProfile(
        input_id=input_id,
        size=size,
        wall_time_s=min(t.wall_time_s for t in timings),
        cpu_time_s=min(t.cpu_time_s for t in timings),
        peak_memory_bytes=memory,
        statements=counts.statements,
        function_calls=counts.function_calls,
        loop_iterations=counts.loop_iterations,
        conditionals=counts.conditionals,
        cpu_times_s=[t.cpu_time_s for t in timings],
        wall_times_s=[t.wall_time_s for t in timings],
        calls_per_pass=calls_per_pass if calls_per_pass > 1 else None,
    )


def profile_versions(
    versions: Mapping[str, Callable[[], object]],
    *,
    input_id: str,
    size: float,
    repeats: int = 5,
    warmup: int = 1,
    timing_only: bool = False,
    min_pass_s: float = 0.0,
    max_repeats: int | None = None,
    precision: float | None = None,
    confidence: float = 0.95,
    before_round: Callable[[], None] | None = None,
) -> dict[str, InputProfile]:
    """Profile several versions of the code on one input, alternating their passes.

    Each round runs every version once in turn, so a burst of load on a shared
    machine hits the versions alike instead of skewing one of them; the order is
    reversed every other round (old-new, new-old, ...), since the pass that runs
    second in a round can pay systematically for what the first left behind
    (a time slice ending, caches taken over): with passes of a few milliseconds,
    a fixed order made an unchanged dot product look 6-12% slower.

    A very short input is timed over several calls per pass: enough that the
    pass of every version lasts ``min_pass_s`` (see :func:`calls_per_pass`).
    With a ``precision``, the timing goes on past ``repeats`` rounds, one round
    at a time up to ``max_repeats``, while the paired interval (at
    ``confidence``) of any version's change against the first version is wider
    than ``precision`` (see :func:`needs_more_timing`). ``before_round`` is called
    before every round of passes (the pytest plugin waits there for its turn).
    """
    limit = repeats if max_repeats is None else max_repeats
    if limit < repeats:
        raise ValueError(f"max_repeats ({limit}) must not be below repeats ({repeats})")
    calls = calls_per_pass(list(versions.values()), min_pass_s)
    runs = {
        name: (
            ProfileRun(
                input_id,
                size,
                repeats=repeats,
                warmup=warmup,
                timing_only=timing_only,
                calls_per_pass=calls,
            ),
            call,
        )
        for name, call in versions.items()
    }
    if precision is None or limit == repeats:
        return _run_in_rounds(runs, before_round, swap=True)
    profile_runs = [run for run, _ in runs.values()]

    def extend() -> None:
        if before_round is not None:
            before_round()
        at_end = all(run.timing_open and len(run.timings) == run.repeats for run in profile_runs)
        if at_end and profile_runs[0].repeats < limit:
            timings = [[t.cpu_time_s for t in run.timings] for run in profile_runs]
            if needs_more_timing(timings, precision, confidence):
                for run in profile_runs:
                    run.repeats += 1

    return _run_in_rounds(runs, extend, swap=True)


# How much longer than the wanted pass, by the wall clock, a calibration run may take
# before waiting calls stop it: on a 2-core machine at a load average of 20 a process
# gets about a tenth of a core.
WAIT_LIMIT = 50


def calls_per_pass(
    calls: Sequence[Callable[[], object]],
    min_pass_s: float,
    clock: Callable[[], float] = time.process_time,
    wall_clock: Callable[[], float] = time.perf_counter,
) -> int:
    """How many calls a timing pass makes so that it lasts ``min_pass_s`` for every call.

    A call of a tenth of a millisecond, timed alone, carries the timer's overhead and
    any interruption of the process in full; over several calls these spread out.
    Like ``timeit``'s autorange: 1, 2, 5, 10, 20, 50, ... calls until the calls take
    ``min_pass_s``; the largest count any version needs, so that every version makes
    the same calls per pass. These calls also warm up.

    The calls are timed by ``clock``, the process CPU time the passes are judged by:
    by the wall clock, a calibration that waited for a core on a loaded machine took
    one call for a pass of 2 ms, and the passes then lasted a quarter of that. A call
    that waits (input and output, sleeping) stops the count once the run lasts
    :data:`WAIT_LIMIT` times ``min_pass_s`` by ``wall_clock``.
    """
    if min_pass_s <= 0:
        return 1
    number = 1
    steps = itertools.cycle((2, 2.5, 2))  # 1, 2, 5, 10, 20, 50, ...
    for call in calls:
        while True:
            started, wall_started = clock(), wall_clock()
            for _ in range(number):
                call()
            if (
                clock() - started >= min_pass_s
                or wall_clock() - wall_started >= WAIT_LIMIT * min_pass_s
            ):
                break
            number = round(number * next(steps))
    return number


def needs_more_timing(
    timings: Sequence[Sequence[float]],
    precision: float,
    confidence: float,
    rounds: int | None = None,
) -> bool:
    """Whether any version's paired change against the first one (``timings[0]``; each row
    the versions' passes, alternated pass by pass, in ``rounds`` equal rounds of a process
    each when given) has an interval wider than ``precision`` (high - low of new / old - 1)
    or none yet."""
    # Imported here: the plugin loads this module in every pytest process, and the
    # detectors pull in scikit-learn, which only the sequential timing needs.
    from perfwatch.detectors.inputs import paired_change

    for other in timings[1:]:
        change = paired_change(timings[0], other, paired=True, confidence=confidence, rounds=rounds)
        if change.low is None or change.high is None or change.high - change.low > precision:
            return True
    return False


def profile_inputs(
    calls: Mapping[str, Callable[[], object]],
    *,
    sizes: Mapping[str, float],
    repeats: int = 5,
    warmup: int = 1,
) -> dict[str, InputProfile]:
    """Profile many inputs in interleaved rounds: each round runs every input's next pass.

    Profiled one after the other, an input's timing passes all fall into the
    same second of machine load, so on a shared machine the minimum of one
    input can be twice that of its neighbour with the same work. In rounds,
    every input's passes are spread over the whole run and every minimum is
    taken under the same mix of load: the times of different inputs become
    comparable, which the time thresholds (built from other inputs' times)
    rely on. (Randomised multiple interleaved trials, Abedi and Brecht 2017,
    without the shuffling: the inputs are many and the load is not periodic.)
    """
    missing = [input_id for input_id in calls if input_id not in sizes]
    if missing:
        raise ValueError(f"no size given for input {missing[0]!r}")
    runs = {
        input_id: (ProfileRun(input_id, sizes[input_id], repeats=repeats, warmup=warmup), call)
        for input_id, call in calls.items()
    }
    return _run_in_rounds(runs)


def _run_in_rounds(
    runs: Mapping[str, tuple[ProfileRun, Callable[[], object]]],
    before_round: Callable[[], None] | None = None,
    *,
    swap: bool = False,
) -> dict[str, InputProfile]:
    """Run the next pass of every run in turn until all are done; their profiles by name.

    ``before_round`` is called before every round, when every run has finished the
    same number of passes (it may raise the runs' repeats). With ``swap`` every
    other round runs them in reverse order.
    """
    passes = {name: iter(run) for name, (run, _) in runs.items()}
    pending = set(runs)
    order = list(runs.items())
    while pending:
        if before_round is not None:
            before_round()
        for name, (_, call) in order:
            if name not in pending:
                continue
            measured_pass = next(passes[name], None)
            if measured_pass is None:
                pending.discard(name)
                continue
            with measured_pass:
                for _ in range(measured_pass.calls):
                    call()
        if swap:
            order.reverse()
    result = {}
    for name, (run, _) in runs.items():
        assert run.profile is not None
        result[name] = run.profile
    return result


class InputProfiler:
    """Profiles inputs and keeps their profiles in ``profiles``, in the order profiled."""

    def __init__(self, *, repeats: int = 5, warmup: int = 1) -> None:
        if repeats < 1:
            raise ValueError(f"repeats must be at least 1, got {repeats}")
        if warmup < 0:
            raise ValueError(f"warmup must be 0 or more, got {warmup}")
        self.repeats = repeats
        self.warmup = warmup
        self.profiles: list[InputProfile] = []

    def run(self, input_id: str, size: float) -> Iterator[_Pass]:
        """The passes of one input, to run the code in with ``with``; the profile is kept."""
        run = ProfileRun(input_id, size, repeats=self.repeats, warmup=self.warmup)
        yield from run
        assert run.profile is not None
        self.profiles.append(run.profile)

    def profile(
        self,
        function: Callable[..., object],
        /,
        *args: Any,
        input_id: str,
        size: float | None = None,
        **kwargs: Any,
    ) -> InputProfile:
        """Call ``function(*args, **kwargs)`` once per pass; keep and return the profile."""
        measured_size = arguments_size(args, kwargs) if size is None else size
        profile = profile_versions(
            {"current": functools.partial(function, *args, **kwargs)},
            input_id=input_id,
            size=measured_size,
            repeats=self.repeats,
            warmup=self.warmup,
        )["current"]
        self.profiles.append(profile)
        return profile

    def profiled(
        self,
        *,
        input_id: Callable[..., str] | None = None,
        size: Callable[..., float] | None = None,
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Decorator: every call is profiled (the function runs once per pass).

        ``input_id`` and ``size`` are computed from the call's arguments; by
        default the id is ``qualified name#call number`` and the size that of
        the arguments (see :func:`input_size`).
        """

        def decorate(function: Callable[P, R]) -> Callable[P, R]:
            calls = 0

            @functools.wraps(function)
            def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
                nonlocal calls
                calls += 1
                name = (
                    input_id(*args, **kwargs)
                    if input_id is not None
                    else f"{function.__qualname__}#{calls}"
                )
                measured_size = (
                    size(*args, **kwargs) if size is not None else arguments_size(args, kwargs)
                )
                results: list[R] = []
                self.profile(
                    lambda: results.append(function(*args, **kwargs)),
                    input_id=name,
                    size=measured_size,
                )
                return results[-1]

            return wrapper

        return decorate

    def measurement(self) -> dict[str, Any]:
        """How the numbers of these profiles were measured (stored in profile files)."""
        return measurement_notes(repeats=self.repeats, warmup=self.warmup)


def measurement_notes(*, repeats: int, warmup: int, min_pass_s: float = 0.0) -> dict[str, Any]:
    return {
        "passes": "separate passes per input: warm-up, timing, memory, counting",
        "warmup_passes": warmup,
        "timing_repeats": repeats,
        **(
            {
                "min_timing_pass_s": min_pass_s,
                "calls_per_pass": "a timing pass calls the code 1, 2, 5, 10, ... times until "
                "it lasts min_timing_pass_s (the count is each profile's calls_per_pass); "
                "the times are those of one call",
            }
            if min_pass_s > 0
            else {}
        ),
        "timing": "minimum over the timing passes of wall-clock time (perf_counter) and "
        "process CPU time (process_time), measured with no tracer and no tracemalloc active",
        "memory": "peak traced allocation (tracemalloc) above the level at the start of the "
        "memory pass",
        "counts": "sys.settrace line and conditional-jump opcode events in a counting pass "
        "of their own: statements = line events, function_calls = Python frames started, "
        "loop_iterations = backward jumps, conditionals = conditional jumps executed",
    }


def input_size(value: object) -> float:
    """Size of one input value, in bytes where that means something.

    Text counts its UTF-8 bytes, binary data its length, a path to an existing
    file the file's size, a number itself (a parameter such as ``n=1000`` is
    usually the size), ``None`` and booleans nothing, anything else the length
    of its JSON form (``repr`` for what JSON cannot hold).
    """
    match value:
        case bool() | None:
            return 0.0
        case int() | float():
            return float(abs(value))
        case str():
            return float(len(value.encode()))
        case bytes() | bytearray() | memoryview():
            return float(len(value))
        case os.PathLike() if Path(value).is_file():
            return float(Path(value).stat().st_size)
        case _:
            options = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
            return float(len(orjson.dumps(value, default=repr, option=options)))


def arguments_size(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> float:
    """Total :func:`input_size` of a call's arguments."""
    return sum(input_size(value) for value in (*args, *kwargs.values()))
