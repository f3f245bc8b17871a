"""Calls to the Pulsar admin REST API that the processor makes."""

from __future__ import annotations

import logging

import httpx

log = logging.getLogger("perfwatch.processor")

_ADMIN_TIMEOUT_S = 10.0


def enable_verdict_deduplication(admin_url: str, topic: str, auth_token: str | None = None) -> bool:
    """Turn on broker deduplication for the verdicts topic (topic policy); True on success.

    With it, a verdict re-sent after a crash under the same producer name and
    sequence id is dropped by the broker.
    """
    path = "/admin/v2/" + topic.replace("://", "/", 1) + "/deduplicationEnabled"
    headers = {"Authorization": f"Bearer {auth_token}"} if auth_token else {}
    try:
        response = httpx.post(
            admin_url.rstrip("/") + path, json=True, headers=headers, timeout=_ADMIN_TIMEOUT_S
        )
        status, answer = response.status_code, response.text
    except httpx.HTTPError as err:
        status, answer = 0, str(err)
    if status in (200, 204):
        return True
    log.warning(
        "could not enable deduplication on the verdicts topic; the outbox read-back "
        "still prevents duplicates after a processor crash",
        extra={"topic": topic, "status": status, "answer": answer[:200]},
    )
    return False
