"""Profile sampled inputs on two versions of the code, round by round.

Old and new code cannot share one Python process (the same modules, two
versions), and profiled one after the other they see different machine load:
a busier minute then passes for a slowdown. Here each round runs pytest with
the profiling plugin once on each version, the order swapped every round
(old-new, new-old, ...), so a change of load reaches both alike and every
timing pass of one version has a partner of the other taken moments apart.
The first round also counts and measures memory; the later ones only time.
The passes are merged in round order, which is what pairs them in
:func:`perfwatch.detectors.inputs.paired_change`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from perfwatch.readers.errors import SourceError
from perfwatch.readers.input_profile import InputProfileFile, read_input_profile

# pytest's exit status when interrupted (Ctrl-C)
PYTEST_INTERRUPTED = 2


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


class Interrupted(Exception):
    """pytest was interrupted (Ctrl-C)."""


def profile_alternately(
    versions: Sequence[Version],
    pytest_args: Sequence[str],
    *,
    only: Path,
    rounds: int,
    repeats: int,
    warmup: int,
) -> AlternateRun:
    """Profile the inputs listed in ``only`` on every version, in ``rounds`` alternating rounds
    of ``repeats`` timing passes each; an input is kept when every round profiled it."""
    if rounds < 1 or repeats < 1 or warmup < 0:
        raise ValueError("rounds and repeats must be at least 1, warmup 0 or more")
    started = time.perf_counter()
    rounds_of: dict[str, list[InputProfileFile]] = {v.name: [] for v in versions}
    failed = dict.fromkeys(rounds_of, 0)
    with tempfile.TemporaryDirectory(prefix="perfwatch-alternate-") as scratch:
        for number in range(rounds):
            order = versions if number % 2 == 0 else list(reversed(versions))
            for version in order:
                output = Path(scratch) / f"{version.name}-{number}.json"
                command = [
                    version.python,
                    "-m",
                    "pytest",
                    *pytest_args,
                    f"--perfwatch-profile={output}",
                    f"--perfwatch-repeats={repeats}",
                    f"--perfwatch-warmup={warmup}",
                    f"--perfwatch-only={only.resolve()}",
                    "--perfwatch-kind=update_sample",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                ]
                if number > 0:
                    command.append("--perfwatch-timing-only")
                status = subprocess.run(
                    command,
                    cwd=version.directory,
                    env=version.command_environment(),
                    check=False,
                    stdout=subprocess.DEVNULL,
                ).returncode
                if status == PYTEST_INTERRUPTED:
                    raise Interrupted
                failed[version.name] += status != 0
                try:
                    rounds_of[version.name].append(read_input_profile(output))
                except SourceError as error:
                    raise AlternationError(
                        f"round {number + 1} on the {version.name} code "
                        f"({version.directory}): pytest exited with status {status} and "
                        f"profiled nothing ({error})"
                    ) from None
    merged, dropped = _merge(rounds_of)
    test_time = {
        name: sum(sum(p.wall_times_s or [p.wall_time_s]) for p in file.profiles)
        for name, file in merged.items()
    }
    return AlternateRun(merged, rounds, time.perf_counter() - started, test_time, failed, dropped)


def _merge(
    rounds_of: Mapping[str, list[InputProfileFile]],
) -> tuple[dict[str, InputProfileFile], list[str]]:
    """Per version: the first round's profiles with the timing passes of every round appended
    in round order; inputs missing from any round of any version are dropped."""
    per_round = [
        {p.input_id: p for p in file.profiles} for files in rounds_of.values() for file in files
    ]
    kept = set(per_round[0]).intersection(*per_round[1:])
    dropped = sorted(set().union(*per_round) - kept)
    merged = {}
    for name, files in rounds_of.items():
        first = files[0]
        by_round = [{p.input_id: p for p in file.profiles} for file in files]
        profiles = []
        for profile in first.profiles:
            if profile.input_id not in kept:
                continue
            passes = [profiles_of_round[profile.input_id] for profiles_of_round in by_round]
            cpu = [t for p in passes for t in (p.cpu_times_s or [p.cpu_time_s])]
            wall = [t for p in passes for t in (p.wall_times_s or [p.wall_time_s])]
            profiles.append(
                replace(
                    profile,
                    cpu_time_s=min(cpu),
                    wall_time_s=min(wall),
                    cpu_times_s=cpu,
                    wall_times_s=wall,
                    timing_rounds=len(files),
                )
            )
        measurement = {
            **first.measurement,
            "alternated_rounds": len(files),
            "timing_repeats": len(profiles[0].cpu_times_s or ()) if profiles else 0,
        }
        merged[name] = replace(first, profiles=profiles, measurement=measurement)
    return merged, dropped
