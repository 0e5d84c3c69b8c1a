"""The swarm's walkers as Ray tasks: `quiesce check --swarm N --ray [ADDRESS]`.

What lives here: `ray_runner`, a context manager that connects to Ray (or reuses the Ray
this process already started), yields a `Runner` that submits every walker of a wave as a
task and yields each result as it finishes, and disconnects from whatever it connected
to. `SwarmRayError`: why `--ray` cannot run, in one line. What it does not know: what a
walker does (`_swarm.run_walker`, a pure function of plain data, so it ships as is).

Where Ray runs:
- `address=None` (`--ray` alone): `ray.init()`'s own choice: the cluster `RAY_ADDRESS`
  names, or one started on this machine by `ray start`, or a new local one;
- `HOST:PORT`, `ray://HOST:PORT`: that cluster. The port is probed first: `ray.init` on a
  port nobody answers retries for minutes, a probe fails in `PROBE_TIMEOUT_S`.

Every walker task runs with `PYTHONHASHSEED` fixed, so every worker fingerprints a state
alike and their bitstates merge (`_bitstate`). Under `uv run`, Ray would start its workers
in a fresh `uv` environment that lacks the `ray` extra; `RAY_ENABLE_UV_RUN_RUNTIME_ENV=0`
(set before ray is imported) keeps them on this interpreter.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from quiesce.fsm import QuiesceError
from quiesce.models.coverage._swarm import (
    Runner,
    SwarmRequest,
    WalkerPlan,
    WalkerResult,
    run_walker,
)

__all__ = ["PROBE_TIMEOUT_S", "SwarmRayError", "ray_runner"]

PROBE_TIMEOUT_S = 5.0
"""How long the address probe waits for the cluster's port to accept a connection."""

_WORKER_ENV = {"PYTHONHASHSEED": "0"}


class SwarmRayError(QuiesceError):
    """`--ray` cannot run: ray is not installed, or nothing answers at `address`."""

    def __init__(self, address: str | None, why: str) -> None:
        self.address = address
        self.why = why
        where = "--ray" if address is None else f"--ray {address}"
        super().__init__(f"{where}: {why}")


@contextmanager
def ray_runner(address: str | None = None) -> Iterator[Runner]:
    """A `Runner` whose walkers are Ray tasks (one CPU each) on the cluster at `address`
    (see the module doc); raises `SwarmRayError` before running anything if there is
    none. A Ray this process started already is used as it is and left running."""
    ray = _import_ray(address)
    started = not ray.is_initialized()
    if started:
        _connect(ray, address)
    try:
        remote = ray.remote(num_cpus=1, runtime_env={"env_vars": _WORKER_ENV})(run_walker)

        def run(request: SwarmRequest, plans: Sequence[WalkerPlan]) -> Iterator[WalkerResult]:
            pending = [remote.remote(request, plan) for plan in plans]
            try:
                while pending:
                    done, pending = ray.wait(pending, num_returns=1)
                    yield from ray.get(done)
            finally:
                for ref in pending:  # stopped early (a signal): drop the rest
                    ray.cancel(ref)

        yield run
    finally:
        if started:
            ray.shutdown()


def _import_ray(address: str | None) -> Any:
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    try:
        import ray
    except ImportError:
        raise SwarmRayError(
            address, "ray is not installed: install the extra with `uv sync --extra ray`"
        ) from None
    return ray


def _connect(ray: Any, address: str | None) -> None:
    if address is not None and address not in ("auto", "local"):
        _probe(address)
    try:
        ray.init(
            address=address,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    except (ConnectionError, ValueError, RuntimeError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise SwarmRayError(address, f"ray.init failed: {first}") from None


def _probe(address: str) -> None:
    """Raise `SwarmRayError` unless `address` is `[ray://]HOST:PORT` and the port
    accepts a connection."""
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not colon or not host or not port.isdigit():
        raise SwarmRayError(address, "expected HOST:PORT, ray://HOST:PORT, auto or local")
    try:
        socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S).close()
    except OSError as error:
        why = error.strerror or type(error).__name__
        raise SwarmRayError(
            address,
            f"nothing answers at {host}:{port} ({why}): start a cluster there"
            " (`ray start --head`) or give the address of one",
        ) from None
