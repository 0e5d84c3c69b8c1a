"""`quiesce serve`: run one participant (agent, policy or resources) as an HTTP server.

The participant's journal (PROTOCOL.md §6) lives in `--state-dir` and is fsynced before
every reply. The server locks its state dir for its whole life (`StateDirLock`), so a
second server on the same dir exits instead of sharing the journal. Started on a state dir
that already holds a journal, the server recovers from it under a new incarnation (the
controller sees the restart), provided it is the same participant (`--name`, `--role`).
With `--fence-log FILE` every request is also appended to FILE as one JSON line with the
fence before and after it (docs/validate.md), for `quiesce validate`. Logs go to stderr
with structlog (JSON when stderr is not a TTY); the bearer token is read from
`QUIESCE_TOKEN` or `--token-file` and never logged.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

import click
import structlog

from quiesce.adapters import (
    FileFenceLog,
    FileJournal,
    ForeignJournal,
    JournalCorrupt,
    ParticipantHost,
    RealClock,
    ServiceUnusable,
    StateDirBusy,
    StateDirLock,
    StateDirUnusable,
    configure_server_logging,
    connect_services,
    secret_incarnation,
)
from quiesce.cli._output import abbreviated, fail, log_level_option
from quiesce.cli._paths import InputFile, OutputDir, OutputFile
from quiesce.cli._values import FiniteFloatRange, HttpUrl, Name, visible
from quiesce.protocol.wire import InstanceRole, Role

__all__ = ["read_token", "serve"]

TOKEN_ENV = "QUIESCE_TOKEN"


def read_token(token_file: Path | None) -> str:
    """The bearer token: the content of `token_file` if given, else `$QUIESCE_TOKEN`, with
    surrounding whitespace stripped. Raises `click.UsageError` (never showing the token)
    when there is none, or it cannot go into an HTTP header (spaces, control characters)."""
    if token_file is not None:
        source = f"--token-file {abbreviated(token_file)}"
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except UnicodeDecodeError:
            raise click.UsageError(f"{source} is not UTF-8 text") from None
        except OSError as error:
            raise click.UsageError(f"cannot read {source}: {error.strerror}") from None
        if not token:
            raise click.UsageError(f"{source} is empty")
    else:
        source = f"${TOKEN_ENV}"
        token = os.environ.get(TOKEN_ENV, "").strip()
        if not token:
            raise click.UsageError(f"no bearer token: set ${TOKEN_ENV} or pass --token-file FILE")
    if not visible(token):
        raise click.UsageError(f"the token in {source} has spaces or control characters")
    return token


def _bind(host: str, port: int) -> socket.socket:
    """A socket bound to host:port (not yet listening: clients are refused, not left
    waiting, until the server runs), or exit 2 saying why the address cannot be used."""
    where = f"--host {abbreviated(host)} --port {port}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except (OSError, UnicodeError) as error:
        fail(f"cannot resolve {where}: {getattr(error, 'strerror', None) or error}")
    try:
        # As uvicorn does: a restarted server may take its port back from TIME_WAIT.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as error:
        sock.close()
        fail(f"cannot listen on {where}: {error.strerror}")
    return sock


def _lock_state_dir(state_dir: Path) -> StateDirLock:
    """This process's lock on `state_dir` (created if missing), or exit 2 naming the
    process that holds it, or why the directory cannot be written, and the fix."""
    where = f"--state-dir {abbreviated(state_dir)}"
    try:
        return StateDirLock.acquire(state_dir)
    except StateDirBusy as busy:
        fail(
            f"{where} is locked by {busy.holder}, a server already running on it: "
            f"stop {busy.holder}, or give this server another --state-dir"
        )
    except StateDirUnusable as unusable:
        fail(f"{where} cannot be used: {unusable.detail}; give a writable directory")


def _foreign_journal_message(error: ForeignJournal, state_dir: Path, name_given: bool) -> str:
    """What differs between the journal in `state_dir` and this server's --role/--name,
    and the options that recover the journal's participant instead."""
    flags = []
    if error.recorded_role != error.given_role:
        flags.append(f"--role {error.recorded_role}")
    if error.recorded_name != error.given_name:
        flags.append(f"--name {error.recorded_name}")
    default = (
        ""
        if name_given or error.recorded_name == error.given_name
        else " (without --name the name is <role>-<port>, so a restart on another port "
        "needs --name)"
    )
    return (
        f"--state-dir {abbreviated(state_dir)} holds the journal of {error.recorded}, "
        f"not of {error.given}{default}: to recover that participant, restart with "
        f"{' '.join(flags)}; to start a new one, give another --state-dir"
    )


