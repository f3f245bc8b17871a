"""The uploader's test inputs: payloads of varied kind, size and shape, generated from a seed.

Seven in ten are alignment payloads (5 to 400 IOVs of six constants), the
rest calibration payloads (2 to 40 IOVs of 16 to 192 channel gains). Sizes
are spread log-uniformly, as inputs collected over years of running are:
many small, a few large.
"""

from __future__ import annotations

import json
import math
import random

ALIGNMENT_SHARE = 0.7


def generate(count: int, *, seed: int = 0) -> list[tuple[str, str]]:
    """``count`` payloads as (input id, JSON text), the same for the same seed."""
    rng = random.Random(seed)
    payloads = []
    for number in range(count):
        kind = "alignment" if rng.random() < ALIGNMENT_SHARE else "calibration"
        document = _alignment(rng) if kind == "alignment" else _calibration(rng)
        payloads.append((f"{kind}-{number:04d}", json.dumps(document)))
    return payloads


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    return round(math.exp(rng.uniform(math.log(low), math.log(high))))


def _iovs(rng: random.Random, count: int, make_data: object) -> list[dict[str, object]]:
    since = rng.randrange(1, 300_000)
    iovs = []
    for _ in range(count):
        since += rng.randrange(1, 500)
        iovs.append({"since": since, "hash": f"{rng.getrandbits(160):040x}", "data": make_data()})
    return iovs


def _alignment(rng: random.Random) -> dict[str, object]:
    def constants() -> dict[str, float]:
        return {
            "x": rng.gauss(0, 0.5),
            "y": rng.gauss(0, 0.5),
            "z": rng.gauss(0, 1.0),
            "alpha": rng.gauss(0, 0.005),
            "beta": rng.gauss(0, 0.005),
            "gamma": rng.gauss(0, 0.005),
        }

    return {
        "tag": f"TrackerAlignment_Run{rng.randrange(1, 4)}_v{rng.randrange(1, 30)}",
        "kind": "alignment",
        "comment": "rigid-body alignment constants",
        "iovs": _iovs(rng, _log_uniform(rng, 5, 400), constants),
    }


def _calibration(rng: random.Random) -> dict[str, object]:
    channels = rng.choice((16, 32, 64, 128, 192))

    def gains() -> dict[str, list[float]]:
        return {"gains": [rng.gauss(1.0, 0.08) for _ in range(channels)]}

    return {
        "tag": f"EcalGains_{channels}ch_v{rng.randrange(1, 12)}",
        "kind": "calibration",
        "comment": "per-channel gain calibration",
        "iovs": _iovs(rng, _log_uniform(rng, 2, 40), gains),
    }
