"""A supervisor that restarts one `quiesce serve` process cheaply, for the kit's restart hook.

`python serve_rig.py <quiesce serve options>` imports quiesce once, then forks the server
(`quiesce serve <options>`, the real command in a fresh process). SIGUSR1 kills the server
with SIGKILL (a crash: only its journal survives), reaps it, so its port and state-dir lock
are free, and forks a new one on the same options; SIGTERM kills it and exits, and so does
the supervisor when the server exits on its own (a bad option, a foreign journal). A restart
then costs a fork instead of a Python start-up (over a second of CPU), which is what lets a
conformance run with hundreds of restarts finish. `restart_command` is the shell command
for `quiesce conform --restart-cmd`.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

_SIGNALS = {signal.SIGUSR1, signal.SIGTERM}


def restart_command(supervisor: int, state_dir: Path, url: str) -> str:
    """Ask `supervisor` for a restart; exit 0 once a new server (another pid in the state
    dir's lock file) answers /healthz at `url`, or 1 as soon as the supervisor is gone (its
    server exited on its own, and the rig with it: waiting longer would only hit the kit's
    timeout)."""
    lock = state_dir / ".lock"
    alive = f"kill -0 {supervisor} 2>/dev/null || exit 1"
    return (
        f'old=$(cat "{lock}"); kill -USR1 {supervisor} || exit 1; '
        f'while [ "$(cat "{lock}")" = "$old" ]; do {alive}; sleep 0.01; done; '
        f"until curl -sf {url}/healthz >/dev/null; do {alive}; sleep 0.02; done"
    )


def _spawn(serve: Callable[[], object]) -> int:
    pid = os.fork()
    if pid:
        return pid
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)  # uvicorn handles SIGTERM itself
    code = 1
    try:
        serve()
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
    except BaseException:
        traceback.print_exc()  # os._exit below would end the process without a word
    finally:
        sys.stderr.flush()
        os._exit(code)


def supervise(options: Sequence[str]) -> None:
    """Serve `quiesce serve <options>` in a child process, restarting it on SIGUSR1."""
    # Everything a server imports, imported once here, so each fork serves at once.
    import uvicorn.lifespan.on
    import uvicorn.loops.asyncio
    import uvicorn.protocols.http.h11_impl  # noqa: F401

    from quiesce.cli import main

    def serve() -> object:
        return main(["serve", *options], prog_name="quiesce")

    watched = {*_SIGNALS, signal.SIGCHLD}
    signal.pthread_sigmask(signal.SIG_BLOCK, watched)  # taken by sigwait, one at a time
    child = _spawn(serve)
    while True:
        received = signal.sigwait(watched)
        if received == signal.SIGCHLD:
            pid, status = os.waitpid(child, os.WNOHANG)
            if pid == child:  # the server exited on its own (it says why on stderr)
                code = os.waitstatus_to_exitcode(status)
                print(f"serve_rig: the server (pid {pid}) exited {code}", file=sys.stderr)
                sys.exit(code)
            continue  # the one this loop killed and reaped
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        if received == signal.SIGTERM:
            return
        child = _spawn(serve)


if __name__ == "__main__":
    supervise(sys.argv[1:])