@click.command()
@click.option("--role", type=click.Choice([r.value for r in Role]), required=True, help="Role.")
@click.option(
    "--host", "bind", type=Name(), default="127.0.0.1", show_default=True, help="Bind address."
)
@click.option("--port", type=click.IntRange(0, 65535), required=True, help="TCP port.")
@click.option(
    "--state-dir",
    type=OutputDir(),
    required=True,
    help="Directory of the participant's journal (created if missing), locked for the "
    "server's life: a second server on it exits 2 naming the holder's pid.",
)
@click.option(
    "--token-file",
    type=InputFile(),
    default=None,
    help=f"File holding the bearer token (default: ${TOKEN_ENV}).",
)
@click.option(
    "--name",
    type=Name(),
    default=None,
    help="Participant name (default: <role>-<port>). A journal in --state-dir is recovered "
    "only under its own name, so a restart on another port needs --name.",
)
@click.option(
    "--recovery-mode",
    type=click.Choice(["stateless", "export_restore", "restart_only"]),
    default="restart_only",
    show_default=True,
    help="How a resources server recovers (§1 M5).",
)
@click.option(
    "--instance-role",
    type=click.Choice([r.value for r in InstanceRole]),
    default=InstanceRole.PRIMARY.value,
    show_default=True,
    help="An auxiliary policy is never fenced.",
)
@click.option(
    "--max-body-bytes", type=click.IntRange(1, 1 << 30), default=1 << 20, show_default=True
)
@click.option(
    "--work/--no-work",
    default=True,
    show_default=True,
    help="Run an agent's simulated executions; with --no-work an external runtime (or "
    "`quiesce conform`) reports boundary and finish itself.",
)
@click.option(
    "--policy",
    "policies",
    type=HttpUrl(),
    multiple=True,
    help="An agent's policy server (repeatable): its executions' generation calls go there "
    "and freeze while it is fenced. Without one, a turn is a simulated latency.",
)
@click.option(
    "--resources",
    "resources",
    type=HttpUrl(),
    multiple=True,
    help="An agent's resources server (repeatable): each turn mutates state there.",
)
@click.option(
    "--wait-services",
    type=FiniteFloatRange(0, 3600),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="How long an agent waits for its --policy / --resources servers to come up.",
)
@click.option(
    "--fence-log",
    type=OutputFile(),
    default=None,
    help="Append one JSON line per request handled, with the fence before and after "
    "(docs/validate.md), to this file; check it with quiesce validate.",
)
@click.option(
    "--allow-reset",
    is_flag=True,
    help="Test rigs only: serve POST /control/v1/_reset (bearer token), which replaces the "
    "participant with a fresh one (new journal, new incarnation), for `quiesce conform "
    "--reset-url`. Without it the route is 404.",
)
@log_level_option("info")
def serve(
    role: str,
    bind: str,
    port: int,
    state_dir: Path,
    token_file: Path | None,
    name: str | None,
    recovery_mode: str,
    instance_role: str,
    max_body_bytes: int,
    work: bool,
    policies: tuple[str, ...],
    resources: tuple[str, ...],
    wait_services: float,
    fence_log: Path | None,
    allow_reset: bool,
    log_level: str,
) -> None:
    """Serve one participant over HTTP (routes in docs/wire.md).

    Runs uvicorn on asyncio only (uvicorn does not run on trio). Every control route needs
    `Authorization: Bearer <token>`, the token read from --token-file or $QUIESCE_TOKEN.
    An existing journal in --state-dir is recovered with a new incarnation (§6) if it is
    this participant's (same --role and --name; the default name <role>-<port> changes
    with the port, so a restart on another port needs --name). One server per --state-dir:
    it is locked (<state-dir>/.lock, holding the pid) until the server exits; the kernel
    drops the lock however the process ends, so a server killed with SIGKILL can be started
    again on the same --state-dir and --port at once (a restart, §6).
    An agent's --policy / --resources servers (same token) are checked before it starts.
    """
    import uvicorn

    from quiesce.adapters import create_app, create_resettable_app

    if (policies or resources) and role != Role.AGENT:
        raise click.UsageError(f"--policy and --resources wire an agent, not a {role} server")
    token = read_token(token_file)
    listener = _bind(bind, port)
    # Held as long as the server runs; closed (dropped) on every way out of this block.
    with _lock_state_dir(state_dir), contextlib.ExitStack() as closing:
        configure_server_logging(log_level)
        try:
            services = connect_services(
                token=token, policies=policies, resources=resources, wait_s=wait_services
            )
        except ServiceUnusable as error:
            fail(error)
        config = {
            "name": name or f"{role}-{port}",
            "role": role,
            "recovery_mode": recovery_mode,
            "instance_role": instance_role,
        }
        journal = FileJournal(state_dir)
        fence_sink = None if fence_log is None else closing.enter_context(FileFenceLog(fence_log))
        try:
            host = ParticipantHost.open(
                config,
                journal,
                clock=RealClock(),
                incarnation_factory=secret_incarnation,
                run_work=work,
                fence_log=fence_sink,
            )
        except JournalCorrupt as error:
            fail(error)
        except ForeignJournal as error:
            fail(_foreign_journal_message(error, state_dir, name_given=name is not None))
        host.connect(policies=services[0], resources=services[1])

        def fresh() -> ParticipantHost:
            """A brand-new participant on the same journal file (`--allow-reset`)."""
            new = ParticipantHost.start(
                config,
                clock=RealClock(),
                journal=journal,
                incarnation_factory=secret_incarnation,
                run_work=work,
            )
            new.connect(policies=services[0], resources=services[1])
            return new

        recovered = journal.load() is not None
        structlog.get_logger("quiesce.serve").info(
            "participant_start",
            participant=host.name,
            role=role,
            incarnation=host.incarnation,
            recovered=recovered,
            state_dir=str(state_dir),
            port=port,
        )
        app = (
            create_resettable_app(host, fresh, token=token, max_body_bytes=max_body_bytes)
            if allow_reset
            else create_app(host, token=token, max_body_bytes=max_body_bytes)
        )
        server = uvicorn.Server(
            uvicorn.Config(app, loop="asyncio", log_config=None, access_log=False, lifespan="on")
        )
        # After a graceful shutdown uvicorn raises the signal that asked for it again, so the
        # process ends as that signal says: Ctrl-C is then a KeyboardInterrupt, not an error.
        with contextlib.suppress(KeyboardInterrupt):
            server.run(sockets=[listener])
        if not server.started:
            fail("the server did not start (its log above says why)", code=1)
