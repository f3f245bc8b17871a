"""The uploader's performance suite: one test, one parametrized case per payload.

CONFIG_SERVICE_VERSION picks the code (baseline, bottleneck, refactor) and
CONFIG_SERVICE_INPUTS how many payloads are generated (default 300).

    perfwatch profile -o baseline.json -- examples/config_service/perf_suite
"""

import os
from collections.abc import Callable

import pytest
from config_service import payloads, versions

VERSION = os.environ.get("CONFIG_SERVICE_VERSION", versions.BASELINE)
PAYLOADS = payloads.generate(int(os.environ.get("CONFIG_SERVICE_INPUTS", "300")), seed=1)


@pytest.mark.parametrize("text", [text for _, text in PAYLOADS], ids=[i for i, _ in PAYLOADS])
def test_upload(text: str, record_property: Callable[[str, object], None]) -> None:
    record_property("input_size", len(text))
    summary = versions.load(VERSION).upload(text, {})
    assert summary["iovs"] == text.count('"since"')
