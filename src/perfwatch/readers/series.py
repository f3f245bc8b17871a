"""One metric's history of runs, as every reader produces it, and point selection on it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import numpy as np

from perfwatch.readers.errors import SourceError

if TYPE_CHECKING:  # CSV readers need not load the record schema module
    from perfwatch.contract.models import Direction

# Shortest commit prefix accepted where a commit names a point (git's own default is 7).
MIN_COMMIT_PREFIX = 4


@dataclass(frozen=True)
class MetricSeries:
    """Runs of one test's metric in run order (oldest first), times in UTC.

    ``attributes`` holds per-run labels (version, environment columns, record
    attributes), one entry per run. ``values`` is NaN for a run without a value, which
    only a reader asked to keep such runs (``keep_missing``) produces.
    ``source``/``line``/``column`` say where the series was defined, so problems with
    the series as a whole can name a place.
    """

    test: str
    metric: str
    times: list[datetime]
    values: np.ndarray
    commits: list[str | None]
    run_ids: list[str | None]
    branches: list[str | None]
    attributes: dict[str, list[str | None]] = field(default_factory=dict)
    direction: Direction | None = None
    unit: str | None = None
    source: str = "<unknown>"
    line: int | None = None
    column: int | None = None

    def __len__(self) -> int:
        return len(self.times)

    def take(self, indices: Sequence[int]) -> MetricSeries:
        """The series restricted to the runs at ``indices`` (in the order given)."""
        return replace(
            self,
            times=[self.times[i] for i in indices],
            values=self.values[np.asarray(indices, dtype=np.intp)],
            commits=[self.commits[i] for i in indices],
            run_ids=[self.run_ids[i] for i in indices],
            branches=[self.branches[i] for i in indices],
            attributes={
                name: [column[i] for i in indices] for name, column in self.attributes.items()
            },
        )

    def error(self, message: str) -> SourceError:
        """A SourceError about the whole series, located where the series was defined."""
        return SourceError(
            self.source, f"{self.test}/{self.metric}: {message}", line=self.line, column=self.column
        )


def select_points(
    series: MetricSeries,
    *,
    branch: str | None = None,
    since: str | None = None,
    until: str | None = None,
    last: int | None = None,
) -> MetricSeries:
    """Keep the runs of one branch, from ``since`` to ``until`` (both inclusive; each a commit
    of the series, a unique commit prefix, an ISO 8601 date or date-time — a bare date
    ``until`` covers its whole day), then the last ``last`` of them.

    Without ``branch``, a series whose runs come from several branches is refused: mixing
    branches makes change points meaningless.
    """
    keep = list(range(len(series)))
    named_branches = {b for b in series.branches if b is not None}
    if branch is not None:
        if not named_branches:
            raise series.error(f"branch {branch!r} requested but the runs carry no branch")
        keep = [i for i in keep if series.branches[i] == branch]
    elif len(named_branches) > 1:
        listed = ", ".join(sorted(named_branches))
        raise series.error(f"runs come from several branches ({listed}); select one branch")
    if since is not None:
        keep = _from_start(series, keep, since)
    if until is not None:
        keep = _to_end(series, keep, until)
    if last is not None:
        keep = keep[-last:] if last > 0 else []
    # keep is an ordered subset of the runs: as long as the series, it is all of them
    return series if len(keep) == len(series) else series.take(keep)


def _from_start(series: MetricSeries, keep: list[int], bound: str) -> list[int]:
    position = _commit_position(series, bound, first=True)
    if position is not None:
        return [i for i in keep if i >= position]
    start, _ = _time_bound(series, bound)
    return [i for i in keep if series.times[i] >= start]


def _to_end(series: MetricSeries, keep: list[int], bound: str) -> list[int]:
    position = _commit_position(series, bound, first=False)
    if position is not None:
        return [i for i in keep if i <= position]
    end, whole_day = _time_bound(series, bound)
    if whole_day:
        return [i for i in keep if series.times[i] < end + timedelta(days=1)]
    return [i for i in keep if series.times[i] <= end]


# Commits an ambiguous prefix's error names (a short prefix can match every commit).
AMBIGUOUS_SHOWN = 5


def _commit_position(series: MetricSeries, bound: str, *, first: bool) -> int | None:
    """Index of the run of commit ``bound`` (exact, or a unique prefix); None if no commit
    matches. ``first`` picks the earliest run of that commit, else the latest."""
    exact = [i for i, commit in enumerate(series.commits) if commit == bound]
    if not exact and len(bound) >= MIN_COMMIT_PREFIX:
        exact = [i for i, c in enumerate(series.commits) if c is not None and c.startswith(bound)]
        matched = {series.commits[i] for i in exact}
        if len(matched) > 1:
            commits = sorted(c for c in matched if c is not None)
            shown = ", ".join(commits[:AMBIGUOUS_SHOWN])
            if len(commits) > AMBIGUOUS_SHOWN:
                shown += f" and {len(commits) - AMBIGUOUS_SHOWN} more"
            raise series.error(
                f"commit prefix {bound!r} is ambiguous ({len(commits)} commits): {shown}"
            )
    if not exact:
        return None
    return exact[0] if first else exact[-1]


def _time_bound(series: MetricSeries, bound: str) -> tuple[datetime, bool]:
    """``bound`` as a UTC time and whether it was a bare date."""
    try:
        moment = datetime.fromisoformat(bound)
    except ValueError:
        raise series.error(
            f"{bound!r} is neither a commit of this series (or a prefix of one, at least "
            f"{MIN_COMMIT_PREFIX} characters) nor an ISO 8601 date or date-time"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC), len(bound) == len("2024-01-31")
