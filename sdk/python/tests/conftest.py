"""The suites run against a real daemon: AGENTBOX_URL and AGENTBOX_API_KEY
(set by test/e2e's TestPythonSDK, which starts one). AGENTBOX_OTHER_API_KEY
is a second tenant's key. Without AGENTBOX_URL the live tests are skipped
with that reason; the Go test always sets it."""

from __future__ import annotations

import os
import sys
from typing import AsyncIterator, Iterator

import pytest
import pytest_asyncio

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from agentbox import AsyncSandbox, Sandbox  # noqa: E402

LIVE = bool(os.environ.get("AGENTBOX_URL"))


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    if LIVE:
        return
    skip = pytest.mark.skip(reason="needs a daemon: set AGENTBOX_URL (test/e2e TestPythonSDK does)")
    for item in items:
        if "live" in item.keywords:
            item.add_marker(skip)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "live: needs a running agentbox daemon")


@pytest.fixture
def sbx() -> Iterator[Sandbox]:
    with Sandbox.create(timeout=300) as s:
        yield s


@pytest_asyncio.fixture
async def asbx() -> AsyncIterator[AsyncSandbox]:
    async with AsyncSandbox.create(timeout=300) as s:
        yield s
