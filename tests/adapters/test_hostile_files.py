"""Hostile files: configs, snapshots and participant journals that are truncated, bit-flipped
or wrongly typed give a typed error naming the file and the field, never a crash; a corrupt
snapshot is skipped at selection and never loaded. And the bearer token of a full HTTP
checkpoint is found nowhere: not in logs, error bodies, snapshot files or journals.

(tests/protocol/test_config.py and tests/adapters/test_snapshot_store.py cover the single,
hand-picked cases; this file sweeps every byte and every bit.)
"""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import anyio
import httpx
import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quiesce.adapters import (
    MANIFEST_NAME,
    ControllerJournal,
    CorruptSnapshot,
    Driver,
    FileJournal,
    HttpParticipant,
    InMemoryDataPlane,
    InMemoryTrainer,
    JournalCorrupt,
    RealClock,
    SnapshotStore,
    configure_server_logging,
)
from quiesce.protocol import ConfigError, Coordinator, QuiesceConfig
from quiesce.protocol.controller import PeriodElapsed
from quiesce.protocol.controller.lowlevel import TrainerAnchor, select_snapshot
from quiesce.protocol.participant import handle, journal_of, new_participant
from quiesce.testing import LocalServer

TOPO = "topo-a"
HOSTILE = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))

YAML_CONFIG = """\
prepare_timeout_s: 12
control_timeout_s: 4.5
keep_latest_k: 3
rollout_recovery:
  target_level: prompt_group
"""
TOML_CONFIG = """\
prepare_timeout_s = 12
control_timeout_s = 4.5
keep_latest_k = 3
[rollout_recovery]
target_level = "prompt_group"
"""


# ------------------------------------------------------------------------------ configs


@pytest.mark.parametrize(
    ("suffix", "text", "field"),
    [
        (".yaml", "rollout_recovery:\n  target_level: sibling\n  surprise: 1\n", "surprise"),
        (".toml", "[rollout_recovery]\nsurprise = 1\n", "surprise"),
        (".yaml", "prepare_timeout_s: soon\n", "prepare_timeout_s"),
        (".toml", 'keep_latest_k = "three"\n', "keep_latest_k"),
        (".yaml", "rollout_recovery: 7\n", "rollout_recovery"),
        (".toml", "restore_mode = 1\n", "restore_mode"),
    ],
)
def test_unknown_keys_and_wrong_types_in_files_name_the_file_and_field(
    tmp_path: Path, suffix: str, text: str, field: str
) -> None:
    path = tmp_path / f"quiesce{suffix}"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        QuiesceConfig.load(path)
    assert caught.value.source == str(path) and str(path) in str(caught.value)
    assert caught.value.field.split(".")[-1] == field or caught.value.field.endswith(field)


@pytest.mark.parametrize(("suffix", "text"), [(".yaml", YAML_CONFIG), (".toml", TOML_CONFIG)])
def test_a_config_truncated_at_any_byte_loads_or_names_the_file(
    tmp_path: Path, suffix: str, text: str
) -> None:
    full = QuiesceConfig.load(_write(tmp_path / f"full{suffix}", text))
    assert full.keep_latest_k == 3
    outcomes = {"loaded": 0, "refused": 0}
    for cut in range(len(text)):
        path = _write(tmp_path / f"cut{suffix}", text[:cut])
        try:
            QuiesceConfig.load(path)
        except ConfigError as error:  # the only exception a bad file may raise
            assert error.source == str(path) and error.field
            outcomes["refused"] += 1
        else:
            outcomes["loaded"] += 1  # a prefix that is itself a valid (shorter) config
    assert outcomes["refused"] > 0 and outcomes["loaded"] > 0


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ------------------------------------------------------------------------------ snapshots


def _publish(store: SnapshotStore, checkpoint_id: str, payload: bytes) -> None:
    staging = store.open_staging(checkpoint_id)
    entry = staging.write("agent-0", payload)
    staging.write("cut", b'{"queue": []}')
    staging.write_manifest(
        trainer_step=3,
        trainer_version=3,
        topology_fingerprint=TOPO,
        created_at=12.5,
        participant_digests={"agent-0": entry.sha256},
    )
    store.publish(checkpoint_id)


