"""Hypothesis profiles for the whole suite, and the `local_ray` fixture.

Profiles: `ci` when `CI` is set, `deep` when QUIESCE_DEEP=1.

- `ci`: derandomized (the same examples on every run, so a red CI is reproducible), no
  deadline (virtual-clock and model runs vary in wall time), failure blobs printed.
  `max_examples` is measured, not guessed: see CI_MAX_EXAMPLES below.
- `deep`: random and many more examples, for long local or nightly soaks.
- `dev`: the default elsewhere; the same as `ci`, so a local run sees what CI sees.
- `hunt`: the budget of a bug hunt (a test that must find a deep schedule, such as a
  scenario mutant the explorer cannot express): `ci` with HUNT_MAX_EXAMPLES, or `deep`'s
  budget under QUIESCE_DEEP=1. Tests opt in with `settings.get_profile("hunt")`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

# Measured by `uv run python benchmarks/hypothesis_examples.py` on the hand-made 4-step bug
# of tests/check/test_table_machine.py (a lock that opens only after one exact sequence of
# 4 inputs, any other input resetting it), one run per seed, seeds 0..19:
#   max_examples        100   300   1000   2000
#   caught (of 20)        8    12     20     20
# The default 100 misses it 12 times in 20 (the issue's own 4-step bug: 2 in 20), 300 still
# 8 times; 1000 is the smallest measured value that caught it every time, and it caught it
# on fresh seeds 20..39 too (40 of 40). A table machine costs 15-35 ms per example, so
# each registered table's sweep would take 15-35 s at 1000: bug hunts get 1000 (`hunt`),
# the broad sweeps (every table, every wire fuzz) get CI_MAX_EXAMPLES.
HUNT_MAX_EXAMPLES = 1000
CI_MAX_EXAMPLES = 200

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    print_blob=True,
    database=None,
    max_examples=CI_MAX_EXAMPLES,
)
settings.register_profile("dev", settings.get_profile("ci"))
settings.register_profile(
    "deep",
    derandomize=False,
    deadline=None,
    print_blob=True,
    max_examples=20 * HUNT_MAX_EXAMPLES,
)
settings.register_profile(
    "hunt",
    settings.get_profile("deep")
    if os.environ.get("QUIESCE_DEEP") == "1"
    else settings(settings.get_profile("ci"), max_examples=HUNT_MAX_EXAMPLES),
)

if os.environ.get("QUIESCE_DEEP") == "1":
    settings.load_profile("deep")
elif os.environ.get("CI"):
    settings.load_profile("ci")
else:
    settings.load_profile("dev")


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """A local Ray (2 CPUs, no dashboard, small object store) for one test module, shut down
    after it; the module is skipped without the `quiesce[ray]` extra."""
    # Under `uv run`, Ray starts its workers with `uv run` in a fresh environment that lacks
    # the optional `ray` extra; workers must use this interpreter instead (read at import).
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    ray = pytest.importorskip("ray", reason="a local Ray needs the `quiesce[ray]` extra")
    ray.init(
        num_cpus=2,
        object_store_memory=80_000_000,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    yield
    ray.shutdown()
