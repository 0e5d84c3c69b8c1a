"""The example services pass the conformance kit over real HTTP: generated sequences with
concurrent duplicates and races, a reset between examples (a fresh participant, so a
failure shrinks) and restarts (the service stopped and served again on its state dir:
§6, what the journal keeps). Few examples: the kit's own tests go deep, these show the
example services are participants."""

from __future__ import annotations

import time

import pytest

from examples.serving import ServedApp
from quiesce.testing import check_conformance
from tests.examples.conftest import TOKEN


@pytest.mark.parametrize("role", ["agent", "resources"])
def test_the_example_passes_the_kit(role: str, agent: ServedApp, resources: ServedApp) -> None:
    served = agent if role == "agent" else resources
    began = time.monotonic()
    result = check_conformance(
        served.url,
        role,
        TOKEN,
        examples=8,
        steps=20,
        seed=3,
        reset=served.reset,
        restart=served.restart,
    )
    assert result.ok, result.report()
    print(result.report(), f"({time.monotonic() - began:.1f}s)")
    # The run went through what the issue asks for, not around it.
    assert result.races > 0 and result.restarts > 0 and result.requests > 50, result.report()
