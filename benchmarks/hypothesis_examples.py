"""How many hypothesis examples does a bug four steps deep need? (sets the `ci` profile)

Runs the table machine of the hand-made `combination_lock` (tests/check/test_table_machine.py:
it opens, breaking its invariant, only after one exact sequence of 4 inputs; any other input
resets it) under the `ci` profile of tests/conftest.py with seeds 0..N-1 (an explicit seed
replaces the profile's derandomized one), for several `max_examples`, and reports how many
seeds catch the bug and the wall time. The chosen `CI_MAX_EXAMPLES` and these figures are
written next to the profile in tests/conftest.py.

    uv run python benchmarks/hypothesis_examples.py [--examples 100,300,1000]
        [--seeds 20] [--first-seed 0] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hypothesis import Verbosity, seed, settings
from hypothesis.stateful import run_state_machine_as_test

import tests.conftest  # noqa: F401  (registers the profiles)
from quiesce.check import table_state_machine
from tests.check.test_table_machine import combination_lock


def caught(max_examples: int, seed_value: int) -> bool:
    """Does the `ci` profile, with this many examples and this seed, find the open lock?"""
    machine = table_state_machine(combination_lock())
    seeded = seed(seed_value)(type(machine.__name__, (machine,), {}))
    profile = settings(
        settings.get_profile("ci"),
        max_examples=max_examples,
        print_blob=False,
        verbosity=Verbosity.quiet,  # a caught bug's program would flood the figures
    )
    try:
        run_state_machine_as_test(seeded, settings=profile)
    except AssertionError:
        return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", default="100,300,1000,2000")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for max_examples in (int(n) for n in options.examples.split(",")):
        start = time.perf_counter()
        seeds = range(options.first_seed, options.first_seed + options.seeds)
        hits = sum(caught(max_examples, s) for s in seeds)
        rows.append(
            {
                "max_examples": max_examples,
                "seeds": options.seeds,
                "caught": hits,
                "seconds": round(time.perf_counter() - start, 1),
            }
        )
        if not options.json:
            row = rows[-1]
            print(
                f"max_examples={max_examples:>5}: caught {hits}/{options.seeds} "
                f"({row['seconds']}s for all seeds)",
                flush=True,
            )
    if options.json:
        print(json.dumps({"bug": "combination_lock (4 steps)", "runs": rows}))


if __name__ == "__main__":
    main()
