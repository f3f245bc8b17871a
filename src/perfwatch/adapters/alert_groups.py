"""Alert groups: the verdicts of one incident posted as one message.

Alertmanager's grouping, under its names. The first verdict of an incident the
forwarder has not posted yet starts its group, which waits `wait_s` collecting
the incident's later verdicts and its members' evidence updates; then one
message says the incident as it stands. Later changes to a posted incident are
batched: at most one message per `interval_s`, and only when the incident has
at least doubled or emptied since the last message (`is_news`). A member's new
evidence alone is no news: it shows in the incident's next message.

The message depends only on the verdicts read: the newest incident verdict,
its members' changes replaced by their newest evidence, and what joined or
left since the last message. This is bookkeeping over decoded verdicts and a
time the caller passes; the caller reads, posts and acknowledges. A group keeps
what it read (`held`) until it is due, so that it is acknowledged only once its
message was posted.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import orjson

from perfwatch.adapters.verdict_feed import block, listed

Held = TypeVar("Held")

INCIDENT_KINDS = ("incident.opened", "incident.updated")
_EVIDENCE_KINDS = ("change_point.confirmed", "change_point.updated")


@dataclass
class _Group(Generic[Held]):
    latest: Mapping[str, Any]  # the newest incident verdict read
    posted: set[str] | None  # finding ids in the last message; None: nothing posted yet
    posted_at: float | None = None
    evidence: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # newest per finding
    due: float | None = None
    held: list[Held] = field(default_factory=list)
    # the finding ids indexed to this group, so forgetting it costs its own size
    findings: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class DueGroup(Generic[Held]):
    """A group whose time came: the verdict to post (None: nothing worth a message)
    and what to acknowledge once it is posted."""

    message: dict[str, Any] | None
    held: list[Held]


class AlertGroups(Generic[Held]):
    """The incidents being grouped, by incident id.

    `capacity` bounds the incidents remembered: the oldest with nothing held is
    forgotten first (a later verdict of it then starts a group as after a restart).
    """

    def __init__(self, wait_s: float = 30.0, interval_s: float = 300.0, capacity: int = 10_000):
        if wait_s < 0 or interval_s < 0:
            raise ValueError(f"group times must not be negative, got {wait_s}, {interval_s}")
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.wait_s = wait_s
        self.interval_s = interval_s
        self.capacity = capacity
        self._groups: OrderedDict[str, _Group[Held]] = OrderedDict()
        # finding id -> the incident whose newest verdict lists it: a finding grouped
        # by its commit range under an earlier commit names its own commit's incident
        self._incident_of: dict[str, str] = {}

    def offer(self, verdict: Mapping[str, Any], held: Held, now: float) -> bool:
        """Take the verdict into its incident's group; False if it belongs to none.

        Incident verdicts always belong to one. A change point's verdict belongs
        to the group of the incident its finding names, if the forwarder knows it.
        """
        kind = verdict.get("kind")
        if kind in INCIDENT_KINDS:
            incident = block(verdict, "incident")
            incident_id = str(incident.get("id", ""))
            group = self._groups.get(incident_id)
            if group is None:
                known = None if kind == "incident.opened" else _known_before(incident)
                group = _Group(verdict, known)
                self._remember(incident_id, group)
            group.latest = verdict
            for finding_id in listed(incident, "joined"):
                # (re)joined with its current evidence: older updates no longer apply
                group.evidence.pop(str(finding_id), None)
            self._index_members(incident_id, incident)
        else:
            finding = block(verdict, "finding")
            finding_id = str(finding.get("id", ""))
            incident_id = self._incident_of.get(finding_id, str(finding.get("incident", "")))
            found = self._groups.get(incident_id)
            if found is None or not str(kind).startswith("change_point."):
                return False
            group = found
            if kind in _EVIDENCE_KINDS and "id" in finding:
                group.evidence[str(finding["id"])] = block(verdict, "change_point")
        group.held.append(held)
        if group.due is None:
            group.due = (
                now + self.wait_s
                if group.posted_at is None
                else max(now, group.posted_at + self.interval_s)
            )
        return True

    def due(self, now: float) -> list[DueGroup[Held]]:
        """The groups due by `now` (soonest first), each settled as if its message was posted."""
        ready = sorted(
            (group.due, incident_id)
            for incident_id, group in self._groups.items()
            if group.due is not None and group.due <= now
        )
        return [self._settle(self._groups[incident_id], now) for _, incident_id in ready]

    def flush(self) -> list[DueGroup[Held]]:
        """Every group holding verdicts, at once: the input ended."""
        return self.due(math.inf)

    @property
    def holding(self) -> int:
        """Verdicts held, not yet acknowledged."""
        return sum(len(group.held) for group in self._groups.values())

    def _settle(self, group: _Group[Held], now: float) -> DueGroup[Held]:
        incident = dict(block(group.latest, "incident"))
        members = [
            _with_evidence(member, group.evidence)
            for member in listed(incident, "members")
            if isinstance(member, Mapping)
        ]
        ids = _member_ids(members)
        message = None
        if group.posted is None:
            if members:
                incident.pop("joined", None)
                incident.pop("left", None)
                message = {**group.latest, "kind": "incident.opened"}
        elif is_news(len(group.posted), len(members)):
            incident.pop("joined", None)
            incident.pop("left", None)
            if joined := sorted(ids - group.posted):
                incident["joined"] = joined
            if left := sorted(group.posted - ids):
                incident["left"] = left
            message = {**group.latest, "kind": "incident.updated"}
        if message is not None:
            message["incident"] = {**incident, "members": members}
            message["verdict_id"] = _message_id(message)
            group.posted, group.posted_at = ids, now
        held, group.held, group.due = group.held, [], None
        return DueGroup(message, held)

    def _index_members(self, incident_id: str, incident: Mapping[str, Any]) -> None:
        group = self._groups[incident_id]
        for finding_id in map(str, listed(incident, "left")):
            group.findings.discard(finding_id)
            if self._incident_of.get(finding_id) == incident_id:
                del self._incident_of[finding_id]
        for finding_id in _member_ids(listed(incident, "members")):
            before = self._incident_of.get(finding_id)
            if before is not None and before != incident_id:
                self._groups[before].findings.discard(finding_id)
            self._incident_of[finding_id] = incident_id
            group.findings.add(finding_id)

    def _remember(self, incident_id: str, group: _Group[Held]) -> None:
        self._groups[incident_id] = group
        if len(self._groups) > self.capacity:
            idle = next((key for key, old in self._groups.items() if not old.held), None)
            if idle is not None:
                for finding_id in self._groups.pop(idle).findings:
                    del self._incident_of[finding_id]


def is_news(posted: int, now: int) -> bool:
    """Whether an incident whose last message listed `posted` series and that now has
    `now` is worth another: it emptied, or it has at least doubled.

    Relative to the last message, not to fixed sizes: the team was told of
    `posted` series, and a few more are not news until they are as many again.
    An incident growing one series at a time posts at 1, 2, 4, 8, ... series, as
    `is_alert` does for single verdicts; one first posted with 3 posts next at 6.
    """
    return now == 0 < posted or (now > 0 and now >= 2 * posted)


def _message_id(message: Mapping[str, Any]) -> str:
    """A grouped message's own verdict id: a hash of what it says (32 hex digits).

    It is not the incident verdict it was made from (its members carry their newest
    evidence, `joined` and `left` count from the last message), so it must not take
    that verdict's id; the same verdicts read give the same message and id.
    """
    said = {name: value for name, value in message.items() if name != "verdict_id"}
    return hashlib.sha256(orjson.dumps(said, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


def _known_before(incident: Mapping[str, Any]) -> set[str]:
    """The members an update's incident had before it: what a forwarder that has
    not seen the incident takes as posted (by the forwarder before a restart)."""
    joined = {str(item) for item in listed(incident, "joined")}
    left = {str(item) for item in listed(incident, "left")}
    return (_member_ids(listed(incident, "members")) - joined) | left


def _member_ids(members: list[Any]) -> set[str]:
    return {str(member.get("finding_id")) for member in members if isinstance(member, Mapping)}


def _with_evidence(
    member: Mapping[str, Any], evidence: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    newest = evidence.get(str(member.get("finding_id")), {})
    return {
        **member,
        **{
            name: newest[name] for name in ("forward_change_percent", "direction") if name in newest
        },
    }
