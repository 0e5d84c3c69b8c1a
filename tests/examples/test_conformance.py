"""The example services pass the conformance kit over real HTTP: generated sequences with
concurrent duplicates and races, a reset between examples (a fresh participant, so a
failure shrinks) and restarts (the service stopped and served again on its state dir:
§6, what the journal keeps). Few examples: the kit's own tests go deep; these show that
the example services are participants. docs/adopting.md quotes this file."""

from __future__ import annotations

from typing import TYPE_CHECKING

from examples.serving import ServedApp
from quiesce.testing import check_conformance
from tests.examples.conftest import TOKEN

if TYPE_CHECKING:  # pytest loads the plugin itself (below)
    from quiesce.testing.plugin import ConformanceCheck

pytest_plugins = ["quiesce.testing.plugin"]  # the `quiesce_conformance` fixture


def test_the_agent_service_conforms(
    agent: ServedApp, quiesce_conformance: ConformanceCheck
) -> None:
    result = quiesce_conformance(
        agent.url, "agent", TOKEN, examples=8, seed=3, reset=agent.reset, restart=agent.restart
    )
    assert result.races > 0 and result.restarts > 0  # it went through both


def test_the_resources_service_conforms(resources: ServedApp) -> None:
    result = check_conformance(
        resources.url, "resources", TOKEN, examples=8, seed=3,
        reset=resources.reset, restart=resources.restart,
    )  # fmt: skip
    assert result.ok, result.report()
    assert result.races > 0 and result.restarts > 0 and result.requests > 50, result.report()
