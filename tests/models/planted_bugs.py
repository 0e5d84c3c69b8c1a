"""Bugs the models once missed, planted again by the tests that show they are caught now."""

from __future__ import annotations

from dataclasses import replace

from quiesce.protocol import Classification, Disposition
from quiesce.protocol.machines import CheckpointData


def count_every_failure(data: CheckpointData, cause: Classification) -> CheckpointData:
    """M1's `note_cause` before the fix: every failed call of an abort or release counted
    again, instead of an attempt once."""
    attempt = data.attempt
    if attempt is not None and attempt.cause is None:
        attempt = replace(attempt, cause=cause)
    if cause.disposition is Disposition.RETRYABLE:
        return replace(data, attempt=attempt, failures=data.failures + 1, skips=0)
    return replace(data, attempt=attempt)
