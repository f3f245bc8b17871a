"""Shared fixtures: Pulsar brokers and unique topic names.

`pulsar_broker` (session) is a real Apache Pulsar, the first that is available of:
1. ``PERFWATCH_TEST_PULSAR_URL`` (an existing broker; ``PERFWATCH_TEST_PULSAR_ADMIN_URL``
   enables its admin API),
2. the ``apachepulsar/pulsar`` image through testcontainers when a Docker engine answers,
3. a local standalone from the Maven jars (``perfwatch dev pulsar --fetch-only`` fetches
   them ahead; otherwise the first test that needs it does).
With ``CI=true`` a broker that cannot be had fails the test; elsewhere a machine
without Java or Maven skips it with the reason.

Property tests draw the same examples on every run (hypothesis's ``derandomize``), so
the suite's outcome is reproducible; ``HYPOTHESIS_PROFILE=explore`` draws fresh ones.

`embedded_broker` (session) is the pulsar-lite broker, for tests that say the
embedded default is enough. `otava` (session) is Apache Otava 0.8, the reference
implementation, running in an environment of its own (``otava_reference.py``).
Tests using `pulsar_broker` get the ``pulsar`` marker, so ``-m "not pulsar"``
leaves them out.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from otava_reference import OtavaReference, ReferenceUnavailable
from perfwatch.brokers import open_broker
from perfwatch.brokers.handle import BrokerHandle

settings.register_profile("reproducible", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "reproducible"))

EXTERNAL_URL_ENV = "PERFWATCH_TEST_PULSAR_URL"
EXTERNAL_ADMIN_ENV = "PERFWATCH_TEST_PULSAR_ADMIN_URL"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def _docker_engine_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=5).ping()
    except Exception:  # no client library, no socket, engine down: all mean "no Docker"
        return False
    return True


def _missing_standalone_tools() -> list[str]:
    from perfwatch.brokers.standalone import jars_ready

    missing = [] if shutil.which("java") else ["java (Java 17+)"]
    if not jars_ready() and not shutil.which("mvn"):
        missing.append("mvn (Maven, to fetch the Pulsar jars)")
    return missing


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        # Also catches tests that pick the broker fixture by name through a parameter.
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "pulsar_broker" in getattr(item, "fixturenames", ()) or "pulsar_broker" in [
            value for value in params.values() if isinstance(value, str)
        ]:
            item.add_marker(pytest.mark.pulsar)


@pytest.fixture(scope="session")
def pulsar_jars() -> Path:
    """The lib folder of the Pulsar standalone, fetched with Maven when not cached."""
    from perfwatch.brokers.standalone import fetch_jars

    missing = _missing_standalone_tools()
    if missing:
        reason = f"no local Pulsar standalone: install {', '.join(missing)}"
        if in_ci():
            pytest.fail(f"CI needs the Pulsar standalone: {reason}")
        pytest.skip(reason)
    return fetch_jars()


@pytest.fixture(scope="session")
def pulsar_broker(request: pytest.FixtureRequest) -> Iterator[BrokerHandle]:
    """A real Apache Pulsar broker for the whole session (see the module docstring)."""
    external = os.environ.get(EXTERNAL_URL_ENV)
    if external:
        with open_broker(external, admin_url=os.environ.get(EXTERNAL_ADMIN_ENV)) as handle:
            yield handle
        return
    if _docker_engine_answers():
        with open_broker("container") as handle:
            yield handle
        return
    request.getfixturevalue("pulsar_jars")
    with open_broker("standalone") as handle:
        yield handle


@pytest.fixture(scope="session")
def embedded_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerHandle]:
    """The embedded pulsar-lite broker on a session-private data folder."""
    with open_broker(None, data_dir=tmp_path_factory.mktemp("embedded-broker")) as handle:
        yield handle


@pytest.fixture(scope="session")
def otava() -> Iterator[OtavaReference]:
    """Apache Otava 0.8 in its own environment, made on first use when not named."""
    try:
        reference = OtavaReference()
    except (ReferenceUnavailable, OSError) as error:
        if in_ci():
            pytest.fail(f"CI needs the Apache Otava reference: {error}")
        pytest.skip(f"no Apache Otava reference environment: {error}")
    with reference:
        yield reference


@pytest.fixture(params=["embedded_broker", "pulsar_broker"])
def each_broker(request: pytest.FixtureRequest) -> BrokerHandle:
    """Runs a test once on the embedded broker and once on real Apache Pulsar."""
    return request.getfixturevalue(request.param)


@pytest.fixture
def unique_topic(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """`unique_topic("records")` -> a persistent topic name no other test uses."""
    test_name = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name)[:60].strip("-")

    def make(purpose: str = "topic") -> str:
        return f"persistent://public/default/{test_name}-{purpose}-{uuid.uuid4().hex[:8]}"

    return make


@pytest.fixture(autouse=True)
def _restore_perfwatch_logger() -> Iterator[None]:
    """Commands run in-process configure the "perfwatch" logger (their own handler, no
    propagation); put it back, so a later test's caplog still sees its records."""
    logger = logging.getLogger("perfwatch")
    saved = (list(logger.handlers), logger.propagate, logger.level)
    yield
    logger.handlers[:], logger.propagate, logger.level = saved
