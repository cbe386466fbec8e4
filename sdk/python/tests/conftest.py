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

# test/e2e's TestPythonSDK runs the suites against the wheel installed in a
# virtual environment (AGENTBOX_SDK_INSTALLED=1, the route docs/python.md
# gives); run by hand they import the sources beside them.
if not os.environ.get("AGENTBOX_SDK_INSTALLED"):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from agentbox import AsyncSandbox, Sandbox  # noqa: E402

if os.environ.get("AGENTBOX_SDK_INSTALLED"):
    import agentbox  # noqa: E402

    _src = os.path.realpath(os.path.join(os.path.dirname(__file__), ".."))
    assert not os.path.realpath(agentbox.__file__).startswith(_src + os.sep), (
        "AGENTBOX_SDK_INSTALLED is set but agentbox comes from the sources: " + agentbox.__file__
    )

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
