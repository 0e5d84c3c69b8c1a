"""Every shipped broken host is caught by the default run of the kit (100 examples, a reset
hook, a restart hook where its bug needs one) whatever the seed, with a shrunk sequence of
at most six state-changing requests (issue 13's acceptance). Slow: ninety runs."""

from __future__ import annotations

import pytest

from quiesce.testing import BROKEN_HOSTS, LocalServer, check_conformance

TOKEN = "any-seed-tok-2a7e"
_AGENT_BUGS = {
    "release-on-retire",
    "whole-batch-ack",
    "stale-prepare-clobbers-next",
    "released-prepare-acts-on-moved-fence",
}
_NEEDS_RESTARTS = {"reply-before-fsync"}


@pytest.mark.slow
# Not the suite's 300 s: busy-duplicate seed 2 is caught in 3 requests, but shrinking a
# timing-dependent duplicate took 318 s on a quiet machine (2026-12-06).
@pytest.mark.timeout(900)
@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("name", sorted(BROKEN_HOSTS))
def test_every_broken_host_is_caught_for_any_seed(name: str, seed: int) -> None:
    role = "agent" if name in _AGENT_BUGS else "policy"
    config = {"name": f"{role}-s", "role": role}
    with LocalServer.start(config, token=TOKEN, host_class=BROKEN_HOSTS[name]) as server:
        restart = server.restart if name in _NEEDS_RESTARTS else None
        result = check_conformance(
            server.url, role, TOKEN, seed=seed, reset=server.reset, restart=restart, max_failures=1
        )
    assert not result.ok and result.violation is not None, f"{name} passed with seed {seed}"
    sent = [s for s in result.violation.steps if not s.check and s.exchange.method != "GET"]
    assert len(sent) <= 6, result.report()
