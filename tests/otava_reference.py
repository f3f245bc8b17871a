"""Apache Otava 0.8, the reference implementation, in an environment of its own.

apache-otava 0.8.0 pins scipy < 1.17 and numpy 2.2, older than what a plain
install of perfwatch resolves, so it never shares perfwatch's environment: the
tests and benchmarks ask it through ``otava_worker.py`` running in a virtual
environment of its own. ``PERFWATCH_OTAVA_PYTHON`` names that environment's
interpreter; without it, one is made on first use (about a minute) in
``$XDG_CACHE_HOME/perfwatch/reference/otava-0.8.0`` and kept there.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import venv
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

OTAVA_REQUIREMENT = "apache-otava==0.8.0"
PYTHON_ENV = "PERFWATCH_OTAVA_PYTHON"
WORKER = Path(__file__).with_name("otava_worker.py")


class ReferenceUnavailable(RuntimeError):
    """The reference environment could not be found or made."""


def reference_home() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "perfwatch" / "reference" / "otava-0.8.0"


def reference_python() -> Path:
    """The reference environment's interpreter, made first if needed."""
    named = os.environ.get(PYTHON_ENV)
    if named:
        if not Path(named).exists():
            raise ReferenceUnavailable(f"{PYTHON_ENV}={named} does not exist")
        return Path(named)
    home = reference_home()
    python = home / "bin" / "python"
    ready = home / ".installed"
    if not ready.exists():
        print(f"making the Apache Otava reference environment in {home} ...", file=sys.stderr)
        venv.create(home, with_pip=True, clear=True)
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", OTAVA_REQUIREMENT],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise ReferenceUnavailable(
                f"pip install {OTAVA_REQUIREMENT} failed: {done.stderr.strip()[-500:]}"
            )
        ready.write_text(OTAVA_REQUIREMENT + "\n")
    return python


def _json_values(values: Iterable[float]) -> list[float | None]:
    return [None if math.isnan(v) else float(v) for v in values]


class OtavaReference:
    """A running worker in the reference environment; one request at a time."""

    def __init__(self, python: Path | None = None) -> None:
        self._process = subprocess.Popen(
            [str(python or reference_python()), str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            raise ReferenceUnavailable(f"the Otava worker exited ({self._process.poll()})")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"Otava failed on {request['op']}: {reply['error']}")
        return reply

    def change_points(self, values: Iterable[float], **options: Any) -> list[dict[str, Any]]:
        """Otava's ``compute_change_points`` on the values (NaN: a missing run)."""
        request = {"op": "change_points", "values": _json_values(values), "options": options}
        return self.ask(request)["change_points"]

    def analyze_runs(
        self, times: Sequence[int], columns: dict[str, Sequence[float]], **options: Any
    ) -> dict[str, list[dict[str, Any]]]:
        """Otava's import of stored runs and its analysis (``Series.analyze``): per metric,
        the change points of runs at ``times`` (epoch seconds) with the values of
        ``columns`` (NaN: the run has no value, which Otava fills in)."""
        runs = [
            {
                "timestamp": moment,
                "metrics": [
                    {"name": name, "value": _json_values([values[run]])[0]}
                    for name, values in columns.items()
                ],
                "attributes": {},
            }
            for run, moment in enumerate(times)
        ]
        request = {"op": "analyze_json_runs", "runs": runs, "options": options}
        return self.ask(request)["change_points"]

    def change_points_orig(self, values: Iterable[float], seed: int, **options: Any) -> list[int]:
        """The indices Otava's original, permutation-tested E-Divisive finds (NaN: missing);
        ``permutations`` and ``max_pvalue`` in ``options`` change its test."""
        request = {
            "op": "change_points_orig",
            "values": _json_values(values),
            "seed": seed,
            **options,
        }
        return self.ask(request)["indices"]

    def candidate(self, values: Sequence[float]) -> tuple[int, float]:
        reply = self.ask({"op": "candidate", "values": _json_values(values)})
        return reply["index"], reply["qhat"]

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=30)

    def __enter__(self) -> OtavaReference:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
