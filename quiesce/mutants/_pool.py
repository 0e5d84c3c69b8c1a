"""Verifying many mutants on several processes.

What lives here: `verify_many`, which yields the `Verdict` of each mutant in order, run on
`jobs` worker processes. What it does not know: how a mutant is judged (`verify`).

How. Mutants hold closures (their hooks), so workers are forked rather than handed
pickled mutants: each gets a mutant's name, looks it up in the catalog it inherited, and
sends back the verdict's plain fields. The unmutated run of every stage (its steps and row
coverage, `Stage.coverage`) is made first, in this process, so the workers forked afterwards
share it rather than each making it again. Workers ignore SIGINT: a Ctrl-C stops the caller,
which terminates them.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Iterator, Sequence
from dataclasses import fields
from typing import Any

from quiesce.mutants._catalog import MUTANTS, Mutant, Verdict, verify
from quiesce.mutants._stages import STAGES

__all__ = ["verify_many"]


def verify_many(mutants: Sequence[Mutant], jobs: int = 1) -> Iterator[Verdict]:
    """The verdict of each of `mutants`, in order, verified on `jobs` processes."""
    if jobs <= 1:
        yield from (verify(mutant) for mutant in mutants)
        return
    context = multiprocessing.get_context("fork")
    if any(mutant.site is not None for mutant in mutants):
        for stage in STAGES:
            stage.coverage()
    with context.Pool(jobs, initializer=_ignore_interrupts) as pool:
        names = [mutant.name for mutant in mutants]
        for mutant, fields in zip(mutants, pool.imap(_verify_named, names), strict=True):
            yield Verdict(mutant, *fields)


def _ignore_interrupts() -> None:
    # Ctrl-C reaches the whole process group: the caller stops, then terminates the pool
    # with SIGTERM, which must simply end a worker (not run a handler it inherited).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _verify_named(name: str) -> tuple[Any, ...]:
    # A verdict's plain fields, all but its mutant (which holds closures).
    verdict = verify(MUTANTS[name])
    return tuple(getattr(verdict, f.name) for f in fields(Verdict)[1:])
