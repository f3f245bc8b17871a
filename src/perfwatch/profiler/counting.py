"""Execution counts of Python code, measured with ``sys.settrace``.

What each count means, precisely (CPython 3.11 bytecode):

statements
    Line events: each time the interpreter starts executing a source line, or
    executes a line again after jumping backwards (a loop). A statement that
    spans several lines can count once per line it executes on.
function_calls
    Python frames started: functions, lambdas, comprehensions, class bodies,
    and the first run of a generator or coroutine (a frame starting at a
    ``RESUME 0`` instruction). Resuming a suspended generator is not a call;
    built-in functions written in C are not counted.
loop_iterations
    Backward jumps taken. A line event is a backward jump when its bytecode
    offset is not after the previous line event's offset in the same frame,
    or when it lands on a loop head (a backward-jump target) of the line the
    previous event was on (a loop written on one line). A ``for`` loop over n
    items takes n; a ``while`` loop whose body runs n times takes n - 1,
    because CPython 3.11 tests the condition again at the bottom and jumps
    back only to repeat the body. ``await`` and ``yield from`` machinery is
    not a loop.
conditionals
    Conditional jump instructions executed, whether the jump is taken or not:
    ``if``/``elif``, ``while`` conditions, ``and``/``or`` short-circuits,
    conditional expressions, comprehension filters, ``assert``, ``match``
    patterns. Opcode events are switched on only while a frame runs a line
    that holds such an instruction, so ordinary lines stay cheap to trace.

Only the thread that starts counting is traced, and only frames started
after it: the lines of the function that starts and stops the counter are not
counted, the functions it calls are. Tracing slows the code tenfold or more,
so these counts come from their own pass and never share one with timing.
"""

from __future__ import annotations

import dis
import gc
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

_CONDITIONAL_JUMPS = frozenset(
    dis.opmap[name]
    for name in dis.opmap
    if name.startswith("POP_JUMP_") or name in ("JUMP_IF_FALSE_OR_POP", "JUMP_IF_TRUE_OR_POP")
)
# JUMP_BACKWARD_NO_INTERRUPT only drives `await` and `yield from`; it is no loop.
_LOOP_JUMPS = frozenset(
    dis.opmap[name]
    for name in dis.opmap
    if name == "JUMP_BACKWARD" or name.startswith("POP_JUMP_BACKWARD_")
)
_RESUME = dis.opmap["RESUME"]
_PROFILER_DIRECTORY = str(Path(__file__).resolve().parent)


@dataclass(frozen=True, slots=True)
class ExecutionCounts:
    statements: int
    function_calls: int
    loop_iterations: int
    conditionals: int


@dataclass(frozen=True, slots=True)
class _CodeLayout:
    """Where in one code object calls start, loops jump back and conditionals sit."""

    call_starts: frozenset[int]
    loop_heads: frozenset[int]
    conditional_offsets: frozenset[int]
    conditional_lines: frozenset[int]


@lru_cache(maxsize=8192)
def _layout(code: CodeType) -> _CodeLayout:
    call_starts: set[int] = set()
    loop_heads: set[int] = set()
    conditional_offsets: set[int] = set()
    conditional_lines: set[int] = set()
    for instruction in dis.get_instructions(code):
        if instruction.opcode == _RESUME and instruction.arg == 0:
            call_starts.add(instruction.offset)
        elif instruction.opcode in _CONDITIONAL_JUMPS:
            conditional_offsets.add(instruction.offset)
            line = instruction.positions.lineno if instruction.positions else None
            if line is not None:
                conditional_lines.add(line)
        if instruction.opcode in _LOOP_JUMPS:
            loop_heads.add(instruction.argval)
    return _CodeLayout(
        frozenset(call_starts),
        frozenset(loop_heads),
        frozenset(conditional_offsets),
        frozenset(conditional_lines),
    )


class ExecutionCounter:
    """Counts what the code called between :meth:`start` and :meth:`stop` executes.

    Any trace function set before :meth:`start` is restored by :meth:`stop`.
    """

    def __init__(self) -> None:
        self._previous_trace: Any = None
        self._gc_was_enabled = False
        self._totals = [0, 0, 0, 0]

    def start(self) -> None:
        self._totals = [0, 0, 0, 0]
        self._previous_trace = sys.gettrace()
        # A collection inside the block would run finalizers and weakref
        # callbacks of unrelated objects, whose lines would then be counted:
        # the same code could count differently depending on what ran before.
        self._gc_was_enabled = gc.isenabled()
        gc.disable()
        sys.settrace(self._make_tracer())

    def stop(self) -> ExecutionCounts:
        sys.settrace(self._previous_trace)
        if self._gc_was_enabled:
            gc.enable()
        statements, calls, iterations, conditionals = self._totals
        return ExecutionCounts(statements, calls, iterations, conditionals)

    def _make_tracer(self) -> Any:
        totals = self._totals

        def frame_tracer(layout: _CodeLayout) -> Any:
            previous_offset = -1
            previous_line: int | None = None

            def trace(frame: FrameType, event: str, arg: Any) -> Any:
                nonlocal previous_offset, previous_line
                if event == "line":
                    offset = frame.f_lasti
                    line = frame.f_lineno
                    totals[0] += 1
                    if offset <= previous_offset or (
                        line == previous_line and offset in layout.loop_heads
                    ):
                        totals[2] += 1
                    previous_offset = offset
                    previous_line = line
                    frame.f_trace_opcodes = line in layout.conditional_lines
                elif event == "opcode" and frame.f_lasti in layout.conditional_offsets:
                    totals[3] += 1
                return trace

            trace.execution_counter = self  # type: ignore[attr-defined]
            return trace

        def start_frame(frame: FrameType, event: str, arg: Any) -> Any:
            code = frame.f_code
            if event != "call" or code.co_filename.startswith(_PROFILER_DIRECTORY):
                return None
            # A resumed generator keeps the tracer (and loop state) of its earlier run.
            existing = frame.f_trace
            if getattr(existing, "execution_counter", None) is self:
                return existing
            layout = _layout(code)
            if frame.f_lasti in layout.call_starts:
                totals[1] += 1
            return frame_tracer(layout)

        return start_frame
