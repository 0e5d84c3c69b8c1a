"""What a `quiesce` command costs before it does anything, as a ratio to `python -c pass`.

Run: `uv run python benchmarks/bench_startup.py [--json] [--check]`.

Each command is started `--repeats` times in a fresh interpreter (the venv's `python`, so
`uv run` itself is not measured), after a first run that compiled and cached its bytecode
(as any second run finds it); a figure is the least CPU time (user + system, from the
kernel's accounting of the child) over the repeats: the run the rest of a loaded machine
disturbed least. CPU time rather than wall time, because on a shared machine a process
waits for a core as long as the others keep it, while the work it does stays the same.
The ratio divides by the same figure for `python -c pass`, measured in the same run, so
machines compare by ratio only.

- `help`: `quiesce --help`, which lists every command without importing any;
- `simulate`: `quiesce simulate --help`, which imports everything `simulate` needs to
  start (the command module, the harness, the adapters, the protocol) and nothing more.

Targets: issue 27's budgets, `quiesce --help` under 0.3 s and `simulate` start-up under
0.6 s, divided by what `python -c pass` costs on the project's 2-core machine (0.010-0.012 s
of CPU): `help_over_python <= 25`, `simulate_over_python <= 50`. Measured there (load 3-6):
about 6x (0.065 s) and 45-52x (0.47-0.54 s, the spread is the machine's noise). What
`simulate` still pays for is mostly the protocol's own import (pydantic models, and tables
checked as they are built) and structlog, which imports rich's traceback renderer and
pygments whether or not a traceback is ever shown.

`--check` exits 1 when a command passes its gate (`GATES`, `.ci/run`): `help`'s target, and
for `simulate`, its target plus the run-to-run noise seen on that machine (20%), so the gate
catches a regression without failing a run by noise alone.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

TARGETS = {"help": 25.0, "simulate": 50.0}
"""The largest ratio to `python -c pass` each command should take (issue 27's budgets)."""

GATES = {"help": 25.0, "simulate": 60.0}
"""The largest ratio `--check` lets through (see the module doc)."""

_QUIESCE = Path(sys.executable).with_name("quiesce")

COMMANDS: dict[str, list[str]] = {
    "python": [sys.executable, "-c", "pass"],
    "help": [str(_QUIESCE), "--help"],
    "simulate": [str(_QUIESCE), "simulate", "--help"],
}


def cpu_seconds(argv: Sequence[str], env: dict[str, str]) -> float:
    """The user + system CPU time of one run of `argv` (its output discarded)."""
    pid = os.fork()
    if pid == 0:  # the child: run argv with stdout and stderr on /dev/null
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        try:
            os.execve(argv[0], list(argv), env)
        finally:
            os._exit(127)
    _, status, usage = os.wait4(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{' '.join(argv)} exited {code}")
    return usage.ru_utime + usage.ru_stime


def measure(repeats: int) -> dict[str, object]:
    """The least CPU time of each command over `repeats` runs, and the ratios to Python's."""
    with tempfile.TemporaryDirectory(prefix="bench-startup-pyc-") as cache:
        # As a user's second run finds them: bytecode compiled and cached (into a directory
        # of its own, so the checkout is left alone), even where the environment turns
        # caching off (PYTHONDONTWRITEBYTECODE).
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = cache
        for argv in COMMANDS.values():
            cpu_seconds(argv, env)  # the first run compiles and caches
        best = {
            name: min(cpu_seconds(argv, env) for _ in range(repeats))
            for name, argv in COMMANDS.items()
        }
    python = max(best["python"], 1e-3)  # a clock tick: never divide by zero
    ratios = {name: best[name] / python for name in TARGETS}
    return {
        "seconds": {name: round(value, 4) for name, value in best.items()},
        "ratios": {f"{name}_over_python": round(ratios[name], 2) for name in TARGETS},
        "targets": {f"{name}_over_python": limit for name, limit in TARGETS.items()},
        "met": {name: ratios[name] <= TARGETS[name] for name in TARGETS},
        "gated": {name: ratios[name] <= GATES[name] for name in GATES},
        "repeats": repeats,
    }


def main(argv: list[str] | None = None) -> int:
    """Print the figures (a table, or one JSON document with `--json`)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--repeats", type=int, default=11, help="runs of each command")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    result = measure(args.repeats)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        seconds = result["seconds"]
        assert isinstance(seconds, dict)
        print(f"python -c pass       {seconds['python']:.3f} s CPU")
        for name in TARGETS:
            ratio = result["ratios"][f"{name}_over_python"]  # type: ignore[index]
            mark = "ok" if result["met"][name] else "MISSED"  # type: ignore[index]
            print(
                f"{' '.join(COMMANDS[name][1:]) or name:20s} {seconds[name]:.3f} s CPU,"
                f" {ratio:5.1f}x python (target <= {TARGETS[name]:.0f}x: {mark})"
            )
    over = [name for name, ok in result["gated"].items() if not ok]  # type: ignore[attr-defined]
    if args.check and over:
        print(f"start-up over its gate: {', '.join(over)} (GATES: {GATES})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
