"""The example services, each served on 127.0.0.1 and a free port while a test runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI

from examples.agent_server import create_agent_app
from examples.resources_server import create_resources_app
from examples.serving import ServedApp
from quiesce.adapters import configure_logging

TOKEN = "example-token"


@pytest.fixture
def resources(tmp_path: Path) -> Iterator[ServedApp]:
    configure_logging("warning")
    with ServedApp(lambda d: create_resources_app(d, token=TOKEN), tmp_path / "res") as served:
        yield served


@pytest.fixture
def agent(tmp_path: Path, resources: ServedApp) -> Iterator[ServedApp]:
    def make(state_dir: Path) -> FastAPI:
        return create_agent_app(state_dir, token=TOKEN, resources_url=resources.url)

    with ServedApp(make, tmp_path / "agent") as served:
        yield served
