"""What the conformance kit's sequences are made of: the operations, the strategies that
draw a request's target and execution key, and the well-formed bodies the hostile rules
break.

What lives here: the vocabulary the rules (`_machine`) and the judging (`_judge`) share.
What it does not know: how an id or a key is resolved against one example's state (the
machine does that), or how a reply is judged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from quiesce.adapters import DEDUPED_OPS
from quiesce.protocol.machines import FenceOp
from quiesce.testing._session import KitRun

__all__ = [
    "AGENT_OPS",
    "BAD_DIGEST",
    "CONTROL_OPS",
    "DEADLINE_AT",
    "DUPLICATED_OPS",
    "FENCE_OPS",
    "KEYS",
    "TARGETS",
    "Key",
    "Snapshot",
    "post_ops",
    "valid_body",
]

DEADLINE_AT = 4102444800.0
"""The `deadline_at` every control request carries (2100-01-01): servers do not enforce
deadlines (docs/wire.md), and one constant keeps printed sequences reproducible."""

Key = tuple[str, int]
"""An execution's `(rollout_id, attempt)`."""

FENCE_OPS = {op.value: op for op in FenceOp if op is not FenceOp.STATUS}
"""The control operations by wire name."""
CONTROL_OPS = tuple(FENCE_OPS)
AGENT_OPS = ("begin", "boundary", "finish", "ack", "retire")  # in the order rules draw them
DUPLICATED_OPS = tuple(op.value for op in DEDUPED_OPS)  # one operation when sent at once
BAD_DIGEST = "0" * 64
"""An `expected_digest` no artifact has: a restore carrying it fails."""

TARGETS = st.one_of(st.sampled_from(["active", "next"]), st.integers(-1, 5))
"""A control request's op id: the fence's `active` one, the `next` fresh one, or
`base + k` of the example (`-1` stale, `0` retired, above fresh)."""

KEYS = st.sampled_from([-1, -1, -1, 0, 1, 2, 3])
"""An execution key: -1 (most of the time, and what shrinking prefers) is a new key for
`begin` and the most recently begun key for the other operations, so begin -> finish ->
retire/ack of one execution is frequent; 0..3 are `(rollout k // 2, attempt k % 2)`, so
keys also collide (duplicates, stale attempts, retire before begin)."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A commit the server and the oracle both made: each side's own artifact and digest."""

    op_id: str
    server: tuple[str, str]
    oracle: tuple[str, str]


def post_ops(run: KitRun) -> tuple[str, ...]:
    """The POST operations the server must accept (for the malformed-body rule)."""
    fenced = run.config is None or run.config.fenced
    ops: tuple[str, ...] = CONTROL_OPS if fenced else ()
    return ops + (AGENT_OPS if run.agent else ())


def valid_body(op: str, prefix: str, op_id: str) -> dict[str, Any]:
    """A well-formed request body for `op` (the malformed-body rule then breaks one field)."""
    rollout: dict[str, Any] = {"rollout_id": f"{prefix}-r0", "attempt": 0}
    control: dict[str, Any] = {"op_id": op_id, "deadline_at": DEADLINE_AT}
    if op in ("prepare", "commit", "resume"):
        return control
    if op == "restore":
        return {**control, "snapshot_id": op_id, "artifact": "", "expected_digest": BAD_DIGEST}
    if op == "discard":
        return {"op_id": op_id, **rollout}
    extra: dict[str, dict[str, Any]] = {
        "begin": {"group_id": "g", "turns": 1},
        "boundary": {"turn": 1},
        "finish": {"result": {}},
        "retire": {},
    }
    if op == "ack":
        return {"receipts": [{**rollout, "receipt": "not-a-receipt"}]}
    return {**rollout, **extra[op]}
