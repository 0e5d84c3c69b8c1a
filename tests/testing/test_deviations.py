"""Known deviations and multi-failure reports (issue 25, part 2): a server with two
deliberate deviations and one real bug reports three distinct failures undeclared, and
exactly the bug with the deviations declared; declaring is checked (unknown rules refused)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner

from quiesce.adapters import ClockEvent
from quiesce.cli import main
from quiesce.protocol.participant import ParticipantOp
from quiesce.protocol.wire import ControlRequest, Message
from quiesce.testing import (
    ConformanceResult,
    Deviation,
    LocalServer,
    ReplayAfterPhaseMovedHost,
    UnknownDeviation,
    check_conformance,
    parse_deviation,
    read_deviations,
)

TOKEN = "deviations-tok-3f9a"
DEVIATIONS = ("prepare:prepare_not_ready", "restore:restore_failed")


class TwoDeviationsAndABugHost(ReplayAfterPhaseMovedHost):
    """Two deliberate deviations: a prepare that is not ready long-polls (until an execution
    event, or `poll_s`), asks again once released, and if still not ready leaves the fence
    idle (and the agent open); a restore that fails (a corrupt artifact) leaves the fence
    idle too. One real bug: a recorded prepare or commit replayed after the phase moved on
    is refused."""

    poll_s = 0.05
    _EVENTS = frozenset({"boundary", "finish", "retire", "ack"})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.waiting: list[ClockEvent] = []

    async def _apply(self, op: ParticipantOp | str, request: Any) -> Message:
        # Under the host's de-duplication (`handle`): a concurrent duplicate joins the poll.
        before = self.state
        reply = await super()._apply(op, request)
        name = getattr(op, "value", op)
        if name in self._EVENTS:
            for released in self.waiting:
                released.set()
            self.waiting.clear()
        if name == "prepare" and getattr(reply, "status", None) == "not_ready":
            released = self.clock.event()
            self.waiting.append(released)
            with anyio.move_on_after(self.poll_s):
                await released.wait()
            op_id = ControlRequest.model_validate(request).op_id
            if released.is_set() and self.state.fence.data.active == op_id:
                reply = await super()._apply(op, request)  # asked again once released
        status = getattr(reply, "status", None)
        if (name, status) in (("prepare", "not_ready"), ("restore", "failed")):
            self._state = before  # the deviation: as if the request had not come
        return reply


def _check(examples: int, seed: int = 2, **options: Any) -> ConformanceResult:
    config = {"name": "agent-d", "role": "agent"}
    with LocalServer.start(config, token=TOKEN, host_class=TwoDeviationsAndABugHost) as server:
        return check_conformance(
            server.url, "agent", TOKEN, reset=server.reset, examples=examples, seed=seed, **options
        )


def test_undeclared_the_two_deviations_and_the_bug_are_distinct_failures() -> None:
    # The search stops at the third distinct failure (the default, 5, would search on).
    result = _check(examples=100, max_failures=3)
    assert not result.ok
    ids = [v.rule_id for v in result.failures]
    assert {"prepare", "restore", "replay"} <= set(ids), result.report()
    assert len({v.key for v in result.failures}) == len(result.failures)  # each distinct
    assert all(v.steps for v in result.failures) and result.shrunk
    document = result.to_json()
    assert [f["rule_id"] for f in document["failures"]] == ids
    assert document["failure"] == document["failures"][0]
    assert f"{len(ids)} distinct failing rules" in result.report()


def test_declared_only_the_real_bug_is_reported_and_the_deviations_are_counted() -> None:
    # Seed 5: its 40 examples also park an execution at a turn boundary (checked below).
    result = _check(examples=40, seed=5, deviations=DEVIATIONS)
    assert not result.ok
    # Exactly the real bug: the deviations are tolerated also where met among concurrent
    # duplicates (the not-ready prepare sent twice at once) and in races.
    assert [v.rule_id for v in result.failures] == ["replay"], result.report()
    tolerated = dict(result.tolerated)
    assert set(tolerated) == set(DEVIATIONS) and all(n > 0 for n in tolerated.values())
    assert "tolerated (declared deviations" in result.report()
    # the search went past the tolerated ones and still fired the parking row (issue 25,
    # part 5: the kit's own boundary requests reach it)
    assert result.coverage is not None
    fired = [row for t in result.coverage.tables for row in t.fired]
    assert any("park_requested + turn_boundary" in row for row in fired), fired


def test_a_deviation_names_a_rule_of_the_kit(tmp_path: Path) -> None:
    assert parse_deviation("linearizability:prepare|resume|retire") == Deviation(
        "linearizability", "prepare|resume|retire"
    )
    with pytest.raises(UnknownDeviation, match="names no rule of the kit; write RULE"):
        parse_deviation("not-a-rule")
    listed = tmp_path / "deviations"
    listed.write_text("# ours\nprepare:prepare_not_ready\n\nrestore  # all of them\n")
    assert read_deviations(listed) == (
        Deviation("prepare", "prepare_not_ready"),
        Deviation("restore"),
    )
    listed.write_text("prepare\nbogus:x\n")
    with pytest.raises(UnknownDeviation, match=r"deviations:2: bogus:x"):
        read_deviations(listed)


def test_the_cli_refuses_an_unknown_deviation_in_one_line(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    args = ["conform", "--url", "http://127.0.0.1:1", "--role", "agent"]
    result = CliRunner().invoke(
        main, [*args, "--token-file", str(token), "--deviation", "nope"], env={"QUIESCE_TOKEN": ""}
    )
    assert result.exit_code == 2
    assert "deviation 'nope' names no rule of the kit" in result.output
    assert "linearizability" in result.output and "Traceback" not in result.output
