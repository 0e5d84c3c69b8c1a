"""The fence log a participant host writes: one line per request it applied, with the fence
before and after it, in memory or appended to a file behind a versioned header."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quiesce.adapters import (
    FENCE_LOG_VERSION,
    FenceLogLine,
    FileFenceLog,
    MemoryFenceLog,
    ParticipantHost,
    VirtualClock,
)
from quiesce.protocol import OpId, ParticipantOp
from quiesce.protocol.machines import FenceOp, FenceState
from quiesce.protocol.wire import ControlRequest, Role

pytestmark = pytest.mark.anyio

CK1, CK2 = OpId.parse("ck-1-1-step1"), OpId.parse("ck-1-2-step2")


async def _served(log: MemoryFenceLog) -> None:
    clock = VirtualClock(seed=1)

    async def requests() -> None:
        host = ParticipantHost.start(
            {"name": "policy-0", "role": "policy"}, clock=clock, incarnation="inc-1", fence_log=log
        )
        await host.handle(ParticipantOp.PREPARE, ControlRequest(op_id=CK1, deadline_at=9.0))
        await host.handle(ParticipantOp.PREPARE, ControlRequest(op_id=CK2, deadline_at=9.0))
        await host.handle("status")

    await clock.run(requests)


async def test_every_applied_request_is_one_line_with_the_fence_around_it() -> None:
    log = MemoryFenceLog()
    await _served(log)
    prepared, conflict, status = log.lines
    assert (prepared.participant, prepared.role, prepared.incarnation) == (
        "policy-0",
        Role.POLICY,
        "inc-1",
    )
    assert (prepared.op, prepared.op_id) == ("prepare", str(CK1))
    assert prepared.before.state is FenceState.IDLE and prepared.before.active is None
    assert prepared.after.state is FenceState.PREPARED and prepared.after.active == CK1
    assert prepared.after.recorded == ((CK1, FenceOp.PREPARE),)
    # A refusal (another id while one is active) is a line too: its fence stays as it was.
    assert (conflict.op_id, conflict.before, conflict.after) == (
        str(CK2),
        prepared.after,
        prepared.after,
    )
    assert (status.op, status.op_id) == ("status", None)


async def test_a_file_log_is_a_header_then_flushed_lines_appended_across_opens(
    tmp_path: Path,
) -> None:
    memory = MemoryFenceLog()
    await _served(memory)
    path = tmp_path / "fence.jsonl"
    first = FileFenceLog(path)
    first.record(memory.lines[0])
    # Flushed as written: a process killed now leaves the line behind.
    assert len(path.read_text().splitlines()) == 2
    first.close()
    with FileFenceLog(path) as again:  # a restarted server continues the same file
        again.record(memory.lines[1])
    header, line, second_header, second_line = path.read_text().splitlines()
    assert json.loads(header) == {"format": "quiesce-fence-log", "version": FENCE_LOG_VERSION}
    assert second_header == header
    assert FenceLogLine.model_validate_json(line) == memory.lines[0]
    assert FenceLogLine.model_validate_json(second_line) == memory.lines[1]