@pytest.fixture
def two_snapshots(tmp_path: Path) -> tuple[SnapshotStore, Path]:
    """An older good snapshot ck-1-1 and the newest ck-1-2, which the tests damage."""
    store = SnapshotStore(tmp_path / "snapshots")
    _publish(store, "ck-1-1-step3", b"older agent state")
    _publish(store, "ck-1-2-step3", b"newest agent state, the one that gets damaged")
    return store, tmp_path / "snapshots" / "published" / "ck-1-2-step3"


def _assert_skipped_and_never_loaded(store: SnapshotStore, snapshot: Path) -> None:
    with pytest.raises(CorruptSnapshot) as caught:
        store.load("ck-1-2-step3")
    assert caught.value.path.parent == snapshot and caught.value.field
    assert str(caught.value.path) in str(caught.value)
    anchor = TrainerAnchor(step=3, version="3")
    selection = select_snapshot(anchor, store.candidates(), mode="latest", fingerprint=TOPO)
    assert selection.snapshot is not None
    assert str(selection.snapshot.snapshot_id) == "ck-1-1-step3"  # the damaged one skipped
    assert [(str(r.snapshot_id), r.reason) for r in selection.rejected] == [
        ("ck-1-2-step3", "corrupt")
    ]


@pytest.mark.parametrize("name", ["agent-0", "cut"])
def test_a_truncated_artifact_names_the_file_and_is_skipped(
    two_snapshots: tuple[SnapshotStore, Path], name: str
) -> None:
    store, snapshot = two_snapshots
    artifact = snapshot / name
    artifact.write_bytes(artifact.read_bytes()[:-3])
    _assert_skipped_and_never_loaded(store, snapshot)
    with pytest.raises(CorruptSnapshot) as caught:
        store.verify("ck-1-2-step3")
    assert caught.value.path == artifact and caught.value.field.startswith(f"artifacts.{name}")


