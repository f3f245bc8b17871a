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
import os
import time
import tracemalloc
from collections.abc import Callable, Iterator, Mapping
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
    """A context manager that measures its block and remembers whether it ran to the end."""

    kind = "pass"

    def __init__(self) -> None:
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
    """Wall-clock and process CPU time of the block, with no tracer or tracemalloc on."""

    kind = "timing"

    def __init__(self) -> None:
        super().__init__()
        self.timing: Timing | None = None
        self._wall_start = 0
        self._cpu_start = 0

    def _start(self) -> None:
        self._wall_start = time.perf_counter_ns()
        self._cpu_start = time.process_time_ns()

    def _stop(self) -> None:
        cpu = time.process_time_ns() - self._cpu_start
        wall = time.perf_counter_ns() - self._wall_start
        self.timing = Timing(wall / 1e9, cpu / 1e9)


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
    when every pass completed.
    """

    def __init__(
        self, input_id: str, size: float, *, repeats: int, warmup: int, timing_only: bool = False
    ) -> None:
        self.input_id = input_id
        self.size = size
        self.repeats = repeats
        self.warmup = warmup
        self.timing_only = timing_only
        self.profile: InputProfile | None = None

    def __iter__(self) -> Iterator[_Pass]:
        passes: list[_Pass] = [WarmupPass() for _ in range(self.warmup)]
        passes += [TimingPass() for _ in range(self.repeats)]
        if not self.timing_only:
            passes += [MemoryPass(), CountingPass()]
        for measured_pass in passes:
            yield measured_pass
            if not measured_pass.completed:
                raise RuntimeError(
                    f"input {self.input_id!r}: the {measured_pass.kind} pass was not run "
                    "to completion inside a `with` block"
                )
        self.profile = _assemble(self.input_id, self.size, passes)


def _assemble(input_id: str, size: float, passes: list[_Pass]) -> InputProfile:
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
    )


def profile_versions(
    versions: Mapping[str, Callable[[], object]],
    *,
    input_id: str,
    size: float,
    repeats: int = 5,
    warmup: int = 1,
    timing_only: bool = False,
) -> dict[str, InputProfile]:
    """Profile several versions of the code on one input, alternating their passes.

    Each round runs every version once in turn, so a burst of load on a shared
    machine hits the versions alike instead of skewing one of them.
    """
    runs = {
        name: (
            ProfileRun(input_id, size, repeats=repeats, warmup=warmup, timing_only=timing_only),
            call,
        )
        for name, call in versions.items()
    }
    return _run_in_rounds(runs)


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
) -> dict[str, InputProfile]:
    """Run the next pass of every run in turn until all are done; their profiles by name."""
    passes = {name: iter(run) for name, (run, _) in runs.items()}
    pending = set(runs)
    while pending:
        for name, (_, call) in runs.items():
            if name not in pending:
                continue
            measured_pass = next(passes[name], None)
            if measured_pass is None:
                pending.discard(name)
                continue
            with measured_pass:
                call()
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


def measurement_notes(*, repeats: int, warmup: int) -> dict[str, Any]:
    return {
        "passes": "separate passes per input: warm-up, timing, memory, counting",
        "warmup_passes": warmup,
        "timing_repeats": repeats,
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
