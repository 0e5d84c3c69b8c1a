"""Shared by the conformance kit's tests."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import structlog


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    # The in-thread servers log every request at debug level; keep test output readable.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    yield
    structlog.reset_defaults()