@HOSTILE
@given(data=st.data())
def test_any_bit_flip_in_a_manifest_or_artifact_is_caught_and_skipped(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    root = tmp_path_factory.mktemp("flip")
    store = SnapshotStore(root)
    _publish(store, "ck-1-1-step3", b"older agent state")
    _publish(store, "ck-1-2-step3", b"newest agent state")
    snapshot = root / "published" / "ck-1-2-step3"
    name = data.draw(st.sampled_from([MANIFEST_NAME, "agent-0", "cut"]), label="file")
    path = snapshot / name
    raw = bytearray(path.read_bytes())
    index = data.draw(st.integers(0, len(raw) - 1), label="byte")
    raw[index] ^= 1 << data.draw(st.integers(0, 7), label="bit")
    path.write_bytes(bytes(raw))
    if name == MANIFEST_NAME and _same_document(raw, snapshot):
        return  # e.g. a flipped bit in JSON whitespace: the manifest still says the same
    _assert_skipped_and_never_loaded(store, snapshot)


def _same_document(raw: bytearray, snapshot: Path) -> bool:
    """Does the flipped manifest still parse to a document that describes the files?"""
    try:
        document = json.loads(bytes(raw))
    except ValueError:
        return False
    store = SnapshotStore(snapshot.parent.parent)
    try:
        store.verify("ck-1-2-step3")
    except CorruptSnapshot:
        return False
    return isinstance(document, dict)


# ------------------------------------------------------------------------------ journals


def _journal_bytes() -> bytes:
    state = new_participant({"name": "agent-0", "role": "agent"}, "inc-1")
    for op, body in [
        ("begin", {"rollout_id": "r", "attempt": 0, "group_id": "g", "turns": 2}),
        ("finish", {"rollout_id": "r", "attempt": 0, "result": {"reward": 1}}),
        ("resume", {"op_id": "ck-1-1-step1", "deadline_at": 1.0}),
        ("prepare", {"op_id": "ck-1-2-step2", "deadline_at": 1.0}),
    ]:
        state, _, _ = handle(state, op, body)
    return FileJournal.encode(journal_of(state))


def test_a_truncated_participant_journal_is_a_typed_error_naming_the_file(tmp_path: Path) -> None:
    raw = _journal_bytes()
    journal = FileJournal(tmp_path)
    for cut in range(0, len(raw), max(1, len(raw) // 60)):
        journal.path.write_bytes(raw[:cut])
        with pytest.raises(JournalCorrupt) as caught:
            journal.load()
        assert caught.value.path == journal.path and caught.value.field
        assert str(journal.path) in str(caught.value)


@HOSTILE
@given(index=st.integers(0, 10_000), bit=st.integers(0, 7))
def test_a_bit_flipped_participant_journal_is_a_typed_error(
    tmp_path_factory: pytest.TempPathFactory, index: int, bit: int
) -> None:
    # The header's sha256 covers every byte of the journal, so no flip anywhere (value,
    # structure, header, digest) can pass for another valid journal: each one is refused
    # naming the file and what is wrong, and the file is left as it was.
    raw = bytearray(_journal_bytes())
    raw[index % len(raw)] ^= 1 << bit
    journal = FileJournal(tmp_path_factory.mktemp("journal"))
    journal.path.write_bytes(bytes(raw))
    with pytest.raises(JournalCorrupt) as caught:
        journal.load()
    assert caught.value.path == journal.path and caught.value.field in {"header", "sha256"}
    assert journal.path.read_bytes() == raw


# ------------------------------------------------------------------------------ the token

TOKEN = "tok-leak-canary-3f9d27c1b8"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_token_is_nowhere_after_a_full_http_checkpoint(
    tmp_path: Path, anyio_backend: str
) -> None:
    logs = io.StringIO()
    saved = (logging.root.handlers[:], logging.root.level)
    configure_server_logging("debug", logs)
    try:
        bodies = await _checkpoint_over_http(tmp_path)
    finally:
        structlog.reset_defaults()
        logging.root.handlers[:] = saved[0]
        logging.root.setLevel(saved[1])
    captured = logs.getvalue()
    assert "participant_serving" in captured and "unauthorized" in captured  # logs were caught
    assert TOKEN not in captured and TOKEN[:-1] not in captured
    assert all(TOKEN not in body and TOKEN[:-1] not in body for body in bodies)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert "journal.json" in names and MANIFEST_NAME in names  # journals and a snapshot exist
    for path in files:
        data = path.read_bytes()
        assert TOKEN.encode() not in data, path
        assert TOKEN[:-1].encode() not in data, path


async def _checkpoint_over_http(tmp_path: Path) -> list[str]:
    """One completed checkpoint through real HTTP servers, plus hostile requests; returns
    the error bodies the servers answered."""
    config = QuiesceConfig(prepare_timeout_s=5.0, control_timeout_s=5.0)
    servers = {
        name: LocalServer.start(
            {"name": name, "role": role}, token=TOKEN, state_dir=tmp_path / "state" / name
        )
        for name, role in (("policy-0", "policy"), ("agent-0", "agent"))
    }
    bodies: list[str] = []
    with servers["policy-0"] as policy, servers["agent-0"] as agent:
        for url in (policy.url, agent.url):
            for headers in ({"Authorization": f"Bearer {TOKEN[:-1]}"}, {"Authorization": TOKEN}):
                bodies.append(httpx.get(f"{url}/control/v1/status", headers=headers).text)
            good = {"Authorization": f"Bearer {TOKEN}"}
            bodies.append(httpx.post(f"{url}/control/v1/prepare", headers=good, content=b"{").text)
        clients = {
            "policy-0": HttpParticipant(policy.url, token=TOKEN, name="policy-0"),
            "agent-0": HttpParticipant(agent.url, token=TOKEN, name="agent-0"),
        }
        clock = RealClock()
        trainer = InMemoryTrainer()
        driver = Driver(
            Coordinator(config),
            clock,
            clients,
            store=SnapshotStore(tmp_path / "snapshots"),
            journal=ControllerJournal(tmp_path / "controller"),
            trainer=trainer,
            data_plane=InMemoryDataPlane(trainer),
        )
        try:
            async with clock.task_group() as tg:
                tg.start_soon(driver.run)
                await driver.start()
                driver.submit(PeriodElapsed())
                with anyio.fail_after(30):
                    while not any(o.result == "completed" for o in driver.outcomes):
                        await anyio.sleep(0.05)
                driver.stop()
        finally:
            for client in clients.values():
                await client.aclose()
    assert any(body for body in bodies)
    return bodies
