"""`StoreLane`: the store's work on the real clock, in worker threads, off the event loop.

What lives here: the order in which store jobs and staging writes run when fsyncs must not
block the event loop (calls are in flight meanwhile), and how a clean stop runs what is
still queued. What it does not know: what a job does (`StoreEffects` does it) or the
protocol; a job is a callable whose answer, if any, goes to the coordinator. On the virtual
clock there is no lane: the driver runs every job inline, so a seeded run is reproducible.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

import anyio.to_thread

from quiesce.adapters._clock import Clock, ClockEvent, Queue
from quiesce.protocol.controller import ControllerInput

__all__ = ["Job", "StoreLane"]

Job = Callable[[], ControllerInput | None]
"""A store job: its answer (if any) goes to the coordinator."""


class StoreLane:
    """Store jobs and staging writes, each in a worker thread.

    Jobs run one at a time in FIFO order, each once no staging write is left; staging
    writes run in parallel with each other. A worker thread claims its work under a lock
    when it starts, so `drain` can run, in its own thread, whatever no worker has claimed
    yet: every piece runs exactly once, in order, also when the lane's tasks are cancelled
    before their threads start.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Condition()
        self._serial = threading.Lock()  # held while a job runs: one at a time
        self._jobs: deque[Job] = deque()
        self._writes: list[Callable[[], object]] = []  # staging writes nobody claimed yet
        self._writing = 0  # staging writes a worker thread is running
        self._tickets: Queue[None] = Queue(clock)  # one per job: wakes `run`
        self._settled: ClockEvent | None = None

    def put(self, job: Job) -> None:
        """Queue a job behind every earlier one."""
        with self._lock:
            self._jobs.append(job)
        self._tickets.put_nowait(None)

    def add_write(self, write: Callable[[], object]) -> None:
        """Register a staging write (jobs wait for it); `run_write` runs it."""
        with self._lock:
            self._writes.append(write)

    async def run_write(self, write: Callable[[], object]) -> None:
        """Run one registered staging write in its own worker thread."""
        try:
            await anyio.to_thread.run_sync(self._write, write)
        finally:
            if not self._writes_left() and self._settled is not None:
                self._settled.set()

    async def run(self, submit: Callable[[ControllerInput], None]) -> None:
        """Run the jobs as they come, forever; `submit` takes their answers."""
        while True:
            await self._tickets.get()
            while self._writes_left():
                self._settled = self._clock.event()
                await self._settled.wait()
            answer = await anyio.to_thread.run_sync(self._next_job)
            if answer is not None:
                submit(answer)

    def drain(self) -> None:
        """Run here every staging write, then every job, that no worker thread claimed,
        after the ones already running ended (this blocks); their answers are dropped."""
        with self._lock:
            writes, self._writes = self._writes, []
        for write in writes:
            write()
        with self._lock:
            self._lock.wait_for(lambda: not self._writing)
        with self._serial:
            with self._lock:
                jobs, self._jobs = self._jobs, deque()
            for job in jobs:
                job()

    def _writes_left(self) -> bool:
        with self._lock:
            return bool(self._writes or self._writing)

    def _write(self, write: Callable[[], object]) -> None:
        with self._lock:
            if write not in self._writes:
                return  # `drain` ran it
            self._writes.remove(write)
            self._writing += 1
        try:
            write()
        finally:
            with self._lock:
                self._writing -= 1
                self._lock.notify_all()

    def _next_job(self) -> ControllerInput | None:
        with self._serial:
            with self._lock:
                if not self._jobs:
                    return None  # `drain` ran it
                job = self._jobs.popleft()
            return job()
