"""The conformance kit as a pytest plugin: the `quiesce_conformance` fixture.

Enable it in your suite's root `conftest.py` (it is not auto-loaded, so it costs nothing in
test runs that do not ask for it):

    pytest_plugins = ["quiesce.testing.plugin"]

    def test_my_agent_conforms(quiesce_conformance, my_agent_url):
        quiesce_conformance(my_agent_url, role="agent", token="s3cret", examples=50)

The fixture is `assert_conforms` with the run's defaults: it fails the test with the
shortest failing request sequence in the message, and returns the `ConformanceResult`
when the server conforms. `server` is a URL, or a factory of fresh servers (e.g.
`LocalServer.start(...).fresh`) for fully shrunk sequences; with a URL, pass `reset=` (and
`restart=`) as for `check_conformance`. `--quiesce-examples N` on the
pytest command line changes the default number of sequences (50).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import pytest

if TYPE_CHECKING:  # keep the plugin's import light: the kit loads when the fixture is used
    from quiesce.protocol.wire import Role
    from quiesce.testing._results import ConformanceResult
    from quiesce.testing._session import Server

__all__ = ["ConformanceCheck", "pytest_addoption", "quiesce_conformance"]


class ConformanceCheck(Protocol):
    """The fixture's type: `check(server, role, token, **options) -> ConformanceResult`."""

    def __call__(
        self, server: Server, role: Role | str, token: str, **options: Any
    ) -> ConformanceResult: ...


def pytest_addoption(parser: pytest.Parser) -> None:
    """`--quiesce-examples N`: default number of sequences per conformance check."""
    parser.addoption(
        "--quiesce-examples",
        type=int,
        default=50,
        help="quiesce conformance kit: generated sequences per check (default 50)",
    )


@pytest.fixture
def quiesce_conformance(request: pytest.FixtureRequest) -> ConformanceCheck:
    """Check a participant server against the protocol; fails the test on a violation."""
    from quiesce.testing._kit import assert_conforms

    default = int(request.config.getoption("--quiesce-examples"))

    def check(server: Server, role: Role | str, token: str, **options: Any) -> ConformanceResult:
        options.setdefault("examples", default)
        try:
            return assert_conforms(server, role, token, **options)
        except AssertionError as failure:
            pytest.fail(str(failure), pytrace=False)

    return check
