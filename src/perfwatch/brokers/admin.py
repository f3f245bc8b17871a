"""Calls to a Pulsar broker's admin REST API: readiness, partitioned topics."""

from __future__ import annotations

import json
import ssl
from pathlib import Path
from typing import Any

import httpx

from perfwatch.brokers.handle import BrokerCapabilityError, BrokerError, BrokerHandle

_PERSISTENT_PREFIX = "persistent://"


def readiness_problem(admin_url: str, *, cluster: str = "standalone") -> str | None:
    """None when a Pulsar broker is ready to serve `public/default`, else what is missing.

    The web port answers before the standalone has created its cluster and default
    namespace; the health check then writes and reads a heartbeat topic, which
    proves the bookie works too.
    """
    checks = (
        ("/admin/v2/clusters", lambda body: cluster in json.loads(body)),
        ("/admin/v2/namespaces/public", lambda body: "public/default" in json.loads(body)),
        ("/admin/v2/brokers/health", lambda body: body.strip() == b"ok"),
    )
    for path, passes in checks:
        try:
            status, body = admin_request(admin_url, "GET", path, timeout=30.0)
        except OSError as error:
            return f"GET {path}: {error}"
        if status != 200:
            return f"GET {path}: HTTP {status}"
        try:
            if not passes(body):
                return f"GET {path}: not yet ({body[:200].decode(errors='replace')})"
        except ValueError:
            return f"GET {path}: unexpected answer {body[:200]!r}"
    return None


def admin_request(
    admin_url: str,
    method: str,
    path: str,
    *,
    body: Any = None,
    timeout: float = 10.0,
    auth_token: str | None = None,
    tls_trust_certs_file: str | Path | None = None,
) -> tuple[int, bytes]:
    """Call the Pulsar admin REST API; returns (HTTP status, body).

    Connection failures and timeouts raise OSError (callers polling for readiness
    retry on it).
    """
    headers = {"Authorization": f"Bearer {auth_token}"} if auth_token else {}
    content = None
    if body is not None:
        content = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    verify: ssl.SSLContext | bool = True
    if admin_url.startswith("https://"):
        verify = ssl.create_default_context(
            cafile=str(tls_trust_certs_file) if tls_trust_certs_file else None
        )
    url = admin_url.rstrip("/") + path
    try:
        response = httpx.request(
            method, url, content=content, headers=headers, timeout=timeout, verify=verify
        )
    except httpx.TransportError as error:
        raise OSError(f"{method} {url}: {error}") from error
    return response.status_code, response.content


def full_topic_name(topic: str) -> str:
    """``name`` -> ``persistent://public/default/name``; full names are checked."""
    if "://" not in topic:
        if "/" in topic:
            raise BrokerError(
                f"topic {topic!r}: give a bare name or persistent://tenant/namespace/name"
            )
        return f"{_PERSISTENT_PREFIX}public/default/{topic}"
    if not topic.startswith(_PERSISTENT_PREFIX) or topic.count("/") != 4:
        raise BrokerError(
            f"topic {topic!r}: partitioned topics must be persistent://tenant/namespace/name"
        )
    return topic


def ensure_partitioned_topic(
    broker: BrokerHandle,
    topic: str,
    partitions: int,
    *,
    auth_token: str | None = None,
    tls_trust_certs_file: str | Path | None = None,
) -> str:
    """Create `topic` with `partitions` partitions unless it exists with that many.

    Returns the full topic name. Raises BrokerCapabilityError on a broker without
    the admin API (the embedded broker, or an external one given no admin URL), and
    BrokerError when the topic exists with another partition count.
    """
    if partitions < 1:
        raise BrokerError(f"topic {topic!r}: partitions must be at least 1, got {partitions}")
    if broker.admin_url is None:
        if broker.kind == "embedded":
            reason = (
                "the embedded broker (pulsar-lite) has no admin REST API and cannot "
                "create partitioned topics; use a real Apache Pulsar broker "
                "(--pulsar-url pulsar://..., or `perfwatch dev pulsar`) for partitions"
            )
        else:
            reason = "no admin URL was given for this broker (pass admin_url)"
        raise BrokerCapabilityError(
            f"cannot create partitioned topic {topic!r} ({partitions} partitions): {reason}"
        )
    name = full_topic_name(topic)
    path = "/admin/v2/persistent/" + name.removeprefix(_PERSISTENT_PREFIX) + "/partitions"
    options = {"auth_token": auth_token, "tls_trust_certs_file": tls_trust_certs_file}
    status, body = admin_request(broker.admin_url, "PUT", path, body=partitions, **options)
    if status in (200, 204):
        return name
    if status != 409:
        raise BrokerError(
            f"creating partitioned topic {name} at {broker.admin_url} failed: "
            f"HTTP {status} {body.decode(errors='replace').strip()}"
        )
    status, body = admin_request(broker.admin_url, "GET", path, **options)
    if status != 200:
        raise BrokerError(
            f"topic {name} exists but its partition count could not be read: "
            f"HTTP {status} {body.decode(errors='replace').strip()}"
        )
    existing = json.loads(body).get("partitions", 0)
    if existing != partitions:
        raise BrokerError(
            f"topic {name} already exists with {existing} partitions, not {partitions}"
            + (" (it is not partitioned)" if existing == 0 else "")
        )
    return name
