"""Roles are enums inside quiesce and plain names on the wire (§2 discovery)."""

import hashlib
import json

import pytest

from quiesce.protocol import UnknownRole, validate_discovery
from quiesce.protocol.controller.lowlevel import topology_fingerprint
from quiesce.protocol.participant import capabilities, new_participant
from quiesce.protocol.wire import Capabilities, InstanceRole, RemoteProtocolError, Role, parse_reply


def test_a_discovery_reply_carries_each_role_as_its_plain_name() -> None:
    state = new_participant({"name": "judge", "role": "policy", "instance_role": "auxiliary"}, "i")
    reply = capabilities(state)
    assert reply.role is Role.POLICY and reply.instance_role is InstanceRole.AUXILIARY
    wire = reply.model_dump_json()
    assert '"role":"policy"' in wire and '"instance_role":"auxiliary"' in wire
    document = json.loads(wire)
    assert type(document["role"]) is str and type(document["instance_role"]) is str
    assert parse_reply(Capabilities, "judge", wire) == reply


def test_the_topology_fingerprint_hashes_the_plain_role_names() -> None:
    # Snapshots taken before roles were enums must still match their fleet.
    reply = Capabilities(participant="agent-0", incarnation="i", role=Role.AGENT)
    fields = ("agent", "agent-0", "primary", "restart_only", "False", "None", "single_worker")
    expected = hashlib.sha256("\x1f".join(fields).encode()).hexdigest()
    assert topology_fingerprint([reply]) == expected


def test_an_unknown_role_is_refused_naming_the_value_and_the_known_roles() -> None:
    raw = {"participant": "mystery", "incarnation": "i", "role": "oracle"}
    with pytest.raises(UnknownRole) as info:
        validate_discovery([raw])
    assert info.value.value == "oracle"
    assert "role='oracle'" in str(info.value)
    assert "supported: policy, agent, resources." in str(info.value)


def test_an_unknown_role_in_a_parsed_reply_is_a_remote_error_naming_the_field() -> None:
    wire = json.dumps({"participant": "mystery", "incarnation": "i", "role": "oracle"})
    with pytest.raises(RemoteProtocolError) as info:
        parse_reply(Capabilities, "mystery", wire)
    assert info.value.participant == "mystery" and info.value.field == "role"
