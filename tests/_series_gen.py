"""Seeded generators of benchmark-like series for the E-Divisive tests."""

from __future__ import annotations

import numpy as np

KINDS = ("noise", "steps", "spikes", "constant", "ties", "gaps", "mixed", "tiny", "trend")


def make_series(rng: np.random.Generator, n: int, kind: str) -> np.ndarray:
    base = float(rng.choice([1.0, 100.0, 1e4, 0.0, -50.0]))
    sigma = float(rng.choice([0.01, 0.5, 1.0, 5.0])) * (abs(base) * 0.01 + 1.0)
    x = base + rng.normal(0.0, sigma, n)
    if kind == "noise":
        return x
    if kind in ("steps", "mixed", "gaps"):
        for _ in range(int(rng.integers(1, max(2, n // 40) + 1))):
            at = int(rng.integers(1, n)) if n > 1 else 0
            x[at:] += float(rng.choice([-1, 1])) * sigma * float(rng.uniform(0.5, 8.0))
    if kind in ("spikes", "mixed"):
        for _ in range(int(rng.integers(1, max(2, n // 30) + 1))):
            at = int(rng.integers(0, n))
            x[at] += float(rng.choice([-1, 1])) * sigma * float(rng.uniform(5, 30))
    if kind == "constant":
        x[:] = base
        for _ in range(int(rng.integers(0, 4))):
            at = int(rng.integers(0, n))
            x[at:] = float(rng.choice([base, base + 1.0, base * 1.001, base - 3.0]))
        if rng.random() < 0.5:  # constant stretches with some noisy runs between them
            noisy = rng.random(n) < 0.3
            x[noisy] += rng.normal(0, sigma, int(noisy.sum()))
    if kind == "ties":
        x = np.round(x / sigma) * sigma
        x = np.round(x, 6)
    if kind == "gaps":
        miss = rng.random(n) < float(rng.uniform(0.02, 0.3))
        x[miss] = np.nan
        if n > 3 and rng.random() < 0.5:
            x[: int(rng.integers(1, 4))] = np.nan
        if n > 3 and rng.random() < 0.5:
            x[-int(rng.integers(1, 4)) :] = np.nan
        if np.isnan(x).all():
            x[0] = base
    if kind == "tiny":
        x = np.round(x, 1)
        x[rng.random(n) < 0.5] = base
    if kind == "trend":
        x += np.linspace(0, sigma * float(rng.uniform(2, 20)), n)
    return x


def corpus(seed: int, count: int, lengths: list[int]) -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        n = int(lengths[i % len(lengths)])
        kind = KINDS[i % len(KINDS)]
        out.append((f"{kind}-n{n}-{i}", make_series(rng, n, kind)))
    return out
