"""How the conformance kit compares a server's reply with the oracle's: both are projected
onto the part the protocol fixes, and the projections must be equal, except where the
protocol leaves the server a choice.

What lives here: the projection (`project`: HTTP status, error code, active id,
high-watermark, reply status, execution state, receipts, continuations; never blockers'
wording, artifact bytes or digests, which are the server's own business), the receipts each
side reported (`Receipts`, so a receipt is compared as "its own receipt" rather than by its
text), and the allowed differences (`allowed_failure`, `other_refusal`). What it does not
know: which request was sent or what a difference means (`_judge`, `_rules`).
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from pydantic import BaseModel, ValidationError

from quiesce.adapters import REPLY_MODELS, CompletionsReply, WireError
from quiesce.protocol.participant import ParticipantOp
from quiesce.protocol.wire import ErrorReply, Receipt
from quiesce.testing._requests import Key
from quiesce.testing._wire import compact_json

__all__ = [
    "Receipts",
    "allowed_failure",
    "other_refusal",
    "project",
    "reply_model",
    "without_incarnation",
]

_PICKED = {
    "capabilities": ("role", "instance_role"),
    "status": (
        "fence",
        "active_id",
        "high_watermark",
        "role_state",
        "live_executions",
        "completed_unacknowledged",
    ),
    "prepare": ("op_id", "status"),
    "commit": ("op_id", "status"),
    "restore": ("op_id", "status"),
    "discard": ("op_id", "status"),
    "resume": ("op_id", "retired"),
    "retire": ("outcome",),
    "begin": ("rollout_id", "attempt", "state", "turn"),
    "boundary": ("rollout_id", "attempt", "state", "turn"),
    "finish": ("rollout_id", "attempt", "state", "turn"),
}
"""The fields of a 200 reply the protocol fixes, by operation."""


def reply_model(op: str, http: int) -> type[BaseModel]:
    """The model a reply to `op` with HTTP status `http` must parse as."""
    if http == 200:
        if op == "completions":
            return CompletionsReply
        return REPLY_MODELS[ParticipantOp(op)]
    if http == 409:
        return ErrorReply
    return WireError


class Receipts:
    """The receipts each side ("server", "oracle") reported, by execution key: receipts are
    each side's own tokens, so an ACK quotes each side's own, and a reply naming a side's
    own receipt projects to `<its receipt>` on both sides."""

    def __init__(self) -> None:
        self._by_side: dict[str, dict[Key, str]] = {"server": {}, "oracle": {}}

    def of(self, side: str, key: Key) -> str | None:
        """The receipt `side` reported for execution `key`, if any."""
        return self._by_side[side].get(key)

    def learn(self, side: str, op: str, http: int, body: Any) -> None:
        """Remember the receipt a reply of `side` carries (the first one per key)."""
        if http != 200 or op not in ("finish", "retire", "begin", "boundary"):
            return
        receipt = body.get("receipt") if isinstance(body, dict) else None
        if isinstance(receipt, dict):
            try:
                parsed = Receipt.model_validate(receipt)
            except ValidationError:
                return
            self._by_side[side].setdefault((parsed.rollout_id, parsed.attempt), parsed.receipt)

    def quoted(self, side: str, item: Any) -> list[Any]:
        """A receipt item of a reply, with `side`'s own receipt text replaced by a marker."""
        if not isinstance(item, dict):
            return [item]
        key = (item.get("rollout_id"), item.get("attempt"))
        known = self._by_side[side].get(key)  # type: ignore[arg-type]
        text = item.get("receipt")
        return [key[0], key[1], "<its receipt>" if known is not None and text == known else text]


def project(op: str, http: int, body: Any, side: str, receipts: Receipts) -> dict[str, Any]:
    """The deterministic part of an answer, comparable between server and oracle."""
    out: dict[str, Any] = {"http": http}
    model = reply_model(op, http)
    try:
        reply = model.model_validate(body)
    except ValidationError as error:
        other = _other_model(model, body)
        if other is not None:  # a reply of another route: say so, in the adapter's words
            out["unparseable"] = f"{op} answered {other}, expected {model.__name__}"
            return out
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "<body>"
        out["unparseable"] = f"not a {model.__name__}: {where}: {first['msg']}"
        return out
    data = reply.model_dump(mode="json")
    if isinstance(reply, WireError):
        out["code"] = data["code"]
        if http == 422:
            out["field"] = data["field"]
        return out
    out["participant"] = data["participant"]
    out["incarnation"] = data["incarnation"]
    if isinstance(reply, ErrorReply):
        out.update(
            code=data["code"],
            active_id=data["active_id"],
            high_watermark=data["high_watermark"],
        )
        return out
    out.update({k: data[k] for k in _PICKED.get(op, ())})
    if op in ("commit", "restore", "discard") and data["status"] in ("committed", "restored"):
        out["continuations"] = sorted(compact_json(c) for c in data["continuations"] or ())
    if op == "commit" and data["status"] == "committed":
        out["digest_is_sha256_of_artifact"] = _digest_ok(data["artifact"], data["digest"])
    if op in ("retire", "begin", "boundary", "finish"):
        receipt = data.get("receipt")
        out["receipt"] = None if receipt is None else receipts.quoted(side, receipt)
    if op == "ack":
        out["acknowledged"] = sorted(receipts.quoted(side, r) for r in data["acknowledged"])
        out["unknown"] = sorted(receipts.quoted(side, r) for r in data["unknown"])
    if op == "completions":
        out["receipts"] = sorted(receipts.quoted(side, r) for r in data["receipts"])
    return out


_REPLY_TYPES: tuple[type[BaseModel], ...] = tuple(
    dict.fromkeys((*REPLY_MODELS.values(), CompletionsReply, ErrorReply, WireError))
)
"""Every reply model of docs/wire.md, once each: what a body of the wrong type may be."""


def _other_model(expected: type[BaseModel], body: Any) -> str | None:
    """The name of the reply model `body` is, if it is one other than `expected` (a commit
    answered with a `PrepareReply`), else None."""
    for model in _REPLY_TYPES:
        if model is expected:
            continue
        try:
            model.model_validate(body)
        except ValidationError:
            continue
        return model.__name__
    return None


def allowed_failure(op: str, expected: dict[str, Any], actual: dict[str, Any]) -> bool:
    """The server failed a commit or restore the oracle ran successfully (its own reasons)."""
    wins = {"commit": ("committed", "failed"), "restore": ("restored", "failed")}.get(op)
    if wins is None or expected.get("http") != 200 or actual.get("http") != 200:
        return False
    return (expected.get("status"), actual.get("status")) == wins and all(
        expected.get(k) == actual.get(k) for k in ("participant", "incarnation", "op_id")
    )


def other_refusal(expected: dict[str, Any], actual: dict[str, Any], codes: frozenset[str]) -> bool:
    """The server refused with another of the refusals that apply (`codes`), where the
    spec fixes no order among them; the rest of the reply is the oracle's."""
    code = actual.get("code")
    if code == expected.get("code") or expected.get("code") not in codes:
        return False
    return code in codes and actual == {**expected, "code": code}


def _digest_ok(artifact: str, digest: str) -> bool:
    try:
        raw = base64.b64decode(artifact, validate=True)
    except ValueError:
        return False
    return hashlib.sha256(raw).hexdigest() == digest


def without_incarnation(reply: Any) -> Any:
    """A raw reply without its `incarnation` (a recorded result replayed after a restart
    carries the new one)."""
    if isinstance(reply, dict):
        return {k: v for k, v in reply.items() if k != "incarnation"}
    return reply
