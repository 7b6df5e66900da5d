"""Fixtures of the runtime unit tests: a recording HTTP server and a Client on it.

Modules that need another kind of server (a fake API server with watches, a webhook or probe
server) define their own ``server`` and ``client``, which take precedence over these.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bridge.runtime.client import Client
from bridge.runtime.session import Session
from tests.fixtures.recording_apiserver import RecordingServer


@pytest.fixture
async def server() -> AsyncIterator[RecordingServer]:
    fake = RecordingServer()
    await fake.start()
    yield fake
    await fake.close()


@pytest.fixture
async def client(server: RecordingServer) -> AsyncIterator[Client]:
    session = Session(base_url=server.base_url)
    yield Client(session)
    await session.close()
