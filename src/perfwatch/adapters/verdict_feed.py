"""Reading the verdicts topic: which verdicts a reader wants, and a summary of each.

Shared by `perfwatch watch` (prints a line per summary), `perfwatch forward` (posts
them to a webhook) and the dashboard. Verdicts are handled as decoded JSON documents so that a
verdict from a newer perfwatch with extra fields is still shown.
"""

from __future__ import annotations

import fnmatch
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, get_args

from perfwatch.contract.models import VerdictKind
from perfwatch.contract.timestamps import parse_rfc3339, parse_time_or_date

if TYPE_CHECKING:
    import pulsar

KINDS: tuple[str, ...] = get_args(VerdictKind)
KIND_FAMILIES: tuple[str, ...] = tuple(sorted({kind.partition(".")[0] for kind in KINDS}))


def unknown_kind_error(wanted: str) -> str | None:
    """Why `wanted` selects no verdict kind (None: it is a kind or a family), for `--kind`
    and the dashboard's `kind` parameter alike."""
    if wanted in KINDS or wanted in KIND_FAMILIES:
        return None
    return (
        f"unknown kind {wanted!r}; use one of {', '.join(KINDS)} or a family "
        f"({', '.join(KIND_FAMILIES)})"
    )


def kind_selected(kind: str, wanted: Sequence[str]) -> bool:
    """Whether `kind` is one of `wanted`, each an exact kind or a family ("change_point");
    an empty `wanted` selects every kind."""
    return not wanted or any(kind == one or kind.startswith(f"{one}.") for one in wanted)


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_SECONDS_PER_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(text: str, now: datetime) -> datetime:
    """`--since`: an RFC 3339 time, a date (midnight UTC) or an age such as 90s, 15m, 2h, 3d, 1w."""
    duration = _DURATION.match(text.strip())
    if duration:
        amount, unit = duration.groups()
        return now - timedelta(seconds=float(amount) * _SECONDS_PER_UNIT[unit])
    try:
        return parse_time_or_date(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is neither a time (2024-05-01T02:00:00Z), a date (2024-05-01) "
            "nor an age (90s, 15m, 2h, 3d, 1w)"
        ) from None


def is_regression(verdict: Mapping[str, Any]) -> bool:
    """A regression: a change point's, the counter check's, or an incident with a
    regression among its series (an incident is how confirmed findings alert)."""
    kind = verdict.get("kind")
    if kind == "counter_regression.detected":
        return True
    if kind in ("change_point.detected", "change_point.confirmed", "change_point.updated"):
        return block(verdict, "change_point").get("direction") == "regression"
    if kind in ("incident.opened", "incident.updated"):
        return any(member.get("direction") == "regression" for member in _members(verdict))
    return False


