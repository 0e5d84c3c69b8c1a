"""Harness tests run on both anyio backends where the harness allows it."""

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every `@pytest.mark.anyio` test here runs once on asyncio and once on trio."""
    return str(request.param)
