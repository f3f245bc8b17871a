"""Calls to the Pulsar admin REST API that the processor and `forward` make at start.

Topic policies apply to a topic that exists (the broker answers 404 for one
that does not, and a topic created by the first producer comes too late), so
the topics are created first. On the verdicts topic: deduplication, and on it
and the dead-letter topic: retention, so that what the processor published is
still there for a reader that comes later (without a retention policy and
without a subscription the broker may delete a message as soon as its ledger
is closed). `forward` sets the same retention on its topic of undeliverable
verdicts.

A call that fails is reported, not raised: the commands work without these
policies, with the risks each report names. The processor logs the report;
a command may take it with `on_failure`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import httpx

from perfwatch.config import TopicsConfig, full_topic_name

log = logging.getLogger("perfwatch.processor")

_ADMIN_TIMEOUT_S = 10.0

FailureReport = Callable[[str, dict[str, Any]], None]
"""Takes what failed and its consequence, and the details: topic, HTTP status
(0: no answer) and the broker's answer."""


def _log_failure(message: str, details: dict[str, Any]) -> None:
    log.warning(message, extra=details)


def _topic_path(topic: str) -> str:
    """`persistent://tenant/namespace/name` -> `/admin/v2/persistent/tenant/namespace/name`,
    the short forms Pulsar accepts (`name`, `tenant/namespace/name`) completed first."""
    return "/admin/v2/" + full_topic_name(topic).replace("://", "/", 1)


def _call(
    admin_url: str, method: str, path: str, auth_token: str | None, body: Any = None
) -> tuple[int, str]:
    """(status, answer) of one admin call; status 0 when the broker did not answer."""
    headers = {"Authorization": f"Bearer {auth_token}"} if auth_token else {}
    try:
        response = httpx.request(
            method,
            admin_url.rstrip("/") + path,
            json=body,
            headers=headers,
            timeout=_ADMIN_TIMEOUT_S,
        )
    except httpx.HTTPError as err:
        return 0, str(err)
    return response.status_code, response.text


def _succeeded(
    status: int,
    answer: str,
    what: str,
    topic: str,
    consequence: str,
    on_failure: FailureReport,
) -> bool:
    if status in (200, 204):
        return True
    on_failure(
        f"could not {what}; {consequence}",
        {"topic": topic, "status": status, "answer": answer[:200]},
    )
    return False


def create_topic(
    admin_url: str,
    topic: str,
    auth_token: str | None = None,
    on_failure: FailureReport = _log_failure,
) -> bool:
    """Create the (non-partitioned) topic unless it exists; True when it exists now."""
    status, answer = _call(admin_url, "PUT", _topic_path(topic), auth_token)
    if status == 409:  # there already, possibly partitioned: its policies apply the same
        return True
    return _succeeded(
        status,
        answer,
        "create the topic",
        topic,
        "its policies cannot be set before it exists",
        on_failure,
    )


def enable_verdict_deduplication(admin_url: str, topic: str, auth_token: str | None = None) -> bool:
    """Create the verdicts topic if needed and turn on broker deduplication for it (topic
    policy); True on success.

    With it, a verdict re-sent after a crash under the same producer name and
    sequence id is dropped by the broker.
    """
    if not create_topic(admin_url, topic, auth_token):
        return False
    status, answer = _call(
        admin_url, "POST", _topic_path(topic) + "/deduplicationEnabled", auth_token, True
    )
    return _succeeded(
        status,
        answer,
        "enable deduplication on the verdicts topic",
        topic,
        "the outbox read-back still prevents duplicates after a processor crash",
        _log_failure,
    )


def set_retention(
    admin_url: str,
    topic: str,
    minutes: int,
    megabytes: int,
    auth_token: str | None = None,
    on_failure: FailureReport = _log_failure,
) -> bool:
    """Create the topic if needed and keep its messages for `minutes` and up to
    `megabytes` (-1: no limit) after they are consumed or when none consumes them."""
    if not create_topic(admin_url, topic, auth_token, on_failure):
        return False
    status, answer = _call(
        admin_url,
        "POST",
        _topic_path(topic) + "/retention",
        auth_token,
        {"retentionTimeInMinutes": minutes, "retentionSizeInMB": megabytes},
    )
    return _succeeded(
        status,
        answer,
        "set the retention of the topic",
        topic,
        "the namespace's retention applies (none by default: messages nobody subscribes "
        "to may be deleted)",
        on_failure,
    )


def prepare_topics(admin_url: str, topics: TopicsConfig, auth_token: str | None = None) -> None:
    """Deduplication on the verdicts topic, retention on it and on the dead-letter topic.
    Failures are logged: the processor works without them, with the risks they name."""
    enable_verdict_deduplication(admin_url, topics.verdicts, auth_token)
    for topic in (topics.verdicts, topics.dead_letter):
        set_retention(admin_url, topic, topics.retention_minutes, topics.retention_mb, auth_token)