def _members(verdict: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """An incident verdict's members (none for other kinds)."""
    return [m for m in listed(block(verdict, "incident"), "members") if isinstance(m, Mapping)]


def is_alert(verdict: Mapping[str, Any]) -> bool:
    """Whether alerting consumers act on the verdict.

    Not: a change point's verdict whose finding is not confirmed (yet, or ever:
    retracted unconfirmed); the confirmation, move or retraction of a finding in
    an incident (the incident's own verdict says it, once for all its series);
    an update that changed only the p-value; an incident's update unless it
    grew to a power of two series (2, 4, 8, ...) or emptied (a change confirmed in
    40 series one after the other posts 6 messages, each with every series so far).
    A verdict without a finding block comes from a perfwatch before findings had
    a lifecycle: an alert. A suspicion (opened or withdrawn) is never an alert:
    one run out of line is often an outlier. Nor is a counter check that found
    nothing (passed, or a baseline too small to judge): no problem to act on.
    """
    kind = str(verdict.get("kind", ""))
    if kind in SUSPICION_KINDS or kind in QUIET_CHECK_KINDS:
        return False
    if kind == "incident.updated":
        incident = block(verdict, "incident")
        after = len(listed(incident, "members"))
        before = after - len(listed(incident, "joined")) + len(listed(incident, "left"))
        return _grew_past_a_power_of_two_or_emptied(before, after)
    if not kind.startswith("change_point."):
        return True
    finding = block(verdict, "finding")
    if finding.get("confirmed", True) is not True:
        return False
    changed = finding.get("changed")
    changed = set(changed) if isinstance(changed, list) else set()
    if changed and "moved" not in changed:
        return not changed <= {"pvalue"}
    return "incident" not in finding


SUSPICION_KINDS = ("change_point.suspected", "change_point.withdrawn")
QUIET_CHECK_KINDS = ("counter_check.passed", "counter_check.insufficient_baseline")


def _grew_past_a_power_of_two_or_emptied(before: int, after: int) -> bool:
    """Whether an incident of `before` series that now has `after` is worth an alert:
    it emptied, or grew past a power of two (1, 2, 4, 8, ... series)."""
    return after == 0 < before or (after > before and before < 1 << (after.bit_length() - 1))


def listed(doc: Mapping[str, Any], name: str) -> list[Any]:
    """The field `name` if it is a list, else an empty one."""
    value = doc.get(name)
    return value if isinstance(value, list) else []


def block(verdict: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """The verdict's field `name` if it is an object, else an empty one."""
    value = verdict.get(name)
    return value if isinstance(value, Mapping) else {}


@dataclass
class VerdictFilter:
    """Which verdicts to keep; an empty `tests` or `kinds` keeps all.

    An incident kept for its series (`tests`) or for a regression among them
    (`regressions_only`) is followed: its later verdicts pass those two filters
    whatever its members are then, so a reader told of an incident also hears that it
    emptied (its update then has no member to judge). A filter follows the incidents of
    the verdicts it has been shown, so a reader started after an incident opened (not
    from the earliest verdict) does not hear of it emptying either.
    """

    tests: Sequence[str] = ()  # globs on the series' test id (or an incident member's)
    kinds: Sequence[str] = ()  # exact kinds, or a family such as "change_point"
    regressions_only: bool = False
    since: datetime | None = None
    alerts_only: bool = False  # see is_alert
    _followed_incidents: set[str] = field(default_factory=set, init=False, repr=False)

    def accepts(self, verdict: Mapping[str, Any]) -> bool:
        followed = self._follows(verdict)
        if self.alerts_only and not is_alert(verdict):
            return False
        if not followed and not concerns_tests(verdict, self.tests):
            return False
        if not kind_selected(str(verdict.get("kind", "")), self.kinds):
            return False
        if self.regressions_only and not followed and not is_regression(verdict):
            return False
        if self.since is not None:
            try:
                emitted = parse_rfc3339(str(verdict.get("emitted_at")))
            except ValueError:
                return False
            if emitted < self.since:
                return False
        return True

    def _follows(self, verdict: Mapping[str, Any]) -> bool:
        """Whether the verdict is of an incident followed before it; starts or ends
        following its incident (an emptied incident's id can open again, afresh)."""
        if not (self.tests or self.regressions_only):
            return False
        incident = block(verdict, "incident")
        incident_id = incident.get("id")
        if not isinstance(incident_id, str):
            return False
        followed = incident_id in self._followed_incidents
        if not listed(incident, "members"):
            self._followed_incidents.discard(incident_id)
        elif concerns_tests(verdict, self.tests) and (
            not self.regressions_only or is_regression(verdict)
        ):
            self._followed_incidents.add(incident_id)
        return followed


def concerns_tests(verdict: Mapping[str, Any], globs: Sequence[str]) -> bool:
    """Whether the verdict is of a test matching one of `globs` (none: every verdict), for
    `--test` and the dashboard's `test` parameter alike."""
    if not globs:
        return True
    # an incident concerns every series in it, not only the one that changed last
    tests = {str(block(verdict, "series").get("test", ""))}
    tests.update(str(member.get("test", "")) for member in _members(verdict))
    return any(fnmatch.fnmatchcase(test, glob) for test in tests for glob in globs)


@dataclass
class MatchedTests:
    """The verdicts a reader read, and of them those of a test matching `globs`:
    a --test that matched none of them is likely mistyped, which a filter alone never
    shows (it passes nothing, as it would with no verdict of that test yet)."""

    globs: Sequence[str]
    read: int = 0
    matched: int = 0

    def note(self, verdict: Mapping[str, Any]) -> None:
        self.read += 1
        self.matched += concerns_tests(verdict, self.globs)

    def unmatched(self) -> str | None:
        """What to warn of when reading ends: None unless `globs` matched no verdict read."""
        if not self.globs or not self.read or self.matched:
            return None
        quoted = ", ".join(repr(glob) for glob in self.globs)
        return (
            f"no verdict of the {self.read} read is of a test matching --test {quoted}: "
            "check the name (a glob on the test id, such as 'tests/test_io.py::*')"
        )


# Characters of a commit a message shows (the dashboard shows as many).
COMMIT_CHARS = 12


def _percent(value: Any) -> str:
    return f"{value:+.1f}%" if isinstance(value, int | float) else ""


def pvalue_text(value: Any) -> str:
    """A p-value as the verdicts' lines show it (empty when there is none)."""
    return f"{value:.2g}" if isinstance(value, int | float) else ""


def _member_of(incident: Mapping[str, Any], series: Mapping[str, Any]) -> Mapping[str, Any]:
    """The incident's member block of `series` (empty when it is not a member: it left)."""
    for member in listed(incident, "members"):
        if isinstance(member, Mapping) and all(
            member.get(key) == series.get(key) for key in ("test", "metric", "attributes")
        ):
            return member
    return {}


def summary_fields(verdict: Mapping[str, Any]) -> dict[str, str]:
    """The verdict's facts as short strings: what a line or a chat message shows.

    Keys: label, kind, test, metric, attributes, change, pvalue, commit,
    commits (`after..last` when a commit range is known, else the commit),
    direction, emitted_at, verdict_id, run_id, detail, summary.
    """
    kind = str(verdict.get("kind", "?"))
    series = block(verdict, "series")
    attributes = series.get("attributes")
    evidence = block(verdict, "previous" if kind == "change_point.retracted" else "change_point")
    if kind in SUSPICION_KINDS:
        evidence = block(verdict, "suspicion")
    elif kind.startswith("counter_"):
        check = block(verdict, "counter_check")
        evidence = {"pvalue": check.get("pvalue"), "commit": block(check, "target").get("commit")}
    direction = str(evidence.get("direction", ""))
    commit = evidence.get("commit")
    fields = {
        "kind": kind,
        "test": str(series.get("test", "?")),
        "metric": str(series.get("metric", "")),
        "attributes": " ".join(f"{key}={value}" for key, value in attributes.items())
        if isinstance(attributes, Mapping)
        else "",
        "change": _percent(evidence.get("forward_change_percent")),
        "pvalue": pvalue_text(evidence.get("pvalue")),
        "commit": str(commit)[:COMMIT_CHARS] if commit else "",
        "direction": direction,
        "emitted_at": str(verdict.get("emitted_at", "")),
        "verdict_id": str(verdict.get("verdict_id", "")),
        "run_id": str(verdict.get("record_run_id", "")),
    }
    fields["label"], fields["detail"] = _label_and_detail(kind, verdict, direction)
    if kind.startswith("incident."):
        # about many series: the one whose change caused this event is not the point
        incident = block(verdict, "incident")
        cause = _member_of(incident, series)
        fields["change"] = _percent(cause.get("forward_change_percent"))
        fields["direction"] = str(cause.get("direction", ""))
        fields["commit"] = str(incident.get("commit", ""))[:COMMIT_CHARS]
        fields["commits"] = _commits(block(incident, "commit_range"), fields["commit"])
        fields["summary"] = f"{fields['label']} {fields['detail']}"
        return fields
    fields["commits"] = _commits(block(block(verdict, "finding"), "commit_range"), fields["commit"])
    # a counter check's detail gives its p-value next to the rule that judged it
    pvalue = "" if kind.startswith("counter_") else fields["pvalue"]
    fields["summary"] = " ".join(
        part
        for part in (
            fields["label"],
            fields["test"],
            fields["metric"],
            fields["change"],
            f"p={pvalue}" if pvalue else "",
            _place(fields["commits"]) if fields["commits"] else "",
            fields["detail"],
            f"[{fields['attributes']}]" if fields["attributes"] else "",
        )
        if part
    )
    return fields


def _label_and_detail(kind: str, verdict: Mapping[str, Any], direction: str) -> tuple[str, str]:
    if kind.startswith("change_point."):
        action = kind.removeprefix("change_point.")
        if action == "retracted":
            return "RETRACTED", f"({direction} no longer seen)"
        if action in ("suspected", "withdrawn"):
            suspicion = block(verdict, "suspicion")
            return action.upper(), f"(run {suspicion.get('run_id', '?')}, {direction})"
        label = {"regression": "REGRESSION", "improvement": "IMPROVEMENT"}.get(direction, "CHANGE")
        episode = block(verdict, "episode")
        fix = block(episode, "fix")
        if fix:
            regression = block(episode, "regression")
            label = "FIXED" if direction != "regression" else label
            return label, (
                f"(regression {_percent(regression.get('forward_change_percent'))} at run "
                f"{regression.get('run_id', '?')}, fixed at run {fix.get('run_id', '?')})"
            )
        finding = block(verdict, "finding")
        changed = finding.get("changed")
        if action == "updated":
            # an update without a finding block (an older perfwatch) is a move
            if not isinstance(changed, list) or "moved" in changed:
                return label, "(moved)"
            return label, f"(updated: {', '.join(map(str, changed))})"
        if finding.get("confirmed") is False:
            return label, "(unconfirmed)"
        return label, "(confirmed)" if action == "confirmed" else ""
    if kind.startswith("counter_"):
        label = _COUNTER_LABELS.get(kind, kind.upper())
        return label, f"(counters: {counter_detail(block(verdict, 'counter_check'))})"
    if kind.startswith("incident."):
        return "INCIDENT", _incident_detail(block(verdict, "incident"))
    if kind == "recommendation":
        advice = block(verdict, "recommendation")
        share = advice.get("run_share")
        votes = f"{share:.0%} of votes say run" if isinstance(share, int | float) else ""
        return str(advice.get("decision", "?")).upper(), f"({votes})" if votes else ""
    return kind.upper(), ""


_INCIDENT_MEMBERS_SHOWN = 10
# Counters a counter verdict's line names to look at first (the block lists more).
_LOOK_FIRST_SHOWN = 3


def counter_detail(check: Mapping[str, Any]) -> str:
    """`1 of 2 cluster(s) flagged, p=1.1e-13, look first at cpu, requests`; what a
    counter check without a verdict (one baseline run) is instead."""
    outcome = check.get("status", check.get("verdict"))
    if outcome == "insufficient_baseline":
        return "no verdict, a baseline of one run shows no run-to-run variation to judge by"
    if "clusters" not in check:
        return str(outcome or "?")
    clusters = [c for c in listed(check, "clusters") if isinstance(c, Mapping)]
    flagged = sum(1 for c in clusters if c.get("flagged") is True)
    parts = [f"{flagged} of {len(clusters)} cluster(s) flagged"]
    pvalue = pvalue_text(check.get("pvalue"))
    threshold = check.get("threshold")
    if pvalue:
        parts.append(f"p={pvalue}")
    elif check.get("decision") == "threshold" and isinstance(threshold, int | float):
        parts.append(f"threshold {100 * threshold:g}%")
    look_first = [str(name) for name in listed(check, "look_first")]
    if look_first:
        more = len(look_first) - _LOOK_FIRST_SHOWN
        parts.append(
            "look first at "
            + ", ".join(look_first[:_LOOK_FIRST_SHOWN])
            + (f" and {more} more" if more > 0 else "")
        )
    return ", ".join(parts)


_COUNTER_LABELS = {
    "counter_regression.detected": "REGRESSION",
    "counter_check.passed": "PASSED",
    "counter_check.insufficient_baseline": "NO VERDICT",
}


def _incident_detail(incident: Mapping[str, Any]) -> str:
    """`commit abc: 3 series: REGRESSION t/m +5.0%, ...` (the first ten, then how many more)."""
    members = incident.get("members")
    members = members if isinstance(members, list) else []
    parts = [_member_text(m) for m in members[:_INCIDENT_MEMBERS_SHOWN] if isinstance(m, Mapping)]
    if len(members) > _INCIDENT_MEMBERS_SHOWN:
        parts.append(f"and {len(members) - _INCIDENT_MEMBERS_SHOWN} more")
    joined = incident.get("joined")
    news = f" ({len(joined)} new)" if isinstance(joined, list) and joined else ""
    commit = str(incident.get("commit", "?"))[:COMMIT_CHARS]
    into = block(incident, "merged_into")
    if into and not members:
        target = str(into.get("commit"))[:COMMIT_CHARS]
        return f"(commit {commit}: merged into the incident of commit {target})"
    place = _place(_commits(block(incident, "commit_range"), commit))
    return f"({place}: {len(members)} series{news}: {', '.join(parts)})"


def _commits(commit_range: Mapping[str, Any], commit: str) -> str:
    """`after..last` (git's notation: the commits after `after`, up to `last`), or the commit."""
    after, last = commit_range.get("after"), commit_range.get("last")
    if isinstance(after, str) and isinstance(last, str):
        return f"{after[:COMMIT_CHARS]}..{last[:COMMIT_CHARS]}"
    return commit


def _place(commits: str) -> str:
    return f"commits {commits}" if ".." in commits else f"commit {commits}"


def _member_text(member: Mapping[str, Any]) -> str:
    """`REGRESSION t m +5.0%`, or `FIXED t m -4.8% (regression +5.0% at run R)`."""
    fixes = block(member, "fixes")
    label = "FIXED" if fixes else str(member.get("direction", "")).upper()
    fixed = (
        f"(regression {_percent(fixes.get('forward_change_percent'))} at run "
        f"{fixes.get('run_id', '?')})"
        if fixes
        else ""
    )
    parts = (
        label,
        str(member.get("test", "?")),
        str(member.get("metric", "")),
        _percent(member.get("forward_change_percent")),
        fixed,
    )
    return " ".join(part for part in parts if part)


class ReaderFeed:
    """A Pulsar Reader read like a consumer: it holds no subscription the broker keeps,
    so a reader that is killed leaves nothing behind; there is nothing to acknowledge."""

    def __init__(self, reader: pulsar.Reader) -> None:
        self._reader = reader

    def receive(self, timeout_millis: int) -> pulsar.Message:
        return self._reader.read_next(timeout_millis)

    def acknowledge(self, message: pulsar.Message) -> None:
        """Nothing to do: a reader keeps its position itself."""

    def close(self) -> None:
        self._reader.close()


def receive_messages(
    consumer: pulsar.Consumer,
    *,
    idle_timeout_s: float | None = None,
    poll_ms: int = 200,
    clock: Callable[[], float] = time.monotonic,
    stop: threading.Event | None = None,
) -> Iterator[pulsar.Message]:
    """Messages as they arrive; ends after `idle_timeout_s` without one (None: never) or
    once `stop` is set."""
    polls = receive_polls(
        consumer, idle_timeout_s=idle_timeout_s, poll_ms=poll_ms, clock=clock, stop=stop
    )
    return (message for message in polls if message is not None)


def receive_polls(
    consumer: pulsar.Consumer,
    *,
    idle_timeout_s: float | None = None,
    poll_ms: int = 200,
    clock: Callable[[], float] = time.monotonic,
    stop: threading.Event | None = None,
) -> Iterator[pulsar.Message | None]:
    """The message of each poll as it arrives, None for a poll of `poll_ms` that got none
    (for a reader that acts on time passing too); ends after `idle_timeout_s` without one
    or, between two polls, once `stop` is set."""
    import pulsar

    last_seen = clock()
    while stop is None or not stop.is_set():
        try:
            message = consumer.receive(timeout_millis=poll_ms)
        except pulsar.Timeout:
            if idle_timeout_s is not None and clock() - last_seen >= idle_timeout_s:
                return
            yield None
            continue
        last_seen = clock()
        yield message


class SeenVerdicts:
    """The verdict ids seen lately, so a verdict the topic carries twice is shown once.

    Equal ids are the same verdict. The processor sends none twice to a broker
    with deduplication, but the embedded broker has none (see docs/processor.md).
    Only the newest `capacity` ids are kept: a repeat arrives close behind.
    """

    def __init__(self, capacity: int = 100_000) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def first_time(self, verdict: Mapping[str, Any]) -> bool:
        """True the first time this verdict's id is offered (and always without an id)."""
        verdict_id = verdict.get("verdict_id")
        if not isinstance(verdict_id, str):
            return True
        if verdict_id in self._ids:
            return False
        self._ids[verdict_id] = None
        if len(self._ids) > self.capacity:
            self._ids.popitem(last=False)
        return True
