"""Numeric kernels over series of floats: smoothing, histograms, dot products."""

import operator  # noqa: F401  (the speed-up patch uses it)

KINDS = ("smoothing", "histogram", "dot")
SMALLEST = {"smoothing": 800, "histogram": 1500, "dot": 3000}


def smooth(values, window):
    result = []
    total = 0.0
    for index in range(len(values)):
        total += values[index]
        if index >= window:
            total -= values[index - window]
        result.append(total / window)
    return result


def bin_of(value, low, width, bins):
    position = int((value - low) / width)
    return position if position < bins else bins - 1


def histogram(values, bins):
    low, high = min(values), max(values)
    width = (high - low) / bins or 1.0
    counts = [0] * bins
    for value in values:
        counts[bin_of(value, low, width, bins)] += 1
    return counts


def dot(left, right):
    total = 0.0
    order = range(len(left))
    for index in order:
        total += left[index] * right[index]
    return total


def run(argument):
    kind, data = argument
    if kind == "smoothing":
        return smooth(data, 16)
    if kind == "histogram":
        return histogram(data, 64)
    return dot(data[0], data[1])


def make_input(kind, size, rng):
    values = [rng.gauss(0, 1) for _ in range(size)]
    if kind != "dot":
        return kind, values
    return kind, (values, [rng.gauss(0, 1) for _ in range(size)])
