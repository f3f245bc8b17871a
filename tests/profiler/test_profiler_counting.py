"""Execution counts of small functions whose counts are known by hand (CPython 3.11 bytecode)."""

from __future__ import annotations

import sys

import pytest

from perfwatch.profiler.core import CountingPass
from perfwatch.profiler.counting import ExecutionCounts


def count(function, *args) -> ExecutionCounts:
    with CountingPass() as counting:
        function(*args)
    assert counting.counts is not None
    return counting.counts


def straight_line(a, b):
    total = a + b
    total *= 2
    return total


def for_loop(items):
    total = 0
    for item in items:
        total += item
    return total


def while_loop(n):
    while n:
        n -= 1
    return n


def one_line_loop(items):
    for _item in items: pass  # noqa: E701  # fmt: skip


def branches(values):
    hits = 0
    for value in values:
        if value % 2 and value > 0:
            hits += 1
    return hits


def comprehension(values):
    return [v for v in values if v]


def countdown(n):
    while n > 0:
        yield n
        n -= 1


def consume(n):
    return sum(countdown(n))


def caller():
    return straight_line(1, 2) + straight_line(3, 4)


def test_straight_line_code_counts_each_line_once() -> None:
    assert count(straight_line, 1, 2) == ExecutionCounts(
        statements=3, function_calls=1, loop_iterations=0, conditionals=0
    )


def test_for_loop_takes_one_backward_jump_per_item() -> None:
    # lines: total=0, for x4 (initial + 3 jumps back), body x3, return
    assert count(for_loop, [1, 2, 3]) == ExecutionCounts(9, 1, 3, 0)


def test_while_loop_jumps_back_one_time_fewer_than_its_body_runs() -> None:
    # while (top test), then body and bottom test three times, return; the jump back
    # happens after the first and second bodies only.
    counts = count(while_loop, 3)
    assert (counts.statements, counts.loop_iterations, counts.conditionals) == (8, 2, 4)


def test_loop_on_a_single_line_counts_every_iteration() -> None:
    counts = count(one_line_loop, [1, 2, 3, 4])
    assert (counts.statements, counts.loop_iterations) == (5, 4)


def test_short_circuit_conditions_count_only_the_jumps_reached() -> None:
    # 0 -> `value % 2` false (1 jump); 1 -> both tested (2); 2 -> 1; 3 -> 2
    counts = count(branches, [0, 1, 2, 3])
    assert counts.conditionals == 6
    assert counts.loop_iterations == 4


def test_comprehension_is_a_call_with_its_own_loop_and_filter() -> None:
    counts = count(comprehension, [0, 1, 2])
    assert counts == ExecutionCounts(
        statements=5, function_calls=2, loop_iterations=3, conditionals=3
    )


def test_resumed_generator_is_not_a_new_call() -> None:
    counts = count(consume, 3)
    # consume and the generator's first run; sum() is a C function and not counted.
    assert counts.function_calls == 2
    # countdown: the loop jumps back after each of the three resumptions that continue it
    assert counts.loop_iterations == 2


def test_nested_calls_are_counted() -> None:
    assert count(caller).function_calls == 3
    assert count(caller).statements == 1 + 2 * 3


def test_counts_are_the_same_on_every_pass() -> None:
    assert count(branches, list(range(50))) == count(branches, list(range(50)))


def test_the_previous_trace_function_is_restored() -> None:
    events: list[str] = []

    def outer_tracer(frame, event, arg):
        events.append(event)

    previous = sys.gettrace()
    sys.settrace(outer_tracer)
    try:
        with CountingPass():
            straight_line(1, 2)
        restored = sys.gettrace()
    finally:
        sys.settrace(previous)
    assert restored is outer_tracer


def test_counts_survive_an_exception_in_the_block() -> None:
    counting = CountingPass()
    with pytest.raises(ZeroDivisionError), counting:
        straight_line(1, 2)
        _ = 1 / 0
    assert counting.counts is not None and counting.counts.function_calls == 1
